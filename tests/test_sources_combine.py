"""The ledger and the engines' readings combined: open in either means open, disagreements counted.

Readings are built here from transcripts (what an engine's stored messages parse to) and from
pending work, so every case of the combination is stated exactly; the engines' own sources are
tested against the real engines in the other ``test_sources_*`` modules.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from telemetry_harness import Pipeline, key, make_pipeline, number_points
from test_reconcile import call as named_call
from test_reconcile import result

from otel_compaction.compactor import GuardedCompactor
from otel_compaction.gate import CompactionGate
from otel_compaction.ledger import ObligationLedger
from otel_compaction.sources import (
    SourceObligation,
    SourceReading,
    combine,
)
from otel_compaction.summarizers import ExtractiveSummarizer
from otel_compaction.transcript import Transcript

CONV = "conv-s"


def call(call_id: str, name: str = "deploy") -> dict[str, Any]:
    return named_call(call_id, name)


def engine(*messages: dict[str, Any], pending: tuple[SourceObligation, ...] = ()) -> SourceReading:
    """What an engine read: its stored messages and other open work."""
    return SourceReading("engine", CONV, Transcript.parse(list(messages)), pending)


class StaticSource:
    """An obligation source answering with fixed readings (the engines have their own tests)."""

    name = "engine"

    def __init__(self, *readings: SourceReading) -> None:
        self.readings = list(readings)
        self.reads = 0

    def read(self, conversation_id: str) -> SourceReading:
        self.reads += 1
        return self.readings[min(self.reads - 1, len(self.readings) - 1)]

    async def aread(self, conversation_id: str) -> SourceReading:
        return self.read(conversation_id)


class BrokenSource(StaticSource):
    def read(self, conversation_id: str) -> SourceReading:
        raise ConnectionError("secret-marker: the engine's store is down")


def test_agreement_adds_nothing_and_counts_nothing() -> None:
    ledger = ObligationLedger()
    ledger.open(CONV, "tool_call", "c1", name="deploy")
    ledger.resolve(CONV, "c1")
    ledger.open(CONV, "tool_call", "c2", name="deploy")
    combined = combine(ledger.snapshot(CONV), [engine(call("c1"), result("c1"), call("c2"))])
    assert combined.disagreements == ()
    assert combined.added == ()
    assert combined.snapshot == ledger.snapshot(CONV)


def test_ledger_open_engine_closed_keeps_the_ledgers_record_open() -> None:
    ledger = ObligationLedger()
    ledger.open(CONV, "tool_call", "c1", name="deploy")
    combined = combine(ledger.snapshot(CONV), [engine(call("c1"), result("c1"))])
    assert [(d.direction, d.kind, d.id, d.name) for d in combined.disagreements] == [
        ("ledger_open", "tool_call", "c1", "deploy")
    ]
    assert combined.added == ()
    assert [r.is_open for r in combined.snapshot.obligations] == [True]


def test_engine_open_ledger_closed_or_unaware_adds_an_open_record() -> None:
    ledger = ObligationLedger()
    ledger.open(CONV, "tool_call", "c1", name="deploy")
    ledger.resolve(CONV, "c1", "error")
    reading = engine(call("c1"), call("c2", "restart"), call("c3"), result("c3"))
    combined = combine(ledger.snapshot(CONV), [reading])
    assert [(d.direction, d.id) for d in combined.disagreements] == [
        ("source_open", "c1"),
        ("source_open", "c2"),
    ]
    assert [(r.kind, r.id, r.name, r.is_open, r.sequence) for r in combined.added] == [
        ("tool_call", "c1", "deploy", True, -1),
        ("tool_call", "c2", "restart", True, -2),
    ]
    assert combined.snapshot.obligations[-2:] == combined.added


def test_a_call_the_ledger_recorded_abandoned_is_discharged_whatever_the_engine_shows() -> None:
    ledger = ObligationLedger()
    ledger.open(CONV, "tool_call", "c1", name="deploy")
    ledger.resolve(CONV, "c1", "abandoned")
    combined = combine(ledger.snapshot(CONV), [engine(call("c1"))])
    assert (combined.disagreements, combined.added) == ((), ())


def test_reused_ids_pair_newest_with_newest() -> None:
    ledger = ObligationLedger()
    for _ in range(2):
        ledger.open(CONV, "tool_call", "call_0", name="deploy")
        ledger.resolve(CONV, "call_0")
    # The engine holds three calls of call_0: the oldest (no ledger record) still open, the
    # two the ledger knows both answered.
    reading = engine(
        call("call_0"), call("call_0"), result("call_0"), call("call_0"), result("call_0")
    )
    combined = combine(ledger.snapshot(CONV), [reading])
    assert [(d.direction, d.id) for d in combined.disagreements] == [("source_open", "call_0")]
    assert [(r.id, r.is_open) for r in combined.added] == [("call_0", True)]


def test_pending_work_is_open_unless_the_ledger_holds_it_open_or_discharged() -> None:
    ledger = ObligationLedger()
    ledger.open(CONV, "background_task", "held-open", name="export")
    ledger.open(CONV, "background_task", "discharged", name="export")
    ledger.resolve(CONV, "discharged", "abandoned", kind="background_task")
    ledger.open(CONV, "background_task", "done-early", name="export")
    ledger.resolve(CONV, "done-early", kind="background_task")
    work = tuple(
        SourceObligation("background_task", task, f"engine task {task}", "pending task")
        for task in ("held-open", "discharged", "done-early", "only-in-engine")
    )
    combined = combine(ledger.snapshot(CONV), [SourceReading("engine", CONV, pending=work)])
    assert [(d.direction, d.id) for d in combined.disagreements] == [
        ("source_open", "done-early"),
        ("source_open", "only-in-engine"),
    ]
    assert [(r.kind, r.id, r.name) for r in combined.added] == [
        ("background_task", "done-early", "engine task done-early"),
        ("background_task", "only-in-engine", "engine task only-in-engine"),
    ]


def test_the_gate_defers_over_a_call_only_the_engine_holds_open() -> None:
    messages = [
        {"role": "user", "content": "deploy api then web"},
        call("c1"),
        result("c1", "api deployed"),
        {"role": "assistant", "content": "api done; deploying web"},
        call("c2"),
        result("c2", "web deployed"),
        {"role": "assistant", "content": "both deployed"},
    ]
    # The transcript says c2 answered; the engine still runs it (its result was written early).
    source = StaticSource(engine(*messages[:5]))
    gate = CompactionGate("default", ledger=ObligationLedger(), sources=[source])
    decision = gate.evaluate(messages, 0, len(messages), conversation_id=CONV)
    assert (decision.action, decision.span) == ("defer", (0, 3))
    assert [(o.kind, o.id) for o in decision.obligations] == [("tool_call", "c2")]
    assert source.reads == 1
    plain = CompactionGate("default", ledger=ObligationLedger())
    assert plain.evaluate(messages, 0, len(messages), conversation_id=CONV).action == "compact"


def test_force_terminal_discharges_a_call_only_the_engine_holds() -> None:
    messages = [{"role": "user", "content": "deploy"}, call("c1"), {"role": "user", "content": "?"}]
    ledger = ObligationLedger()
    gate = CompactionGate("default", ledger=ledger, sources=[StaticSource(engine(*messages[:2]))])
    compactor = GuardedCompactor(ExtractiveSummarizer(), budget=10, ledger=ledger)
    refused = gate.evaluate(
        messages, 0, 3, conversation_id=CONV, critical=True, raise_on_refuse=False
    )
    assert refused.action == "refuse"
    assert compactor.force_terminal(refused.obligations, conversation_id=CONV) == 1
    # The ledger now records it abandoned: the engine's open call is discharged.
    combined = gate.sources.combine(ledger.snapshot(CONV), gate.sources.read(CONV))  # type: ignore[union-attr]
    assert combined.added == ()


def test_an_unreadable_source_is_logged_without_its_message_and_carried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = CompactionGate("default", ledger=ObligationLedger(), sources=[BrokenSource()])
    messages = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    with caplog.at_level(logging.WARNING):
        decision = gate.evaluate(messages, 0, 2, conversation_id=CONV)
    assert decision.action == "compact"
    assert [(o.kind, o.id, o.name) for o in decision.must_carry.pending] == [
        ("background_task", "engine:unreadable", "engine (unreadable)")
    ]
    assert "obligation source engine unreadable (ConnectionError)" in caplog.text
    assert "secret-marker" not in caplog.text


def test_each_disagreement_is_counted_once_on_the_telemetrys_metrics() -> None:
    pipeline: Pipeline = make_pipeline()
    try:
        pipeline.ledger.open(CONV, "tool_call", "c1", name="deploy")
        source = StaticSource(
            engine(call("c1"), result("c1"), call("c2")),
            engine(call("c1"), result("c1"), call("c2"), call("c3")),
        )
        gate = pipeline.telemetry.gate("default", sources=[source])
        messages = [{"role": "user", "content": "go"}, call("c1"), result("c1"), call("c2")]
        for _ in range(2):
            gate.evaluate(messages, 0, 4, conversation_id=CONV, raise_on_refuse=False)
        points = number_points(pipeline.metrics()["compaction.sources.disagreements"])
    finally:
        pipeline.shutdown()
    source_open = {
        "compaction.source.name": "engine",
        "compaction.source.disagreement": "source_open",
        "compaction.obligation.kind": "tool_call",
    }
    ledger_open = {**source_open, "compaction.source.disagreement": "ledger_open"}
    # c1 (ledger open, engine closed) once; c2 on the first read, c3 on the second: once each.
    assert points == {key(ledger_open): 1, key(source_open): 2}
