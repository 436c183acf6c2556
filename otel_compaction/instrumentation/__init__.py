"""Auto-instrumentation: the OpenAI and Anthropic SDKs, with passive compaction detection, and
the framework integrations (LangChain and LangGraph, MCP, the OpenAI Agents SDK).

Zero code change: installed, the package registers `CompactionInstrumentor` under the
``opentelemetry_instrumentor`` entry point (name ``compaction``), so
``opentelemetry-instrument python agent.py`` instruments every supported SDK that is installed.
In code::

    from otel_compaction.instrumentation import CompactionInstrumentor

    instrumentor = CompactionInstrumentor()
    instrumentor.instrument()  # tracer_provider=, meter_provider=, policy=, detection=, ...
    gate = instrumentor.gate  # a gate over the instrumentation's ledger
    instrumentor.uninstrument()

Each SDK is instrumented when it is imported (a post-import hook: nothing is imported early),
at most once per `instrument`; so is each installed framework that ``OTEL_COMPACTION_FRAMEWORKS``
selects, through its integration's ``instrument`` (left alone when the application instrumented
it already). A tool call both layers see is one obligation (`ToolCallRecorder.call`'s
``layer``). `uninstrument` takes the wrappers out (a wrapper another
instrumentation wrapped over stays, as a pass-through) and abandons the tool calls the
instrumentation opened that are still open, as it does at interpreter exit, so their spans end
and are exported; it uninstruments the frameworks it instrumented. Settings come from the
environment (see `_settings`); the telemetry is
`otel_compaction.configure()`'s: the SDK providers already installed (by
``opentelemetry-instrument`` and a distro), else providers built from ``OTEL_*``. Nothing here
raises into the host: a failure is logged and the application runs uninstrumented.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import logging
from collections.abc import Callable, Collection
from types import ModuleType
from typing import Any

import wrapt
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from otel_compaction.gate import CompactionGate
from otel_compaction.instrumentation._runtime import Runtime
from otel_compaction.instrumentation._settings import Settings
from otel_compaction.instrumentation._wrapping import Patches
from otel_compaction.ledger import ObligationLedger
from otel_compaction.telemetry import Telemetry, configure

__all__ = ["CompactionInstrumentor"]

_log = logging.getLogger(__name__)

# The library module whose import triggers instrumentation, and the module instrumenting it.
_LIBRARIES: tuple[tuple[str, str], ...] = (
    ("openai", "otel_compaction.instrumentation._openai"),
    ("anthropic", "otel_compaction.instrumentation._anthropic"),
)
# The frameworks (as ``OTEL_COMPACTION_FRAMEWORKS`` names them), the module whose import
# triggers their integration, and the integration (``instrument`` / ``uninstrument``).
_FRAMEWORKS: tuple[tuple[str, str, str], ...] = (
    ("langchain", "langchain_core", "otel_compaction.integrations.langchain"),
    ("mcp", "mcp", "otel_compaction.integrations.mcp"),
    ("agents", "agents", "otel_compaction.integrations.openai_agents"),
)


class CompactionInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Instruments the installed OpenAI and Anthropic SDKs and agent frameworks.

    ``instrument()`` keyword arguments, each optional: ``tracer_provider``, ``meter_provider``,
    ``ledger`` or a whole ``telemetry`` (a `Telemetry`), and the settings ``policy`` (name,
    path or `Policy`), ``detection``, ``capture_content``, ``agent_name``, ``frameworks``
    (names, or a comma list), which override the environment. Like every
    ``BaseInstrumentor``, the class is a singleton.
    """

    _runtime: Runtime | None = None
    _patches: Patches | None = None
    _integrations: list[ModuleType] | None = None
    _gate: CompactionGate | None = None
    _reusable: tuple[Telemetry, Settings] | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        """None: each supported SDK is instrumented when it is installed."""
        return ()

    @property
    def telemetry(self) -> Telemetry | None:
        """What the instrumentation records into (None while not instrumented)."""
        return self._runtime.telemetry if self._runtime is not None else None

    @property
    def ledger(self) -> ObligationLedger | None:
        """The instrumentation's ledger (None while not instrumented)."""
        return self._runtime.ledger if self._runtime is not None else None

    @property
    def gate(self) -> CompactionGate | None:
        """A gate over the instrumentation's ledger, with the configured policy, whose
        decisions are recorded (None while not instrumented)."""
        runtime = self._runtime
        if runtime is None:
            return None
        if self._gate is None or self._gate.ledger is not runtime.ledger:
            self._gate = runtime.telemetry.gate(runtime.settings.policy)
        return self._gate

    def _instrument(self, **kwargs: Any) -> None:
        try:
            settings = Settings.resolve(kwargs)
            runtime = Runtime(self._telemetry(kwargs, settings), settings)
        except Exception:
            _log.exception("otel-compaction: instrumentation failed; the application runs on")
            return
        patches = Patches()
        integrations: list[ModuleType] = []
        self._runtime, self._patches, self._gate = runtime, patches, None
        self._integrations = integrations
        for module, implementation in _LIBRARIES:
            try:
                if importlib.util.find_spec(module) is not None:
                    hook = _when_imported(runtime, patches, implementation)
                    wrapt.register_post_import_hook(hook, module)
            except Exception:
                _log.exception("otel-compaction: instrumenting %s failed", module)
        for name, module, integration in _FRAMEWORKS:
            if name not in settings.frameworks:
                continue
            try:
                if importlib.util.find_spec(module) is not None:
                    hook = _when_framework_imported(runtime, integration, integrations)
                    wrapt.register_post_import_hook(hook, module)
            except Exception:
                _log.exception("otel-compaction: instrumenting %s failed", name)
        atexit.register(self._at_exit)

    def _uninstrument(self, **kwargs: Any) -> None:
        atexit.unregister(self._at_exit)
        self._stop("uninstrumented")

    def _at_exit(self) -> None:
        self._stop("process exit")

    def _stop(self, reason: str) -> None:
        runtime, patches, integrations = self._runtime, self._patches, self._integrations
        self._runtime = self._patches = self._gate = self._integrations = None
        if runtime is not None:
            runtime.active = False  # a framework imported from now on is left alone
        try:
            if patches is not None:
                patches.remove()
        except Exception:
            _log.exception("otel-compaction: removing the instrumentation failed")
        for integration in integrations or ():
            try:
                integration.uninstrument()
            except Exception:
                _log.exception("otel-compaction: uninstrumenting %s failed", integration.__name__)
        if runtime is not None:
            runtime.shutdown(reason)

    def _telemetry(self, kwargs: dict[str, Any], settings: Settings) -> Telemetry:
        given = kwargs.get("telemetry")
        if isinstance(given, Telemetry):
            return given
        explicit = any(kwargs.get(k) is not None for k in ("tracer_provider", "meter_provider"))
        reusable = self._reusable
        # Instrumenting again on the global providers reuses what was attached to them, so
        # that their pipeline does not gain a ledger processor per `instrument()`.
        if not explicit and kwargs.get("ledger") is None and reusable is not None:
            telemetry, before = reusable
            if (before.capture_content, before.agent_name) == (
                settings.capture_content,
                settings.agent_name,
            ) and _global_providers() == (telemetry.tracer_provider, telemetry.meter_provider):
                return telemetry
        telemetry = configure(
            ledger=kwargs.get("ledger"),
            tracer_provider=kwargs.get("tracer_provider"),
            meter_provider=kwargs.get("meter_provider"),
            capture_content=settings.capture_content,
            agent_name=settings.agent_name,
        )
        if not explicit:
            self._reusable = (telemetry, settings)
        return telemetry


def _global_providers() -> tuple[Any, Any]:
    from opentelemetry import metrics, trace

    return trace.get_tracer_provider(), metrics.get_meter_provider()


def _when_imported(
    runtime: Runtime, patches: Patches, implementation: str
) -> Callable[[ModuleType], None]:
    """A post-import hook instrumenting a library, unless the runtime was stopped since."""

    def hook(_module: ModuleType) -> None:
        if not runtime.active:
            return
        try:
            importlib.import_module(implementation).instrument(runtime, patches)
        except Exception:
            _log.exception("otel-compaction: instrumenting %s failed", _module.__name__)

    return hook


def _when_framework_imported(
    runtime: Runtime, integration: str, instrumented: list[ModuleType]
) -> Callable[[ModuleType], None]:
    """A post-import hook turning a framework integration on (appended to `instrumented`),
    unless the runtime was stopped since or the application instrumented it itself."""

    def hook(_module: ModuleType) -> None:
        if not runtime.active:
            return
        try:
            module = importlib.import_module(integration)
            if module in instrumented or module.is_instrumented():
                return  # already on: the application's own setup is kept
            if module.instrument(runtime.telemetry, **_framework_options(module, runtime)):
                instrumented.append(module)
        except Exception:
            _log.exception("otel-compaction: instrumenting %s failed", _module.__name__)

    return hook


def _framework_options(module: ModuleType, runtime: Runtime) -> dict[str, Any]:
    """The LangChain integration guards the built-in summarization (when its environment
    variable says so) with the instrumentor's policy."""
    if module.__name__.endswith(".langchain"):
        return {"policy": runtime.settings.policy}
    return {}
