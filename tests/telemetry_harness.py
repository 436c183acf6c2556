"""In-memory OpenTelemetry pipelines and small transcript builders for the telemetry tests.

Every test module has the ``pipeline`` fixture (``conftest.py`` loads this module as a plugin).

`Pipeline` wires `configure()` to an SDK tracer provider whose spans land in an
`InMemorySpanExporter` (through a `SimpleSpanProcessor`, so a span is visible the moment it
ends) and to a meter provider read by an `InMemoryMetricReader`. Metric points are returned
keyed by their attributes as a frozenset, so tests can compare whole metrics with ``==``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Sampler

from otel_compaction import Telemetry, ToolCallRecorder, configure
from otel_compaction.ledger import ObligationLedger
from otel_compaction.telemetry import semconv as sc

AttrKey = frozenset[tuple[str, Any]]
"""A metric point's attributes, hashable."""

AGE_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
AGE_BUCKETS += (120.0, 300.0, 600.0, 1800.0, 3600.0)
"""The explicit bucket bounds of the age and duration histograms."""

FORBIDDEN_METRIC_KEYS = frozenset({sc.GEN_AI_TOOL_CALL_ID, sc.GEN_AI_CONVERSATION_ID})


def key(attributes: Mapping[str, Any] | None = None) -> AttrKey:
    """The hashable form of a metric point's attributes."""
    return frozenset((attributes or {}).items())


@dataclass
class Pipeline:
    """One configured `Telemetry` over in-memory exporters."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    telemetry: Telemetry

    @property
    def recorder(self) -> ToolCallRecorder:
        """The configured recorder."""
        return self.telemetry.recorder

    @property
    def ledger(self) -> ObligationLedger:
        """The configured ledger."""
        return self.telemetry.ledger

    def spans(self, name: str | None = None, *, prefix: str = "") -> list[ReadableSpan]:
        """Finished spans (named `name`, if given; whose name starts with `prefix`) in the order
        they ended."""
        return [
            s
            for s in self.exporter.get_finished_spans()
            if (name is None or s.name == name) and s.name.startswith(prefix)
        ]

    def span(self, name: str) -> ReadableSpan:
        """The one finished span called `name`."""
        found = self.spans(name)
        assert len(found) == 1, f"expected one {name!r} span, got {[s.name for s in self.spans()]}"
        return found[0]

    def metrics(self) -> dict[str, Metric]:
        """Collect now; every metric of this package's scope by name."""
        data = self.reader.get_metrics_data()
        found: dict[str, Metric] = {}
        if data is None:
            return found
        for resource_metrics in data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                assert scope_metrics.scope.name == sc.SCOPE
                for metric in scope_metrics.metrics:
                    found[metric.name] = metric
        return found

    def shutdown(self) -> None:
        """Shut both providers down."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def make_pipeline(
    sampler: Sampler | None = None,
    *,
    agent_name: str | None = None,
    capture_content: bool | None = None,
    ledger: ObligationLedger | None = None,
) -> Pipeline:
    """A `configure()`d telemetry on fresh in-memory providers (never the global ones)."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(sampler=sampler) if sampler else TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry = configure(
        ledger=ledger,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        capture_content=capture_content,
        agent_name=agent_name,
        set_global=False,
    )
    return Pipeline(exporter, reader, tracer_provider, meter_provider, telemetry)


def set_otlp_environment(
    monkeypatch: pytest.MonkeyPatch, *, protocol: str, endpoint: str, timeout: str
) -> None:
    """Make `configure()` export traces and metrics over OTLP to `endpoint` (``timeout``
    seconds per export), with no sampler, resource attributes or headers from the
    environment."""
    for name in ("OTEL_TRACES_SAMPLER", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", timeout)


@pytest.fixture(name="pipeline")
def pipeline_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    """A pipeline with content capture left to the (cleared) environment."""
    monkeypatch.delenv(sc.CAPTURE_CONTENT_ENV, raising=False)
    made = make_pipeline(agent_name="planner")
    yield made
    made.shutdown()


def number_points(metric: Metric) -> dict[AttrKey, int | float]:
    """A sum's or gauge's points: value by attributes."""
    points: dict[AttrKey, int | float] = {}
    for point in metric.data.data_points:
        assert isinstance(point, NumberDataPoint), metric.name
        points[key(point.attributes)] = point.value
    return points


def histogram_points(metric: Metric) -> dict[AttrKey, HistogramDataPoint]:
    """A histogram's points by attributes."""
    points: dict[AttrKey, HistogramDataPoint] = {}
    for point in metric.data.data_points:
        assert isinstance(point, HistogramDataPoint), metric.name
        points[key(point.attributes)] = point
    return points


def histogram_counts(metric: Metric) -> dict[AttrKey, int]:
    """A histogram's point counts by attributes."""
    return {attrs: point.count for attrs, point in histogram_points(metric).items()}


def metric_attribute_keys(metrics: Mapping[str, Metric]) -> set[str]:
    """Every attribute key on any point of any metric."""
    return {
        name
        for metric in metrics.values()
        for point in metric.data.data_points
        for name in (point.attributes or {})
    }


def metric_attribute_values(metrics: Mapping[str, Metric]) -> set[Any]:
    """Every attribute value on any point of any metric."""
    return {
        value
        for metric in metrics.values()
        for point in metric.data.data_points
        for value in (point.attributes or {}).values()
    }


# -- transcript builders (OpenAI Chat Completions shape) -----------------------------------------


def user(text: str) -> dict[str, Any]:
    """A user message."""
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    """An assistant text message."""
    return {"role": "assistant", "content": text}


def calls(*emitted: tuple[str, str] | tuple[str, str, str]) -> dict[str, Any]:
    """An assistant message emitting tool calls: (call id, tool name[, JSON arguments])."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call[0],
                "type": "function",
                "function": {"name": call[1], "arguments": call[2] if len(call) > 2 else "{}"},
            }
            for call in emitted
        ],
    }


def result(call_id: str, text: str) -> dict[str, Any]:
    """A tool result."""
    return {"role": "tool", "tool_call_id": call_id, "content": text}


FLIGHT_MESSAGES = [
    user("book a flight to Oslo"),
    calls(("c1", "search")),
    result("c1", "no flights found on Friday"),
    user("None on Friday? Then book Saturday."),
    calls(("c2", "book")),
    result("c2", "booked ZFA04Y"),
    user("Pay for ZFA04Y now."),
    calls(("c3", "pay", '{"booking": "ZFA04Y"}')),  # 21 characters of arguments: 6 tokens
]
"""A search whose result is a negative ("no flights"), a booking that mints the identifier
ZFA04Y, and a payment call that uses it and has no result yet (message 7). (The user asks for
the booking and the payment: an assistant message right before a call would be one response
with it.)"""


def ledger_rows(ledger: ObligationLedger, conversation_id: str | None) -> list[tuple[Any, ...]]:
    """A conversation's records without their clock readings, for exact comparison."""
    return [
        (o.kind, o.id, o.name, o.conversation_id, o.sequence, o.status)
        for o in ledger.snapshot(conversation_id).obligations
    ]


def names(spans: Sequence[ReadableSpan]) -> list[str]:
    """Span names, in order."""
    return [s.name for s in spans]
