"""Guards for agent frameworks' own compactors and tool runtimes, one subpackage per framework:
`langchain` (LangChain and LangGraph) and `openai_agents` (the OpenAI Agents SDK).

Every integration has the same three entry functions (the `Integration` protocol) and one row
in `REGISTRY`: its name, its module, the library that turns it on, the versions it supports
and the instrumentor that turns it on under auto-instrumentation. The MCP client is a library
the instrumentation wraps, like the model SDKs, so its module lives with them
(`otel_compaction.instrumentation.mcp`) and has its row here too. A new integration is one
subpackage and one row. `outer_call` is what the layers share: the tool call running now, so
that a call two layers see is one obligation.

Each module imports its framework lazily; importing this package never requires one.

Example:
    >>> from otel_compaction.integrations import registration
    >>> row = registration("mcp")
    >>> row.module, row.instruments, row.entry_point
    ('otel_compaction.instrumentation.mcp', ('mcp >= 1.10, < 2',), 'compaction_mcp')
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from otel_compaction.telemetry.configuration import Telemetry

__all__ = ["REGISTRY", "Integration", "Registration", "registration"]


class Integration(Protocol):
    """What every integration module provides. None of the three raises."""

    def instrument(self, telemetry: Telemetry) -> bool:
        """Record the framework's tool calls through `telemetry`; idempotent. False (and
        nothing changed) when the framework is not installed or instrumenting it failed."""
        ...

    def uninstrument(self) -> None:
        """Stop recording; calls in flight still resolve."""
        ...

    def is_instrumented(self) -> bool:
        """Whether the framework's tool calls are being recorded."""
        ...


@dataclass(frozen=True, slots=True)
class Registration:
    """One integration, as the instrumentation finds it."""

    name: str
    """``OTEL_COMPACTION_FRAMEWORKS``'s name for it; its entry point is ``compaction_{name}``."""
    module: str
    """The module with the `Integration` functions."""
    library: str
    """The framework module whose import turns the integration on."""
    instruments: tuple[str, ...]
    """The distributions and versions it supports (the instrumentor's dependencies)."""
    instrumentor: str
    """Its instrumentor, as its ``opentelemetry_instrumentor`` entry point names it."""

    @property
    def entry_point(self) -> str:
        """The instrumentor's entry-point name (in ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``)."""
        return f"compaction_{self.name}"

    def load(self) -> Integration:
        """The integration module (importing it never imports the framework)."""
        return cast("Integration", importlib.import_module(self.module))


_INSTRUMENTATION = "otel_compaction.instrumentation"

REGISTRY: tuple[Registration, ...] = (
    Registration(
        name="mcp",
        module="otel_compaction.instrumentation.mcp",
        library="mcp",
        instruments=("mcp >= 1.10, < 2",),  # 2.x reworked ClientSession.call_tool
        instrumentor=f"{_INSTRUMENTATION}:CompactionMCPInstrumentor",
    ),
    Registration(
        name="langchain",
        module="otel_compaction.integrations.langchain",
        library="langchain_core",
        instruments=("langchain-core >= 1.0", "langgraph >= 1.0"),
        instrumentor=f"{_INSTRUMENTATION}:CompactionLangChainInstrumentor",
    ),
    Registration(
        name="agents",
        module="otel_compaction.integrations.openai_agents",
        library="agents",
        instruments=("openai-agents >= 0.3",),
        instrumentor=f"{_INSTRUMENTATION}:CompactionAgentsInstrumentor",
    ),
)
"""Every framework integration, in the order the instrumentation turns them on."""


def registration(name: str) -> Registration:
    """The row named `name` (``langchain``, ``mcp``, ``agents``); KeyError for another."""
    for row in REGISTRY:
        if row.name == name:
            return row
    raise KeyError(name)
