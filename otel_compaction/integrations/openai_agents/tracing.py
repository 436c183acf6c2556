"""The OpenAI Agents SDK's function-tool spans as obligations.

`ObligationTracingProcessor` is an Agents SDK tracing processor (register it with
``agents.add_trace_processor``, or let `otel_compaction.integrations.openai_agents.instrument`
do it). A function span opens an obligation through the `ToolCallRecorder` when it starts and
resolves it when it ends: ``error`` when the SDK attached an error to the span (the tool raised,
or was cancelled and the model was told so), ``abandoned`` with reason ``cancelled`` when the
span ends because its task was cancelled, ``result`` otherwise.

The SDK's function spans carry no tool-call id. When the OpenAI SDK under the agent is
instrumented, its layer has already opened the call, with the model's call id, from the
``function_call`` in the response: the span joins that obligation (`ToolCallRecorder.join_open`)
instead of opening a second one, so a call is one obligation, one ``execute_tool`` span and one
conversation. The span is matched to an open call of the same tool name in the same run (opened
since the trace started, in the run's conversation, or in the conversation of the run's first
joined call when it has none), in open order; parallel calls of one tool are told apart by their
arguments once the SDK sets the span's input (``trace_include_sensitive_data``), before anything
reads the binding, the guess at start given to the span it belongs to. The span's end resolves
the joined call with its richer status; the result the next request carries finds it resolved
(the first resolution wins). Without a call of the SDK layer to join, the span opens its own
obligation, keyed by the span id.

Its conversation (``gen_ai.conversation.id``) is the trace's ``group_id`` (``RunConfig.group_id``)
when there is one, else the current `conversation` scope. `current_group_id` gives the
instrumentation the same ``group_id`` for the requests the run makes, so both layers agree.

While a function span is open its call is the running tool's (`outer_call`): an MCP call the
tool makes joins it instead of opening an obligation of its own.

The SDK calls processors synchronously, from whichever thread or asyncio task starts or ends a
span. Open calls are kept in a dict keyed by span id behind a lock held only for the dict
operation (and the rebinding of a guess), so parallel tool calls, concurrent runs and
``Runner.run_sync`` threads resolve their own calls. No callback ever raises into the SDK:
failures are logged. `shutdown` abandons whatever is still open.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from agents.tracing import FunctionSpanData, Span, Trace, TracingProcessor, get_current_trace

from otel_compaction.context import current_conversation_id
from otel_compaction.integrations import outer_call
from otel_compaction.recorder import ToolCallHandle, ToolCallRecorder
from otel_compaction.telemetry import semconv

__all__ = ["ObligationTracingProcessor", "current_group_id"]

_log = logging.getLogger(__name__)

_MAX_ARGUMENTS = 8_192


def current_group_id() -> str | None:
    """The ``group_id`` of the Agents SDK trace current in this context: the conversation the
    processor files the run's tool calls under. Never raises."""
    try:
        current = get_current_trace()
        group = getattr(current, "group_id", None) if current is not None else None
    except Exception:
        _log.exception("otel-compaction: reading the Agents SDK trace failed")
        return None
    return group if isinstance(group, str) and group else None


@dataclass(slots=True)
class _Run:
    """A running trace: its conversation (the ``group_id``, or the one its first joined call
    showed) and when it started (``time.monotonic_ns()``)."""

    conversation: str | None
    started_ns: int | None


@dataclass(slots=True)
class _Open:
    """An open function span: its call, whether the call is another layer's it joined, and the
    token of its mark as the running tool's call."""

    span: Span[Any]
    handle: ToolCallHandle
    joined: bool
    token: outer_call.Mark | None = None


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
        self._open: dict[str, _Open] = {}
        self._runs: dict[str, _Run] = {}

    # -- traces: remember each running trace's group id and start ------------------------------

    def on_trace_start(self, trace: Trace) -> None:
        """Remember the trace's ``group_id`` (the conversation of its tool calls) and start."""
        try:
            group = getattr(trace, "group_id", None)
            run = _Run(group if isinstance(group, str) and group else None, time.monotonic_ns())
            with self._lock:
                self._runs[trace.trace_id] = run
        except Exception:
            _log.exception("otel-compaction: Agents SDK trace start failed")

    def on_trace_end(self, trace: Trace) -> None:
        """Forget the trace."""
        try:
            with self._lock:
                self._runs.pop(trace.trace_id, None)
        except Exception:
            _log.exception("otel-compaction: Agents SDK trace end failed")

    # -- spans: function spans are tool calls --------------------------------------------------

    def on_span_start(self, span: Span[Any]) -> None:
        """Join the SDK layer's obligation for this call, or open one; mark it running."""
        try:
            data = span.span_data
            if not self.enabled or not isinstance(data, FunctionSpanData):
                return
            run = self._run(span.trace_id)
            conversation = run.conversation or current_conversation_id()
            handle = self.recorder.join_open(
                data.name,
                semconv.LAYER_AGENTS,
                conversation_id=conversation,
                since_ns=run.started_ns,
                recorded_by=semconv.LAYER_SDK,
            )
            entry = _Open(span, handle, joined=True) if handle is not None else None
            if entry is None:
                opened = self.recorder.call(
                    data.name,
                    span.span_id,
                    conversation_id=conversation,
                    layer=semconv.LAYER_AGENTS,
                )
                entry = _Open(span, opened, joined=False)
            with self._lock:
                if entry.joined and conversation is None:
                    run.conversation = entry.handle.conversation_id
                self._open[span.span_id] = entry
            entry.token = outer_call.enter(functools.partial(self._running, span.span_id))
        except Exception:
            _log.exception("otel-compaction: Agents SDK span start failed")

    def on_span_end(self, span: Span[Any]) -> None:
        """Resolve the function span's obligation: error, abandoned (cancelled) or result."""
        try:
            with self._lock:
                entry = self._open.get(span.span_id)
                if entry is None:
                    return
                self._rebind(entry)
                del self._open[span.span_id]
            if entry.token is not None:
                outer_call.leave(entry.token)
            handle = entry.handle
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
            leftover = [entry.handle for entry in self._open.values()]
            self._open.clear()
            self._runs.clear()
        for handle in leftover:
            try:
                handle.abandon("shutdown")
            except Exception:
                _log.exception("otel-compaction: abandoning an open Agents SDK call failed")

    def force_flush(self) -> None:
        """Nothing is buffered: every resolution is recorded when its span ends."""

    # -- internals -----------------------------------------------------------------------------

    def _run(self, trace_id: str) -> _Run:
        """The running trace `trace_id` (one started before this processor was registered is
        read from the SDK, without a start time)."""
        with self._lock:
            run = self._runs.get(trace_id)
            if run is not None:
                return run
        current = get_current_trace()
        group = current_group_id() if current is not None and current.trace_id == trace_id else None
        return _Run(group, None)

    def _running(self, span_id: str) -> ToolCallHandle | None:
        """The call of the open function span `span_id`, bound to its arguments by now."""
        with self._lock:
            entry = self._open.get(span_id)
            if entry is None:
                return None
            self._rebind(entry)
            return entry.handle

    def _rebind(self, entry: _Open) -> None:
        """A joined call guessed in open order whose arguments the span's input contradicts is
        exchanged for the one they match: another open span's guess, when that span's input does
        not match it either, else a call no span joined yet (lock held)."""
        arguments = getattr(entry.span.span_data, "input", None)
        if not entry.joined or not arguments or entry.handle.has_arguments(arguments):
            return
        for other in self._open.values():
            if (
                other is not entry
                and other.joined
                and other.handle.name == entry.handle.name
                and not other.handle.resolved
                and other.handle.has_arguments(arguments)
                and not other.handle.has_arguments(getattr(other.span.span_data, "input", None))
            ):
                entry.handle, other.handle = other.handle, entry.handle
                return
        found = self.recorder.join_open(
            entry.handle.name,
            semconv.LAYER_AGENTS,
            arguments=arguments,
            conversation_id=entry.handle.conversation_id,
            recorded_by=semconv.LAYER_SDK,
            instead_of=entry.handle,
        )
        if found is not None:
            entry.handle = found

    def _arguments(self, handle: ToolCallHandle, arguments: Any) -> None:
        """The SDK sets a function span's input (with ``trace_include_sensitive_data``) after the
        span starts; put it on the call span once known, when content capture is on."""
        if not isinstance(arguments, str) or not arguments or not self.recorder.capture_content:
            return
        handle.arguments = arguments
        handle.span.set_attribute(semconv.GEN_AI_TOOL_CALL_ARGUMENTS, arguments[:_MAX_ARGUMENTS])
