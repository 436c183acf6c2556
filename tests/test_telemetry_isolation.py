"""A telemetry failure never breaks the host call, and the ledger stays right.

Providers whose ``get_tracer`` / ``get_meter`` raise, tracers whose ``start_span`` raises,
spans every method of which raises, and content that cannot be serialised.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import pytest
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status
from opentelemetry.util.types import Attributes, AttributeValue
from telemetry_harness import (
    assistant,
    calls,
    histogram_counts,
    key,
    ledger_rows,
    make_pipeline,
    number_points,
    result,
    user,
)

from otel_compaction import ToolCallRecorder, configure
from otel_compaction.ledger import ObligationLedger
from otel_compaction.telemetry import semconv as sc
from otel_compaction.telemetry.decisions import DecisionTelemetry
from otel_compaction.telemetry.metrics import CompactionMetrics

MESSAGES = [user("hi"), calls(("c1", "search")), result("c1", "ok"), assistant("done")]


def _boom(*_args: object, **_kwargs: object) -> NoReturn:
    raise RuntimeError("telemetry is broken")


class BrokenTracerProvider(trace.TracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        _boom()


class BrokenMeterProvider(metrics.MeterProvider):
    def get_meter(self, *args: Any, **kwargs: Any) -> metrics.Meter:
        _boom()


class ExplodingSpan(Span):
    """Every method raises."""

    def end(self, end_time: int | None = None) -> None:
        _boom()

    def get_span_context(self) -> SpanContext:
        _boom()

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        _boom()

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        _boom()

    def add_event(
        self, name: str, attributes: Attributes = None, timestamp: int | None = None
    ) -> None:
        _boom()

    def update_name(self, name: str) -> None:
        _boom()

    def is_recording(self) -> bool:
        _boom()

    def set_status(self, status: Status | Any, description: str | None = None) -> None:
        _boom()

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        _boom()


class SpanTracer(trace.Tracer):
    """Hands out exploding spans, or raises on `start_span` itself."""

    def __init__(self, raise_on_start: bool) -> None:
        self.raise_on_start = raise_on_start

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        if self.raise_on_start:
            _boom()
        return ExplodingSpan()

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        _boom()


class SpanTracerProvider(trace.TracerProvider):
    def __init__(self, raise_on_start: bool) -> None:
        self.raise_on_start = raise_on_start

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return SpanTracer(self.raise_on_start)


def _agent_work(recorder: ToolCallRecorder) -> list[object]:
    """What an agent does: decorated tools, explicit calls, a transaction, a retry chain."""

    @recorder.tool()
    def add(a: int, b: int) -> int:
        return a + b

    @recorder.tool()
    def fail() -> None:
        raise KeyError("missing")

    outcomes: list[object] = [add(2, 3)]
    with pytest.raises(KeyError, match="missing"):
        fail()
    recorder.call("search", "c1", conversation_id="conv").result("x")
    recorder.call("search", "c2", conversation_id="conv").error(ValueError("bad"))
    recorder.call("search", "c3", conversation_id="conv").abandon("stop")
    assert recorder.resolve("c4", conversation_id="conv") is False
    recorder.call("search", "c4", conversation_id="conv")
    outcomes.append(recorder.resolve("c4", "y", conversation_id="conv"))
    with recorder.tool_call("ls", "c5", conversation_id="conv"):
        outcomes.append("in tool_call")
    with recorder.transaction("t", "txn", conversation_id="conv"):
        outcomes.append("in transaction")
    chain = recorder.retry_chain("r", "retry", conversation_id="conv")
    chain.attempt_failed(TimeoutError())
    chain.succeeded()
    recorder.call("search", "c6", conversation_id="conv")  # left open
    return outcomes


EXPECTED_OUTCOMES = [5, True, "in tool_call", "in transaction"]
EXPECTED_LEDGER = [
    ("tool_call", "c1", "search", "conv", 2, "result"),
    ("tool_call", "c2", "search", "conv", 3, "error"),
    ("tool_call", "c3", "search", "conv", 4, "abandoned"),
    ("tool_call", "c4", "search", "conv", 5, "result"),
    ("tool_call", "c5", "ls", "conv", 6, "result"),
    ("transaction", "txn", "t", "conv", 7, "result"),
    ("retry", "retry", "r", "conv", 8, "result"),
    ("tool_call", "c6", "search", "conv", 9, None),
]


def _age(kind: str, status: str, **more: str) -> frozenset[tuple[str, object]]:
    return key({"compaction.obligation.kind": kind, "compaction.obligation.status": status, **more})


TOOL = "gen_ai.tool.name"
EXPECTED_AGES = {
    _age("tool_call", "result", **{TOOL: "add"}): 1,
    _age("tool_call", "error", **{TOOL: "fail", "error.type": "KeyError"}): 1,
    _age("tool_call", "result", **{TOOL: "search"}): 2,
    _age("tool_call", "error", **{TOOL: "search", "error.type": "ValueError"}): 1,
    _age("tool_call", "abandoned", **{TOOL: "search"}): 1,
    _age("tool_call", "result", **{TOOL: "ls"}): 1,
    _age("transaction", "result"): 1,
    _age("retry", "result"): 1,
}
"""One age per resolution of `_agent_work`, a tool call's by its tool."""


@pytest.mark.parametrize(
    "provider",
    [BrokenTracerProvider(), SpanTracerProvider(True), SpanTracerProvider(False)],
    ids=["get_tracer raises", "start_span raises", "every span method raises"],
)
def test_a_broken_tracer_never_breaks_the_agent(
    provider: trace.TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    working = make_pipeline()
    metrics_ = CompactionMetrics(working.meter_provider)
    ledger = ObligationLedger()
    recorder = ToolCallRecorder(ledger=ledger, tracer_provider=provider, metrics=metrics_)
    with caplog.at_level(logging.ERROR, logger="otel_compaction"):
        assert _agent_work(recorder) == EXPECTED_OUTCOMES
    assert ledger_rows(ledger, "conv") == EXPECTED_LEDGER
    assert [row[1:3] + row[5:] for row in ledger_rows(ledger, None)] == [
        ("call_1", "add", "result"),
        ("call_2", "fail", "error"),
    ]
    # The failures were logged, not raised; the metrics did not depend on the spans.
    assert caplog.records
    assert all(r.getMessage().startswith("otel-compaction: ") for r in caplog.records)
    collected = working.metrics()
    assert number_points(collected[sc.METRIC_OPEN_OBLIGATIONS]) == {
        key({sc.OBLIGATION_KIND: "tool_call"}): 1,
        key({sc.OBLIGATION_KIND: "transaction"}): 0,
        key({sc.OBLIGATION_KIND: "retry"}): 0,
    }
    assert histogram_counts(collected["compaction.obligation.age"]) == EXPECTED_AGES
    working.shutdown()


def test_broken_providers_leave_configure_and_the_gate_working() -> None:
    reference = make_pipeline()
    expected = reference.telemetry.gate().evaluate(MESSAGES, 0, 2).to_dict()

    telemetry = configure(
        tracer_provider=BrokenTracerProvider(),
        meter_provider=BrokenMeterProvider(),
        set_global=False,
    )
    assert _agent_work(telemetry.recorder) == EXPECTED_OUTCOMES
    assert ledger_rows(telemetry.ledger, "conv") == EXPECTED_LEDGER
    decision = telemetry.gate().evaluate(MESSAGES, 0, 2)
    assert decision.to_dict() == expected
    assert (decision.action, decision.span, decision.extended) == ("compact", (0, 3), True)
    telemetry.shutdown()
    reference.shutdown()


def test_a_failing_decision_span_still_counts_the_decision() -> None:
    working = make_pipeline()
    decisions = DecisionTelemetry(
        SpanTracerProvider(False), CompactionMetrics(working.meter_provider)
    )
    gate = working.telemetry.gate()
    gate.add_observer(decisions)
    decision = gate.evaluate(MESSAGES, 0, 2)
    assert (decision.action, decision.span) == ("compact", (0, 3))
    # Both observers counted it: the working one and the one whose spans explode.
    assert number_points(working.metrics()[sc.METRIC_DECISIONS]) == {
        key({"compaction.action": "compact", "compaction.rule": "none"}): 2
    }
    working.shutdown()


class Hostile:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_content_that_cannot_be_serialised_never_breaks_the_call() -> None:
    pipeline = make_pipeline(capture_content=True)
    recorder = pipeline.recorder
    circular: dict[str, Any] = {"name": "loop"}
    circular["self"] = circular

    @recorder.tool()
    def echo(value: Any) -> Any:
        return value

    assert echo(circular) is circular
    recorder.call("odd", "c2", arguments=Hostile()).result(Hostile())

    assert ledger_rows(pipeline.ledger, None) == [
        ("tool_call", "call_1", "echo", "", 0, "result"),
        ("tool_call", "c2", "odd", "", 1, "result"),
    ]

    def attribute(span_name: str, name: str) -> object:
        return (pipeline.span(span_name).attributes or {})[name]

    assert attribute("execute_tool echo", "gen_ai.tool.call.arguments") == repr({"value": circular})
    assert attribute("tool_result echo", "gen_ai.tool.call.result") == repr(circular)
    assert attribute("execute_tool odd", "gen_ai.tool.call.arguments") == "<Hostile>"
    assert attribute("tool_result odd", "gen_ai.tool.call.result") == "<Hostile>"
    pipeline.shutdown()
