"""`ToolCallRecorder`: tool calls and their results as linked spans, feeding the obligation ledger.

For runtimes that are not auto-instrumented: a call opens an obligation and starts an
``execute_tool {tool}`` span that lives until the terminal resolution; the result gets its own
``tool_result {tool}`` span linked to the call span. The recorder writes the ledger directly, so
sampling can never blind it. (Spans other instrumentations make reach the ledger through
`otel_compaction.telemetry.processor.LedgerSpanProcessor`, kept recorded by
`otel_compaction.telemetry.sampler.ObligationSampler`.)

Nothing here raises into the host: every entry point keeps an internal fault (of the ledger,
a span, a metric) out of it with one guard, `internal_errors`, which logs it once and lets the
call go on; a call whose recording failed gets a handle that does nothing. A tool the recorder
runs returns its own value or raises its own exception, once.

Handles are plain objects owned by the caller; the recorder keeps open ones in a dict keyed by
(conversation, call id) guarded by a lock, so threads and asyncio tasks may resolve calls
concurrently. It holds no more than the ledger does: when a ledger bound drops an open call,
the recorder lets its handle go and ends its live span as abandoned (reason ``evicted``), so
calls that never resolve cost at most the ledger's bound. A call two instrumentation layers
record (a model SDK's wrapper and the framework above it: ``layer``) is one obligation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import itertools
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from time import monotonic_ns
from typing import Any, ParamSpec, TypeVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.util.types import Attributes

from otel_compaction._internal_errors import internal_errors
from otel_compaction.context import current_conversation_id
from otel_compaction.ledger import Obligation, ObligationKind, ObligationLedger, ResolutionStatus
from otel_compaction.reissue import SideEffectLog, SideEffectRecord
from otel_compaction.telemetry import semconv
from otel_compaction.telemetry.metrics import CompactionMetrics
from otel_compaction.telemetry.runs import agent_run
from otel_compaction.telemetry.scope import capture_content_enabled, package_tracer
from otel_compaction.transcript import ToolCall

__all__ = ["ObligationHandle", "RetryChain", "ToolCallHandle", "ToolCallRecorder"]

P = ParamSpec("P")
R = TypeVar("R")

_CLAIM_LOCK = threading.Lock()  # held for a flag flip only
_MAX_CONTENT = 8_192
_NO_LAYERS: frozenset[str] = frozenset()
_EARLY_DROPS = 1_024  # dropped records remembered until their handle is indexed (a race)

# The guards of the steps of a tool call, made once (see `ToolCallRecorder.call`).
_RECORDING_CALL = internal_errors("recording a tool call")
_STARTING_CALL_SPAN = internal_errors("starting a tool-call span")
_RECORDING_RESULT = internal_errors("recording a tool result")
_RECORDING_ERROR = internal_errors("recording a tool error")
_RECORDING_ABANDONED = internal_errors("recording an abandoned tool call")
_RESOLVING = internal_errors("resolving a tool call in the ledger")
_RESULT_SPAN = internal_errors("recording a tool result span")
_ENDING_CALL_SPAN = internal_errors("ending a tool-call span")


def _content(value: Any) -> str:
    """Content as span text: JSON where it can be, else its repr; never raises (a circular
    structure or a hostile ``__str__`` must not break the call)."""
    try:
        text = (
            value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
        )
    except Exception:
        try:
            text = repr(value)
        except Exception:
            text = f"<{type(value).__qualname__}>"
    return text if len(text) <= _MAX_CONTENT else text[:_MAX_CONTENT] + "…"


def _description(error: BaseException | str | None) -> str | None:
    return str(error) if isinstance(error, BaseException) else None


def _error_type(error: BaseException | str | None) -> str:
    if error is None:
        return semconv.ERROR_TYPE_OTHER
    if isinstance(error, BaseException):
        return type(error).__qualname__
    return error


class ObligationHandle:
    """An open obligation the caller holds: resolve it exactly once.

    Resolving twice is ignored (the first terminal resolution wins), as the ledger requires.
    """

    __slots__ = ("_done", "_recorder", "conversation_id", "id", "kind", "name", "span")

    def __init__(
        self,
        recorder: ToolCallRecorder,
        kind: ObligationKind,
        obligation_id: str,
        name: str,
        conversation_id: str | None,
        span: Span,
    ) -> None:
        self._recorder = recorder
        self._done = False
        self.kind = kind
        self.id = obligation_id
        self.name = name
        self.conversation_id = conversation_id
        self.span = span

    @property
    def resolved(self) -> bool:
        """True once the obligation is over: a terminal resolution was recorded, a ledger
        bound dropped it, or recording it failed (resolving it does nothing then)."""
        return self._done

    def _claim(self) -> bool:
        with _CLAIM_LOCK:
            if self._done:
                return False
            self._done = True
            return True


class ToolCallHandle(ObligationHandle):
    """A tool call in flight. Call exactly one of `result`, `error` or `abandon`.

    None of them raises. The first resolution wins; once the ledger's bound dropped the call
    (it is then `resolved`, abandoned as ``evicted``), or when recording it failed, they do
    nothing.
    """

    __slots__ = ("_key", "_sequence", "arguments", "layers", "model_call_id", "started_ns")

    arguments: Any
    layers: frozenset[str]
    """The instrumentation layers that recorded this call (see `ToolCallRecorder.call`)."""
    model_call_id: str | None
    """The model's id of the call when the handle's `id` is another one (an Agents SDK span
    id): the side-effect ledger keeps the call under it, as the transcript names it."""

    # Tool calls are claimed under the recorder's lock, together with leaving its index.

    def __init__(
        self,
        recorder: ToolCallRecorder,
        call_id: str,
        tool_name: str,
        conversation_id: str | None,
        span: Span,
        arguments: Any,
        layer: str | None,
        sequence: int,
    ) -> None:
        # Every slot set here, in one call: a handle is made per tool call.
        self._recorder = recorder
        self._done = False
        self.kind = "tool_call"
        self.id = call_id
        self.name = tool_name
        self.conversation_id = conversation_id
        self.span = span
        self.arguments = arguments
        self.model_call_id = None
        self.layers = _NO_LAYERS if layer is None else frozenset((layer,))
        self._key = (conversation_id or "", call_id)  # in the recorder's index
        self._sequence = sequence  # of its ledger record; -1 when it has none
        self.started_ns = monotonic_ns()
        """When the call was recorded (``time.monotonic_ns()``): another layer joins calls
        recorded since its run began."""

    def has_arguments(self, arguments: Any) -> bool:
        """Whether the call was recorded with `arguments` (JSON text and the value it encodes
        are the same arguments); False when they cannot be compared."""
        with internal_errors("comparing tool-call arguments"):
            return bool(_comparable(self.arguments) == _comparable(arguments))
        return False

    def result(self, content: Any = None) -> None:
        """The tool returned `content`."""
        try:
            self._recorder._finish_call(self, "result", content, None, "")
        except Exception as fault:
            _RECORDING_RESULT.failed(fault)

    def error(self, error: BaseException | str | None = None, content: Any = None) -> None:
        """The tool failed: `error` is the exception or an ``error.type`` string."""
        try:
            self._recorder._finish_call(self, "error", content, error, "")
        except Exception as fault:
            _RECORDING_ERROR.failed(fault)

    def abandon(self, reason: str = "") -> None:
        """The call will never get a result (cancelled, timed out, forced terminal)."""
        try:
            self._recorder._finish_call(self, "abandoned", None, None, reason)
        except Exception as fault:
            _RECORDING_ABANDONED.failed(fault)


class ToolCallRecorder:
    """Records tool calls, results, transactions and retry chains as spans and obligations.

    It never raises into the host: an internal fault is logged and the call goes on, and a
    decorated tool returns its own value or raises its own exception. The open calls it holds
    follow the ledger's bounds (`ObligationLedger`: by default 10,000 open obligations, about
    4 KB each with the live span): a call the ledger drops ends as abandoned, ``evicted``.

    Example:
        >>> from otel_compaction.ledger import ObligationLedger
        >>> recorder = ToolCallRecorder(ledger=ObligationLedger())
        >>> call = recorder.call("search", "call_1", arguments={"q": "flights"})
        >>> [o.id for o in recorder.ledger.open_obligations()]
        ['call_1']
        >>> call.result("2 flights")
        >>> recorder.ledger.open_obligations()
        ()
    """

    def __init__(
        self,
        *,
        ledger: ObligationLedger | None = None,
        tracer_provider: TracerProvider | None = None,
        metrics: CompactionMetrics | None = None,
        capture_content: bool | None = None,
        agent_name: str | None = None,
        side_effects: SideEffectLog | None = None,
    ) -> None:
        """Create a recorder.

        Args:
            ledger: the ledger to feed; a new one when None.
            tracer_provider: where spans go; the global provider when None.
            metrics: instruments to record into: they watch the ledger, so that every
                resolution records its age (a tool call's duration) once.
            capture_content: record arguments and results; from the environment when None.
            agent_name: ``gen_ai.agent.name`` on every tool-call span.
            side_effects: the side-effect ledger re-issues are judged by (the policy's
                ``side_effects`` table decides which calls count); a new one when None.
        """
        self.ledger = ledger if ledger is not None else ObligationLedger()
        self.side_effects = side_effects if side_effects is not None else SideEffectLog()
        self._metrics = metrics
        self._tracer_provider = tracer_provider
        self._tracer = package_tracer(tracer_provider)
        if metrics is not None:
            with internal_errors("watching the ledger's metrics"):
                metrics.watch(self.ledger)
        self._capture = capture_content
        self.agent_name = agent_name
        self._open: dict[tuple[str, str], list[ToolCallHandle]] = {}
        # Open calls recorded by a layer, per call id in every conversation, in open order.
        self._layered: dict[str, list[ToolCallHandle]] = {}
        # Sequences of tool-call records the ledger dropped while no handle was indexed for
        # them: a call whose record another thread's opening dropped before `call` indexed it.
        self._dropped_early: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        with internal_errors("subscribing to the ledger's bound"):
            self.ledger.subscribe(on_overflow=_weak_listener(self._dropped))

    def agent_run(
        self,
        name: str | None = None,
        *,
        conversation_id: str | None = None,
        links: Sequence[Link] = (),
    ) -> AbstractContextManager[Span]:
        """The run's ``invoke_agent`` span on this recorder's tracer provider, current for a
        ``with`` block (`otel_compaction.telemetry.runs.agent_run`): the calls recorded inside
        it are its children, one trace per run. `name` defaults to the recorder's agent name."""
        return agent_run(
            name or self.agent_name,
            conversation_id=conversation_id,
            tracer_provider=self._tracer_provider,
            links=links,
        )

    @property
    def capture_content(self) -> bool:
        """Whether arguments and results are put on spans."""
        return capture_content_enabled() if self._capture is None else self._capture

    # -- tool calls --------------------------------------------------------------------------

    def call(
        self,
        tool_name: str,
        call_id: str | None = None,
        *,
        arguments: Any = None,
        tool_type: str = "function",
        conversation_id: str | None = None,
        links: Sequence[Link] = (),
        context: Context | None = None,
        layer: str | None = None,
    ) -> ToolCallHandle:
        """The model emitted a call: open the obligation and start its ``execute_tool`` span.

        `links` go on the call span (auto-instrumentation links it to the model request that
        emitted it); `context` is its parent context (the current one when None).

        `layer` names the instrumentation recording the call (``"sdk"``, ``"langchain"``, ...)
        when several may see the same one: a model SDK's wrapper and the agent framework
        calling it. A call whose id is already open, in any conversation, from another layer
        (one that has not joined it yet) is that call: its handle is returned and no second
        obligation opens; the first layer's conversation, span and ledger record stay, and the
        first resolution from either layer wins. Within one layer, or without a layer, a
        reused id opens a new obligation as before.

        Never raises: when the ledger cannot record the call, the handle returned does nothing.
        """
        # Each step guarded by its own ``try`` (free while nothing fails): this runs per call.
        try:
            if call_id and layer is not None:
                joined = self._join(call_id, layer)
                if joined is not None:
                    return joined
            conversation = conversation_id or current_conversation_id()
            call_id = call_id or f"call_{next(self._ids)}"
            # The ledger first: whatever happens to telemetry, the obligation is known.
            record = self.ledger.open(conversation, "tool_call", call_id, name=tool_name)
            attributes: dict[str, Any] = {
                semconv.GEN_AI_OPERATION_NAME: semconv.EXECUTE_TOOL,
                semconv.GEN_AI_TOOL_NAME: tool_name,
                semconv.GEN_AI_TOOL_CALL_ID: call_id,
                semconv.GEN_AI_TOOL_TYPE: tool_type,
            }
            if conversation:
                attributes[semconv.GEN_AI_CONVERSATION_ID] = conversation
            if self.agent_name:
                attributes[semconv.GEN_AI_AGENT_NAME] = self.agent_name
            if arguments is not None and self.capture_content:
                attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = _content(arguments)
            try:
                # The span starts when the obligation opened: its duration is the age the
                # metrics record.
                span = self._tracer.start_span(
                    f"{semconv.EXECUTE_TOOL} {tool_name}",
                    context,
                    attributes=attributes,
                    links=links,
                    start_time=record.opened_at_ns,
                )
            except Exception as fault:
                _STARTING_CALL_SPAN.failed(fault)
                span = trace.INVALID_SPAN
            if arguments is not None:
                with internal_errors("judging a re-issue"):
                    self._reissue(span, conversation, call_id, tool_name, arguments)
            sequence = record.sequence
            handle = ToolCallHandle(
                self, call_id, tool_name, conversation, span, arguments, layer, sequence
            )
            key = handle._key
            lock = self._lock
            lock.acquire()  # not ``with``: half the cost, twice per call
            try:
                dropped = bool(self._dropped_early) and sequence in self._dropped_early
                if dropped:
                    del self._dropped_early[sequence]
                    handle._done = True
                else:
                    index = self._open
                    if key in index:
                        index[key].append(handle)
                    else:
                        index[key] = [handle]
                    if layer is not None:
                        self._layered.setdefault(call_id, []).append(handle)
            finally:
                lock.release()
            if dropped:
                _end_call_span(span, "abandoned", None, None, semconv.ABANDON_REASON_EVICTED)
            return handle
        except Exception as fault:  # recording it failed: a handle that is over
            _RECORDING_CALL.failed(fault)
        handle = ToolCallHandle(
            self, call_id or "", tool_name, conversation_id, trace.INVALID_SPAN, None, None, -1
        )
        handle._done = True
        return handle

    def compacted(self, conversation_id: str | None, call_ids: Iterable[str]) -> None:
        """A compaction removed the calls `call_ids` of the conversation from context: a later
        call repeating one of their side effects is a re-issue (`compaction.reissue`)."""
        with internal_errors("noting a compaction's side effects"):
            self.side_effects.compacted(conversation_id or "", call_ids)

    def compacted_except(self, conversation_id: str | None, kept: Iterable[str]) -> None:
        """A compaction replaced the conversation's whole history: every call recorded so far
        is out of context except the calls `kept` (those the compacted history still shows)."""
        with internal_errors("noting a compaction's side effects"):
            self.side_effects.compacted_except(conversation_id or "", kept)

    def reissue_of(
        self, tool_name: str, arguments: Any, *, conversation_id: str | None = None
    ) -> SideEffectRecord | None:
        """The compacted-away side effect that a call of `tool_name` with `arguments` would
        repeat, judged as ``compaction.reissue`` is (`otel_compaction.reissue.repeat_of`), or
        None: for an approval point to ask before the call runs. The conversation is the
        current `conversation` scope when None. Never raises (None on an internal fault).

        Example:
            >>> recorder = ToolCallRecorder()
            >>> push = {"command": "git push origin main"}
            >>> recorder.call("Bash", "c1", arguments=push, conversation_id="s").result("ok")
            >>> recorder.compacted("s", ["c1"])
            >>> recorder.reissue_of("Bash", push, conversation_id="s").call_id
            'c1'
        """
        with internal_errors("judging a re-issue"):
            conversation = conversation_id or current_conversation_id() or ""
            return self.side_effects.repeat(conversation, _as_call("", tool_name, arguments))
        return None

    def _reissue(
        self, span: Span, conversation: str | None, call_id: str, tool: str, arguments: Any
    ) -> None:
        """The span event and the counter when the call repeats a compacted-away side effect."""
        original = self.side_effects.repeat(conversation or "", _as_call(call_id, tool, arguments))
        if original is None:
            return
        span.add_event(
            semconv.EVENT_REISSUE,
            {
                semconv.GEN_AI_TOOL_CALL_ID: call_id,
                semconv.GEN_AI_TOOL_NAME: tool,
                semconv.REISSUE_OF: original.call_id,
                semconv.REISSUE_OUTCOME: original.outcome,
                semconv.REISSUE_KIND: original.kind,
            },
        )
        if self._metrics is not None:
            self._metrics.reissued_calls.add(
                1, {semconv.GEN_AI_TOOL_NAME: tool, semconv.REISSUE_KIND: original.kind}
            )

    def _take(self, handle: ToolCallHandle) -> bool:
        """Take `handle` out of the index for its terminal resolution; False when it already
        has one (the first wins)."""
        self._lock.acquire()
        try:
            if handle._done:
                return False
            handle._done = True
            waiting = self._open.get(handle._key)
            if waiting is not None:
                if len(waiting) == 1:
                    if waiting[0] is handle:
                        del self._open[handle._key]
                elif waiting[0] is handle:
                    del waiting[0]
                elif handle in waiting:
                    waiting.remove(handle)
            if handle.layers:
                self._unindex(handle)
        finally:
            self._lock.release()
        return True

    def _completed(self, handle: ToolCallHandle, status: ResolutionStatus, content: Any) -> None:
        """Keep a call that came back in the side-effect ledger (when it has side effects)."""
        with internal_errors("recording a side effect"):
            self.side_effects.completed(
                handle.conversation_id or "",
                _as_call(handle.model_call_id or handle.id, handle.name, handle.arguments),
                "success" if status == "result" else "failure",
                "" if content is None else _content(content),
            )

    def _dropped(self, record: Obligation) -> None:
        """The ledger's bound dropped `record`: let its call go and end its span, abandoned as
        evicted (the ledger's listener; its overflow counter counts the record)."""
        if record.kind != "tool_call":
            return  # transactions and retry chains are held by their callers only
        key = (record.conversation_id, record.id)
        with self._lock:
            waiting = self._open.get(key)
            if not waiting:
                early = self._dropped_early
                early[record.sequence] = None
                if len(early) > _EARLY_DROPS:
                    early.popitem(last=False)  # a record some other writer of the ledger opened
                return
            # Its own handle; else the earliest of the id, as the ledger pairs resolutions.
            handle = next((h for h in waiting if h._sequence == record.sequence), waiting[0])
            waiting.remove(handle)
            if not waiting:
                del self._open[key]
            handle._done = True
            if handle.layers:
                self._unindex(handle)
        _end_call_span(handle.span, "abandoned", None, None, semconv.ABANDON_REASON_EVICTED)

    def _join(self, call_id: str, layer: str) -> ToolCallHandle | None:
        """The earliest open call of `call_id` that another layer recorded and `layer` has not
        joined yet, now joined by `layer`; None when there is none."""
        with self._lock:
            for handle in self._layered.get(call_id, ()):
                if not handle._done and layer not in handle.layers:
                    handle.layers = handle.layers | {layer}
                    return handle
        return None

    def join_open(
        self,
        tool_name: str,
        layer: str,
        *,
        arguments: Any = None,
        conversation_id: str | None = None,
        since_ns: int | None = None,
        recorded_by: str | None = None,
        instead_of: ToolCallHandle | None = None,
    ) -> ToolCallHandle | None:
        """Join an open call of `tool_name` that another layer recorded, for a layer that sees
        the call without its id (the Agents SDK's function spans); None when there is none.

        Candidates are open, recorded by a layer (`recorded_by` when given), not joined by
        `layer` yet, in `conversation_id` (any when None) and opened at or after `since_ns`
        (``time.monotonic_ns()``; any when None). Among them the earliest whose arguments equal
        `arguments` (JSON text and the object it encodes are equal) is joined, else the
        earliest. `instead_of` is a call `layer` joined by a guess that its arguments now
        contradict: it is left for the call that is really it, unless no candidate matches
        `arguments` better, and it is returned then.
        """
        with internal_errors("joining an open tool call"):
            return self._join_open(
                tool_name, layer, arguments, conversation_id, since_ns, recorded_by, instead_of
            )
        return None

    def _join_open(
        self,
        tool_name: str,
        layer: str,
        arguments: Any,
        conversation_id: str | None,
        since_ns: int | None,
        recorded_by: str | None,
        instead_of: ToolCallHandle | None,
    ) -> ToolCallHandle | None:
        with self._lock:
            candidates = [
                handle
                for handles in self._layered.values()
                for handle in handles
                if handle.name == tool_name
                and not handle._done
                and (layer not in handle.layers or handle is instead_of)
                and (recorded_by is None or recorded_by in handle.layers)
                and (conversation_id is None or handle.conversation_id == conversation_id)
                and (since_ns is None or handle.started_ns >= since_ns)
            ]
            candidates.sort(key=lambda handle: handle.started_ns)
            matching = [
                h for h in candidates if arguments is not None and h.has_arguments(arguments)
            ]
            if matching:
                chosen = matching[0]
            elif instead_of is not None and instead_of in candidates:
                chosen = instead_of
            elif candidates and instead_of is None:
                chosen = candidates[0]
            else:
                return None
            if instead_of is not None and chosen is not instead_of:
                instead_of.layers = instead_of.layers - {layer}
            chosen.layers = chosen.layers | {layer}
            return chosen

    def join(self, handle: ToolCallHandle, layer: str) -> bool:
        """`layer` records `handle` too (a call it makes inside another layer's call, such as an
        MCP request inside a framework's tool): False, and nothing changes, once it is resolved
        (or when another recorder holds it)."""
        with internal_errors("joining a tool call"), self._lock:
            if handle._done or handle._recorder is not self:
                return False
            handle.layers = handle.layers | {layer}
            return True
        return False

    def _unindex(self, handle: ToolCallHandle) -> None:
        """Take a resolved handle that a layer recorded out of the layered index (lock held)."""
        layered = self._layered.get(handle.id)
        if layered is not None:
            with contextlib.suppress(ValueError):
                layered.remove(handle)
            if not layered:
                del self._layered[handle.id]

    def resolve(
        self,
        call_id: str,
        content: Any = None,
        *,
        error: BaseException | str | None = None,
        status: ResolutionStatus | None = None,
        conversation_id: str | None = None,
    ) -> bool:
        """Resolve the earliest open call with this id (for runtimes that only keep ids).

        Returns False when no such call is open (or finding it failed: that is logged).
        """
        with internal_errors("resolving a tool call"):
            return self._resolve(call_id, content, error, status, conversation_id)
        return False

    def _resolve(
        self,
        call_id: str,
        content: Any,
        error: BaseException | str | None,
        status: ResolutionStatus | None,
        conversation_id: str | None,
    ) -> bool:
        conversation = conversation_id or current_conversation_id()
        key = (conversation or "", call_id)
        handle: ToolCallHandle | None = None
        with self._lock:
            # Take and claim the earliest handle in one step: two threads resolving the same
            # id must get two different calls, and a handle being resolved directly by its
            # owner right now is skipped (its owner removes it).
            waiting = self._open.get(key)
            while waiting:
                candidate = waiting.pop(0)
                if not candidate._done:
                    candidate._done = True
                    handle = candidate
                    if candidate.layers:
                        self._unindex(candidate)
                    break
            if waiting is not None and not waiting:
                del self._open[key]
        if handle is None:
            return False
        if status == "abandoned":
            self._finish_call(handle, "abandoned", None, None, str(content or ""), True)
        elif error is not None or status == "error":
            self._finish_call(handle, "error", content, error, "", True)
        else:
            self._finish_call(handle, "result", content, None, "", True)
        return True

    @contextmanager
    def tool_call(
        self,
        tool_name: str,
        call_id: str | None = None,
        *,
        arguments: Any = None,
        conversation_id: str | None = None,
    ) -> Iterator[ToolCallHandle]:
        """Run a tool inside ``with``: an exception is its error, a normal exit without an
        explicit resolution is a result with no content. The body's exception passes
        unchanged; the recording never raises one of its own."""
        handle = self.call(tool_name, call_id, arguments=arguments, conversation_id=conversation_id)
        try:
            yield handle
        except BaseException as exc:
            _failed(handle, exc)
            raise
        handle.result()

    def tool(self, name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorate a tool function (sync or async): each invocation is a recorded call whose
        return value is the result and whose exception is the error.

        The function runs exactly once per invocation, and the invocation returns its value or
        raises its exception, unchanged, whatever happens to the recording."""

        def decorate(function: Callable[P, R]) -> Callable[P, R]:
            tool_name = name or function.__name__
            signature = _signature(function)
            if inspect.iscoroutinefunction(function):

                @functools.wraps(function)
                async def run_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                    handle = self.call(tool_name, arguments=_bound(signature, args, kwargs))
                    try:
                        value = await function(*args, **kwargs)
                    except BaseException as exc:
                        _failed(handle, exc)
                        raise
                    handle.result(value)
                    return value

                return run_async  # type: ignore[return-value]

            @functools.wraps(function)
            def run(*args: P.args, **kwargs: P.kwargs) -> R:
                handle = self.call(tool_name, arguments=_bound(signature, args, kwargs))
                try:
                    value = function(*args, **kwargs)
                except BaseException as exc:
                    _failed(handle, exc)
                    raise
                handle.result(value)
                return value

            return run

        return decorate

    # -- transactions and retry chains -------------------------------------------------------

    @contextmanager
    def transaction(
        self, name: str, transaction_id: str | None = None, *, conversation_id: str | None = None
    ) -> Iterator[ObligationHandle]:
        """A transaction is an obligation from begin to commit (normal exit) or rollback
        (an exception, recorded as its error). The body's exception passes unchanged; the
        recording never raises one of its own."""
        handle = ObligationHandle(
            self,
            "transaction",
            transaction_id or f"txn_{next(self._ids)}",
            name,
            conversation_id or current_conversation_id(),
            trace.INVALID_SPAN,
        )
        self._begin(handle, semconv.TRANSACTION_SPAN)
        try:
            yield handle
        except BaseException as exc:
            self._finish_obligation(handle, "error", error=exc)
            raise
        self._finish_obligation(handle, "result")

    def retry_chain(
        self, name: str, chain_id: str | None = None, *, conversation_id: str | None = None
    ) -> RetryChain:
        """Open a retry chain: an obligation that stays open while attempts fail and closes
        on the first success (or when abandoned). Never raises."""
        chain = RetryChain(
            self,
            chain_id or f"retry_{next(self._ids)}",
            name,
            conversation_id or current_conversation_id(),
            trace.INVALID_SPAN,
        )
        self._begin(chain, semconv.RETRY_SPAN)
        return chain

    # -- internals ---------------------------------------------------------------------------

    def _begin(self, handle: ObligationHandle, span_name: str) -> None:
        """Open `handle`'s obligation and start its span; when the ledger cannot record it
        the handle is done already, so that resolving it does nothing."""
        with internal_errors("opening an obligation"):
            self.ledger.open(handle.conversation_id, handle.kind, handle.id, name=handle.name)
            handle.span = self._start_span(
                f"{span_name} {handle.name}",
                {
                    semconv.OBLIGATION_KIND: handle.kind,
                    semconv.OBLIGATION_ID: handle.id,
                    **_conversation_attrs(handle.conversation_id),
                },
            )
            return
        handle._done = True

    def _start_span(self, name: str, attributes: Attributes) -> Span:
        with internal_errors("starting a span"):
            return self._tracer.start_span(name, kind=SpanKind.INTERNAL, attributes=attributes)
        return trace.INVALID_SPAN

    def _finish_call(
        self,
        handle: ToolCallHandle,
        status: ResolutionStatus,
        content: Any,
        error: BaseException | str | None,
        reason: str,
        claimed: bool = False,
    ) -> None:
        """Record the terminal resolution of `handle`, unless it already has one (the first
        wins). `claimed`: `resolve` already claimed it and took it out of the index."""
        if not claimed and not self._take(handle):
            return
        error_type = _error_type(error) if status == "error" else None
        if status in ("result", "error") and handle.arguments is not None:
            self._completed(handle, status, content)
        # The ledger first (its listeners record the call's age, which is its duration), then
        # the spans, each on its own: a failing ledger or result span must not leave the call
        # span open. Both spans take the resolution's time from the ledger's record.
        at: int | None = None
        try:
            record = self.ledger.resolve(
                handle.conversation_id, handle.id, status, error_type=error_type
            )
            if record is not None:
                at = record.resolved_at_ns
        except Exception as fault:
            _RESOLVING.failed(fault)
        # An exception's message is content: without capture the spans say only its type.
        capture = self._capture
        if capture is None and (content is not None or error is not None):
            capture = capture_content_enabled()
        shown = error if error is not None and capture else None
        try:
            # Not ``gen_ai.operation.name``: the call span is the tool execution, and a backend
            # counting executions by that attribute would count each call twice.
            attributes: dict[str, Any] = {
                semconv.GEN_AI_TOOL_NAME: handle.name,
                semconv.GEN_AI_TOOL_CALL_ID: handle.id,
                semconv.OBLIGATION_STATUS: status,
            }
            if handle.conversation_id:
                attributes[semconv.GEN_AI_CONVERSATION_ID] = handle.conversation_id
            if error_type is not None:
                attributes[semconv.ERROR_TYPE] = error_type
            if status == "abandoned" and reason:
                attributes[semconv.ABANDON_REASON] = reason
            if content is not None and capture:
                attributes[semconv.GEN_AI_TOOL_CALL_RESULT] = _content(content)
            link = Link(handle.span.get_span_context(), {semconv.GEN_AI_TOOL_CALL_ID: handle.id})
            result_span = self._tracer.start_span(
                f"{semconv.TOOL_RESULT_SPAN} {handle.name}",
                attributes=attributes,
                links=(link,),
                start_time=at,
            )
            if error_type is not None:
                result_span.set_status(Status(StatusCode.ERROR, _description(shown)))
            result_span.end(at)  # the moment the result arrived, within the call span
        except Exception as fault:
            _RESULT_SPAN.failed(fault)
        _end_call_span(handle.span, status, shown, error_type, reason, at)

    def _finish_obligation(
        self,
        handle: ObligationHandle,
        status: ResolutionStatus,
        *,
        error: BaseException | str | None = None,
        reason: str = "",
        attributes: Mapping[str, int] | None = None,
    ) -> None:
        """Record the terminal resolution of `handle`, unless it already has one (the first
        wins); the ledger and the span each on its own."""
        if not handle._claim():
            return
        error_type = _error_type(error) if status == "error" else None
        with internal_errors("resolving an obligation in the ledger"):
            self.ledger.resolve(
                handle.conversation_id, handle.id, status, kind=handle.kind, error_type=error_type
            )
        with internal_errors("ending an obligation span"):
            self._end_obligation_span(handle.span, status, error, reason, attributes or {})

    def _end_obligation_span(
        self,
        span: Span,
        status: ResolutionStatus,
        error: BaseException | str | None,
        reason: str,
        attributes: Mapping[str, int],
    ) -> None:
        for name, value in attributes.items():
            span.set_attribute(name, value)
        span.set_attribute(semconv.OBLIGATION_STATUS, status)
        if status == "error":
            span.set_attribute(semconv.ERROR_TYPE, _error_type(error))
            shown = error if self.capture_content else None  # a message is content
            span.set_status(Status(StatusCode.ERROR, _description(shown)))
        elif status == "abandoned":
            span.add_event(semconv.EVENT_ABANDONED, {semconv.ABANDON_REASON: reason})
        span.end()


class RetryChain(ObligationHandle):
    """A retry chain: `attempt_failed` per failure, then `succeeded` or `abandon`."""

    __slots__ = ("attempts",)

    def __init__(
        self,
        recorder: ToolCallRecorder,
        chain_id: str,
        name: str,
        conversation_id: str | None,
        span: Span,
    ) -> None:
        super().__init__(recorder, "retry", chain_id, name, conversation_id, span)
        self.attempts = 0

    def attempt_failed(self, error: BaseException | str | None = None) -> None:
        """One more failed attempt; the chain stays open (its retry counter is above zero)."""
        self.attempts += 1
        with internal_errors("recording a retry attempt"):
            self.span.add_event(
                semconv.EVENT_RETRY_ATTEMPT,
                {semconv.RETRY_ATTEMPT: self.attempts, semconv.ERROR_TYPE: _error_type(error)},
            )

    def succeeded(self) -> None:
        """The chain closed: the last attempt succeeded."""
        with internal_errors("recording a retry chain's success"):
            self._recorder._finish_obligation(
                self, "result", attributes={semconv.RETRY_ATTEMPT: self.attempts + 1}
            )

    def abandon(self, reason: str = "") -> None:
        """Give up on the chain; recorded as abandoned, not as a crash."""
        with internal_errors("recording an abandoned retry chain"):
            self._recorder._finish_obligation(self, "abandoned", reason=reason)


def _end_call_span(
    call_span: Span,
    status: ResolutionStatus,
    error: BaseException | str | None,
    error_type: str | None,
    reason: str,
    end_time: int | None = None,
) -> None:
    try:
        call_span.set_attribute(semconv.OBLIGATION_STATUS, status)
        if error_type is not None:
            call_span.set_attribute(semconv.ERROR_TYPE, error_type)
            call_span.set_status(Status(StatusCode.ERROR, _description(error)))
        elif status == "abandoned":
            call_span.add_event(semconv.EVENT_ABANDONED, {semconv.ABANDON_REASON: reason})
        call_span.end(end_time)
    except Exception as fault:
        _ENDING_CALL_SPAN.failed(fault)


def _weak_listener(method: Callable[[Obligation], None]) -> Callable[[Obligation], None]:
    """A ledger listener calling the bound `method` while its object lives: a recorder made
    for a while on a long-lived ledger is not kept alive by it."""
    reference = weakref.WeakMethod(method)

    def listener(record: Obligation) -> None:
        alive = reference()
        if alive is not None:
            alive(record)

    return listener


def _conversation_attrs(conversation: str | None) -> dict[str, str]:
    return {semconv.GEN_AI_CONVERSATION_ID: conversation} if conversation else {}


def _as_call(call_id: str, tool: str, arguments: Any) -> ToolCall:
    """A recorded call as the side-effect table reads it."""
    text = arguments if isinstance(arguments, str) else _content(arguments)
    return ToolCall(call_id, tool, 0, text, 0)


def _comparable(arguments: Any) -> Any:
    """Arguments as compared across layers: JSON text as the value it encodes."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _failed(handle: ToolCallHandle, exc: BaseException) -> None:
    """A tool raised: a cancellation means the call will never get a result (abandoned);
    anything else is its error."""
    if isinstance(exc, asyncio.CancelledError):
        handle.abandon("cancelled")
    else:
        handle.error(exc)


def _signature(function: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        return None


def _bound(
    signature: inspect.Signature | None, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Any:
    if signature is not None:
        # Arguments the signature does not take are the tool's error to raise, not a fault.
        with internal_errors("binding a tool's arguments"), contextlib.suppress(TypeError):
            return dict(signature.bind_partial(*args, **kwargs).arguments)
    return {"args": list(args), **kwargs}
