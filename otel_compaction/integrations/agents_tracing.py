"""The OpenAI Agents SDK's function-tool spans as obligations.

`ObligationTracingProcessor` is an Agents SDK tracing processor (register it with
``agents.add_trace_processor``, or let `otel_compaction.integrations.openai_agents.instrument`
do it). A function span opens an obligation through the `ToolCallRecorder` when it starts and
resolves it when it ends: ``error`` when the SDK attached an error to the span (the tool raised,
or was cancelled and the model was told so), ``abandoned`` with reason ``cancelled`` when the
span ends because its task was cancelled, ``result`` otherwise.

The SDK's function spans carry no tool-call id, so the obligation is keyed by the span id. Its
conversation (``gen_ai.conversation.id``) is the trace's ``group_id`` (``RunConfig.group_id``)
when there is one, else the current `conversation` scope.

The SDK calls processors synchronously, from whichever thread or asyncio task starts or ends a
span. Open calls are kept in a dict keyed by span id behind a lock held only for the dict
operation, so parallel tool calls, concurrent runs and ``Runner.run_sync`` threads resolve
their own calls. No callback ever raises into the SDK: failures are logged. `shutdown` abandons
whatever is still open.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from typing import Any

from agents.tracing import FunctionSpanData, Span, Trace, TracingProcessor, get_current_trace

from otel_compaction import semconv
from otel_compaction.context import current_conversation_id
from otel_compaction.tracing import ToolCallHandle, ToolCallRecorder

__all__ = ["ObligationTracingProcessor"]

_log = logging.getLogger(__name__)

_MAX_ARGUMENTS = 8_192


class ObligationTracingProcessor(TracingProcessor):
    """Maps the Agents SDK's function-tool spans to obligations in the recorder's ledger.

    Example:
        >>> from agents import add_trace_processor  # doctest: +SKIP
        >>> add_trace_processor(ObligationTracingProcessor(telemetry.recorder))  # doctest: +SKIP
    """

    def __init__(self, recorder: ToolCallRecorder) -> None:
        """Report to `recorder` (and so to its ledger, spans and metrics)."""
        self.recorder = recorder
        self.enabled = True
        """While False, new function spans are ignored; calls already open still resolve."""
        self._lock = threading.Lock()
        self._open: dict[str, ToolCallHandle] = {}
        self._groups: dict[str, str] = {}

    # -- traces: remember each running trace's group id ---------------------------------------

    def on_trace_start(self, trace: Trace) -> None:
        """Remember the trace's ``group_id``: the conversation of its tool calls."""
        try:
            group = getattr(trace, "group_id", None)
            if isinstance(group, str) and group:
                with self._lock:
                    self._groups[trace.trace_id] = group
        except Exception:
            _log.exception("otel-compaction: Agents SDK trace start failed")

    def on_trace_end(self, trace: Trace) -> None:
        """Forget the trace's group."""
        try:
            with self._lock:
                self._groups.pop(trace.trace_id, None)
        except Exception:
            _log.exception("otel-compaction: Agents SDK trace end failed")

    # -- spans: function spans are tool calls --------------------------------------------------

    def on_span_start(self, span: Span[Any]) -> None:
        """Open an obligation for a function span."""
        try:
            data = span.span_data
            if not self.enabled or not isinstance(data, FunctionSpanData):
                return
            handle = self.recorder.call(
                data.name,
                span.span_id,
                conversation_id=self._conversation(span.trace_id),
                layer=semconv.LAYER_AGENTS,
            )
            with self._lock:
                self._open[span.span_id] = handle
        except Exception:
            _log.exception("otel-compaction: Agents SDK span start failed")

    def on_span_end(self, span: Span[Any]) -> None:
        """Resolve the function span's obligation: error, abandoned (cancelled) or result."""
        try:
            with self._lock:
                handle = self._open.pop(span.span_id, None)
            if handle is None:
                return
            data = span.span_data
            self._arguments(handle, getattr(data, "input", None))
            error = span.error
            if error is not None:
                handle.error(error.get("message") or "tool_error", content=error.get("data"))
            elif isinstance(sys.exc_info()[1], asyncio.CancelledError):
                # The span's ``with`` block is being left by a cancellation of its task.
                handle.abandon("cancelled")
            else:
                handle.result(getattr(data, "output", None))
        except Exception:
            _log.exception("otel-compaction: Agents SDK span end failed")

    def shutdown(self) -> None:
        """Abandon every call still open: its span will never end in this process."""
        with self._lock:
            leftover = list(self._open.values())
            self._open.clear()
            self._groups.clear()
        for handle in leftover:
            try:
                handle.abandon("shutdown")
            except Exception:
                _log.exception("otel-compaction: abandoning an open Agents SDK call failed")

    def force_flush(self) -> None:
        """Nothing is buffered: every resolution is recorded when its span ends."""

    # -- internals -----------------------------------------------------------------------------

    def _conversation(self, trace_id: str) -> str | None:
        with self._lock:
            group = self._groups.get(trace_id)
        if group is None:
            # A trace started before this processor was registered.
            current = get_current_trace()
            found = getattr(current, "group_id", None) if current is not None else None
            if current is not None and current.trace_id == trace_id and isinstance(found, str):
                group = found or None
        return group or current_conversation_id()

    def _arguments(self, handle: ToolCallHandle, arguments: Any) -> None:
        """The SDK sets a function span's input (with ``trace_include_sensitive_data``) after the
        span starts; put it on the call span once known, when content capture is on."""
        if not isinstance(arguments, str) or not arguments or not self.recorder.capture_content:
            return
        handle.arguments = arguments
        handle.span.set_attribute(semconv.GEN_AI_TOOL_CALL_ARGUMENTS, arguments[:_MAX_ARGUMENTS])
