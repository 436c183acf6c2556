"""The recorder's one histogram record per tool call: ``compaction.obligation.age``, whose value
is the call's age at its resolution (its duration) as the ledger timed it, with the kind, the
status, the tool's name and, for an error, its ``error.type``; nothing else is recorded per call.

The record is made in the context current at the resolution, so its exemplar (the SDK's default
trace-based filter) is the span current there when that span is sampled, the parent of the
``tool_result`` span, and there is none outside a sampled span.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics.export import HistogramDataPoint
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from telemetry_harness import AttrKey, Pipeline, histogram_points, key, make_pipeline

from otel_compaction.ledger import Obligation


@pytest.fixture(name="pipeline")
def pipeline_fixture() -> Iterator[Pipeline]:
    made = make_pipeline(capture_content=False)
    yield made
    made.shutdown()


def _age_points(pipeline: Pipeline) -> dict[AttrKey, HistogramDataPoint]:
    metrics = pipeline.metrics()
    assert metrics["compaction.obligation.age"].unit == "s"
    return histogram_points(metrics["compaction.obligation.age"])


def _records(pipeline: Pipeline, conversation: str) -> list[Obligation]:
    return list(pipeline.ledger.snapshot(conversation).obligations)


def test_each_resolution_is_one_point_of_its_age_with_exact_attributes(
    pipeline: Pipeline,
) -> None:
    recorder = pipeline.recorder
    for number in range(3):
        recorder.call("search", f"s{number}", conversation_id="conv").result("found")
    recorder.call("fetch", "f1", conversation_id="conv").error(TimeoutError("slow"))
    recorder.call("fetch", "f2", conversation_id="conv").abandon("cancelled")
    recorder.call("fetch", "f3", conversation_id="conv")  # still open: no point

    points = _age_points(pipeline)
    search = key(
        {
            "compaction.obligation.kind": "tool_call",
            "compaction.obligation.status": "result",
            "gen_ai.tool.name": "search",
        }
    )
    failed = key(
        {
            "compaction.obligation.kind": "tool_call",
            "compaction.obligation.status": "error",
            "gen_ai.tool.name": "fetch",
            "error.type": "TimeoutError",
        }
    )
    abandoned = key(
        {
            "compaction.obligation.kind": "tool_call",
            "compaction.obligation.status": "abandoned",
            "gen_ai.tool.name": "fetch",
        }
    )
    assert set(points) == {search, failed, abandoned}
    assert [points[k].count for k in (search, failed, abandoned)] == [3, 1, 1]

    # Each value is the age the ledger gives the resolved record, in seconds.
    ages: dict[AttrKey, list[float]] = {}
    for record in _records(pipeline, "conv"):
        if record.status is None:
            continue
        attributes = {
            "compaction.obligation.kind": record.kind,
            "compaction.obligation.status": record.status,
            "gen_ai.tool.name": record.name,
        }
        if record.error_type is not None:
            attributes["error.type"] = record.error_type
        ages.setdefault(key(attributes), []).append(record.age_seconds)
    for point_key, values in ages.items():
        point = points[point_key]
        assert point.sum == pytest.approx(sum(values), rel=1e-9, abs=1e-12)
        assert point.min == pytest.approx(min(values))
        assert point.max == pytest.approx(max(values))


def test_an_age_resolved_inside_a_sampled_span_has_that_span_as_exemplar(
    pipeline: Pipeline,
) -> None:
    tracer = pipeline.tracer_provider.get_tracer("agent")
    recorder = pipeline.recorder
    call = recorder.call("search", "c1", conversation_id="conv")
    with tracer.start_as_current_span("agent step") as step:
        call.result("found")
    recorder.call("search", "c2", conversation_id="conv").result("found")  # no span current

    (point,) = _age_points(pipeline).values()
    assert point.count == 2
    (exemplar,) = point.exemplars
    context = step.get_span_context()
    assert (exemplar.trace_id, exemplar.span_id) == (context.trace_id, context.span_id)
    # c1's result span, made in the same context, is that span's child; c2's is a root.
    first, second = pipeline.spans("tool_result search")
    assert first.parent == context
    assert second.parent is None


def test_no_exemplar_without_a_sampled_span() -> None:
    pipeline = make_pipeline(ParentBased(ALWAYS_OFF), capture_content=False)
    tracer = pipeline.tracer_provider.get_tracer("agent")
    call = pipeline.recorder.call("search", "c1", conversation_id="conv")
    with tracer.start_as_current_span("agent step (not sampled)"):
        call.result("found")
    pipeline.recorder.call("search", "c2", conversation_id="conv").result("found")

    (point,) = _age_points(pipeline).values()
    assert point.count == 2
    assert list(point.exemplars) == []
    pipeline.shutdown()
