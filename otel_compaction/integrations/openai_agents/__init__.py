"""The OpenAI Agents SDK: function tools as obligations, and its compaction guarded.

* `ObligationTracingProcessor` (in `tracing`): the SDK's function-tool spans become
  obligations in the ledger, with ``execute_tool`` / ``tool_result`` spans; over the
  instrumented OpenAI SDK a span joins the call that layer opened, so each call is one.
* `CompactionGuardSession` (in `session`): wraps the SDK's compaction session and asks
  the gate before every compaction, deferring or refusing while obligations are open.
* `approve_reissues` and `reissue_reason` (in `approval`): a function tool whose calls need
  approval exactly when they repeat a side effect a compaction removed from context.
* `instrument` registers one processor with the SDK's tracing; `uninstrument` turns it off.

Importing this module never imports ``agents``: the names above load on first use, and
`instrument` returns False when the SDK is not installed.

Example:
    >>> from otel_compaction import configure  # doctest: +SKIP
    >>> from otel_compaction.integrations import openai_agents  # doctest: +SKIP
    >>> telemetry = configure()  # doctest: +SKIP
    >>> openai_agents.instrument(telemetry)  # doctest: +SKIP
    True
"""

from __future__ import annotations

import importlib
import logging
import threading
from typing import TYPE_CHECKING, Any

from otel_compaction._internal_errors import internal_errors

if TYPE_CHECKING:
    from otel_compaction.integrations.openai_agents.approval import (
        approve_reissues,
        reissue_reason,
    )
    from otel_compaction.integrations.openai_agents.session import CompactionGuardSession
    from otel_compaction.integrations.openai_agents.tracing import ObligationTracingProcessor
    from otel_compaction.telemetry.configuration import Telemetry

__all__ = [
    "CompactionGuardSession",
    "ObligationTracingProcessor",
    "approve_reissues",
    "instrument",
    "is_instrumented",
    "reissue_reason",
    "uninstrument",
]

_log = logging.getLogger(__name__)

_LAZY = {
    "ObligationTracingProcessor": "otel_compaction.integrations.openai_agents.tracing",
    "CompactionGuardSession": "otel_compaction.integrations.openai_agents.session",
    "approve_reissues": "otel_compaction.integrations.openai_agents.approval",
    "reissue_reason": "otel_compaction.integrations.openai_agents.approval",
}


class _State:
    """The one processor `instrument` made, and whether it added it to the SDK's list."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.processor: ObligationTracingProcessor | None = None
        self.added = False


_STATE = _State()


def __getattr__(name: str) -> Any:
    """The names that need the SDK, imported on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def instrument(telemetry: Telemetry) -> bool:
    """Record the SDK's function-tool calls through `telemetry`'s recorder.

    Registers one `ObligationTracingProcessor` with the SDK's tracing (added beside its other
    processors); calling again only changes the recorder it reports to. Returns False when the
    SDK is not installed; never raises.
    """
    try:
        tracing = importlib.import_module("agents.tracing")
        from otel_compaction.integrations.openai_agents.tracing import ObligationTracingProcessor
    except ImportError:
        _log.debug("otel-compaction: openai-agents is not installed; its tools are not recorded")
        return False
    with internal_errors("instrumenting the Agents SDK"), _STATE.lock:
        processor = _STATE.processor
        if processor is None:
            processor = _STATE.processor = ObligationTracingProcessor(telemetry.recorder)
        else:
            processor.recorder = telemetry.recorder
            processor.enabled = True
        if not _registered(tracing, processor):
            tracing.add_trace_processor(processor)
            _STATE.added = True
        return True
    return False


def uninstrument() -> None:
    """Stop recording new function-tool calls (those in flight still resolve); the processor
    is taken out of the SDK's list when the SDK lets it be read. Never raises."""
    with _STATE.lock:
        processor = _STATE.processor
        if processor is None:
            return
        processor.enabled = False
        with internal_errors("removing the Agents SDK processor"):
            tracing = importlib.import_module("agents.tracing")
            processors = _processors(tracing)
            if processors is not None and any(p is processor for p in processors):
                tracing.set_trace_processors([p for p in processors if p is not processor])
                _STATE.added = False


def is_instrumented() -> bool:
    """Whether the SDK's function-tool calls are being recorded."""
    processor = _STATE.processor
    return processor is not None and processor.enabled


def _processors(tracing: Any) -> tuple[Any, ...] | None:
    """The SDK's registered processors. The SDK can add and replace processors but not list
    them, so this reads its provider's private list, and gives None when that is not there."""
    try:
        multi = getattr(tracing.get_trace_provider(), "_multi_processor", None)
        found = getattr(multi, "_processors", None)
    except Exception:
        return None
    return tuple(found) if isinstance(found, (tuple, list)) else None


def _registered(tracing: Any, processor: ObligationTracingProcessor) -> bool:
    """Whether `processor` is among the SDK's processors (``set_trace_processors`` may have
    replaced them since); when the list cannot be read, whether it was added."""
    processors = _processors(tracing)
    if processors is None:
        return _STATE.added
    return any(p is processor for p in processors)
