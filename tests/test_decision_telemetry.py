"""Each gate action as one ``compaction.evaluate`` span, events named for it, and metrics.

The transcript, `FLIGHT_MESSAGES`: a search whose result is a negative ("no flights"), a
booking that mints the identifier ZFA04Y, and a payment call that uses it and has no result yet
(message 7).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from telemetry_harness import (
    FLIGHT_MESSAGES,
    FORBIDDEN_METRIC_KEYS,
    Pipeline,
    key,
    metric_attribute_keys,
    metric_attribute_values,
    number_points,
)

from otel_compaction import CompactionRefused, OpenObligationError, conversation
from otel_compaction.telemetry import semconv as sc

EVALUATE = "compaction.evaluate"


def _attributes(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "compaction.action": "compact",
        "compaction.policy": "default",
        "compaction.critical": False,
        "compaction.extended": False,
        "compaction.span.start": 0,
        "compaction.span.end": 4,
        "compaction.requested.start": 0,
        "compaction.requested.end": 4,
        "compaction.transcript.messages": 8,
        "compaction.must_carry.identifiers": 0,
        "compaction.must_carry.negatives": 0,
        "openinference.span.kind": "GUARDRAIL",
        "input.value": "compact messages 0:4 of 8",
        "output.value": "compacting span 0:4",
    }
    base.update({name.replace("__", "."): value for name, value in overrides.items()})
    return base


def _event(rules: list[str], ids: list[str], kinds: list[str], span: tuple[int, int]) -> Any:
    return {
        "compaction.rules": tuple(rules),
        "compaction.obligation.ids": tuple(ids),
        "compaction.obligation.kinds": tuple(kinds),
        "compaction.span.start": span[0],
        "compaction.span.end": span[1],
    }


def _events(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, dict(e.attributes or {})) for e in span.events]


def _decisions(pipeline: Pipeline) -> dict[frozenset[tuple[str, Any]], int | float]:
    return number_points(pipeline.metrics()[sc.METRIC_DECISIONS])


def test_compact_is_one_evaluate_span_with_a_compacted_event(pipeline: Pipeline) -> None:
    before = time.time_ns()
    decision = pipeline.telemetry.gate().evaluate(FLIGHT_MESSAGES, 0, 4)
    after = time.time_ns()
    assert (decision.action, decision.span, decision.extended) == ("compact", (0, 4), False)

    span = pipeline.span(EVALUATE)
    assert span.kind is SpanKind.INTERNAL
    assert span.status.status_code is StatusCode.UNSET
    assert span.start_time is not None and span.end_time is not None
    assert before <= span.start_time <= span.end_time <= after
    assert dict(span.attributes or {}) == _attributes(compaction__must_carry__negatives=1)
    assert _events(span) == [
        ("compaction.compacted", _event(["not_addressable", "null_result"], [], [], (0, 4)))
    ]
    metrics = pipeline.metrics()
    assert number_points(metrics[sc.METRIC_DECISIONS]) == {
        key({"compaction.action": "compact", "compaction.rule": "none"}): 1
    }
    assert sc.METRIC_HELD_TOKENS not in metrics
    assert sc.METRIC_SEVERED not in metrics


def test_an_extended_compaction_adds_an_extended_event(pipeline: Pipeline) -> None:
    # [0, 2) cuts between the search and its result: extended to [0, 3).
    decision = pipeline.telemetry.gate().evaluate(FLIGHT_MESSAGES, 0, 2)
    assert (decision.action, decision.span, decision.extended) == ("compact", (0, 3), True)

    span = pipeline.span(EVALUATE)
    assert dict(span.attributes or {}) == _attributes(
        compaction__extended=True,
        compaction__span__end=3,
        compaction__requested__end=2,
        compaction__must_carry__negatives=1,
        input__value="compact messages 0:2 of 8",
        output__value="compacting span 0:3 (extended to close a pairing break)",
    )
    event = _event(["not_addressable", "null_result"], [], [], (0, 3))
    assert _events(span) == [("compaction.extended", event), ("compaction.compacted", event)]
    assert _decisions(pipeline) == {
        key({"compaction.action": "compact", "compaction.rule": "none"}): 1
    }


def test_a_deferral_names_the_live_obligation_and_counts_held_tokens(pipeline: Pipeline) -> None:
    decision = pipeline.telemetry.gate().evaluate(FLIGHT_MESSAGES, 4, 8)
    assert (decision.action, decision.span, decision.requested) == ("defer", (4, 7), (4, 8))

    span = pipeline.span(EVALUATE)
    assert dict(span.attributes or {}) == _attributes(
        compaction__action="defer",
        compaction__span__start=4,
        compaction__span__end=7,
        compaction__requested__start=4,
        compaction__requested__end=8,
        compaction__must_carry__identifiers=1,
        compaction__tokens__held=6,
        input__value="compact messages 4:8 of 8",
        output__value="deferring span 4:8 (open obligations tool_call c3); compacting the "
        "closed span 4:7 instead",
    )
    assert _events(span) == [
        ("compaction.deferred", _event(["open_tool_call"], ["c3"], ["tool_call"], (4, 7)))
    ]
    metrics = pipeline.metrics()
    assert number_points(metrics[sc.METRIC_DECISIONS]) == {
        key({"compaction.action": "defer", "compaction.rule": "open_tool_call"}): 1
    }
    assert number_points(metrics[sc.METRIC_HELD_TOKENS]) == {key(): 6}
    assert metrics[sc.METRIC_HELD_TOKENS].unit == "{token}"


def test_a_refusal_is_recorded_before_it_is_raised(pipeline: Pipeline) -> None:
    gate = pipeline.telemetry.gate()
    # Critical: no deferral allowed.
    with pytest.raises(OpenObligationError) as critical:
        gate.evaluate(FLIGHT_MESSAGES, 4, 8, critical=True)
    # Not critical, but nothing closed before the open call: refused too.
    with pytest.raises(CompactionRefused) as no_prefix:
        gate.evaluate(FLIGHT_MESSAGES, 7, 8)
    assert critical.value.decision.action == "refuse"
    assert no_prefix.value.decision.span == (7, 8)

    first, second = pipeline.spans(EVALUATE)
    assert dict(first.attributes or {}) == _attributes(
        compaction__action="refuse",
        compaction__critical=True,
        compaction__span__start=4,
        compaction__span__end=8,
        compaction__requested__start=4,
        compaction__requested__end=8,
        input__value="compact messages 4:8 of 8, critical",
        output__value="refusing compaction of span 4:8: open obligations tool_call c3",
    )
    assert _events(first) == [
        ("compaction.refused", _event(["open_tool_call"], ["c3"], ["tool_call"], (4, 8)))
    ]
    assert dict(second.attributes or {}) == _attributes(
        compaction__action="refuse",
        compaction__span__start=7,
        compaction__span__end=8,
        compaction__requested__start=7,
        compaction__requested__end=8,
        input__value="compact messages 7:8 of 8",
        output__value="refusing compaction of span 7:8: open obligations tool_call c3",
    )
    assert _events(second) == [
        ("compaction.refused", _event(["open_tool_call"], ["c3"], ["tool_call"], (7, 8)))
    ]
    # A refusal is a correct outcome, not a failed span.
    assert first.status.status_code is StatusCode.UNSET
    assert _decisions(pipeline) == {
        key({"compaction.action": "refuse", "compaction.rule": "open_tool_call"}): 2
    }


def test_a_result_the_ledger_saw_but_the_transcript_lost_is_a_severed_obligation(
    pipeline: Pipeline,
) -> None:
    gate = pipeline.telemetry.gate()
    with conversation("conv-sev"):
        for call_id, tool in (("c1", "search"), ("c2", "book"), ("c3", "pay")):
            pipeline.recorder.call(tool, call_id).result("done")
        # The transcript has the payment call but lost its result.
        deferred = gate.evaluate(FLIGHT_MESSAGES, 4, 8)
        with pytest.raises(OpenObligationError) as refused:
            gate.evaluate(FLIGHT_MESSAGES, 4, 8, critical=True)
    assert deferred.action == "defer"
    rules = [f.rule for f in refused.value.decision.blocking]
    assert rules == ["open_tool_call", "severed_obligation"]

    defer_span, refuse_span = pipeline.spans(EVALUATE)
    assert defer_span.attributes is not None and refuse_span.attributes is not None
    assert defer_span.attributes["gen_ai.conversation.id"] == "conv-sev"
    both = ["open_tool_call", "severed_obligation"]
    assert _events(defer_span) == [
        ("compaction.deferred", _event(both, ["c3"], ["tool_call"], (4, 7)))
    ]
    assert _events(refuse_span) == [
        ("compaction.refused", _event(both, ["c3"], ["tool_call"], (4, 8)))
    ]
    metrics = pipeline.metrics()
    # Two evaluations found the payment severed: it is one severed obligation.
    assert number_points(metrics[sc.METRIC_SEVERED]) == {
        key({"compaction.obligation.kind": "tool_call", "gen_ai.tool.name": "pay"}): 1
    }
    assert number_points(metrics[sc.METRIC_DECISIONS]) == {
        key({"compaction.action": "defer", "compaction.rule": "open_tool_call"}): 1,
        key({"compaction.action": "refuse", "compaction.rule": "open_tool_call"}): 1,
    }


def test_decision_metrics_count_every_action_and_carry_no_ids(pipeline: Pipeline) -> None:
    gate = pipeline.telemetry.gate()
    with conversation("conv-metrics"):
        for call_id, tool in (("c1", "search"), ("c2", "book")):
            pipeline.recorder.call(tool, call_id).result("ok")
        pipeline.recorder.call("pay", "c3")  # still open, as in the transcript
        outcomes = [
            gate.evaluate(FLIGHT_MESSAGES, 0, 4).action,
            gate.evaluate(FLIGHT_MESSAGES, 0, 2).action,
        ]
        outcomes.append(gate.evaluate(FLIGHT_MESSAGES, 4, 8).action)
        outcomes.append(
            gate.evaluate(FLIGHT_MESSAGES, 4, 8, critical=True, raise_on_refuse=False).action
        )
    assert outcomes == ["compact", "compact", "defer", "refuse"]

    metrics = pipeline.metrics()
    assert number_points(metrics[sc.METRIC_DECISIONS]) == {
        key({"compaction.action": "compact", "compaction.rule": "none"}): 2,
        key({"compaction.action": "defer", "compaction.rule": "open_tool_call"}): 1,
        key({"compaction.action": "refuse", "compaction.rule": "open_tool_call"}): 1,
    }
    assert number_points(metrics[sc.METRIC_OPEN_OBLIGATIONS]) == {
        key({sc.OBLIGATION_KIND: "tool_call"}): 1
    }
    assert not metric_attribute_keys(metrics) & FORBIDDEN_METRIC_KEYS
    assert not metric_attribute_values(metrics) & {"c1", "c2", "c3", "conv-metrics"}
    # The spans do carry the conversation.
    for span in pipeline.spans(EVALUATE):
        assert span.attributes is not None
        assert span.attributes["gen_ai.conversation.id"] == "conv-metrics"
