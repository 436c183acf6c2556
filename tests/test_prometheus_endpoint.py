"""The optional Prometheus scrape endpoint of `configure()`: off by default, on loopback when
asked, the exact metric names it exposes (those the alert rules and the dashboard use), and
failures that never break the application."""

from __future__ import annotations

import http.client
import importlib
import logging
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_agent import Message, call_message, result_message
from e2e_servers import LOOPBACK
from observability_files import ALERTS, dashboard_queries, load_yaml, metric_names
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from otlp_receiver import (
    OtlpReceiver,
)
from prometheus_client.parser import text_string_to_metric_families

from otel_compaction import conversation
from otel_compaction.telemetry import configuration as telemetry
from otel_compaction.telemetry import semconv
from otel_compaction.telemetry.configuration import Telemetry, configure

EXPOSED = {
    "compaction_obligations_open": "gauge",
    "compaction_obligation_oldest_age_seconds": "gauge",
    "compaction_obligation_age_seconds": "histogram",
    "compaction_decisions_total": "counter",
    "compaction_deferral_held_tokens_total": "counter",
    "compaction_tool_calls_duplicate_total": "counter",
    "compaction_tool_calls_reissued_total": "counter",
    "compaction_obligations_severed_total": "counter",
    "compaction_ledger_overflow_total": "counter",
    "compaction_sources_disagreements_total": "counter",
}
"""The Prometheus name and type of every instrument the rules or the dashboard read."""
SHARED_LEDGER_ONLY = {"compaction_obligations_orphaned": "gauge"}
"""Served only beside a shared ledger (``tests/test_fleet_stores.py`` scrapes it there)."""
HOOKS_ONLY = {"compaction_hook_exports_dropped_total": "counter"}
"""Sent over OTLP by the CLI hooks' runs (``compaction.hook.exports.dropped``, which
``tests/test_hook_faults.py`` receives), never served by a Python agent."""


@pytest.fixture(autouse=True)
def own_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let `configure` create its meter provider even if another test installed a global
    one, export nothing over OTLP, and read no endpoint settings from the environment."""
    monkeypatch.setattr(telemetry, "_installed_meter_provider", lambda: None)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.delenv(telemetry.PROMETHEUS_PORT_ENV, raising=False)
    monkeypatch.delenv(telemetry.PROMETHEUS_HOST_ENV, raising=False)
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(name="configured")
def configured_fixture() -> Iterator[list[Telemetry]]:
    """Collects the telemetries a test configures and shuts them all down afterwards."""
    made: list[Telemetry] = []
    yield made
    for item in made:
        item.shutdown()


def _configure(made: list[Telemetry], **kwargs: Any) -> Telemetry:
    result = configure(tracer_provider=TracerProvider(), set_global=False, **kwargs)
    made.append(result)
    return result


def _scrape(address: tuple[str, int]) -> str:
    connection = http.client.HTTPConnection(*address, timeout=5)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        assert response.status == 200
        return response.read().decode("utf-8")
    finally:
        connection.close()


def _families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def _record_everything(result: Telemetry) -> None:
    """One of each: decisions of every action, an open and a resolved call, a severed one,
    and the counters no gate decision here produces, recorded directly."""
    gate = result.gate("default")
    recorder = result.recorder
    system = {"role": "system", "content": "You deploy."}
    with conversation("endpoint"):
        read = recorder.call("read_config", "c1")
        read.result("port 8080")
        recorder.call("write_config", "c2")
        messages: list[Message] = [
            system,
            {"role": "user", "content": "Move api."},
            call_message("c1", "read_config", {}),
            result_message("c1", "port 8080"),
            call_message("c2", "write_config", {}),
        ]
        gate.evaluate(messages, 1, 5, raise_on_refuse=False)  # defer
        gate.evaluate(messages, 4, 5, raise_on_refuse=False)  # refuse
        gate.evaluate(messages, 1, 4, raise_on_refuse=False)  # compact
    with conversation("severed"):
        restart = recorder.call("restart", "r1")
        restart.result("restarted")
        severed: list[Message] = [
            system,
            {"role": "user", "content": "Restart api."},
            call_message("r1", "restart", {}),  # its result is gone from the transcript
            {"role": "assistant", "content": "Restarting."},
        ]
        gate.evaluate(severed, 1, 4, raise_on_refuse=False)
    result.metrics.duplicate_calls.add(1, {semconv.GEN_AI_TOOL_NAME: "restart"})
    result.metrics.reissued_calls.add(1, {semconv.GEN_AI_TOOL_NAME: "Bash"})
    result.metrics.ledger_overflow.add(1, {semconv.OBLIGATION_KIND: "tool_call"})
    result.metrics.record_disagreement("langgraph", "source_open", "tool_call")


def test_off_by_default(configured: list[Telemetry]) -> None:
    result = _configure(configured)
    assert result.prometheus_address is None


def test_serves_the_exact_names_on_loopback(configured: list[Telemetry]) -> None:
    result = _configure(configured, prometheus_port=0)
    assert result.prometheus_address is not None
    host, port = result.prometheus_address
    assert host == LOOPBACK and port > 0
    _record_everything(result)
    families = _families(_scrape(result.prometheus_address))
    ours = {
        name: family.type
        for name, family in families.items()
        if name.startswith(("compaction_", "gen_ai_"))
    }
    # The text parser names counter families without "_total"; the samples carry it.
    samples = {s.name for f in families.values() for s in f.samples}
    exposed = {(n[: -len("_total")] if t == "counter" else n): t for n, t in EXPOSED.items()}
    assert ours == exposed
    for name, kind in EXPOSED.items():
        wanted = (
            {name} if kind != "histogram" else {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        )
        assert wanted <= samples, name
    decisions = {
        (s.labels["compaction_action"], s.labels["compaction_rule"]): s.value
        for s in families["compaction_decisions"].samples
        if s.name == "compaction_decisions_total"
    }
    assert decisions[("refuse", "open_tool_call")] == 1
    assert decisions[("compact", "none")] == 1
    assert decisions[("defer", "open_tool_call")] == 2
    [severed] = [
        s for s in families["compaction_obligations_severed"].samples if s.name.endswith("_total")
    ]
    assert severed.value == 1
    assert {k: v for k, v in severed.labels.items() if not k.startswith("otel_scope_")} == {
        "compaction_obligation_kind": "tool_call",
        "gen_ai_tool_name": "restart",
    }
    [open_calls] = families["compaction_obligations_open"].samples
    assert open_calls.labels["compaction_obligation_kind"] == "tool_call"
    assert open_calls.value == 1
    # Scope labels, as the Collector's prometheus exporter adds them too.
    assert open_calls.labels["otel_scope_name"] == semconv.SCOPE


def test_rules_and_dashboard_read_only_exposed_names() -> None:
    referenced = {name for query in dashboard_queries() for name in metric_names(query.expr)}
    for group in load_yaml(ALERTS)["groups"]:
        for rule in group["rules"]:
            referenced |= metric_names(rule["expr"])
    ours = {n for n in referenced if n.startswith(("compaction_", "gen_ai_"))}
    names = set()
    for name, kind in {**EXPOSED, **SHARED_LEDGER_ONLY, **HOOKS_ONLY}.items():
        names |= (
            {name} if kind != "histogram" else {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        )
    assert ours <= names, sorted(ours - names)
    # Every instrument the issue asks to see is on the dashboard.
    on_dashboard = {n for q in dashboard_queries() for n in metric_names(q.expr)}
    for name in (
        "compaction_obligations_open",
        "compaction_obligation_oldest_age_seconds",
        "compaction_decisions_total",
        "compaction_deferral_held_tokens_total",
        "compaction_obligations_severed_total",
        "compaction_tool_calls_duplicate_total",
    ):
        assert name in on_dashboard, name


def test_port_and_host_from_the_environment(
    configured: list[Telemetry], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(telemetry.PROMETHEUS_PORT_ENV, "0")
    monkeypatch.setenv(telemetry.PROMETHEUS_HOST_ENV, "localhost")
    result = _configure(configured)
    assert result.prometheus_address is not None
    assert result.prometheus_address[0] in ("127.0.0.1", "::1")
    assert "target_info" in _scrape(result.prometheus_address)


@pytest.mark.parametrize("value", ["nine", "-1", "70000"])
def test_a_bad_port_in_the_environment_is_a_warning(
    configured: list[Telemetry],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    value: str,
) -> None:
    monkeypatch.setenv(telemetry.PROMETHEUS_PORT_ENV, value)
    with caplog.at_level(logging.WARNING, logger="otel_compaction.telemetry"):
        result = _configure(configured)
    assert result.prometheus_address is None
    assert f"{telemetry.PROMETHEUS_PORT_ENV}={value!r} is not a port" in caplog.text


@pytest.mark.parametrize("port", [-1, 65536])
def test_a_bad_port_argument_is_an_error(configured: list[Telemetry], port: int) -> None:
    with pytest.raises(ValueError, match=r"prometheus_port must be 0\.\.65535"):
        _configure(configured, prometheus_port=port)


def test_the_applications_meter_provider_is_left_as_it_is(
    configured: list[Telemetry], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_compaction.telemetry"):
        result = _configure(configured, meter_provider=MeterProvider(), prometheus_port=0)
    assert result.prometheus_address is None
    assert "add a PrometheusMetricReader" in caplog.text


def test_a_taken_port_is_logged_and_everything_else_works(
    configured: list[Telemetry], caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.ERROR, logger="otel_compaction.telemetry"):
            result = _configure(configured, prometheus_port=port)
    assert result.prometheus_address is None
    assert f"Prometheus endpoint on {LOOPBACK}:{port} failed" in caplog.text
    call = result.recorder.call("search", "s1")
    call.result("found")
    assert result.ledger.open_obligations() == ()


def test_a_missing_exporter_is_logged(
    configured: list[Telemetry],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.prometheus", None)
    with caplog.at_level(logging.ERROR, logger="otel_compaction.telemetry"):
        result = _configure(configured, prometheus_port=0)
    assert result.prometheus_address is None
    assert "otel-compaction[prometheus]" in caplog.text


def test_shutdown_releases_the_port(configured: list[Telemetry]) -> None:
    result = _configure(configured, prometheus_port=0)
    assert result.prometheus_address is not None
    host, port = result.prometheus_address
    result.shutdown()
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=2).close()
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind((host, port))  # free again


def test_two_configurations_keep_their_metrics_apart(configured: list[Telemetry]) -> None:
    first = _configure(configured, prometheus_port=0)
    second = _configure(configured, prometheus_port=0)
    assert first.prometheus_address and second.prometheus_address
    assert first.prometheus_address != second.prometheus_address
    first.recorder.call("write_config", "only-in-first")
    one = _families(_scrape(first.prometheus_address))
    two = _families(_scrape(second.prometheus_address))
    assert [s.value for s in one["compaction_obligations_open"].samples] == [1]
    assert "compaction_obligations_open" not in two


_OTLP_EXPORTERS = (
    ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter"),
    ("opentelemetry.exporter.otlp.proto.http.metric_exporter", "OTLPMetricExporter"),
    ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter"),
    ("opentelemetry.exporter.otlp.proto.grpc.metric_exporter", "OTLPMetricExporter"),
)
_OTLP_SETTINGS = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
)


def _otlp_exporters_made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every OTLP exporter constructed from now on, as ``<module>.<class>`` (each still the
    real exporter): none constructed, no connection to the default ``localhost:4317/4318``."""
    made: list[str] = []
    for module_name, class_name in _OTLP_EXPORTERS:
        module = importlib.import_module(module_name)
        real = getattr(module, class_name)

        def construct(*args: Any, _real: Any = real, _name: str = module_name, **kw: Any) -> Any:
            made.append(f"{_name}.{_real.__name__}")
            return _real(*args, **kw)

        monkeypatch.setattr(module, class_name, construct)
    return made


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_prometheus_without_an_otlp_endpoint_exports_nothing_over_otlp(
    configured: list[Telemetry], monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    for name in _OTLP_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    made = _otlp_exporters_made(monkeypatch)
    monkeypatch.setattr(telemetry, "_installed_tracer_provider", lambda: None)
    result = configure(set_global=False, prometheus_port=0)
    configured.append(result)
    assert made == []
    assert result.prometheus_address is not None
    result.recorder.call("write_config", "c1")
    families = _families(_scrape(result.prometheus_address))
    assert [s.value for s in families["compaction_obligations_open"].samples] == [1]


def test_prometheus_with_an_otlp_endpoint_exports_there_too(
    configured: list[Telemetry], monkeypatch: pytest.MonkeyPatch, otlp_receiver: OtlpReceiver
) -> None:
    for name in _OTLP_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint_http)
    made = _otlp_exporters_made(monkeypatch)
    monkeypatch.setattr(telemetry, "_installed_tracer_provider", lambda: None)
    result = configure(set_global=False, prometheus_port=0)
    configured.append(result)
    assert made == [
        "opentelemetry.exporter.otlp.proto.http.trace_exporter.OTLPSpanExporter",
        "opentelemetry.exporter.otlp.proto.http.metric_exporter.OTLPMetricExporter",
    ]
    assert result.prometheus_address is not None
    result.recorder.call("search", "s1").result("found")
    families = _families(_scrape(result.prometheus_address))
    assert "compaction_obligation_age_seconds" in families
    result.shutdown()
    [span] = otlp_receiver.wait_for_spans("execute_tool search")
    assert span.attributes[semconv.GEN_AI_TOOL_CALL_ID] == "s1"


def test_prometheus_and_otlp_when_the_exporter_variable_asks_for_it(
    configured: list[Telemetry], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in _OTLP_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    made = _otlp_exporters_made(monkeypatch)
    monkeypatch.setattr(telemetry, "_installed_tracer_provider", lambda: None)
    configured.append(configure(set_global=False, prometheus_port=0))
    assert made == ["opentelemetry.exporter.otlp.proto.http.metric_exporter.OTLPMetricExporter"]
