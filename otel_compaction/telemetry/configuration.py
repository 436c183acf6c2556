"""Wiring: providers from the standard ``OTEL_*`` environment, the ledger, the recorder, the
metrics, and a gate factory whose decisions are recorded (`otel_compaction.telemetry.decisions`).

`configure()` is the one call an application makes. When the application (or
``opentelemetry-instrument``) already set SDK providers, it attaches to them: the ledger's span
processor is added to the tracer provider. Otherwise it creates providers that export over
OTLP as the ``OTEL_*`` variables say (``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``,
``OTEL_EXPORTER_OTLP_PROTOCOL``, ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_TRACES_SAMPLER``...),
with the obligation sampler around the configured sampler. Exporters being down changes
nothing in decisions: the gate and the ledger depend on no backend.

For users without a Collector, ``configure(prometheus_port=...)`` (or
``OTEL_COMPACTION_PROMETHEUS_PORT``) also serves the metrics for Prometheus to scrape, on
``127.0.0.1`` unless a host is given; it needs the ``prometheus`` extra and is off by default.
With that endpoint and no OTLP endpoint configured, nothing is exported over OTLP unless
``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER`` asks for ``otlp``.

Shutdown is bounded: each OTLP export of the providers created here gives up after the export
timeout (``OTEL_EXPORTER_OTLP_TIMEOUT`` or its per-signal variant, else
`DEFAULT_EXPORT_TIMEOUT_S`), and `Telemetry.shutdown`, which also runs at interpreter exit,
waits for at most two exports per signal: one already in flight and one final flush. Once an
export fails during shutdown, the spans still queued are dropped instead of each waiting its own
timeout.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import types
import weakref
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import Sampler, _get_from_env_or_default
from opentelemetry.trace import Link, Span, TracerProvider

from otel_compaction.gate import CompactionGate
from otel_compaction.ledger import ObligationLedger, default_ledger
from otel_compaction.policy import Policy
from otel_compaction.recorder import ToolCallRecorder
from otel_compaction.reissue import SideEffectLog
from otel_compaction.sources import ObligationSource, ObligationSources
from otel_compaction.telemetry.decisions import DecisionTelemetry, SeveredObligations
from otel_compaction.telemetry.metrics import CompactionMetrics
from otel_compaction.telemetry.processor import LedgerSpanProcessor
from otel_compaction.telemetry.sampler import ObligationSampler
from otel_compaction.telemetry.unreachable import (
    UNREACHABLE_EXPORT_TIMEOUT_S,
    NothingListens,
    default_endpoint,
    listening,
)

__all__ = ["DEFAULT_EXPORT_TIMEOUT_S", "Telemetry", "configure"]

_log = logging.getLogger(__name__)


class Telemetry:
    """The configured pieces: ledger, recorder, metrics and a gate factory that records."""

    prometheus_address: tuple[str, int] | None = None
    """``(host, port)`` of the Prometheus scrape endpoint `configure` started, else None."""

    def __init__(
        self,
        *,
        ledger: ObligationLedger,
        tracer_provider: TracerProvider,
        meter_provider: MeterProvider,
        owns_tracer_provider: bool = False,
        owns_meter_provider: bool = False,
        capture_content: bool | None = None,
        agent_name: str | None = None,
        policy: Policy | str | None = None,
    ) -> None:
        """Hold the configured pieces; `shutdown` shuts down only the providers whose
        ``owns_*`` flag is set (those `configure` created). `policy` (``default`` when None)
        is the one `gate` uses unless told otherwise, and the recorder judges side effects by
        its ``side_effects`` table."""
        self.policy = _loaded(policy)
        self.ledger = ledger
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.metrics = CompactionMetrics(meter_provider)
        self.metrics.watch(ledger)
        self.recorder = ToolCallRecorder(
            ledger=ledger,
            tracer_provider=tracer_provider,
            metrics=self.metrics,
            capture_content=capture_content,
            agent_name=agent_name,
            side_effects=SideEffectLog(self.policy.side_effects),
        )
        self.severed = SeveredObligations(self.metrics)
        """Counts each severed obligation once, for the gate and the instrumentation alike."""
        self.decisions = DecisionTelemetry(
            tracer_provider, self.metrics, capture_content, self.severed
        )
        self._owned: list[object] = []
        if owns_tracer_provider:
            self._owned.append(tracer_provider)
        if owns_meter_provider:
            self._owned.append(meter_provider)
        self._closing: list[_ClosingSpanExporter] = []
        self._meter_shutdown_millis: float = _SDK_SHUTDOWN_MILLIS
        self._shut_down = False
        self._quiet: NothingListens | None = None

    def agent_run(
        self,
        name: str | None = None,
        *,
        conversation_id: str | None = None,
        links: Sequence[Link] = (),
    ) -> AbstractContextManager[Span]:
        """The run's ``invoke_agent`` span, current for a ``with`` block (`runs.agent_run`):
        the tool calls, decisions and compactions inside it are its children, one trace per
        run. `name` defaults to the agent name given to `configure`.

        Example:
            >>> with telemetry.agent_run(conversation_id="conv-7"):  # doctest: +SKIP
            ...     telemetry.recorder.call("restart", "call_1")
        """
        return self.recorder.agent_run(name, conversation_id=conversation_id, links=links)

    def gate(
        self, policy: Policy | str | None = None, *, sources: Iterable[ObligationSource] = ()
    ) -> CompactionGate:
        """A gate reading this ledger (and `sources`, their disagreements with it counted in
        these metrics) whose every decision is recorded as telemetry.

        `policy` is this telemetry's (`configure`'s ``policy``) when None. Another policy
        given here becomes this telemetry's (`use_policy`): the recorder feeding the gate's
        ledger then judges side effects by that policy's table, as the gate does."""
        consulted = ObligationSources(sources, metrics=self.metrics) if sources else None
        gate = CompactionGate(
            self.policy if policy is None else policy, ledger=self.ledger, sources=consulted
        )
        if policy is not None:
            self.use_policy(gate.policy)
        gate.add_observer(self.decisions)
        return gate

    def use_policy(self, policy: Policy | str) -> None:
        """Make `policy` this telemetry's: `gate`'s default, and the ``side_effects`` table
        the recorder judges which calls change something (and so which repeats are
        re-issues) by, from the next call it records on."""
        self.policy = _loaded(policy)
        self.recorder.side_effects.table = self.policy.side_effects

    def shutdown(self) -> None:
        """Flush and shut down the providers `configure` created (not the application's).

        With the OTLP endpoint unreachable this returns within `configure`'s documented bound;
        it runs at interpreter exit when not called before, and a second call does nothing."""
        if self._shut_down:
            return
        self._shut_down = True
        atexit.unregister(self.shutdown)
        for exporter in self._closing:
            exporter.closing = True
        for provider in self._owned:
            try:
                if isinstance(provider, SdkMeterProvider):
                    provider.shutdown(timeout_millis=self._meter_shutdown_millis)
                else:
                    shutdown = getattr(provider, "shutdown", None)
                    if shutdown is not None:
                        shutdown()
            except Exception:
                _log.exception("otel-compaction: provider shutdown failed")
        if self._quiet is not None:
            self._quiet.remove()


def configure(
    *,
    ledger: ObligationLedger | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    capture_content: bool | None = None,
    agent_name: str | None = None,
    set_global: bool = True,
    prometheus_port: int | None = None,
    prometheus_host: str | None = None,
    policy: Policy | str | None = None,
) -> Telemetry:
    """Wire otel-compaction into the application's OpenTelemetry setup.

    `policy` (a `Policy`, a built-in name or a file; ``default`` when None) is the policy
    `Telemetry.gate` uses unless told otherwise; the recorder judges which tool calls are
    side effects, and so which repeats after a compaction are re-issues
    (``compaction.reissue``), by its ``side_effects`` table.

    Providers given here, or already installed globally as SDK providers, are used as they are
    (the ledger's span processor is added to an SDK tracer provider). When none exist, providers
    are created from the standard ``OTEL_*`` environment variables and, with `set_global`,
    installed globally.

    `prometheus_port` (default: ``OTEL_COMPACTION_PROMETHEUS_PORT``, else off) adds a
    Prometheus scrape endpoint, ``http://HOST:PORT/metrics``, to the meter provider created
    here: `prometheus_host` (default: ``OTEL_COMPACTION_PROMETHEUS_HOST``, else ``127.0.0.1``)
    is the address it binds; port 0 picks a free port, read back from
    `Telemetry.prometheus_address`. It needs ``opentelemetry-exporter-prometheus`` (the
    ``prometheus`` extra). An application that brings its own meter provider adds a
    ``PrometheusMetricReader`` to it instead. When the endpoint cannot start (the port is
    taken, the extra is missing), the failure is logged and the rest works as configured.

    Which exporters the created providers get: those ``OTEL_TRACES_EXPORTER`` and
    ``OTEL_METRICS_EXPORTER`` name (``otlp``, ``console``, ``none``). Unset, a signal exports
    over OTLP, except when a Prometheus endpoint is asked for: then it exports over OTLP only
    if an endpoint is configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` or the signal's
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``/``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``), so that a
    setup without a Collector never sends to ``localhost:4318``.

    Shutdown is bounded, whether by `Telemetry.shutdown` or at interpreter exit (which calls
    it): each OTLP export gives up after the export timeout, ``OTEL_EXPORTER_OTLP_TIMEOUT`` or
    the signal's ``OTEL_EXPORTER_OTLP_TRACES_TIMEOUT``/``OTEL_EXPORTER_OTLP_METRICS_TIMEOUT``
    (seconds), else `DEFAULT_EXPORT_TIMEOUT_S` (2 s; 0.5 s when no endpoint is configured and
    nothing listens at the default one when `configure` runs, which then says so once on the
    first failed export instead of the exporters' retries); shutdown waits for at most two
    exports per signal (one in flight, one final flush), so with the OTLP endpoint refusing or never
    answering it takes at most ``2 * (traces timeout + metrics timeout)``: 8 s by default.
    Raise the timeouts for a slow Collector; what the ledger and the gate hold in-process is
    never affected.

    Raises:
        ValueError: `prometheus_port` is not a port number.
        PolicyError: `policy` cannot be loaded.

    Example:
        >>> telemetry = configure(set_global=False)  # doctest: +SKIP
        >>> gate = telemetry.gate("default")  # doctest: +SKIP
    """
    loaded = _loaded(policy)  # before anything is installed: a bad policy changes nothing
    made_ledger = ledger is None
    ledger = ledger if ledger is not None else default_ledger()  # OTEL_COMPACTION_LEDGER_URL
    port = _prometheus_port(prometheus_port)
    otlp_by_default = port is None
    owns_tracer = owns_meter = False
    closing: list[_ClosingSpanExporter] = []
    endpoint = default_endpoint(os.environ, _http())
    unreachable = endpoint is not None and not listening(endpoint)
    default_timeout = UNREACHABLE_EXPORT_TIMEOUT_S if unreachable else DEFAULT_EXPORT_TIMEOUT_S
    tracer_provider = tracer_provider or _installed_tracer_provider()
    if tracer_provider is None:
        tracer_provider = _tracer_provider_from_env(otlp_by_default, closing, default_timeout)
        owns_tracer = True
        if set_global:
            trace.set_tracer_provider(tracer_provider)
    meter_provider = meter_provider or _installed_meter_provider()
    prometheus: _PrometheusEndpoint | None = None
    if meter_provider is None:
        if port is not None:
            prometheus = _PrometheusEndpoint.start(port, _prometheus_host(prometheus_host))
        extra = [prometheus.reader] if prometheus is not None else []
        meter_provider = _meter_provider_from_env(otlp_by_default, default_timeout, extra)
        owns_meter = True
        if set_global:
            metrics.set_meter_provider(meter_provider)
    elif port is not None:
        _log.warning(
            "otel-compaction: the application's meter provider is used as it is, so no "
            "Prometheus endpoint was started; add a PrometheusMetricReader to that provider"
        )
    if isinstance(tracer_provider, SdkTracerProvider):
        _attach_ledger(tracer_provider, ledger)
    telemetry = Telemetry(
        ledger=ledger,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        owns_tracer_provider=owns_tracer,
        owns_meter_provider=owns_meter,
        capture_content=capture_content,
        agent_name=agent_name,
        policy=loaded,
    )
    telemetry._closing = closing
    exports_otlp = (owns_tracer and "otlp" in _exporter_names("TRACES", otlp_by_default)) or (
        owns_meter and "otlp" in _exporter_names("METRICS", otlp_by_default)
    )
    if endpoint is not None and exports_otlp:
        telemetry._quiet = NothingListens(endpoint).install()
    telemetry._meter_shutdown_millis = 2 * 1000 * _export_timeout_s("METRICS", default_timeout)
    if prometheus is not None:
        telemetry.prometheus_address = prometheus.address
        telemetry._owned.append(prometheus)  # stopped after the meter provider
    if made_ledger and ledger.owner is not None:  # a shared store's worker: stops last
        telemetry._owned.append(types.SimpleNamespace(shutdown=ledger.close))
    if telemetry._owned:
        # In place of the SDK's own exit hooks (the providers are created without them), so
        # that exit is bounded as `shutdown` is.
        atexit.register(telemetry.shutdown)
    return telemetry


def _loaded(policy: Policy | str | None) -> Policy:
    if isinstance(policy, Policy):
        return policy
    return Policy.load(policy or "default")


PROMETHEUS_PORT_ENV = "OTEL_COMPACTION_PROMETHEUS_PORT"
"""Port of the optional Prometheus scrape endpoint; unset or empty: no endpoint."""
PROMETHEUS_HOST_ENV = "OTEL_COMPACTION_PROMETHEUS_HOST"
"""Address the optional Prometheus scrape endpoint binds; ``127.0.0.1`` when unset."""
_DEFAULT_PROMETHEUS_HOST = "127.0.0.1"


def _prometheus_port(explicit: int | None) -> int | None:
    if explicit is not None:
        if not 0 <= explicit <= 65535:
            raise ValueError(f"prometheus_port must be 0..65535, not {explicit}")
        return explicit
    value = os.environ.get(PROMETHEUS_PORT_ENV, "").strip()
    if not value:
        return None
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        _log.warning(
            "otel-compaction: %s=%r is not a port; no endpoint", PROMETHEUS_PORT_ENV, value
        )
        return None
    return port


def _prometheus_host(explicit: str | None) -> str:
    return explicit or os.environ.get(PROMETHEUS_HOST_ENV, "").strip() or _DEFAULT_PROMETHEUS_HOST


class _PrometheusEndpoint:
    """A ``PrometheusMetricReader`` and the HTTP server that serves it, on its own registry
    (so that two configurations in one process never mix their metrics)."""

    def __init__(self, reader: MetricReader, server: Any, thread: threading.Thread) -> None:
        self.reader = reader
        self._server = server
        self._thread = thread

    @classmethod
    def start(cls, port: int, host: str) -> _PrometheusEndpoint | None:
        """Start serving on ``host:port``; None (logged) when that is not possible."""
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            _log.error(
                "otel-compaction: a Prometheus endpoint needs opentelemetry-exporter-prometheus "
                "(pip install 'otel-compaction[prometheus]'); no endpoint started"
            )
            return None
        registry = CollectorRegistry()
        try:
            reader = PrometheusMetricReader(registry=registry)
        except TypeError:  # releases before the registry keyword: the global registry
            from prometheus_client import REGISTRY

            registry = REGISTRY
            reader = PrometheusMetricReader()
        try:
            server, thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            _log.error("otel-compaction: Prometheus endpoint on %s:%s failed: %s", host, port, exc)
            return None
        return cls(reader, server, thread)

    @property
    def address(self) -> tuple[str, int]:
        """The bound ``(host, port)``."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def shutdown(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# Providers already feeding a ledger, so configuring twice never counts a span twice.
_ATTACHED: weakref.WeakKeyDictionary[SdkTracerProvider, list[ObligationLedger]] = (
    weakref.WeakKeyDictionary()
)


def _attach_ledger(provider: SdkTracerProvider, ledger: ObligationLedger) -> None:
    ledgers = _ATTACHED.setdefault(provider, [])
    if any(known is ledger for known in ledgers):
        return
    ledgers.append(ledger)
    provider.add_span_processor(LedgerSpanProcessor(ledger))


def _installed_tracer_provider() -> TracerProvider | None:
    provider = trace.get_tracer_provider()
    return provider if isinstance(provider, SdkTracerProvider) else None


def _installed_meter_provider() -> MeterProvider | None:
    provider = metrics.get_meter_provider()
    return provider if isinstance(provider, SdkMeterProvider) else None


DEFAULT_EXPORT_TIMEOUT_S = 2.0
"""Seconds an OTLP export of the providers `configure` creates may take, retries included,
when neither ``OTEL_EXPORTER_OTLP_TIMEOUT`` nor the signal's own variable is set (the SDK's
default is 10 s)."""
_SDK_SHUTDOWN_MILLIS = 30_000


def _export_timeout_s(signal: str, default: float = DEFAULT_EXPORT_TIMEOUT_S) -> float:
    """The OTLP export timeout of `signal` (``TRACES`` or ``METRICS``), read as the exporters
    read it: the signal's variable, then the general one, else `default`."""
    for variable in (f"OTEL_EXPORTER_OTLP_{signal}_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        value = os.environ.get(variable, "").strip()
        if not value:
            continue
        try:
            timeout = float(value)
        except ValueError:
            timeout = -1.0
        if timeout > 0:
            return timeout
        _log.warning(
            "otel-compaction: %s=%r is not a timeout in seconds; using %g",
            variable,
            value,
            default,
        )
        return default
    return default


def _exporter_names(signal: str, otlp_by_default: bool) -> list[str]:
    """The exporters ``OTEL_<signal>_EXPORTER`` names; unset, ``otlp`` when that is the
    default or an OTLP endpoint is configured, else none."""
    value = os.environ.get(f"OTEL_{signal}_EXPORTER")
    if value is None:
        endpoints = (f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
        configured = any(os.environ.get(name, "").strip() for name in endpoints)
        value = "otlp" if otlp_by_default or configured else "none"
    return [name.strip().lower() for name in value.split(",") if name.strip()]


def _http() -> bool:
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip().lower()
    return protocol.startswith("http")


class _ClosingSpanExporter(SpanExporter):
    """An OTLP span exporter that, once shutdown has begun (`closing`) and an export has failed,
    fails the remaining batches at once: with the endpoint down, each would otherwise wait its
    own export timeout and the final flush would have no bound."""

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter
        self.closing = False
        self._failed_while_closing = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._failed_while_closing:
            return SpanExportResult.FAILURE
        result = self._exporter.export(spans)
        if self.closing and result is not SpanExportResult.SUCCESS:
            self._failed_while_closing = True
        return result

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)


def _tracer_provider_from_env(
    otlp_by_default: bool, closing: list[_ClosingSpanExporter], default_timeout: float
) -> SdkTracerProvider:
    delegate: Sampler = _get_from_env_or_default()
    provider = SdkTracerProvider(
        resource=Resource.create(), sampler=ObligationSampler(delegate), shutdown_on_exit=False
    )
    for name in _exporter_names("TRACES", otlp_by_default):
        exporter: SpanExporter | None = None
        if name == "otlp":
            timeout = _export_timeout_s("TRACES", default_timeout)
            if _http():
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter as HttpSpanExporter,
                )

                otlp: SpanExporter = HttpSpanExporter(timeout=timeout)
            else:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                    OTLPSpanExporter as GrpcSpanExporter,
                )

                otlp = GrpcSpanExporter(timeout=timeout)
            exporter = _ClosingSpanExporter(otlp)
            closing.append(exporter)
        elif name == "console":
            exporter = ConsoleSpanExporter()
        elif name != "none":
            _log.warning("otel-compaction: unknown OTEL_TRACES_EXPORTER %r ignored", name)
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _meter_provider_from_env(
    otlp_by_default: bool, default_timeout: float, extra: list[MetricReader] | None = None
) -> SdkMeterProvider:
    readers: list[MetricReader] = list(extra or ())
    for name in _exporter_names("METRICS", otlp_by_default):
        if name == "otlp":
            timeout = _export_timeout_s("METRICS", default_timeout)
            if _http():
                from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                    OTLPMetricExporter as HttpMetricExporter,
                )

                readers.append(PeriodicExportingMetricReader(HttpMetricExporter(timeout=timeout)))
            else:
                from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                    OTLPMetricExporter as GrpcMetricExporter,
                )

                readers.append(PeriodicExportingMetricReader(GrpcMetricExporter(timeout=timeout)))
        elif name == "console":
            from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
        elif name != "none":
            _log.warning("otel-compaction: unknown OTEL_METRICS_EXPORTER %r ignored", name)
    return SdkMeterProvider(
        resource=Resource.create(), metric_readers=readers, shutdown_on_exit=False
    )
