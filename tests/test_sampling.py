"""Sampling never blinds the ledger: with a sampler that drops everything, the ledger and the
gate's decisions (and the metrics) are exactly those of full sampling.

The recorder writes the ledger directly, so even plain ALWAYS_OFF cannot hide its calls.
Another instrumentation's ``execute_tool`` span reaches the ledger through the span
processor, which needs the span recorded: `ObligationSampler` makes a dropped obligation span
record-only. That foreign span sets ``gen_ai.tool.call.id`` only when it ends, so the ledger
tracks it by span id first and re-keys it at the end.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
)
from opentelemetry.trace import SpanKind
from telemetry_harness import (
    FLIGHT_MESSAGES,
    Pipeline,
    histogram_counts,
    ledger_rows,
    make_pipeline,
    number_points,
)

from otel_compaction import conversation
from otel_compaction.telemetry import semconv as sc
from otel_compaction.telemetry.sampler import ObligationSampler

REQUESTS: list[tuple[int, int, bool]] = [(0, 4, False), (0, 2, False), (4, 8, False), (4, 8, True)]
CONVERSATION = "conv-sampled"


def _foreign_book_call(pipeline: Pipeline, seen_while_open: list[Any]) -> None:
    """Another instrumentation runs the ``book`` call; it learns the call id only at the end."""
    tracer = pipeline.tracer_provider.get_tracer("vendor.agents", "2.0")
    span = tracer.start_span(
        "execute_tool book",
        kind=SpanKind.INTERNAL,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "book"},
    )
    assert span.is_recording()  # recorded, even when the sampler drops it
    context = span.get_span_context()
    seen_while_open.append(ledger_rows(pipeline.ledger, CONVERSATION)[-1])
    seen_while_open.append(f"span:{context.span_id:016x}")
    seen_while_open.append(context.trace_flags.sampled)
    span.set_attribute("gen_ai.tool.call.id", "c2")
    span.end()


def _agent_run(pipeline: Pipeline, *, foreign: bool) -> dict[str, Any]:
    """The same agent run, whatever the sampler; returns what must not depend on it."""
    recorder = pipeline.recorder
    gate = pipeline.telemetry.gate()
    seen_while_open: list[Any] = []
    with conversation(CONVERSATION):
        recorder.call("search", "c1").result("no flights found on Friday")
        if foreign:
            _foreign_book_call(pipeline, seen_while_open)
        else:
            recorder.call("book", "c2").result("booked ZFA04Y")
        recorder.call("pay", "c3")  # open, as in the transcript
        chain = recorder.retry_chain("refresh", "retry_1")
        chain.attempt_failed("rate_limited")
        decisions = [
            gate.evaluate(FLIGHT_MESSAGES, s, e, critical=c, raise_on_refuse=False).to_dict()
            for s, e, c in REQUESTS
        ]
    metrics = pipeline.metrics()
    return {
        "ledger": ledger_rows(pipeline.ledger, CONVERSATION),
        "decisions": decisions,
        "open": number_points(metrics[sc.METRIC_OPEN_OBLIGATIONS]),
        "decided": number_points(metrics[sc.METRIC_DECISIONS]),
        "held": number_points(metrics[sc.METRIC_HELD_TOKENS]),
        "ages": histogram_counts(metrics[sc.METRIC_OBLIGATION_AGE]),
        "seen while open": seen_while_open,
    }


def _run(sampler: Sampler, *, foreign: bool) -> tuple[dict[str, Any], list[str]]:
    pipeline = make_pipeline(sampler)
    try:
        observed = _agent_run(pipeline, foreign=foreign)
        return observed, [s.name for s in pipeline.spans()]
    finally:
        pipeline.shutdown()


EXPECTED_LEDGER = [
    ("tool_call", "c1", "search", CONVERSATION, 0, "result"),
    ("tool_call", "c2", "book", CONVERSATION, 1, "result"),
    ("tool_call", "c3", "pay", CONVERSATION, 2, None),
    ("retry", "retry_1", "refresh", CONVERSATION, 3, None),
]


@pytest.mark.parametrize(
    "sampler",
    [ObligationSampler(ALWAYS_OFF), ALWAYS_OFF, ParentBased(ALWAYS_OFF)],
    ids=["ObligationSampler(ALWAYS_OFF)", "ALWAYS_OFF", "ParentBased(ALWAYS_OFF)"],
)
def test_a_sampler_that_drops_everything_changes_no_ledger_record_and_no_decision(
    sampler: Sampler,
) -> None:
    full, full_spans = _run(ALWAYS_ON, foreign=False)
    dropped, dropped_spans = _run(sampler, foreign=False)

    assert dropped_spans == []  # the sampler really dropped everything
    assert len(full_spans) == 8  # two resolved calls (two spans each) and four decisions
    assert full["ledger"] == EXPECTED_LEDGER
    assert [d["action"] for d in full["decisions"]] == ["compact", "compact", "defer", "refuse"]
    assert dropped == full


def test_a_foreign_tool_span_reaches_the_ledger_when_the_sampler_drops_it() -> None:
    full, full_spans = _run(ALWAYS_ON, foreign=True)
    dropped, dropped_spans = _run(ObligationSampler(ALWAYS_OFF), foreign=True)

    assert "execute_tool book" in full_spans
    assert dropped_spans == []  # record-only: seen by the ledger, never exported
    assert full["ledger"] == dropped["ledger"] == EXPECTED_LEDGER
    assert full["decisions"] == dropped["decisions"]
    # While open, the foreign call was tracked under its span id, then re-keyed to its call id.
    for observed, sampled in ((full, True), (dropped, False)):
        row, span_key, was_sampled = observed["seen while open"]
        assert row == ("tool_call", span_key, "book", CONVERSATION, 1, None)
        assert was_sampled is sampled
    for name in ("open", "decided", "held", "ages"):
        assert full[name] == dropped[name], name


def test_the_obligation_sampler_turns_only_obligation_drops_into_record_only() -> None:
    sampler = ObligationSampler(ALWAYS_OFF)
    by_name = sampler.should_sample(None, 1, "execute_tool search")
    by_attribute = sampler.should_sample(
        None, 1, "run lookup", attributes={"gen_ai.operation.name": "execute_tool"}
    )
    other = sampler.should_sample(None, 1, "chat gpt-4o", attributes={"a": 1})
    look_alike = sampler.should_sample(None, 1, "execute_tools_later")
    assert by_name.decision is Decision.RECORD_ONLY
    assert by_attribute.decision is Decision.RECORD_ONLY
    assert dict(by_attribute.attributes or {}) == {"gen_ai.operation.name": "execute_tool"}
    assert other.decision is Decision.DROP
    assert look_alike.decision is Decision.DROP
    # What the delegate samples stays sampled.
    kept = ObligationSampler(ALWAYS_ON).should_sample(None, 1, "execute_tool search")
    assert kept.decision is Decision.RECORD_AND_SAMPLE
    assert sampler.get_description() == "ObligationSampler{AlwaysOffSampler}"
