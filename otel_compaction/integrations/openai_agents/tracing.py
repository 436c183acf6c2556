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

A tool that needs human approval (``needs_approval``) pauses the run: its function span ends
without the tool having run, and the run returns the approval in ``interruptions``. Its call
stays open while the approval is pending. When the run resumes after ``approve`` the tool runs
in a new function span, which takes that call again (the same tool in the same conversation,
told apart by the model's call id once the SDK looks at its approval); ``reject`` resolves the
call as an error (``error.type`` ``rejected``; the rejection's text is content), as a
human-in-the-loop rejection is (the resumed run tells the model without a function span), and
so does a function span the SDK rejects at once (``always_reject`` earlier). The SDK shows
neither the pause nor the decision to tracing processors, so the processor wraps the two places
it happens, once per process: the function-tool executor's approval step
(``_FunctionToolBatchExecutor._maybe_execute_tool_approval``, which returns the
``ToolApprovalItem`` when approval is pending) and ``RunContextWrapper.reject_tool``. The
wrappers call the SDK exactly once, return what it returned and pass its exceptions; an SDK
without that step keeps the older behaviour (the pause resolves the call as a result).

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
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from agents.tracing import FunctionSpanData, Span, Trace, TracingProcessor, get_current_trace

from otel_compaction._internal_errors import internal_errors
from otel_compaction.context import current_conversation_id
from otel_compaction.integrations import outer_call
from otel_compaction.recorder import ToolCallHandle, ToolCallRecorder
from otel_compaction.telemetry import semconv

__all__ = ["ObligationTracingProcessor", "current_group_id"]

_log = logging.getLogger(__name__)

_MAX_ARGUMENTS = 8_192
_MAX_WAITING = 10_000
_REJECTED = "rejected"
"""The ``error.type`` of a call a human rejected (the rejection's text is content)."""


def current_group_id() -> str | None:
    """The ``group_id`` of the Agents SDK trace current in this context: the conversation the
    processor files the run's tool calls under. Never raises."""
    group = None
    with internal_errors("reading the Agents SDK trace"):
        current = get_current_trace()
        group = getattr(current, "group_id", None) if current is not None else None
    return group if isinstance(group, str) and group else None


@dataclass(slots=True)
class _Run:
    """A running trace: its conversation (the ``group_id``, or the one its first joined call
    showed) and when it started (``time.monotonic_ns()``)."""

    conversation: str | None
    started_ns: int | None


@dataclass(slots=True)
class _Open:
    """An open function span: its call, whether the call is another layer's it joined, the
    token of its mark as the running tool's call, the model's call id once the SDK's approval
    step saw it, and whether that step left the call waiting for approval or rejected it."""

    span: Span[Any]
    handle: ToolCallHandle
    joined: bool
    token: outer_call.Mark | None = None
    call_id: str | None = None
    awaiting: bool = False
    rejected: bool = False


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
        self._waiting: list[_Open] = []
        """Calls whose function span ended waiting for approval, oldest first."""
        _PROCESSORS.add(self)
        _watch_approvals()

    # -- traces: remember each running trace's group id and start ------------------------------

    @internal_errors("recording an Agents SDK trace start")
    def on_trace_start(self, trace: Trace) -> None:
        """Remember the trace's ``group_id`` (the conversation of its tool calls) and start."""
        group = getattr(trace, "group_id", None)
        run = _Run(group if isinstance(group, str) and group else None, time.monotonic_ns())
        with self._lock:
            self._runs[trace.trace_id] = run

    @internal_errors("recording an Agents SDK trace end")
    def on_trace_end(self, trace: Trace) -> None:
        """Forget the trace."""
        with self._lock:
            self._runs.pop(trace.trace_id, None)

    # -- spans: function spans are tool calls --------------------------------------------------

    @internal_errors("recording an Agents SDK span start")
    def on_span_start(self, span: Span[Any]) -> None:
        """Join the SDK layer's obligation for this call, or open one; mark it running."""
        data = span.span_data
        if not self.enabled or not isinstance(data, FunctionSpanData):
            return
        run = self._run(span.trace_id)
        conversation = run.conversation or current_conversation_id()
        entry = self._resumed(span, conversation, data.name)
        if entry is None:
            entry = self._opened(span, run, conversation, data.name)
        with self._lock:
            if entry.joined and conversation is None:
                run.conversation = entry.handle.conversation_id
            self._open[span.span_id] = entry
        entry.token = outer_call.enter(functools.partial(self._running, span.span_id))

    @internal_errors("recording an Agents SDK span end")
    def on_span_end(self, span: Span[Any]) -> None:
        """Resolve the function span's obligation: error, abandoned (cancelled) or result."""
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
        if entry.awaiting and error is None:
            self._wait(entry)  # the tool did not run: the call stays open
            return
        if entry.rejected:  # a decision made before the run (``always_reject``)
            handle.error(_REJECTED, content=error.get("message") if error else None)
            return
        if error is not None:
            handle.error(error.get("message") or "tool_error", content=error.get("data"))
        elif isinstance(sys.exc_info()[1], asyncio.CancelledError):
            # The span's ``with`` block is being left by a cancellation of its task.
            handle.abandon("cancelled")
        else:
            handle.result(getattr(data, "output", None))

    def shutdown(self) -> None:
        """Abandon every call still open: its span will never end in this process."""
        with self._lock:
            leftover = [entry.handle for entry in (*self._open.values(), *self._waiting)]
            self._open.clear()
            self._runs.clear()
            self._waiting.clear()
        for handle in leftover:
            handle.abandon("shutdown")  # never raises

    def force_flush(self) -> None:
        """Nothing is buffered: every resolution is recorded when its span ends."""

    # -- approvals -----------------------------------------------------------------------------

    def _resumed(self, span: Span[Any], conversation: str | None, name: str) -> _Open | None:
        """The oldest call of tool `name` in `conversation` waiting for approval, taken by the
        function span `span` of a resumed run (`_approval_seen` corrects the guess)."""
        with self._lock:
            for index, waiting in enumerate(self._waiting):
                handle = waiting.handle
                if handle.name == name and handle.conversation_id == conversation:
                    del self._waiting[index]
                    return _Open(span, handle, waiting.joined, call_id=waiting.call_id)
        return None

    def _approval_seen(self, span_id: str, call_id: str, pending: bool, rejected: bool) -> None:
        """The SDK's approval step ran in function span `span_id` for the model's `call_id`
        (`pending` when it left the call waiting for approval, `rejected` when it rejected it).
        A span that took a waiting call of another id gives it back, for the call waiting under
        its own id or a call of its own (a second call of the tool in the run that pauses)."""
        with self._lock:
            entry = self._open.get(span_id)
            if entry is None:
                return
            if entry.call_id is not None and entry.call_id != call_id:
                guess = _Open(entry.span, entry.handle, entry.joined, call_id=entry.call_id)
                found = next((w for w in self._waiting if w.call_id == call_id), None)
                if found is not None:
                    self._waiting.remove(found)
                else:
                    found = self._opened(
                        entry.span,
                        self._runs.get(entry.span.trace_id) or _Run(None, None),
                        entry.handle.conversation_id,
                        entry.handle.name,
                    )
                entry.handle, entry.joined = found.handle, found.joined
                self._waiting.insert(0, guess)
            entry.call_id = call_id
            if not entry.joined:  # keyed by the span id: the model's id names it elsewhere
                entry.handle.model_call_id = call_id
            entry.awaiting = pending
            entry.rejected = rejected

    def _rejected(self, call_id: str, message: str | None) -> None:
        """The call `call_id` waiting for approval was rejected: it will never run."""
        with self._lock:
            found = next((w for w in self._waiting if w.call_id == call_id), None)
            if found is None:
                return
            self._waiting.remove(found)
        found.handle.error(_REJECTED, content=message)

    def _wait(self, entry: _Open) -> None:
        """Keep `entry`'s call open for the run that resumes it (bounded: the oldest is
        forgotten, still open in the ledger)."""
        with self._lock:
            self._waiting.append(entry)
            del self._waiting[:-_MAX_WAITING]

    # -- internals -----------------------------------------------------------------------------

    def _opened(self, span: Span[Any], run: _Run, conversation: str | None, name: str) -> _Open:
        """The call of function span `span`: the SDK layer's open call of tool `name` it
        joins, else one opened for it, keyed by the span id."""
        handle = self.recorder.join_open(
            name,
            semconv.LAYER_AGENTS,
            conversation_id=conversation,
            since_ns=run.started_ns,
            recorded_by=semconv.LAYER_SDK,
        )
        if handle is not None:
            return _Open(span, handle, joined=True)
        opened = self.recorder.call(
            name, span.span_id, conversation_id=conversation, layer=semconv.LAYER_AGENTS
        )
        return _Open(span, opened, joined=False)

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
        span starts: the call's arguments once known, which the side-effect ledger fingerprints
        (a repeat after a compaction is a re-issue), and on the call span when content capture
        is on."""
        if not isinstance(arguments, str) or not arguments:
            return
        if handle.arguments is None:
            handle.arguments = arguments
        if self.recorder.capture_content:
            handle.span.set_attribute(
                semconv.GEN_AI_TOOL_CALL_ARGUMENTS, arguments[:_MAX_ARGUMENTS]
            )


# -- the SDK's approval step, watched once per process ------------------------------------------

_PROCESSORS: weakref.WeakSet[ObligationTracingProcessor] = weakref.WeakSet()
_WATCHING = threading.Lock()
_watched = False


def _watch_approvals() -> None:
    """Wrap the SDK's function-tool approval step and its rejection, once (see the module)."""
    global _watched  # noqa: PLW0603 - one wrapping per process
    with _WATCHING:
        if _watched:
            return
        _watched = True
    try:
        from agents.items import ToolApprovalItem
        from agents.run_context import RunContextWrapper
        from agents.run_internal.tool_execution import _FunctionToolBatchExecutor
        from agents.tool import FunctionToolResult

        decide = _FunctionToolBatchExecutor._maybe_execute_tool_approval
        reject = RunContextWrapper.reject_tool
    except (ImportError, AttributeError):
        _log.debug("otel-compaction: the Agents SDK's approval step not found", exc_info=True)
        return

    @functools.wraps(decide)
    async def approval_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        outcome = await decide(self, *args, **kwargs)
        with internal_errors("reading an Agents SDK tool approval"):
            span, call = kwargs.get("span_fn"), kwargs.get("tool_call")
            pending = isinstance(outcome, FunctionToolResult) and isinstance(
                outcome.run_item, ToolApprovalItem
            )
            # A call rejected before it was asked about: the step marked the span failed.
            rejected = not pending and getattr(span, "error", None) is not None
            call_id = getattr(call, "call_id", None)
            if span is not None and isinstance(call_id, str):
                for processor in list(_PROCESSORS):
                    processor._approval_seen(span.span_id, call_id, pending, rejected)
        return outcome

    @functools.wraps(reject)
    def reject_tool(self: Any, approval_item: Any, *args: Any, **kwargs: Any) -> None:
        reject(self, approval_item, *args, **kwargs)
        with internal_errors("reading an Agents SDK tool rejection"):
            call_id = getattr(approval_item, "call_id", None)
            message = kwargs.get("rejection_message", args[1] if len(args) > 1 else None)
            if isinstance(call_id, str):
                for processor in list(_PROCESSORS):
                    processor._rejected(call_id, message if isinstance(message, str) else None)

    step: Callable[..., Coroutine[Any, Any, Any]] = approval_step
    _FunctionToolBatchExecutor._maybe_execute_tool_approval = step  # type: ignore[method-assign]
    RunContextWrapper.reject_tool = reject_tool  # type: ignore[method-assign]
