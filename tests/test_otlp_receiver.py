"""The test OTLP receiver, checked end to end against the real OpenTelemetry SDK exporters.

Every exporter talks to the receiver over loopback, on OTLP/HTTP or OTLP/gRPC; the tests
assert that what the SDK sent arrives decoded with exactly the values it was given.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Literal

import grpc  # type: ignore[import-untyped]
import pytest
from loopback import assert_refused, http_request
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
    OTLPLogExporter as GrpcLogExporter,
)
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
    OTLPMetricExporter as GrpcMetricExporter,
)
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http._log_exporter import (
    OTLPLogExporter as HttpLogExporter,
)
from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
    OTLPMetricExporter as HttpMetricExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, format_span_id, format_trace_id
from opentelemetry.util.types import AttributeValue
from otlp_receiver import (
    OtlpReceiver,
    SpanEvent,
    SpanLink,
)

Transport = Literal["http", "grpc"]
TRANSPORTS: tuple[Transport, ...] = ("http", "grpc")
RESOURCE = Resource({"service.name": "otlp-receiver-test", "deployment.environment": "test"})
EXPORT_TIMEOUT_S = 5
"""Exporter request timeout: a broken receiver fails a test quickly instead of hanging it."""


@pytest.fixture(autouse=True)
def _no_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep ``OTEL_*`` settings of the surrounding environment out of the exporters."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


def span_exporter(
    receiver: OtlpReceiver, transport: Transport, compression: str | None = None
) -> SpanExporter:
    """An OTLP span exporter of *transport* that sends to *receiver*."""
    if transport == "http":
        return HttpSpanExporter(
            endpoint=receiver.endpoint_http + "/v1/traces",
            timeout=EXPORT_TIMEOUT_S,
            compression=HttpCompression(compression) if compression else None,
        )
    return GrpcSpanExporter(
        endpoint=receiver.endpoint_grpc,
        insecure=True,
        timeout=EXPORT_TIMEOUT_S,
        compression=grpc.Compression.Gzip if compression == "gzip" else None,
    )


def metric_exporter(receiver: OtlpReceiver, transport: Transport) -> MetricExporter:
    """An OTLP metric exporter of *transport* that sends to *receiver*."""
    if transport == "http":
        return HttpMetricExporter(
            endpoint=receiver.endpoint_http + "/v1/metrics", timeout=EXPORT_TIMEOUT_S
        )
    return GrpcMetricExporter(
        endpoint=receiver.endpoint_grpc, insecure=True, timeout=EXPORT_TIMEOUT_S
    )


@pytest.fixture
def tracer_provider() -> Iterator[TracerProvider]:
    """A tracer provider that is shut down after the test (processors added by the test)."""
    provider = TracerProvider(resource=RESOURCE)
    try:
        yield provider
    finally:
        provider.shutdown()


def export_one_span(provider: TracerProvider, exporter: SpanExporter, name: str) -> None:
    """Export a single span called *name* through a batch processor and flush it."""
    provider.add_span_processor(BatchSpanProcessor(exporter))
    with provider.get_tracer("receiver.test").start_as_current_span(name):
        pass
    assert provider.force_flush(5_000)


# --------------------------------------------------------------------------
# Traces
# --------------------------------------------------------------------------

TOOL_ATTRIBUTES: dict[str, AttributeValue] = {
    "gen_ai.tool.name": "search",
    "retries": 3,
    "score": 0.25,
    "cached": False,
    "tags": ["a", "b"],
    "sizes": [1, 2, 3],
}
"""Span attributes of every type, sent and expected back exactly (arrays as lists)."""


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_span_with_attributes_event_and_link_arrives_intact(
    otlp_receiver: OtlpReceiver, tracer_provider: TracerProvider, transport: Transport
) -> None:
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter(otlp_receiver, transport)))
    tracer = tracer_provider.get_tracer("receiver.test", "1.2.3")
    with tracer.start_as_current_span("earlier") as earlier:
        pass
    with (
        tracer.start_as_current_span("parent") as parent,
        tracer.start_as_current_span(
            "tool.call",
            kind=SpanKind.CLIENT,
            attributes=TOOL_ATTRIBUTES,
            links=[Link(earlier.get_span_context(), {"link.reason": "follows"})],
        ) as child,
    ):
        child.add_event("tool.result", {"ok": True, "items": 7})
        child.set_status(Status(StatusCode.ERROR, "tool failed"))
    assert tracer_provider.force_flush(5_000)

    [span] = otlp_receiver.wait_for_spans("tool.call", timeout=5)
    parent_context, child_context = parent.get_span_context(), child.get_span_context()
    assert span.kind == "SPAN_KIND_CLIENT"
    assert span.trace_id == format_trace_id(child_context.trace_id)
    assert span.span_id == format_span_id(child_context.span_id)
    assert span.parent_span_id == format_span_id(parent_context.span_id)
    assert span.attributes == TOOL_ATTRIBUTES
    assert [(e.name, e.attributes) for e in span.events] == [
        ("tool.result", {"ok": True, "items": 7})
    ]
    assert isinstance(span.events[0], SpanEvent)
    earlier_context = earlier.get_span_context()
    assert span.links == (
        SpanLink(
            trace_id=format_trace_id(earlier_context.trace_id),
            span_id=format_span_id(earlier_context.span_id),
            trace_state="",
            attributes={"link.reason": "follows"},
            dropped_attributes_count=0,
            flags=span.links[0].flags,  # SDK-version-specific SpanFlags bits
        ),
    )
    assert (span.status_code, span.status_message) == ("STATUS_CODE_ERROR", "tool failed")
    assert span.resource_attributes == dict(RESOURCE.attributes)
    assert (span.scope_name, span.scope_version) == ("receiver.test", "1.2.3")
    assert span.transport == transport
    assert 0 < span.start_time_unix_nano <= span.end_time_unix_nano

    [root] = otlp_receiver.spans("parent")
    assert root.parent_span_id is None
    assert root.kind == "SPAN_KIND_INTERNAL"
    assert root.status_code == "STATUS_CODE_UNSET"
    assert sorted(s.name for s in otlp_receiver.spans()) == ["earlier", "parent", "tool.call"]


@pytest.mark.parametrize(
    ("transport", "compression"), [("http", "gzip"), ("http", "deflate"), ("grpc", "gzip")]
)
def test_compressed_exports_are_decoded(
    otlp_receiver: OtlpReceiver,
    tracer_provider: TracerProvider,
    transport: Transport,
    compression: str,
) -> None:
    exporter = span_exporter(otlp_receiver, transport, compression)
    export_one_span(tracer_provider, exporter, "compressed")
    [span] = otlp_receiver.wait_for_spans("compressed", timeout=5)
    assert span.transport == transport
    [request] = otlp_receiver.requests("traces")
    assert request.items == 1
    assert request.content_encoding == (compression if transport == "http" else None)
    assert otlp_receiver.errors == []


# --------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_counter_updown_counter_and_histogram_arrive_with_correct_points(
    otlp_receiver: OtlpReceiver, transport: Transport
) -> None:
    reader = PeriodicExportingMetricReader(
        metric_exporter(otlp_receiver, transport), export_interval_millis=60_000
    )
    provider = MeterProvider(metric_readers=[reader], resource=RESOURCE)
    try:
        meter = provider.get_meter("receiver.test", "0.1")
        handled = meter.create_counter("test.requests", unit="{request}", description="Handled")
        handled.add(2, {"route": "a"})
        handled.add(3, {"route": "a"})
        handled.add(1, {"route": "b"})
        inflight = meter.create_up_down_counter("test.inflight")
        inflight.add(5)
        inflight.add(-2)
        latency = meter.create_histogram(
            "test.latency", unit="ms", explicit_bucket_boundaries_advisory=[10.0, 100.0]
        )
        for value in (5.0, 50.0, 500.0, 7.0):
            latency.record(value, {"tool": "search"})
        assert provider.force_flush(5_000)
        names = ("test.requests", "test.inflight", "test.latency")
        otlp_receiver.wait_for(lambda: all(otlp_receiver.metrics(n) for n in names), timeout=5)
    finally:
        provider.shutdown()

    counter = otlp_receiver.wait_for_metric("test.requests", lambda m: len(m.data_points) == 2)
    assert (counter.type, counter.is_monotonic) == ("sum", True)
    assert counter.aggregation_temporality == "AGGREGATION_TEMPORALITY_CUMULATIVE"
    assert (counter.unit, counter.description) == ("{request}", "Handled")
    assert counter.number_point({"route": "a"}).value == 5
    assert counter.number_point({"route": "b"}).value == 1
    assert len(counter.data_points) == 2
    assert (counter.scope_name, counter.scope_version) == ("receiver.test", "0.1")
    assert counter.resource_attributes == dict(RESOURCE.attributes)
    assert counter.transport == transport

    updown = otlp_receiver.last_metric("test.inflight")
    assert (updown.type, updown.is_monotonic) == ("sum", False)
    assert updown.number_point().value == 3

    histogram = otlp_receiver.last_metric("test.latency")
    assert histogram.type == "histogram"
    assert histogram.is_monotonic is None
    assert histogram.aggregation_temporality == "AGGREGATION_TEMPORALITY_CUMULATIVE"
    point = histogram.histogram_point({"tool": "search"})
    assert (point.count, point.sum, point.min, point.max) == (4, 562.0, 5.0, 500.0)
    assert point.explicit_bounds == (10.0, 100.0)
    assert point.bucket_counts == (2, 1, 1)
    with pytest.raises(TypeError):
        _ = histogram.number_points


# --------------------------------------------------------------------------
# Logs
# --------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_log_record_arrives_intact(otlp_receiver: OtlpReceiver, transport: Transport) -> None:
    exporter = (
        HttpLogExporter(endpoint=otlp_receiver.endpoint_http + "/v1/logs", timeout=EXPORT_TIMEOUT_S)
        if transport == "http"
        else GrpcLogExporter(
            endpoint=otlp_receiver.endpoint_grpc, insecure=True, timeout=EXPORT_TIMEOUT_S
        )
    )
    provider = LoggerProvider(resource=RESOURCE)
    try:
        provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
        provider.get_logger("receiver.test").emit(
            body={"message": "compacted", "kept": [1, 2]},
            severity_number=SeverityNumber.WARN,
            severity_text="WARN",
            attributes={"turns": 12},
            event_name="compaction.done",
        )
        assert provider.force_flush(5_000)
        [record] = otlp_receiver.wait_for_logs(timeout=5)
    finally:
        provider.shutdown()
    assert record.body == {"message": "compacted", "kept": [1, 2]}
    assert (record.severity_number, record.severity_text) == (SeverityNumber.WARN.value, "WARN")
    assert record.event_name == "compaction.done"
    assert record.attributes == {"turns": 12}
    assert (record.trace_id, record.span_id) == (None, None)
    assert record.scope_name == "receiver.test"
    assert record.resource_attributes == dict(RESOURCE.attributes)


# --------------------------------------------------------------------------
# The receiver itself
# --------------------------------------------------------------------------


def test_http_only_fixture_serves_http(
    otlp_http_receiver: OtlpReceiver, tracer_provider: TracerProvider
) -> None:
    with pytest.raises(RuntimeError, match="gRPC server is not running"):
        _ = otlp_http_receiver.endpoint_grpc
    export_one_span(tracer_provider, span_exporter(otlp_http_receiver, "http"), "over-http")
    assert otlp_http_receiver.wait_for_spans("over-http", timeout=5)[0].transport == "http"


def test_grpc_only_fixture_serves_grpc(
    otlp_grpc_receiver: OtlpReceiver, tracer_provider: TracerProvider
) -> None:
    with pytest.raises(RuntimeError, match="HTTP server is not running"):
        _ = otlp_grpc_receiver.endpoint_http
    assert otlp_grpc_receiver.grpc_target == f"127.0.0.1:{otlp_grpc_receiver.grpc_port}"
    export_one_span(tracer_provider, span_exporter(otlp_grpc_receiver, "grpc"), "over-grpc")
    assert otlp_grpc_receiver.wait_for_spans("over-grpc", timeout=5)[0].transport == "grpc"


def _post(
    receiver: OtlpReceiver, path: str, body: bytes, content_type: str, method: str = "POST"
) -> tuple[int, bytes]:
    """Send one raw request to the receiver's HTTP server; return status and body."""
    headers = {"Content-Type": content_type}
    status, _, data = http_request(receiver.http_port, method, path, body, headers, timeout=5)
    return status, data


def test_http_rejects_what_it_cannot_decode(otlp_http_receiver: OtlpReceiver) -> None:
    protobuf = "application/x-protobuf"
    assert _post(otlp_http_receiver, "/v1/traces", b"", protobuf) == (200, b"")
    assert _post(otlp_http_receiver, "/v1/traces", b"\xff\xff\xff", protobuf)[0] == 400
    assert _post(otlp_http_receiver, "/v1/profiles", b"", protobuf)[0] == 404
    assert _post(otlp_http_receiver, "/v1/logs", b"{}", "application/json")[0] == 415
    assert _post(otlp_http_receiver, "/v1/traces", b"", protobuf, method="GET")[0] == 405
    [error] = otlp_http_receiver.errors
    assert error.startswith("HTTP /v1/traces: cannot decode request")
    [request] = otlp_http_receiver.requests()
    assert (request.signal, request.items) == ("traces", 0)


def test_wait_for_times_out_with_a_summary(otlp_receiver: OtlpReceiver) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"span 'missing' not met within 0\.2s; received 0"):
        otlp_receiver.wait_for_spans("missing", timeout=0.2)
    assert time.monotonic() - started < 2


def test_stop_is_prompt_idempotent_and_frees_the_ports() -> None:
    receiver = OtlpReceiver().start()
    http_port, grpc_port = receiver.http_port, receiver.grpc_port
    started = time.monotonic()
    receiver.stop()
    receiver.stop()
    assert time.monotonic() - started < 2
    for port in (http_port, grpc_port):
        assert_refused(port)
