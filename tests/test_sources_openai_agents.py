"""An OpenAI Agents SDK session as an obligation source, and the session guard that reads it.

Against a real PostgreSQL server on loopback (``SQLAlchemySession`` over asyncpg): process A
runs an agent whose model (the SDK's ``Model`` interface, scripted) calls a tool that needs
approval; the Runner stops with the ``function_call`` stored and no output, and A exits with
its run state saved. A new process B, whose ledger has never seen the call, guards the SDK's
own compaction session over the same store: the guard holds the compaction (the compaction
endpoint is never called), the call is counted as a disagreement; B approves and resumes the
run from the saved state, the output is stored, and the next compaction goes through. In
process (SQLite): the source's readings, a factory of sessions, disagreements both ways, and a
session that cannot be read (reported, and carried by the summary as still open).

Run as a script, this module is the worker processes: ``stop URL SESSION STATE_FILE`` and
``guard URL SESSION STATE_FILE`` (one JSON object on stdout).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from frameworks import require_framework
from source_workers import disagreement_metrics, disagreement_points, run_worker

try:
    from agents import Agent, Runner, RunState, function_tool, set_tracing_disabled
    from agents.extensions.memory import SQLAlchemySession
    from agents.memory import OpenAIResponsesCompactionSession, SQLiteSession
    from agents.models.interface import Model
    from agents_sdk import ScriptedModel, call, text
    from openai import AsyncOpenAI
    from test_openai_agents_integration import SUMMARY, CompactEndpoint

    from otel_compaction.integrations.openai_agents import CompactionGuardSession
    from otel_compaction.sources.openai_agents import AgentsSessionSource
except ImportError as error:  # pragma: no cover - the dev extra installs them
    MISSING: ImportError | None = error
else:
    MISSING = None

from otel_compaction.gate import CompactionGate
from otel_compaction.ledger import ObligationLedger
from otel_compaction.sources import ObligationSources

if __name__ != "__main__":
    require_framework(MISSING, "openai-agents (with sqlalchemy)", "agents")

CALL_ID = "call_refund_7"


def refund_call() -> list[Any]:
    return [call(CALL_ID, "refund", order=7)]


def refund_agent(model: Model) -> Any:
    @function_tool(needs_approval=True)
    def refund(order: int) -> str:
        """Refund an order (a person approves first)."""
        return f"order {order} refunded"

    return Agent(name="support", model=model, tools=[refund])


def async_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+asyncpg://", 1)


# -- the worker processes ------------------------------------------------------------------------


async def _stop(url: str, session_id: str, state_file: str) -> dict[str, Any]:
    """Process A: run until the tool waits for approval, save the run state, exit."""
    set_tracing_disabled(True)
    session = SQLAlchemySession.from_url(session_id, url=async_url(url), create_tables=True)
    result = await Runner.run(
        refund_agent(ScriptedModel(refund_call())), "Refund order 7", session=session
    )
    Path(state_file).write_text(result.to_state().to_string())
    items = await session.get_items()
    await session.engine.dispose()
    return {
        "interruptions": [getattr(i.raw_item, "call_id", None) for i in result.interruptions],
        "items": [item.get("type", "message") for item in items],
    }


async def _guard(url: str, session_id: str, state_file: str) -> dict[str, Any]:
    """Process B: guard the compaction over the stored history, resume, guard again."""
    set_tracing_disabled(True)
    metrics, reader = disagreement_metrics()
    store = SQLAlchemySession.from_url(session_id, url=async_url(url))
    endpoint = CompactEndpoint()
    client = cast(AsyncOpenAI, SimpleNamespace(responses=endpoint))
    sources = ObligationSources([AgentsSessionSource(store)], metrics=metrics)
    gate = CompactionGate("default", ledger=ObligationLedger(), sources=sources)
    guarded = CompactionGuardSession(
        OpenAIResponsesCompactionSession(
            session_id, store, client=client, should_trigger_compaction=lambda context: True
        ),
        gate,
    )
    await guarded.run_compaction({"force": True})
    held = guarded.last_decision
    assert held is not None
    held_items = [item.get("type", "message") for item in await store.get_items()]
    requests_while_held = len(endpoint.requests)

    agent = refund_agent(ScriptedModel([text("Order 7 is refunded.")]))
    state = await RunState.from_string(agent, Path(state_file).read_text())
    for approval in state.get_interruptions():
        state.approve(approval)
    resumed = await Runner.run(agent, state, session=store)
    resumed_items = [item.get("type", "message") for item in await store.get_items()]
    await guarded.run_compaction({"force": True})
    allowed = guarded.last_decision
    assert allowed is not None
    after = await store.get_items()
    await store.engine.dispose()
    return {
        "held": [held.action, [[o.kind, o.id, o.name] for o in held.obligations]],
        "held_items": held_items,
        "requests_while_held": requests_while_held,
        "final_output": resumed.final_output,
        "resumed_items": resumed_items,
        "allowed": allowed.action,
        "requests": len(endpoint.requests),
        "after": after,
        "compactions": guarded.compactions,
        "deferrals": guarded.deferrals,
        "disagreements": disagreement_points(reader),
    }


def _worker(*args: str) -> dict[str, Any]:
    return run_worker(str(Path(__file__)), *args)


# -- against PostgreSQL --------------------------------------------------------------------------


def test_a_new_process_guard_holds_the_compaction_over_a_dangling_function_call(
    postgres_url: str, tmp_path: Path
) -> None:
    state_file = str(tmp_path / "run-state.json")
    stopped = _worker("stop", postgres_url, "chat-refund", state_file)
    assert stopped == {"interruptions": [CALL_ID], "items": ["message", "function_call"]}

    found = _worker("guard", postgres_url, "chat-refund", state_file)

    # The stored call has no output: the guard holds the whole history verbatim.
    assert found["held"] == ["defer", [["tool_call", CALL_ID, "refund"]]]
    assert found["held_items"] == ["message", "function_call"]
    assert found["requests_while_held"] == 0
    # Approved and resumed from the saved state: the output is stored, the run ends.
    assert found["final_output"] == "Order 7 is refunded."
    assert found["resumed_items"] == ["message", "function_call", "function_call_output", "message"]
    assert found["allowed"] == "compact"
    assert found["requests"] == 1
    assert found["after"] == [SUMMARY]
    assert (found["compactions"], found["deferrals"]) == (1, 1)
    # B's ledger never held the call: one disagreement, counted once across both decisions.
    assert found["disagreements"] == [
        [
            {
                "compaction.source.name": "openai_agents",
                "compaction.source.disagreement": "source_open",
                "compaction.obligation.kind": "tool_call",
            },
            1,
        ]
    ]


# -- in process ----------------------------------------------------------------------------------


def test_the_source_reads_a_dangling_call_and_its_output_closes_it(tmp_path: Path) -> None:
    async def run() -> tuple[Any, Any]:
        set_tracing_disabled(True)
        session = SQLiteSession("chat-1", str(tmp_path / "sessions.db"))
        await Runner.run(
            refund_agent(ScriptedModel(refund_call())), "Refund order 7", session=session
        )
        source = AgentsSessionSource(
            lambda conversation: SQLiteSession(conversation, str(tmp_path / "sessions.db"))
        )
        before = await source.aread("chat-1")
        await session.add_items(
            [{"type": "function_call_output", "call_id": CALL_ID, "output": "refunded"}]
        )
        return before, await source.aread("chat-1")

    before, after = asyncio.run(run())
    assert before.calls is not None and after.calls is not None
    assert [c.id for c in before.calls.open_calls()] == [CALL_ID]
    assert after.calls.open_calls() == []
    assert AgentsSessionSource(SQLiteSession("empty")).read("empty").calls is None


def test_the_ledger_and_the_session_disagreeing_both_ways() -> None:
    session = SQLiteSession("chat-2")
    asyncio.run(
        session.add_items(
            [
                {"role": "user", "content": "refund 7 and 8"},
                {"type": "function_call", "call_id": "c7", "name": "refund", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c7", "output": "done"},
                {"type": "function_call", "call_id": "c8", "name": "refund", "arguments": "{}"},
            ]
        )
    )
    ledger = ObligationLedger()
    ledger.open("chat-2", "tool_call", "c7", name="refund")  # the ledger missed c7's output
    ledger.open("chat-2", "tool_call", "c8", name="refund")
    ledger.resolve("chat-2", "c8")  # ... and holds c8 answered, which the session does not show
    sources = ObligationSources([AgentsSessionSource(session)])
    combined = sources.combine(ledger.snapshot("chat-2"), sources.read("chat-2"))
    assert [(d.direction, d.id) for d in combined.disagreements] == [
        ("ledger_open", "c7"),
        ("source_open", "c8"),
    ]
    assert [(r.kind, r.id, r.is_open) for r in combined.added] == [("tool_call", "c8", True)]


def test_a_session_that_cannot_be_read_is_reported_and_carried() -> None:
    class Broken(SQLiteSession):
        async def get_items(self, limit: int | None = None) -> list[Any]:
            raise ConnectionError("the session store is down")

    async def run() -> Any:
        endpoint = CompactEndpoint()
        client = cast(AsyncOpenAI, SimpleNamespace(responses=endpoint))
        store = SQLiteSession("chat-3")
        items: list[Any] = [{"role": "user", "content": "hello"}, answer_item()]
        await store.add_items(items)
        gate = CompactionGate(
            "default", ledger=ObligationLedger(), sources=[AgentsSessionSource(Broken("chat-3"))]
        )
        guarded = CompactionGuardSession(
            OpenAIResponsesCompactionSession(
                "chat-3", store, client=client, should_trigger_compaction=lambda context: True
            ),
            gate,
        )
        await guarded.run_compaction({"force": True})
        return guarded.last_decision, endpoint.requests

    decision, requests = asyncio.run(run())
    assert decision is not None
    # Unread, the engine has no place in the transcript, which is closed: the compaction goes
    # ahead, and the summary is told the engine's work is unknown.
    assert decision.action == "compact"
    assert [(o.kind, o.id) for o in decision.must_carry.pending] == [
        ("background_task", "openai_agents:unreadable")
    ]
    assert len(requests) == 1


def answer_item() -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Hello!"}],
    }


def test_a_source_must_keep_the_protocol() -> None:
    with pytest.raises(TypeError, match=r"sources\[0\]: object is not an obligation source"):
        ObligationSources([object()])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not an Agents SDK session"):
        AgentsSessionSource(42)  # type: ignore[arg-type]


if __name__ == "__main__":
    command, url, session_id, state = sys.argv[1:5]
    run = {"stop": _stop, "guard": _guard}[command]
    print(json.dumps(asyncio.run(run(url, session_id, state)), default=str))
