"""A real, in-process OTLP receiver for tests: OTLP/HTTP and OTLP/gRPC on loopback.

:class:`OtlpReceiver` runs an OTLP/HTTP server (``/v1/traces``, ``/v1/metrics`` and
``/v1/logs``, protobuf bodies, optionally gzip- or deflate-compressed) and an OTLP/gRPC
server (the ``TraceService``, ``MetricsService`` and ``LogsService`` collector services),
both bound to ``127.0.0.1`` on ephemeral ports. Every export request is decoded with
``opentelemetry-proto`` into the plain, frozen dataclasses below (:class:`Span`,
:class:`Metric`, :class:`LogRecord`), which tests can compare with ``==``.

As a context manager::

    from otlp_receiver import OtlpReceiver

    with OtlpReceiver() as receiver:
        exporter = OTLPSpanExporter(endpoint=receiver.endpoint_http + "/v1/traces")
        ...  # export something, then force_flush() the provider
        [span] = receiver.wait_for_spans("work")
        assert span.attributes == {"answer": 42}

As pytest fixtures, which every test module has (``conftest.py`` loads this module as a
plugin). The functions are called ``*_fixture`` and register under the name without that
suffix::

    from otlp_receiver import OtlpReceiver

    def test_export(otlp_http_receiver: OtlpReceiver) -> None: ...

``otlp_receiver`` runs both servers, ``otlp_http_receiver`` only HTTP and
``otlp_grpc_receiver`` only gRPC. The fixtures also remove proxy settings from the
environment for the duration of the test, so that exporters really talk to loopback.

Data is recorded before the server replies, so once an exporter's (or a provider's)
``force_flush()`` has returned successfully the data is already visible; ``wait_for`` is
still the robust way to wait, since batch processors may export on their own thread.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypeAlias, TypeVar

import grpc  # type: ignore[import-untyped]
import pytest
from loopback import LOOPBACK, LoopbackService, bypass_proxies, serve_in_background
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

__all__ = [
    "AttributeValue",
    "DataPoint",
    "ExponentialHistogramDataPoint",
    "HistogramDataPoint",
    "LogRecord",
    "Metric",
    "MetricType",
    "NumberDataPoint",
    "OtlpReceiver",
    "ReceivedRequest",
    "Signal",
    "Span",
    "SpanEvent",
    "SpanLink",
    "SummaryDataPoint",
    "Transport",
    "bypass_proxies",
    "otlp_grpc_receiver_fixture",
    "otlp_http_receiver_fixture",
    "otlp_receiver_fixture",
]

DEFAULT_TIMEOUT = 5.0
"""Default number of seconds the ``wait_for*`` helpers wait before giving up."""

AttributeValue: TypeAlias = (
    str | bool | int | float | bytes | list["AttributeValue"] | dict[str, "AttributeValue"] | None
)
"""An OTLP ``AnyValue`` as a Python value (arrays become lists, key/value lists dicts)."""

Attributes: TypeAlias = dict[str, AttributeValue]
"""Decoded OTLP attributes (a repeated ``KeyValue``; the last duplicate key wins)."""

Signal: TypeAlias = Literal["traces", "metrics", "logs"]
"""The OTLP signal an export request carried."""

Transport: TypeAlias = Literal["http", "grpc"]
"""The OTLP transport an export request arrived on."""

MetricType: TypeAlias = Literal["gauge", "sum", "histogram", "exponential_histogram", "summary"]
"""The kind of data a :class:`Metric` carries (the name of the OTLP ``data`` oneof)."""

_T = TypeVar("_T")


# --------------------------------------------------------------------------
# Decoded data
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class SpanEvent:
    """A span event."""

    name: str
    time_unix_nano: int
    attributes: Attributes
    dropped_attributes_count: int


@dataclass(frozen=True)
class SpanLink:
    """A span link; ids are lowercase hex."""

    trace_id: str
    span_id: str
    trace_state: str
    attributes: Attributes
    dropped_attributes_count: int
    flags: int


@dataclass(frozen=True)
class Span:
    """A received span, flattened with its resource and instrumentation scope.

    Ids are lowercase hex (32 digits for trace ids, 16 for span ids); ``parent_span_id`` is
    ``None`` for a root span. ``kind`` and ``status_code`` are the OTLP enum names, e.g.
    ``"SPAN_KIND_INTERNAL"`` and ``"STATUS_CODE_ERROR"``.
    """

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    trace_state: str
    flags: int
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: Attributes
    events: tuple[SpanEvent, ...]
    links: tuple[SpanLink, ...]
    status_code: str
    status_message: str
    dropped_attributes_count: int
    dropped_events_count: int
    dropped_links_count: int
    resource_attributes: Attributes
    scope_name: str
    scope_version: str
    scope_attributes: Attributes
    transport: Transport


@dataclass(frozen=True)
class NumberDataPoint:
    """A data point of a gauge or sum; ``value`` is an ``int`` or a ``float`` as sent."""

    attributes: Attributes
    value: int | float
    start_time_unix_nano: int
    time_unix_nano: int
    flags: int


@dataclass(frozen=True)
class HistogramDataPoint:
    """A data point of an explicit-bucket histogram.

    ``bucket_counts`` has one more entry than ``explicit_bounds``; ``sum``, ``min`` and
    ``max`` are ``None`` when the sender left them out.
    """

    attributes: Attributes
    count: int
    sum: float | None
    bucket_counts: tuple[int, ...]
    explicit_bounds: tuple[float, ...]
    min: float | None
    max: float | None
    start_time_unix_nano: int
    time_unix_nano: int
    flags: int


@dataclass(frozen=True)
class ExponentialHistogramDataPoint:
    """A data point of an exponential histogram."""

    attributes: Attributes
    count: int
    sum: float | None
    scale: int
    zero_count: int
    zero_threshold: float
    positive_offset: int
    positive_bucket_counts: tuple[int, ...]
    negative_offset: int
    negative_bucket_counts: tuple[int, ...]
    min: float | None
    max: float | None
    start_time_unix_nano: int
    time_unix_nano: int
    flags: int


@dataclass(frozen=True)
class SummaryDataPoint:
    """A data point of a summary; ``quantile_values`` holds ``(quantile, value)`` pairs."""

    attributes: Attributes
    count: int
    sum: float
    quantile_values: tuple[tuple[float, float], ...]
    start_time_unix_nano: int
    time_unix_nano: int
    flags: int


DataPoint: TypeAlias = (
    NumberDataPoint | HistogramDataPoint | ExponentialHistogramDataPoint | SummaryDataPoint
)
"""Any decoded metric data point."""


_PointT = TypeVar("_PointT", NumberDataPoint, HistogramDataPoint)


@dataclass(frozen=True)
class Metric:
    """One metric of one export request, flattened with its resource and scope.

    Periodic readers export the same metric again and again, so a receiver usually holds
    several :class:`Metric` records per name; :meth:`OtlpReceiver.last_metric` picks the
    newest. ``is_monotonic`` is set for sums only; ``aggregation_temporality`` (e.g.
    ``"AGGREGATION_TEMPORALITY_CUMULATIVE"``) for sums and (exponential) histograms.
    """

    name: str
    description: str
    unit: str
    type: MetricType
    is_monotonic: bool | None
    aggregation_temporality: str | None
    data_points: tuple[DataPoint, ...]
    resource_attributes: Attributes
    scope_name: str
    scope_version: str
    transport: Transport

    @property
    def number_points(self) -> tuple[NumberDataPoint, ...]:
        """The data points of a gauge or sum (``TypeError`` for any other type)."""
        return _points_of(self, NumberDataPoint)

    @property
    def histogram_points(self) -> tuple[HistogramDataPoint, ...]:
        """The data points of a histogram (``TypeError`` for any other type)."""
        return _points_of(self, HistogramDataPoint)

    def number_point(
        self, attributes: Mapping[str, AttributeValue] | None = None
    ) -> NumberDataPoint:
        """The gauge or sum data point whose attributes equal *attributes* (default: none)."""
        return _only_point(self, self.number_points, attributes)

    def histogram_point(
        self, attributes: Mapping[str, AttributeValue] | None = None
    ) -> HistogramDataPoint:
        """The histogram data point whose attributes equal *attributes* (default: none)."""
        return _only_point(self, self.histogram_points, attributes)


def _points_of(metric: Metric, kind: type[_PointT]) -> tuple[_PointT, ...]:
    """The data points of *metric*, which must all be of type *kind*."""
    points = tuple(point for point in metric.data_points if isinstance(point, kind))
    if len(points) != len(metric.data_points):
        raise TypeError(f"metric {metric.name!r} is a {metric.type}, not made of {kind.__name__}s")
    return points


def _only_point(
    metric: Metric, points: Sequence[_PointT], attributes: Mapping[str, AttributeValue] | None
) -> _PointT:
    """Return the single point of *points* whose attributes equal *attributes*."""
    wanted = dict(attributes or {})
    matches = [point for point in points if point.attributes == wanted]
    if len(matches) != 1:
        seen = [point.attributes for point in points]
        raise LookupError(
            f"metric {metric.name!r}: {len(matches)} data points with attributes {wanted!r};"
            f" points have {seen!r}"
        )
    return matches[0]


@dataclass(frozen=True)
class LogRecord:
    """A received log record; ids are lowercase hex or ``None`` when not set."""

    body: AttributeValue
    severity_number: int
    severity_text: str
    event_name: str
    attributes: Attributes
    trace_id: str | None
    span_id: str | None
    flags: int
    time_unix_nano: int
    observed_time_unix_nano: int
    dropped_attributes_count: int
    resource_attributes: Attributes
    scope_name: str
    scope_version: str
    transport: Transport


@dataclass(frozen=True)
class ReceivedRequest:
    """Metadata of one export request that was decoded successfully.

    ``headers`` holds the HTTP headers or the gRPC invocation metadata, with lowercase
    keys; ``content_encoding`` is the HTTP ``Content-Encoding`` (``None`` for gRPC, whose
    compression is handled by gRPC itself); ``size`` is the size of the decoded protobuf
    message in bytes and ``items`` the number of spans, metric data points or log records.
    """

    signal: Signal
    transport: Transport
    path: str
    headers: dict[str, str]
    content_encoding: str | None
    size: int
    items: int


# --------------------------------------------------------------------------
# Protobuf decoding
# --------------------------------------------------------------------------


def _hex_id(raw: Any) -> str | None:
    """Render an OTLP id as lowercase hex; ``None`` for an empty (absent) id."""
    data = bytes(raw)
    return data.hex() if data else None


def _any_value(value: Any) -> AttributeValue:
    """Convert an OTLP ``AnyValue`` message to a Python value."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return str(value.string_value)
    if kind == "bool_value":
        return bool(value.bool_value)
    if kind == "int_value":
        return int(value.int_value)
    if kind == "double_value":
        return float(value.double_value)
    if kind == "bytes_value":
        return bytes(value.bytes_value)
    if kind == "array_value":
        return [_any_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return None


def _attributes(key_values: Any) -> Attributes:
    """Convert a repeated OTLP ``KeyValue`` to a dict."""
    return {str(kv.key): _any_value(kv.value) for kv in key_values}


def _optional_float(message: Any, field: str) -> float | None:
    """Read an ``optional double`` field, ``None`` when it is not set."""
    return float(getattr(message, field)) if message.HasField(field) else None


def _flatten(
    resources: Any,
    scopes: str,
    items: str,
    transport: Transport,
    convert: Callable[[Any, Any, dict[str, Any]], _T],
) -> list[_T]:
    """Convert each item of an export request's ``resources`` (``resource.<scopes>[].<items>``)
    with ``convert(item, scope, origin)``: ``origin`` holds the fields saying where the item
    came from (resource attributes, scope name and version, transport)."""
    converted: list[_T] = []
    for resource in resources:
        resource_attributes = _attributes(resource.resource.attributes)
        for scoped in getattr(resource, scopes):
            origin = {
                "resource_attributes": resource_attributes,
                "scope_name": str(scoped.scope.name),
                "scope_version": str(scoped.scope.version),
                "transport": transport,
            }
            converted.extend(convert(item, scoped.scope, origin) for item in getattr(scoped, items))
    return converted


def _decode_span(span: Any, scope: Any, origin: dict[str, Any]) -> Span:
    """Convert one OTLP ``Span`` message."""
    return Span(
        name=str(span.name),
        kind=str(trace_pb2.Span.SpanKind.Name(span.kind)),
        trace_id=_hex_id(span.trace_id) or "",
        span_id=_hex_id(span.span_id) or "",
        parent_span_id=_hex_id(span.parent_span_id),
        trace_state=str(span.trace_state),
        flags=int(span.flags),
        start_time_unix_nano=int(span.start_time_unix_nano),
        end_time_unix_nano=int(span.end_time_unix_nano),
        attributes=_attributes(span.attributes),
        events=tuple(
            SpanEvent(
                name=str(event.name),
                time_unix_nano=int(event.time_unix_nano),
                attributes=_attributes(event.attributes),
                dropped_attributes_count=int(event.dropped_attributes_count),
            )
            for event in span.events
        ),
        links=tuple(
            SpanLink(
                trace_id=_hex_id(link.trace_id) or "",
                span_id=_hex_id(link.span_id) or "",
                trace_state=str(link.trace_state),
                attributes=_attributes(link.attributes),
                dropped_attributes_count=int(link.dropped_attributes_count),
                flags=int(link.flags),
            )
            for link in span.links
        ),
        status_code=str(trace_pb2.Status.StatusCode.Name(span.status.code)),
        status_message=str(span.status.message),
        dropped_attributes_count=int(span.dropped_attributes_count),
        dropped_events_count=int(span.dropped_events_count),
        dropped_links_count=int(span.dropped_links_count),
        scope_attributes=_attributes(scope.attributes),
        **origin,
    )


def _point_fields(point: Any) -> dict[str, Any]:
    """The fields every OTLP data point has: attributes, times and flags."""
    return {
        "attributes": _attributes(point.attributes),
        "start_time_unix_nano": int(point.start_time_unix_nano),
        "time_unix_nano": int(point.time_unix_nano),
        "flags": int(point.flags),
    }


def _histogram_fields(point: Any) -> dict[str, Any]:
    """The fields both histogram data points have, besides `_point_fields`."""
    return {
        "count": int(point.count),
        "sum": _optional_float(point, "sum"),
        "min": _optional_float(point, "min"),
        "max": _optional_float(point, "max"),
    }


def _number_point(point: Any) -> NumberDataPoint:
    """Convert an OTLP ``NumberDataPoint``."""
    is_int = point.WhichOneof("value") == "as_int"
    value: int | float = int(point.as_int) if is_int else float(point.as_double)
    return NumberDataPoint(value=value, **_point_fields(point))


def _histogram_point(point: Any) -> HistogramDataPoint:
    """Convert an OTLP ``HistogramDataPoint``."""
    return HistogramDataPoint(
        bucket_counts=tuple(int(count) for count in point.bucket_counts),
        explicit_bounds=tuple(float(bound) for bound in point.explicit_bounds),
        **_histogram_fields(point),
        **_point_fields(point),
    )


def _exponential_histogram_point(point: Any) -> ExponentialHistogramDataPoint:
    """Convert an OTLP ``ExponentialHistogramDataPoint``."""
    return ExponentialHistogramDataPoint(
        scale=int(point.scale),
        zero_count=int(point.zero_count),
        zero_threshold=float(point.zero_threshold),
        positive_offset=int(point.positive.offset),
        positive_bucket_counts=tuple(int(count) for count in point.positive.bucket_counts),
        negative_offset=int(point.negative.offset),
        negative_bucket_counts=tuple(int(count) for count in point.negative.bucket_counts),
        **_histogram_fields(point),
        **_point_fields(point),
    )


def _summary_point(point: Any) -> SummaryDataPoint:
    """Convert an OTLP ``SummaryDataPoint``."""
    return SummaryDataPoint(
        count=int(point.count),
        sum=float(point.sum),
        quantile_values=tuple(
            (float(quantile.quantile), float(quantile.value)) for quantile in point.quantile_values
        ),
        **_point_fields(point),
    )


def _temporality(data: Any) -> str:
    """The name of an OTLP ``AggregationTemporality`` value."""
    return str(metrics_pb2.AggregationTemporality.Name(data.aggregation_temporality))


def _decode_metric(metric: Any, scope: Any, origin: dict[str, Any]) -> Metric:
    """Convert one OTLP ``Metric`` message."""
    kind = metric.WhichOneof("data")
    is_monotonic: bool | None = None
    temporality: str | None = None
    points: tuple[DataPoint, ...]
    metric_type: MetricType
    if kind == "gauge":
        metric_type = "gauge"
        points = tuple(_number_point(point) for point in metric.gauge.data_points)
    elif kind == "sum":
        metric_type = "sum"
        is_monotonic = bool(metric.sum.is_monotonic)
        temporality = _temporality(metric.sum)
        points = tuple(_number_point(point) for point in metric.sum.data_points)
    elif kind == "histogram":
        metric_type = "histogram"
        temporality = _temporality(metric.histogram)
        points = tuple(_histogram_point(point) for point in metric.histogram.data_points)
    elif kind == "exponential_histogram":
        metric_type = "exponential_histogram"
        temporality = _temporality(metric.exponential_histogram)
        points = tuple(
            _exponential_histogram_point(point)
            for point in metric.exponential_histogram.data_points
        )
    elif kind == "summary":
        metric_type = "summary"
        points = tuple(_summary_point(point) for point in metric.summary.data_points)
    else:
        raise ValueError(f"metric {metric.name!r} carries no data (oneof 'data' is unset)")
    return Metric(
        name=str(metric.name),
        description=str(metric.description),
        unit=str(metric.unit),
        type=metric_type,
        is_monotonic=is_monotonic,
        aggregation_temporality=temporality,
        data_points=points,
        **origin,
    )


def _decode_log(record: Any, scope: Any, origin: dict[str, Any]) -> LogRecord:
    """Convert one OTLP ``LogRecord`` message."""
    return LogRecord(
        body=_any_value(record.body),
        severity_number=int(record.severity_number),
        severity_text=str(record.severity_text),
        event_name=str(record.event_name),
        attributes=_attributes(record.attributes),
        trace_id=_hex_id(record.trace_id),
        span_id=_hex_id(record.span_id),
        flags=int(record.flags),
        time_unix_nano=int(record.time_unix_nano),
        observed_time_unix_nano=int(record.observed_time_unix_nano),
        dropped_attributes_count=int(record.dropped_attributes_count),
        **origin,
    )


@dataclass(frozen=True)
class _SignalSpec:
    """How the receiver handles one signal on both transports."""

    signal: Signal
    http_path: str
    grpc_method: str
    grpc_register: Callable[[Any, Any], Any]
    request_type: Any
    response_type: Any


_SIGNALS: tuple[_SignalSpec, ...] = (
    _SignalSpec(
        "traces",
        "/v1/traces",
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server,
        trace_service_pb2.ExportTraceServiceRequest,
        trace_service_pb2.ExportTraceServiceResponse,
    ),
    _SignalSpec(
        "metrics",
        "/v1/metrics",
        "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server,
        metrics_service_pb2.ExportMetricsServiceRequest,
        metrics_service_pb2.ExportMetricsServiceResponse,
    ),
    _SignalSpec(
        "logs",
        "/v1/logs",
        "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server,
        logs_service_pb2.ExportLogsServiceRequest,
        logs_service_pb2.ExportLogsServiceResponse,
    ),
)
_SIGNAL_BY_PATH = {spec.http_path: spec for spec in _SIGNALS}


class _UnsupportedEncodingError(ValueError):
    """Raised for a ``Content-Encoding`` the receiver cannot undo."""


def _decompress(body: bytes, encoding: str) -> bytes:
    """Undo an HTTP ``Content-Encoding`` (``identity``, ``gzip`` or ``deflate``)."""
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip"):
        return gzip.decompress(body)
    if encoding == "deflate":
        try:  # RFC 9110 "deflate" is zlib-wrapped; some clients send raw deflate.
            return zlib.decompress(body)
        except zlib.error:
            return zlib.decompress(body, -zlib.MAX_WBITS)
    raise _UnsupportedEncodingError(f"unsupported Content-Encoding {encoding!r}")


# --------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------


class _HttpServer(ThreadingHTTPServer):
    """A ``ThreadingHTTPServer`` that knows the receiver it feeds."""

    daemon_threads = True
    receiver: OtlpReceiver


class _HttpHandler(BaseHTTPRequestHandler):
    """Handles OTLP/HTTP export requests (one request per connection)."""

    server: _HttpServer
    server_version = "otlp-test-receiver"

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output free of access logs."""

    def do_POST(self) -> None:
        """Decode an export request and reply with an empty Export*ServiceResponse."""
        path = self.path.split("?", 1)[0]
        spec = _SIGNAL_BY_PATH.get(path)
        if spec is None:
            self._reply_text(HTTPStatus.NOT_FOUND, f"no OTLP signal at {path!r}")
            return
        content_type = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if content_type not in ("", "application/x-protobuf", "application/protobuf"):
            self._reply_text(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                f"only protobuf bodies are supported, got Content-Type {content_type!r}",
            )
            return
        encoding = self.headers.get("Content-Encoding", "").strip().lower()
        receiver = self.server.receiver
        try:
            body = _decompress(self._read_body(), encoding)
            receiver._ingest(
                spec,
                "http",
                spec.request_type.FromString(body),
                path=path,
                headers={key.lower(): value for key, value in self.headers.items()},
                content_encoding=encoding or None,
            )
        except _UnsupportedEncodingError as error:
            receiver._record_error(f"HTTP {path}: {error}")
            self._reply_text(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, str(error))
            return
        except Exception as error:
            receiver._record_error(f"HTTP {path}: cannot decode request: {error!r}")
            self._reply_text(HTTPStatus.BAD_REQUEST, f"cannot decode request: {error!r}")
            return
        self._reply(
            HTTPStatus.OK, bytes(spec.response_type().SerializeToString()), "application/x-protobuf"
        )

    def do_GET(self) -> None:
        """OTLP/HTTP only accepts POST."""
        self._reply_text(HTTPStatus.METHOD_NOT_ALLOWED, "OTLP/HTTP accepts POST only")

    do_PUT = do_GET

    def _read_body(self) -> bytes:
        """Read the request body, with a ``Content-Length`` or chunked."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline(1024).split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # skip trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)  # CRLF after the chunk
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reply_text(self, status: HTTPStatus, message: str) -> None:
        self._reply(status, message.encode(), "text/plain; charset=utf-8")

    def _reply(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _GrpcServicer:
    """The ``Export`` method of one OTLP collector service."""

    def __init__(self, receiver: OtlpReceiver, spec: _SignalSpec) -> None:
        self._receiver = receiver
        self._spec = spec

    def Export(self, request: Any, context: Any) -> Any:
        """Record the request and reply with an empty Export*ServiceResponse."""
        try:
            self._receiver._ingest(
                self._spec,
                "grpc",
                request,
                path=self._spec.grpc_method,
                headers={
                    str(key).lower(): str(value) for key, value in context.invocation_metadata()
                },
                content_encoding=None,
            )
        except Exception as error:
            message = f"cannot decode request: {error!r}"
            self._receiver._record_error(f"gRPC {self._spec.signal}: {message}")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        return self._spec.response_type()


# --------------------------------------------------------------------------
# The receiver
# --------------------------------------------------------------------------


class OtlpReceiver(LoopbackService):
    """An OTLP/HTTP and OTLP/gRPC receiver on loopback that records what it receives.

    Use it as a context manager (or call :meth:`start` and :meth:`stop`). Both servers
    run by default; pass ``http=False`` or ``grpc=False`` to run only one of them. All
    accessors return snapshots (new lists) in arrival order and are thread-safe.
    """

    def __init__(self, *, http: bool = True, grpc: bool = True) -> None:
        if not (http or grpc):
            raise ValueError("enable at least one of http and grpc")
        self._want_http = http
        self._want_grpc = grpc
        self._condition = threading.Condition(threading.RLock())
        self._spans: list[Span] = []
        self._metrics: list[Metric] = []
        self._logs: list[LogRecord] = []
        self._requests: list[ReceivedRequest] = []
        self._errors: list[str] = []
        self._http_server: _HttpServer | None = None
        self._http_thread: threading.Thread | None = None
        self._grpc_server: Any = None
        self._grpc_executor: ThreadPoolExecutor | None = None
        self._http_port: int | None = None
        self._grpc_port: int | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> OtlpReceiver:
        """Start the enabled servers; returns ``self``. A receiver starts only once."""
        if self._http_port is not None or self._grpc_port is not None:
            raise RuntimeError("OtlpReceiver already started")
        try:
            if self._want_http:
                self._start_http()
            if self._want_grpc:
                self._start_grpc()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_http(self) -> None:
        server = _HttpServer((LOOPBACK, 0), _HttpHandler)
        server.receiver = self
        self._http_server = server
        self._http_port = int(server.server_address[1])
        self._http_thread = serve_in_background(server, f"otlp-http-receiver-{self._http_port}")

    def _start_grpc(self) -> None:
        executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-grpc-receiver")
        self._grpc_executor = executor
        # Without SO_REUSEPORT two receivers can never end up sharing a port.
        server = grpc.server(executor, options=[("grpc.so_reuseport", 0)])
        self._grpc_server = server
        for spec in _SIGNALS:
            spec.grpc_register(_GrpcServicer(self, spec), server)
        port = int(server.add_insecure_port(f"{LOOPBACK}:0"))
        if port == 0:  # older grpcio reports a failed bind as port 0
            raise RuntimeError(f"gRPC server could not bind {LOOPBACK}:0")
        server.start()
        self._grpc_port = port

    def stop(self, timeout: float = 5.0) -> None:
        """Shut both servers down (idempotent); in-flight gRPC calls are cancelled.

        Waits at most about *timeout* seconds per server. Recorded data stays readable.
        """
        grpc_server, self._grpc_server = self._grpc_server, None
        if grpc_server is not None:
            grpc_server.stop(grace=None).wait(timeout)
        executor, self._grpc_executor = self._grpc_executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        http_server, self._http_server = self._http_server, None
        http_thread, self._http_thread = self._http_thread, None
        if http_server is not None:
            if http_thread is not None and http_thread.is_alive():
                http_server.shutdown()
                http_thread.join(timeout)
            http_server.server_close()

    # -- endpoints ---------------------------------------------------------

    @property
    def http_port(self) -> int:
        """The OTLP/HTTP port (``RuntimeError`` unless the HTTP server was started)."""
        if self._http_port is None:
            raise RuntimeError("the OTLP/HTTP server is not running (http=False or not started)")
        return self._http_port

    @property
    def grpc_port(self) -> int:
        """The OTLP/gRPC port (``RuntimeError`` unless the gRPC server was started)."""
        if self._grpc_port is None:
            raise RuntimeError("the OTLP/gRPC server is not running (grpc=False or not started)")
        return self._grpc_port

    @property
    def endpoint_http(self) -> str:
        """Base URL of the OTLP/HTTP server, ``http://127.0.0.1:PORT``; add ``/v1/traces`` etc."""
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def endpoint_grpc(self) -> str:
        """URL of the OTLP/gRPC server, ``http://127.0.0.1:PORT`` (``http`` means insecure)."""
        return f"http://{LOOPBACK}:{self.grpc_port}"

    @property
    def grpc_target(self) -> str:
        """The OTLP/gRPC server as a plain ``127.0.0.1:PORT`` channel target."""
        return f"{LOOPBACK}:{self.grpc_port}"

    # -- recording (called on server threads) ------------------------------

    def _ingest(
        self,
        spec: _SignalSpec,
        transport: Transport,
        request: Any,
        *,
        path: str,
        headers: dict[str, str],
        content_encoding: str | None,
    ) -> None:
        """Decode *request* and record it; raises (recording nothing) if decoding fails."""
        spans: list[Span] = []
        metrics: list[Metric] = []
        logs: list[LogRecord] = []
        if spec.signal == "traces":
            spans = _flatten(
                request.resource_spans, "scope_spans", "spans", transport, _decode_span
            )
            items = len(spans)
        elif spec.signal == "metrics":
            metrics = _flatten(
                request.resource_metrics, "scope_metrics", "metrics", transport, _decode_metric
            )
            items = sum(len(metric.data_points) for metric in metrics)
        else:
            logs = _flatten(
                request.resource_logs, "scope_logs", "log_records", transport, _decode_log
            )
            items = len(logs)
        received = ReceivedRequest(
            signal=spec.signal,
            transport=transport,
            path=path,
            headers=headers,
            content_encoding=content_encoding,
            size=int(request.ByteSize()),
            items=items,
        )
        with self._condition:
            self._spans.extend(spans)
            self._metrics.extend(metrics)
            self._logs.extend(logs)
            self._requests.append(received)
            self._condition.notify_all()

    def _record_error(self, message: str) -> None:
        with self._condition:
            self._errors.append(message)
            self._condition.notify_all()

    # -- accessors ---------------------------------------------------------

    def spans(self, name: str | None = None) -> list[Span]:
        """All received spans, or those called *name*, in arrival order."""
        with self._condition:
            return [span for span in self._spans if name is None or span.name == name]

    def metrics(self, name: str | None = None) -> list[Metric]:
        """All received metric records, or those called *name*, in arrival order."""
        with self._condition:
            return [metric for metric in self._metrics if name is None or metric.name == name]

    def last_metric(self, name: str) -> Metric:
        """The most recently received record of metric *name* (``LookupError`` if none)."""
        found = self.metrics(name)
        if not found:
            raise LookupError(f"no metric {name!r} received; {self._describe()}")
        return found[-1]

    def logs(self) -> list[LogRecord]:
        """All received log records in arrival order."""
        with self._condition:
            return list(self._logs)

    def requests(self, signal: Signal | None = None) -> list[ReceivedRequest]:
        """Metadata of every decoded export request (optionally of one *signal* only)."""
        with self._condition:
            return [r for r in self._requests if signal is None or r.signal == signal]

    @property
    def errors(self) -> list[str]:
        """Descriptions of requests that were rejected (bad body or encoding)."""
        with self._condition:
            return list(self._errors)

    def clear(self) -> None:
        """Forget everything received so far."""
        with self._condition:
            self._spans.clear()
            self._metrics.clear()
            self._logs.clear()
            self._requests.clear()
            self._errors.clear()

    # -- waiting -----------------------------------------------------------

    def wait_for(
        self,
        predicate: Callable[[], _T | None],
        timeout: float = DEFAULT_TIMEOUT,
        message: str | None = None,
    ) -> _T:
        """Wait until *predicate()* returns something truthy, and return that.

        *predicate* is re-evaluated whenever a request arrives (it runs with the
        receiver's lock held, so it may call the accessors but should be quick). Raises
        ``TimeoutError`` (mentioning *message* and what was received) after *timeout*
        seconds.
        """
        deadline = time.monotonic() + timeout
        with self._condition:
            while True:
                result = predicate()
                if result:
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    what = message or "condition"
                    raise TimeoutError(f"{what} not met within {timeout:g}s; {self._describe()}")
                self._condition.wait(remaining)

    def wait_for_spans(
        self, name: str | None = None, count: int = 1, timeout: float = DEFAULT_TIMEOUT
    ) -> list[Span]:
        """Wait until at least *count* spans (called *name*, if given) arrived; return them."""

        def enough() -> list[Span]:
            found = self.spans(name)
            return found if len(found) >= count else []

        label = f"span {name!r}" if name is not None else "span"
        return self.wait_for(enough, timeout, f"{count} x {label}")

    def wait_for_metric(
        self,
        name: str,
        where: Callable[[Metric], bool] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Metric:
        """Wait for a record of metric *name* (satisfying *where*, if given); return the newest."""

        def newest() -> Metric | None:
            for metric in reversed(self.metrics(name)):
                if where is None or where(metric):
                    return metric
            return None

        return self.wait_for(newest, timeout, f"metric {name!r}")

    def wait_for_logs(self, count: int = 1, timeout: float = DEFAULT_TIMEOUT) -> list[LogRecord]:
        """Wait until at least *count* log records arrived; return all of them."""

        def enough() -> list[LogRecord]:
            found = self.logs()
            return found if len(found) >= count else []

        return self.wait_for(enough, timeout, f"{count} log record(s)")

    def _describe(self) -> str:
        """A one-line summary of what was received, for failure messages."""
        with self._condition:
            span_names = sorted({span.name for span in self._spans})
            metric_names = sorted({metric.name for metric in self._metrics})
            return (
                f"received {len(self._spans)} span(s) {span_names}, "
                f"{len(self._metrics)} metric record(s) {metric_names}, "
                f"{len(self._logs)} log record(s), {len(self._errors)} error(s) {self._errors}"
            )


# --------------------------------------------------------------------------
# pytest fixtures
# --------------------------------------------------------------------------


@pytest.fixture(name="otlp_receiver")
def otlp_receiver_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """A running :class:`OtlpReceiver` with both the HTTP and the gRPC server."""
    bypass_proxies(monkeypatch)
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(name="otlp_http_receiver")
def otlp_http_receiver_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """A running :class:`OtlpReceiver` with the OTLP/HTTP server only."""
    bypass_proxies(monkeypatch)
    with OtlpReceiver(grpc=False) as receiver:
        yield receiver


@pytest.fixture(name="otlp_grpc_receiver")
def otlp_grpc_receiver_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """A running :class:`OtlpReceiver` with the OTLP/gRPC server only."""
    bypass_proxies(monkeypatch)
    with OtlpReceiver(http=False) as receiver:
        yield receiver
