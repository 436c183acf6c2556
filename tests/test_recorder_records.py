"""The ledger's records and the recorder's spans share their times: a tool call's span starts
when its obligation opened and ends at its resolution, so that its duration is exactly the age
the histogram records; the result span is the moment of the resolution. The records the ledger
makes on its hot path are real, frozen `Obligation`s, equal to ones built by hand."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator
from typing import Any

import pytest
from telemetry_harness import Pipeline, histogram_points, make_pipeline

from otel_compaction.ledger import Obligation, ObligationLedger


@pytest.fixture(name="pipeline")
def pipeline_fixture() -> Iterator[Pipeline]:
    made = make_pipeline(capture_content=False)
    yield made
    made.shutdown()


def test_records_are_frozen_obligations_equal_to_ones_built_by_hand() -> None:
    ledger = ObligationLedger()
    opened = ledger.open("conv", "tool_call", "c1", name="search")
    resolved = ledger.resolve("conv", "c1", "error", error_type="TimeoutError")
    assert resolved is not None
    assert type(opened) is Obligation and type(resolved) is Obligation
    assert opened == Obligation("tool_call", "c1", "search", "conv", 0, opened.opened_at_ns)
    assert resolved == Obligation(
        "tool_call",
        "c1",
        "search",
        "conv",
        0,
        opened.opened_at_ns,
        "error",
        resolved.resolved_at_ns,
        "TimeoutError",
    )
    assert hash(resolved) == hash(dataclasses.replace(resolved))
    assert pickle.loads(pickle.dumps(resolved)) == resolved
    assert repr(opened) == (
        f"Obligation(kind='tool_call', id='c1', name='search', conversation_id='conv', "
        f"sequence=0, opened_at_ns={opened.opened_at_ns}, status=None, resolved_at_ns=None, "
        "error_type=None)"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolved.status = "result"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("resolve", "status"),
    [
        (lambda call: call.result("2 flights"), "result"),
        (lambda call: call.error(TimeoutError("slow")), "error"),
        (lambda call: call.abandon("cancelled"), "abandoned"),
    ],
)
def test_a_call_span_lasts_exactly_the_age_the_histogram_records(
    pipeline: Pipeline, resolve: Any, status: str
) -> None:
    resolve(pipeline.recorder.call("search", "c1", conversation_id="conv"))

    (record,) = pipeline.ledger.snapshot("conv").obligations
    assert record.status == status and record.resolved_at_ns is not None
    call_span = pipeline.span("execute_tool search")
    result_span = pipeline.span("tool_result search")
    assert call_span.start_time == record.opened_at_ns
    assert call_span.end_time == record.resolved_at_ns
    assert result_span.start_time == result_span.end_time == record.resolved_at_ns

    (point,) = histogram_points(pipeline.metrics()["compaction.obligation.age"]).values()
    assert point.count == 1
    assert point.sum == (record.resolved_at_ns - record.opened_at_ns) / 1e9


class UnresolvingLedger(ObligationLedger):
    """A ledger that knows no open obligation when asked to resolve one."""

    def resolve(self, *args: Any, **kwargs: Any) -> Obligation | None:
        return None


def test_without_a_resolved_record_the_spans_take_their_own_times_in_order() -> None:
    pipeline = make_pipeline(ledger=UnresolvingLedger(), capture_content=False)
    pipeline.recorder.call("search", "c1", conversation_id="conv").result("found")
    (record,) = pipeline.ledger.snapshot("conv").obligations
    call_span = pipeline.span("execute_tool search")
    result_span = pipeline.span("tool_result search")
    assert call_span.start_time == record.opened_at_ns
    assert call_span.start_time is not None and result_span.start_time is not None
    assert result_span.end_time is not None and call_span.end_time is not None
    assert call_span.start_time <= result_span.start_time <= result_span.end_time
    assert result_span.end_time <= call_span.end_time
    assert "compaction.obligation.age" not in pipeline.metrics()
    pipeline.shutdown()
