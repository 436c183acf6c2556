"""Auto-instrumentation: one instrumentor per library, all recording into one runtime.

=================================  =========================  ===============================
instrumentor                       entry point                library
=================================  =========================  ===============================
`CompactionOpenAIInstrumentor`     ``compaction_openai``      ``openai``
`CompactionAnthropicInstrumentor`  ``compaction_anthropic``   ``anthropic``
`CompactionMCPInstrumentor`        ``compaction_mcp``         ``mcp``
`CompactionLangChainInstrumentor`  ``compaction_langchain``   ``langchain-core``, ``langgraph``
`CompactionAgentsInstrumentor`     ``compaction_agents``      ``openai-agents``
=================================  =========================  ===============================

Zero code change: each is registered under the ``opentelemetry_instrumentor`` entry point, so
``opentelemetry-instrument python agent.py`` runs every one whose library is installed at a
supported version (`instrumentation_dependencies`) and skips the others, as the
contrib instrumentations are skipped. ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` switches one
off by its entry-point name, and all of them with ``compaction``; ``OTEL_COMPACTION_FRAMEWORKS``
selects the framework ones (``mcp``, ``langchain``, ``agents``). In code, one object instruments
every installed library::

    from otel_compaction.instrumentation import CompactionInstrumentor

    instrumentor = CompactionInstrumentor()
    instrumentor.instrument()  # tracer_provider=, meter_provider=, policy=, detection=, ...
    gate = instrumentor.gate  # a gate over the instrumentation's ledger
    instrumentor.uninstrument()

or one of them: ``CompactionOpenAIInstrumentor().instrument()``, with the same arguments.

A plain SDK loop (no framework opens a run) makes each run one trace with `agent_run`, the
GenAI ``invoke_agent`` span, recorded with the global tracer provider that
``opentelemetry-instrument`` installed; the model calls, tool calls and decisions inside it are
its children::

    from otel_compaction.instrumentation import agent_run

    with agent_run("support-agent", conversation_id=session_id):
        ...  # the agent's loop: client.chat.completions.create(...), tools, compaction

Whichever starts first builds the runtime (the telemetry, the ledger and recorder in it, the
gate's policy, whose ``side_effects`` table the recorder judges re-issues by) from its arguments
and the environment (see `_settings`); the others record into it too, so a tool call two
layers see is one obligation (`ToolCallRecorder.call`'s ``layer``).
The telemetry is `otel_compaction.configure()`'s: the SDK providers already installed (by
``opentelemetry-instrument`` and a distro), else providers built from ``OTEL_*``. When the last
one is uninstrumented, and at interpreter exit, the tool calls still open are abandoned, so
their spans end and are exported; until then a call stays open in the ledger, where another
layer may still resolve it.

Each library is instrumented when it is imported (a post-import hook: nothing is imported
early). A framework the application instrumented itself is left alone. `uninstrument` takes the
wrappers out (one that cannot be taken from under another instrumentation's stays, and passes
calls through once the runtime has stopped) and turns off the integration it turned on.

Nothing here raises into the host: a failure is logged and the application runs
uninstrumented. The one exception is the distro's own: under
``opentelemetry-instrument`` an instrumentor whose library is missing or of another version
raises ``DependencyConflictError``, which the loader logs and skips it for.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import threading
from collections.abc import Callable, Collection, Mapping
from types import ModuleType
from typing import Any, ClassVar

import wrapt
from opentelemetry.instrumentation.dependencies import DependencyConflictError
from opentelemetry.instrumentation.environment_variables import (
    OTEL_PYTHON_DISABLED_INSTRUMENTATIONS,
)
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from otel_compaction._internal_errors import internal_errors
from otel_compaction.gate import CompactionGate
from otel_compaction.instrumentation._runtime import Runtime
from otel_compaction.instrumentation._settings import Settings, frameworks
from otel_compaction.instrumentation._wrapping import Patches
from otel_compaction.integrations import Integration, Registration, registration
from otel_compaction.ledger import ObligationLedger
from otel_compaction.telemetry import semconv
from otel_compaction.telemetry.configuration import Telemetry, configure
from otel_compaction.telemetry.runs import agent_run

__all__ = [
    "CompactionAgentsInstrumentor",
    "CompactionAnthropicInstrumentor",
    "CompactionInstrumentor",
    "CompactionLangChainInstrumentor",
    "CompactionMCPInstrumentor",
    "CompactionOpenAIInstrumentor",
    "agent_run",
    "instrumentors",
]

_log = logging.getLogger(__name__)

_ALL = "compaction"
"""Named in ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``, it switches every instrumentor here off;
each one's entry point is ``compaction_{name}``."""


class _Shared:
    """The runtime every instrumentor records into while any of them is instrumented."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runtime: Runtime | None = None
        self.users: list[_Instrumentor] = []
        self._gate: CompactionGate | None = None
        self._reusable: tuple[Telemetry, Settings] | None = None

    def join(self, user: _Instrumentor, kwargs: Mapping[str, Any]) -> Runtime:
        """The runtime, built from `kwargs` if `user` is the first to instrument."""
        with self.lock:
            runtime = self.runtime
            if runtime is None:
                settings = Settings.resolve(kwargs)
                runtime = Runtime(self._telemetry(kwargs, settings), settings)
                self.runtime, self._gate = runtime, None
                atexit.register(self._at_exit)
            elif _other_telemetry(kwargs, runtime.telemetry):
                _log.warning(
                    "otel-compaction: %s records into the instrumentation already running; "
                    "uninstrument every otel-compaction instrumentor to record elsewhere",
                    type(user).__name__,
                )
            if user not in self.users:
                self.users.append(user)
            return runtime

    def leave(self, user: _Instrumentor) -> None:
        """`user` is uninstrumented; the last one to leave shuts the runtime down."""
        with self.lock:
            if user in self.users:
                self.users.remove(user)
            runtime = self.runtime
            if self.users or runtime is None:
                return
            self.runtime = self._gate = None
            atexit.unregister(self._at_exit)
        runtime.shutdown("uninstrumented")

    def runtime_of(self, user: _Instrumentor) -> Runtime | None:
        """The runtime, if `user` is instrumented into it."""
        return self.runtime if user in self.users else None

    def gate(self, user: _Instrumentor) -> CompactionGate | None:
        """The runtime's gate (one per runtime), if `user` is instrumented into it."""
        with self.lock:
            runtime = self.runtime
            if runtime is None or user not in self.users:
                return None
            if self._gate is None:
                self._gate = runtime.telemetry.gate(runtime.settings.policy)
            return self._gate

    def _at_exit(self) -> None:
        with self.lock:
            runtime, users = self.runtime, tuple(self.users)
            self.runtime = self._gate = None
            self.users.clear()
        for user in users:
            user._halt()
        if runtime is not None:
            runtime.shutdown("process exit")

    def _telemetry(self, kwargs: Mapping[str, Any], settings: Settings) -> Telemetry:
        given = kwargs.get("telemetry")
        if isinstance(given, Telemetry):
            if kwargs.get("policy") is not None or os.environ.get(semconv.POLICY_ENV, "").strip():
                given.use_policy(settings.policy)  # asked for: it judges the side effects too
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
                telemetry.use_policy(settings.policy)
                return telemetry
        telemetry = configure(
            ledger=kwargs.get("ledger"),
            tracer_provider=kwargs.get("tracer_provider"),
            meter_provider=kwargs.get("meter_provider"),
            capture_content=settings.capture_content,
            agent_name=settings.agent_name,
            policy=settings.policy,
        )
        if not explicit:
            self._reusable = (telemetry, settings)
        return telemetry


_SHARED = _Shared()


def _other_telemetry(kwargs: Mapping[str, Any], telemetry: Telemetry) -> bool:
    """Whether `kwargs` ask for telemetry other than `telemetry`."""
    given = kwargs.get("telemetry")
    if given is not None:
        return given is not telemetry
    return any(
        kwargs.get(name) not in (None, getattr(telemetry, name))
        for name in ("tracer_provider", "meter_provider", "ledger")
    )


def _global_providers() -> tuple[Any, Any]:
    from opentelemetry import metrics, trace

    return trace.get_tracer_provider(), metrics.get_meter_provider()


class _Instrumentor(BaseInstrumentor):  # type: ignore[misc]
    """What every instrumentor here offers: the shared runtime's pieces. Like every
    ``BaseInstrumentor``, each class is a singleton."""

    @property
    def _runtime(self) -> Runtime | None:
        return _SHARED.runtime_of(self)

    @property
    def telemetry(self) -> Telemetry | None:
        """What the instrumentation records into (None while not instrumented)."""
        runtime = self._runtime
        return runtime.telemetry if runtime is not None else None

    @property
    def ledger(self) -> ObligationLedger | None:
        """The instrumentation's ledger (None while not instrumented)."""
        runtime = self._runtime
        return runtime.ledger if runtime is not None else None

    @property
    def gate(self) -> CompactionGate | None:
        """A gate over the instrumentation's ledger, with the configured policy, whose
        decisions are recorded (None while not instrumented). Every instrumentor here gives
        the same one."""
        return _SHARED.gate(self)

    def _halt(self) -> None:
        """Stop recording (at interpreter exit)."""


class _Session:
    """What one instrumentor installed between its `instrument` and `uninstrument`."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.active = True
        self.patches = Patches()
        self.integration: Integration | None = None
        """The integration it turned on (None: off, or the application's own)."""


class _LibraryInstrumentor(_Instrumentor):
    """One library, instrumented when it is imported."""

    name: ClassVar[str]
    """Its entry point is ``compaction_{name}``."""
    _library: ClassVar[str]
    """The module whose import turns the instrumentation on."""
    _instruments: ClassVar[tuple[str, ...]]
    _session: _Session | None = None

    @property
    def entry_point(self) -> str:
        """The ``opentelemetry_instrumentor`` entry point naming this instrumentor."""
        return f"{_ALL}_{self.name}"

    def instrumentation_dependencies(self) -> Collection[str]:
        """The distributions and versions this instrumentor supports."""
        return self._instruments

    def instrument(self, **kwargs: Any) -> Any:
        """Instrument the library when it is imported; see ``BaseInstrumentor.instrument``.

        ``opentelemetry-instrument`` passes ``skip_dep_check=True`` once it checked the
        distribution's ``instruments`` extra, which this package, holding an instrumentor per
        library, leaves empty. So this checks its own library then: a missing or unsupported
        one raises ``DependencyConflictError``, which the loader logs and skips it for. It also
        stays off when ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` names ``compaction``.
        """
        if kwargs.get("skip_dep_check"):
            if not self._wanted():
                return None
            conflict = self._check_dependency_conflicts()
            if conflict is not None:
                raise DependencyConflictError(conflict)
        return super().instrument(**kwargs)

    def _wanted(self) -> bool:
        """Whether the environment leaves this instrumentor on under auto-instrumentation."""
        disabled = os.environ.get(OTEL_PYTHON_DISABLED_INSTRUMENTATIONS, "")
        if _ALL in {name.strip() for name in disabled.split(",")}:
            _log.debug("otel-compaction: %s skipped: %s names %s", self.entry_point,
                       OTEL_PYTHON_DISABLED_INSTRUMENTATIONS, _ALL)  # fmt: skip
            return False
        return True

    def _instrument(self, **kwargs: Any) -> None:
        runtime = None
        with internal_errors("instrumentation (the application runs on)"):
            runtime = _SHARED.join(self, kwargs)
        if runtime is None:
            return
        session = self._session = _Session(runtime)
        with internal_errors(f"instrumenting {self._library}"):
            wrapt.register_post_import_hook(self._when_imported(session), self._library)

    def _when_imported(self, session: _Session) -> Callable[[ModuleType], None]:
        """A post-import hook starting `session`, unless it was stopped since."""

        def hook(_module: ModuleType) -> None:
            if not (session.active and session.runtime.active):
                return
            with internal_errors(f"instrumenting {self._library}"):
                self._start(session)

        return hook

    def _uninstrument(self, **kwargs: Any) -> None:
        self._halt()
        _SHARED.leave(self)

    def _halt(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        session.active = False  # the library imported from now on is left alone
        with internal_errors(f"uninstrumenting {self._library}"):
            self._stop(session)

    def _start(self, session: _Session) -> None:
        """Instrument the library, just imported."""
        raise NotImplementedError

    def _stop(self, session: _Session) -> None:
        """Take out what `_start` installed."""
        raise NotImplementedError


class _SdkInstrumentor(_LibraryInstrumentor):
    """A model SDK: its methods wrapped (the implementation module's ``instrument``)."""

    _implementation: ClassVar[str]

    def _start(self, session: _Session) -> None:
        implementation = importlib.import_module(self._implementation)
        implementation.instrument(session.runtime, session.patches)

    def _stop(self, session: _Session) -> None:
        session.patches.remove()


class _IntegrationInstrumentor(_LibraryInstrumentor):
    """A framework: its integration (a `REGISTRY` row) turned on."""

    _registration: ClassVar[Registration]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        row = cls._registration
        cls.name, cls._library, cls._instruments = row.name, row.library, row.instruments

    def _wanted(self) -> bool:
        if self.name not in frameworks():
            _log.debug("otel-compaction: %s skipped: not in OTEL_COMPACTION_FRAMEWORKS",
                       self.entry_point)  # fmt: skip
            return False
        return super()._wanted()

    def _start(self, session: _Session) -> None:
        integration = self._registration.load()
        if integration.is_instrumented():
            return  # on already: the application's own setup is kept
        if self._turn_on(integration, session.runtime):
            session.integration = integration

    def _turn_on(self, integration: Integration, runtime: Runtime) -> bool:
        return integration.instrument(runtime.telemetry)

    def _stop(self, session: _Session) -> None:
        if session.integration is not None:
            session.integration.uninstrument()


class CompactionOpenAIInstrumentor(_SdkInstrumentor):
    """The OpenAI SDK: Chat Completions and Responses (``create``, ``parse``, ``.stream()``),
    sync and async, streamed and not."""

    name = "openai"
    _library = "openai"
    _instruments = ("openai >= 1.66",)
    _implementation = "otel_compaction.instrumentation._openai"


class CompactionAnthropicInstrumentor(_SdkInstrumentor):
    """The Anthropic SDK: Messages (``create``, ``parse``, ``stream()``), sync and async,
    streamed and not."""

    name = "anthropic"
    _library = "anthropic"
    _instruments = ("anthropic >= 0.40",)
    _implementation = "otel_compaction.instrumentation._anthropic"


class CompactionMCPInstrumentor(_IntegrationInstrumentor):
    """MCP client tool calls (``ClientSession.call_tool``): `instrumentation.mcp`."""

    _registration = registration("mcp")


class CompactionLangChainInstrumentor(_IntegrationInstrumentor):
    """The tool calls of every LangChain and LangGraph run, and the built-in summarization
    guarded with the instrumentation's policy when
    ``OTEL_COMPACTION_GUARD_LANGCHAIN_SUMMARIZATION=true``:
    `otel_compaction.integrations.langchain`."""

    _registration = registration("langchain")

    def _turn_on(self, integration: Integration, runtime: Runtime) -> bool:
        from otel_compaction.integrations import langchain

        return langchain.instrument(runtime.telemetry, policy=runtime.settings.policy)


class CompactionAgentsInstrumentor(_IntegrationInstrumentor):
    """The OpenAI Agents SDK's function tools: `otel_compaction.integrations.openai_agents`."""

    _registration = registration("agents")


_LIBRARIES: tuple[type[_LibraryInstrumentor], ...] = (
    CompactionOpenAIInstrumentor,
    CompactionAnthropicInstrumentor,
    CompactionMCPInstrumentor,
    CompactionLangChainInstrumentor,
    CompactionAgentsInstrumentor,
)


def instrumentors() -> tuple[_LibraryInstrumentor, ...]:
    """Every per-library instrumentor, SDKs first (each class is a singleton)."""
    return tuple(cls() for cls in _LIBRARIES)


class CompactionInstrumentor(_Instrumentor):
    """Every per-library instrumentor whose library is installed, as one object.

    ``instrument()`` keyword arguments, each optional: ``tracer_provider``, ``meter_provider``,
    ``ledger`` or a whole ``telemetry`` (a `Telemetry`), the settings ``policy`` (name, path or
    `Policy`), ``detection``, ``capture_content``, ``agent_name``, which override the
    environment, and ``frameworks`` (names, or a comma list; else ``OTEL_COMPACTION_FRAMEWORKS``)
    selecting the framework instrumentors. It instruments each of `instrumentors` that is not
    on already, skipping those whose library is not installed (one at an unsupported version is
    logged, as ``BaseInstrumentor`` logs it), and uninstruments the ones it instrumented.
    """

    _started: tuple[_LibraryInstrumentor, ...] = ()

    def instrumentation_dependencies(self) -> Collection[str]:
        """None: it instruments whichever supported libraries are installed."""
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        selected = None
        with internal_errors("instrumentation (the application runs on)"):
            _SHARED.join(self, kwargs)
            selected = frameworks(kwargs.get("frameworks"))
        if selected is None:
            return
        started: list[_LibraryInstrumentor] = []
        for instrumentor in instrumentors():
            if instrumentor.is_instrumented_by_opentelemetry:
                continue  # on already: opentelemetry-instrument's, or the application's
            if isinstance(instrumentor, _IntegrationInstrumentor) and (
                instrumentor.name not in selected
            ):
                continue
            with internal_errors(f"instrumenting {instrumentor.name}"):
                conflict = instrumentor._check_dependency_conflicts()
                if conflict is not None and not conflict.found:
                    _log.debug("otel-compaction: %s: %s", instrumentor.entry_point, conflict)
                    continue
                instrumentor.instrument(**kwargs)
            if instrumentor.is_instrumented_by_opentelemetry:
                started.append(instrumentor)
        self._started = tuple(started)

    def _uninstrument(self, **kwargs: Any) -> None:
        started, self._started = self._started, ()
        for instrumentor in reversed(started):
            with internal_errors(f"uninstrumenting {instrumentor.name}"):
                if instrumentor.is_instrumented_by_opentelemetry:
                    instrumentor.uninstrument()
        _SHARED.leave(self)
