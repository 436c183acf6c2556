"""`configure()`: attaching to the application's SDK providers, or creating them from the
standard ``OTEL_*`` environment; and shutting down only what it created."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from telemetry_harness import ledger_rows

from otel_compaction import configure
from otel_compaction.telemetry import configuration as telemetry_module
from otel_compaction.telemetry import semconv as sc
from otel_compaction.telemetry.sampler import ObligationSampler

_OTEL_VARIABLES = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
)


class SpyProcessor(SpanProcessor):
    """Remembers whether it was shut down."""

    def __init__(self) -> None:
        self.shut_down = False

    def shutdown(self) -> None:
        self.shut_down = True


class SpyReader(InMemoryMetricReader):
    """Remembers whether it was shut down."""

    shut_down = False

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.shut_down = True
        super().shutdown(timeout_millis=timeout_millis)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in _OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # These tests rely on no SDK provider being installed globally by anyone else.
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    assert not isinstance(metrics.get_meter_provider(), MeterProvider)
    yield


def _foreign_tool_span(provider: trace.TracerProvider, call_id: str) -> None:
    tracer = provider.get_tracer("vendor.agents", "2.0")
    with tracer.start_as_current_span(
        "execute_tool lookup",
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
    ) as span:
        span.set_attribute("gen_ai.tool.call.id", call_id)


def test_configure_attaches_to_the_application_providers() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    spy = SpyProcessor()
    tracer_provider.add_span_processor(spy)
    reader = SpyReader()
    meter_provider = MeterProvider(metric_readers=[reader])

    telemetry = configure(
        tracer_provider=tracer_provider, meter_provider=meter_provider, set_global=False
    )
    assert telemetry.tracer_provider is tracer_provider
    assert telemetry.meter_provider is meter_provider
    # The ledger's span processor was added: another instrumentation's tool span reaches it.
    _foreign_tool_span(tracer_provider, "call_7")
    assert ledger_rows(telemetry.ledger, None) == [
        ("tool_call", "call_7", "lookup", "", 0, "result")
    ]
    telemetry.recorder.call("search", "call_8").result()
    assert [s.name for s in exporter.get_finished_spans()] == [
        "execute_tool lookup",
        "tool_result search",
        "execute_tool search",
    ]
    # The application's providers are the application's to shut down.
    telemetry.shutdown()
    assert not spy.shut_down and not reader.shut_down
    tracer_provider.shutdown()
    meter_provider.shutdown()


def test_configure_attaches_to_globally_installed_sdk_providers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tracer_provider = TracerProvider()
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: tracer_provider)
    monkeypatch.setattr(metrics, "get_meter_provider", lambda: meter_provider)

    telemetry = configure()
    assert telemetry.tracer_provider is tracer_provider
    assert telemetry.meter_provider is meter_provider
    _foreign_tool_span(tracer_provider, "call_9")
    assert [o.id for o in telemetry.ledger.snapshot(None).obligations] == ["call_9"]
    tracer_provider.shutdown()
    meter_provider.shutdown()


def test_configure_creates_providers_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    console = io.StringIO()
    monkeypatch.setattr(
        telemetry_module, "ConsoleSpanExporter", lambda: ConsoleSpanExporter(out=console)
    )
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "travel-agent")

    telemetry = configure(set_global=False)
    provider = telemetry.tracer_provider
    assert isinstance(provider, TracerProvider)
    assert isinstance(telemetry.meter_provider, MeterProvider)
    # Nothing was installed globally.
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    # The configured sampler is wrapped so that obligation spans are never blinded.
    assert isinstance(provider.sampler, ObligationSampler)
    assert provider.sampler.get_description() == "ObligationSampler{AlwaysOffSampler}"
    assert provider.resource.attributes["service.name"] == "travel-agent"

    telemetry.recorder.call("search", "call_1").result("2 flights")
    _foreign_tool_span(provider, "call_2")  # recorded (not sampled), so the ledger sees it
    chat = provider.get_tracer("vendor.llm").start_span("chat gpt-4o")  # dropped
    assert not chat.is_recording()
    chat.end()
    assert [o.id for o in telemetry.ledger.snapshot(None).obligations] == ["call_1", "call_2"]
    telemetry.shutdown()  # flushes the batch processor into the console exporter
    assert console.getvalue() == ""  # always_off: nothing sampled, nothing exported

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")
    telemetry = configure(set_global=False)
    telemetry.recorder.call("search", "call_3").result("1 flight")
    telemetry.shutdown()
    exported = [json.loads(chunk) for chunk in _json_objects(console.getvalue())]
    assert [span["name"] for span in exported] == ["tool_result search", "execute_tool search"]
    assert exported[1]["attributes"][sc.GEN_AI_TOOL_CALL_ID] == "call_3"


def test_configure_with_no_exporters_and_shutdown_of_only_what_it_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    reader = SpyReader()
    app_meter_provider = MeterProvider(metric_readers=[reader])

    telemetry = configure(meter_provider=app_meter_provider, set_global=False)
    created = telemetry.tracer_provider
    assert isinstance(created, TracerProvider)
    spy = SpyProcessor()
    created.add_span_processor(spy)
    telemetry.recorder.call("search", "call_1").result()

    telemetry.shutdown()
    assert spy.shut_down  # the tracer provider configure() created
    assert not reader.shut_down  # not the application's meter provider
    app_meter_provider.shutdown()
    assert reader.shut_down


def _json_objects(text: str) -> list[str]:
    """Split the console exporter's output (pretty-printed JSON objects, one per span)."""
    objects: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char == "{":
            if depth == 0:
                start = index
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                objects.append(text[start : index + 1])
    return objects


def test_ledger_span_processor_abandons_what_is_open_at_shutdown() -> None:
    tracer_provider = TracerProvider()
    telemetry = configure(
        tracer_provider=tracer_provider,
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
        set_global=False,
    )
    span = tracer_provider.get_tracer("vendor.agents").start_span(
        "execute_tool lookup",
        attributes={"gen_ai.tool.call.id": "call_x", "gen_ai.tool.name": "lookup"},
    )
    assert isinstance(span, ReadableSpan)
    tracer_provider.shutdown()
    assert ledger_rows(telemetry.ledger, None) == [
        ("tool_call", "call_x", "lookup", "", 0, "abandoned")
    ]
