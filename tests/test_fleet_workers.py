"""A fleet of worker processes on one PostgreSQL ledger and archive: what one worker opens
holds the other's gate, a killed owner's obligation is orphaned and refused over until it is
discharged, an archive written by one is recalled byte for byte by the other, and two workers
deciding at once never both compact."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet_worker import FleetWorker

HEARTBEAT = {"FLEET_HEARTBEAT_INTERVAL": "0.2", "FLEET_HEARTBEAT_TIMEOUT": "1.5"}


def _call(call_id: str, name: str) -> dict[str, Any]:
    arguments = json.dumps({"service": "api"})
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }


MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "Reconfigure the api service. " * 20},
    _call("call_cfg", "get_config"),
    {"role": "tool", "tool_call_id": "call_cfg", "content": "config of api: replicas=3 " * 20},
    {"role": "assistant", "content": "The api runs 3 replicas. " * 20},
    {"role": "user", "content": "Restart it. " * 20},
    _call("call_live", "restart"),
]
"""A shared conversation: a closed call, then the call ``call_live`` still running."""


@pytest.fixture(name="fleet")
def fleet_fixture(postgres_url: str, tmp_path: Path) -> Iterator[list[FleetWorker]]:
    """Two workers on one PostgreSQL ledger and archive."""
    environment = {
        "OTEL_COMPACTION_LEDGER_URL": postgres_url,
        "OTEL_COMPACTION_ARCHIVE_URL": postgres_url,
        **HEARTBEAT,
    }
    workers: list[FleetWorker] = []
    try:
        for name in ("worker-a", "worker-b"):
            workers.append(FleetWorker(tmp_path / name, environment, name=name))
        yield workers
    finally:
        for worker in workers:
            worker.stop()


def _evaluate(worker: FleetWorker, conversation: str) -> dict[str, Any]:
    result: dict[str, Any] = worker.call(
        {"op": "evaluate", "conversation": conversation, "messages": MESSAGES}
    )
    return result


def test_a_killed_owner_leaves_an_orphan_refused_over_until_another_worker_discharges_it(
    fleet: list[FleetWorker],
) -> None:
    a, b = fleet
    assert a.owner != b.owner
    assert a.owner.count(":") == 2  # host:pid:instance
    opened = a.call({"op": "open", "conversation": "conv-1", "id": "call_live", "name": "restart"})
    assert opened["status"] is None

    # B sees A's open call: the span over it is deferred, the closed span before compacted.
    live = _evaluate(b, "conv-1")
    assert (live["action"], live["span"], live["obligations"]) == ("defer", [0, 5], ["call_live"])
    assert live["orphaned"] == []

    # A dies without a word. Its heartbeat lapses: the call is orphaned, and refused over.
    a.kill()
    deadline = time.monotonic() + 20
    while (decision := _evaluate(b, "conv-1"))["action"] != "refuse":
        assert decision["action"] == "defer", decision
        assert time.monotonic() < deadline, f"never orphaned: {decision}"
        time.sleep(0.2)
    assert decision["span"] == [0, 6]
    assert decision["obligations"] == ["call_live"]
    [orphan] = decision["orphaned"]
    assert (orphan["kind"], orphan["id"], orphan["name"]) == ("tool_call", "call_live", "restart")
    assert orphan["owner"] == a.owner
    assert isinstance(orphan["silent_seconds"], float) and orphan["silent_seconds"] > 0
    assert (
        "ledger.resolve('conv-1', 'call_live', 'abandoned', kind='tool_call')"
        in (orphan["discharge"])
    )
    assert f"orphaned (owner {a.owner} last heartbeat" in decision["describe"]
    time.sleep(0.5)  # still refused: an orphan is never closed by itself
    assert _evaluate(b, "conv-1")["action"] == "refuse"

    # B discharges it explicitly; the span compacts, carrying the abandonment.
    discharged = b.call(
        {"op": "resolve", "conversation": "conv-1", "id": "call_live", "status": "abandoned"}
    )
    assert (discharged["status"], discharged["sequence"]) == ("abandoned", opened["sequence"])
    after = _evaluate(b, "conv-1")
    assert (after["action"], after["span"], after["orphaned"]) == ("compact", [0, 6], [])
    assert after["abandoned"] == ["call_live"]


def test_a_live_owner_is_never_orphaned(fleet: list[FleetWorker]) -> None:
    a, b = fleet
    a.call({"op": "open", "conversation": "conv-2", "id": "call_live", "name": "restart"})
    time.sleep(3 * float(HEARTBEAT["FLEET_HEARTBEAT_TIMEOUT"]))  # heartbeats keep it alive
    decision = _evaluate(b, "conv-2")
    assert (decision["action"], decision["orphaned"]) == ("defer", [])
    a.call({"op": "resolve", "conversation": "conv-2", "id": "call_live"})


def test_an_archive_written_by_one_worker_is_recalled_byte_for_byte_by_another(
    fleet: list[FleetWorker],
) -> None:
    a, b = fleet
    span = [
        {"role": "user", "content": "naïve ☃ — \u00e9 tabs\tand\nnewlines", "n": 1.5e-7},
        {"role": "tool", "tool_call_id": "c1", "content": "", "extra": {"z": 1, "a": [None]}},
    ]
    handle = a.call({"op": "put", "messages": span, "start": 3})
    assert b.call({"op": "put", "messages": span, "start": 3}) == handle  # idempotent
    stored = base64.b64decode(b.call({"op": "recall", "handle": handle}))
    assert stored == base64.b64decode(a.call({"op": "recall", "handle": handle}))
    expected = json.dumps(span, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    assert stored == expected
    assert json.loads(stored) == span


ROUNDS = 15


def _race(workers: list[FleetWorker], conversation: str) -> list[dict[str, Any]]:
    at = time.time() + 0.3
    for worker in workers:
        worker.send(
            {
                "op": "compact",
                "conversation": conversation,
                "messages": MESSAGES[:4],
                "budget": 300,
                "at": at,
            }
        )
    return [worker.receive() for worker in workers]


def test_two_workers_deciding_at_once_never_both_compact(fleet: list[FleetWorker]) -> None:
    for round_ in range(ROUNDS):
        results = _race(fleet, f"race-{round_}")
        compacted = [r for r in results if r["compacted"]]
        held = [r for r in results if not r["compacted"]]
        assert len(compacted) == 1, (round_, results)
        assert held[0]["reason"] == (
            "another worker already compacted this transcript state; read the conversation again"
        )
        assert held[0]["span"] == compacted[0]["span"] == [0, 3]  # the same decision


def test_without_a_shared_ledger_two_workers_both_compact(tmp_path: Path) -> None:
    """The control: what the shared ledger's lock prevents happens without it."""
    alone = {"OTEL_COMPACTION_LEDGER_URL": "", "OTEL_COMPACTION_ARCHIVE_URL": ""}
    workers = [FleetWorker(tmp_path / name, alone, name=name) for name in ("solo-a", "solo-b")]
    try:
        results = _race(workers, "race")
    finally:
        for worker in workers:
            worker.stop()
    assert [r["compacted"] for r in results] == [True, True]
