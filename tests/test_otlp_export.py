"""Export over OTLP/HTTP and OTLP/gRPC to a real receiver on loopback.

`configure()` builds the providers from the standard ``OTEL_*`` variables, pointed at the
receiver; the receiver decodes every request with opentelemetry-proto. What must arrive
intact: the link from each result span to its call span, the decision events, and the metrics.
"""

from __future__ import annotations

from typing import Any

import pytest
from otlp_receiver import (
    Metric,
    OtlpReceiver,
    Span,
)
from telemetry_harness import FLIGHT_MESSAGES, set_otlp_environment

from otel_compaction import __version__, configure, conversation

PROTOCOLS = {"http": "http/protobuf", "grpc": "grpc"}


def _configure_from_environment(
    monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver, transport: str
) -> Any:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    endpoint = receiver.endpoint_http if transport == "http" else receiver.endpoint_grpc
    set_otlp_environment(monkeypatch, protocol=PROTOCOLS[transport], endpoint=endpoint, timeout="5")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")  # only the final flush
    monkeypatch.setenv("OTEL_SERVICE_NAME", "travel-agent")
    return configure(agent_name="planner", set_global=False)


def _one(spans: list[Span], name: str) -> Span:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def _points(metric: Metric) -> dict[frozenset[tuple[str, Any]], Any]:
    return {frozenset(p.attributes.items()): p for p in metric.data_points}


def _event(name: str, rules: list[str], ids: list[str], span: tuple[int, int]) -> Any:
    return (
        name,
        {
            "compaction.rules": rules,
            "compaction.obligation.ids": ids,
            "compaction.obligation.kinds": ["tool_call"] * len(ids),
            "compaction.span.start": span[0],
            "compaction.span.end": span[1],
        },
    )


def _events(span: Span) -> list[tuple[str, Any]]:
    return [(e.name, e.attributes) for e in span.events]


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_links_decision_events_and_metrics_arrive_intact(
    otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    telemetry = _configure_from_environment(monkeypatch, otlp_receiver, transport)
    recorder = telemetry.recorder
    gate = telemetry.gate()
    with conversation("conv-otlp"):
        recorder.call("search", "t1").result("2 flights")
        recorder.call("book", "t2").error(ValueError("seat 3A is taken"))
        recorder.call("pay", "t3").abandon("user cancelled")
        recorder.call("notify", "t4")  # still open at export time
    decisions = [
        gate.evaluate(FLIGHT_MESSAGES, 0, 2, conversation_id="conv-gate").action,
        gate.evaluate(FLIGHT_MESSAGES, 4, 8, conversation_id="conv-gate").action,
        gate.evaluate(
            FLIGHT_MESSAGES, 4, 8, critical=True, conversation_id="conv-gate", raise_on_refuse=False
        ).action,
    ]
    assert decisions == ["compact", "defer", "refuse"]
    telemetry.shutdown()  # flushes the batch span processor and the metric reader

    spans = otlp_receiver.wait_for_spans(count=9)
    assert otlp_receiver.errors == []
    assert len(spans) == 9
    assert {s.transport for s in spans} == {transport}
    assert {(s.scope_name, s.scope_version) for s in spans} == {("otel_compaction", __version__)}
    assert {s.resource_attributes["service.name"] for s in spans} == {"travel-agent"}
    assert {s.kind for s in spans} == {"SPAN_KIND_INTERNAL"}

    # Each result span links to its call span; the link carries the call id.
    for tool, call_id in (("search", "t1"), ("book", "t2"), ("pay", "t3")):
        call_span = _one(spans, f"execute_tool {tool}")
        result_span = _one(spans, f"tool_result {tool}")
        [link] = result_span.links
        assert (link.trace_id, link.span_id) == (call_span.trace_id, call_span.span_id)
        assert link.attributes == {"gen_ai.tool.call.id": call_id}
        assert call_span.links == ()
        assert call_span.attributes["gen_ai.tool.call.id"] == call_id
    assert _one(spans, "execute_tool search").attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.id": "t1",
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": "conv-otlp",
        "gen_ai.agent.name": "planner",
        "compaction.obligation.status": "result",
    }
    book = _one(spans, "execute_tool book")
    assert (book.status_code, book.status_message) == ("STATUS_CODE_ERROR", "")  # capture is off
    assert book.attributes["error.type"] == "ValueError"
    pay = _one(spans, "execute_tool pay")
    assert pay.status_code == "STATUS_CODE_UNSET"
    assert _events(pay) == [
        ("compaction.obligation.abandoned", {"compaction.abandon.reason": "user cancelled"})
    ]
    assert not [s for s in spans if s.name == "execute_tool notify"]  # never ended

    # The decisions: one span each, events named for the action.
    extended, deferred, refused = [s for s in spans if s.name == "compaction.evaluate"]
    for span in (extended, deferred, refused):
        assert span.attributes["gen_ai.conversation.id"] == "conv-gate"
        assert span.status_code == "STATUS_CODE_UNSET"
    assert extended.attributes["compaction.action"] == "compact"
    assert extended.attributes["compaction.extended"] is True
    compacted_rules = ["not_addressable", "null_result"]
    assert _events(extended) == [
        _event("compaction.extended", compacted_rules, [], (0, 3)),
        _event("compaction.compacted", compacted_rules, [], (0, 3)),
    ]
    assert deferred.attributes["compaction.action"] == "defer"
    assert deferred.attributes["compaction.tokens.held"] == 6
    assert _events(deferred) == [_event("compaction.deferred", ["open_tool_call"], ["c3"], (4, 7))]
    assert refused.attributes["compaction.action"] == "refuse"
    assert refused.attributes["compaction.critical"] is True
    assert _events(refused) == [_event("compaction.refused", ["open_tool_call"], ["c3"], (4, 8))]

    # The metrics.
    def metric(name: str) -> Metric:
        found = otlp_receiver.wait_for_metric(name)
        assert found.transport == transport
        assert (found.scope_name, found.scope_version) == ("otel_compaction", __version__)
        return found

    decided = metric("compaction.decisions")
    assert (decided.type, decided.is_monotonic, decided.unit) == ("sum", True, "{decision}")
    assert {k: p.value for k, p in _points(decided).items()} == {
        frozenset({"compaction.action": "compact", "compaction.rule": "none"}.items()): 1,
        frozenset({"compaction.action": "defer", "compaction.rule": "open_tool_call"}.items()): 1,
        frozenset({"compaction.action": "refuse", "compaction.rule": "open_tool_call"}.items()): 1,
    }
    still_open = metric("compaction.obligations.open")
    assert (still_open.type, still_open.is_monotonic) == ("sum", False)
    assert still_open.number_point({"compaction.obligation.kind": "tool_call"}).value == 1
    assert metric("compaction.deferral.held_tokens").number_point().value == 6
    # One age per resolution; a tool call's age is its duration, by tool and error type.
    ages = metric("compaction.obligation.age")
    assert ages.type == "histogram" and ages.unit == "s"
    kind = ("compaction.obligation.kind", "tool_call")
    assert {k: p.count for k, p in _points(ages).items()} == {
        frozenset(
            {kind, ("compaction.obligation.status", "result"), ("gen_ai.tool.name", "search")}
        ): 1,
        frozenset(
            {
                kind,
                ("compaction.obligation.status", "error"),
                ("gen_ai.tool.name", "book"),
                ("error.type", "ValueError"),
            }
        ): 1,
        frozenset(
            {kind, ("compaction.obligation.status", "abandoned"), ("gen_ai.tool.name", "pay")}
        ): 1,
    }
    # No call or conversation id on any metric point.
    for received in otlp_receiver.metrics():
        for point in received.data_points:
            assert not {"gen_ai.tool.call.id", "gen_ai.conversation.id"} & set(point.attributes)
