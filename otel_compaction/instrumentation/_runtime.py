"""What every instrumented library shares: one model request at a time becomes an `Exchange`.

An exchange works out the conversation, resolves the open calls whose results the request
carries (their ``tool_result`` spans are children of the request span and link to the call
spans) and reports what compaction lost (severed calls, orphaned results). When the response is
complete it opens one obligation per emitted tool call through the recorder (an
``execute_tool`` span, parented like the request and linked to it) and reports duplicates.

The request span is the inference span another GenAI instrumentation made around the SDK call
when there is one (`_inference.inference_span`: opentelemetry-instrumentation-openai-v2's
``chat`` span, OpenLLMetry's ``openai.chat`` and ``anthropic.chat``): the exchange adds its
attributes and events to it and leaves the rest (its name, its ``gen_ai.*`` request and
response attributes, its status, its end) to its owner. Otherwise the
exchange starts its own ``compaction.model_request`` span, which ends with ``error.type`` when
the request failed, and which claims ``gen_ai.operation.name`` ``chat`` (set when it ends) only
when no other instrumentation's inference span started inside it (OpenInference's, which wraps
the HTTP request beneath the SDK method): one ``chat``-like span per request either way. The
first request after a compaction of its conversation, one a `GuardedCompactor` applied in this
process (`otel_compaction.telemetry.compactions`) or one detection saw (the transcript shrank), has
``gen_ai.conversation.compacted`` ``true`` on its request span.

Guarantees: nothing here raises into the host (an internal error is logged; the request goes on
with a no-op exchange); an exchange finishes once; every piece of shared state (the ledger, the
conversation index, the detection states, the open handles) is behind a lock held only for
dictionary work, so threads and asyncio tasks may make requests concurrently.
`Runtime.shutdown` abandons the calls this instrumentation opened that are still open, so their
spans end and are exported.

A request costs what its conversation appended: the conversion to plain dicts
(`MessageCache`), the parse (`TranscriptCache`) and the detection index
(`detection.TranscriptIndex`) are kept per conversation, within the ledger's bounds, and read
a request whole only when it is not an append to the previous one; even then (a sliding
window, a truncation) the parse keeps the reading of each message it saw before.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanKind, Status, StatusCode
from pydantic import BaseModel

from otel_compaction._internal_errors import internal_errors
from otel_compaction.incremental import TranscriptCache
from otel_compaction.instrumentation._inference import (
    inference_follows,
    inference_span,
    watch,
    watching,
)
from otel_compaction.instrumentation._requests import (
    MessageCache,
    ModelRequest,
    ModelResponse,
    parse_transcript,
)
from otel_compaction.instrumentation._settings import Settings
from otel_compaction.instrumentation._streams import (
    AsyncTracedStream,
    StreamObserver,
    TracedStream,
)
from otel_compaction.instrumentation.conversation import ConversationIndex, Identity
from otel_compaction.instrumentation.detection import (
    ConversationState,
    Duplicate,
    Orphan,
    Resolution,
    Severed,
    check_request,
    check_response,
)
from otel_compaction.recorder import ToolCallHandle
from otel_compaction.telemetry import compactions, semconv
from otel_compaction.telemetry.configuration import Telemetry
from otel_compaction.telemetry.scope import package_tracer
from otel_compaction.transcript import Transcript

__all__ = ["Exchange", "Runtime"]

_log = logging.getLogger(__name__)

_MAX_STATES = 10_000
_PRUNE_AT = 10_000


class Exchange:
    """A request whose telemetry could not be started: every method does nothing."""

    def activated(self) -> contextlib.AbstractContextManager[Any]:
        """Make the request span current around the SDK call."""
        return contextlib.nullcontext()

    def respond(self, response: ModelResponse | None) -> None:
        """The response is complete (or not readable: None)."""

    def fail(self, error: BaseException) -> None:
        """The request (or its stream) raised `error`."""

    def complete(
        self,
        result: Any,
        extract: Callable[[Any], ModelResponse | None],
        observer: Callable[[], StreamObserver],
        *,
        is_async: bool,
    ) -> Any:
        """Finish with the SDK's `result`: read it, or wrap it when it is a stream."""
        return result


class _Exchange(Exchange):
    """One model request and its response, recorded on `span`: this package's own when
    `owned`, else another instrumentation's inference span. `parent` is the context the
    request's tool-call spans start in."""

    def __init__(
        self,
        runtime: Runtime,
        request: ModelRequest,
        identity: Identity,
        span: Span,
        parent: Context,
        *,
        owned: bool,
    ) -> None:
        self.runtime = runtime
        self.request = request
        self.identity = identity
        self.span = span
        self.parent = parent
        self.owned = owned
        self._beside_inference = False
        self._done = False
        self._lock = threading.Lock()

    def activated(self) -> contextlib.AbstractContextManager[Any]:
        if not self.owned:
            return contextlib.nullcontext()  # its owner decides what is current
        return _attached(watching(self, trace.set_span_in_context(self.span)))

    def compacted(self) -> None:
        """The conversation was compacted since its previous request: this request's inference
        span says so (``gen_ai.conversation.compacted``, only ever ``true``)."""
        self.span.set_attribute(semconv.GEN_AI_CONVERSATION_COMPACTED, True)

    def inference_started(self) -> None:
        """Another instrumentation's inference span started inside this request: it is the
        ``chat`` span, and this exchange's own span does not claim to be one."""
        self._beside_inference = True

    def _claim(self) -> bool:
        with self._lock:
            if self._done:
                return False
            self._done = True
            return True

    def check(self, transcript: Transcript) -> None:
        """Resolve what the request answers; report what it lost."""
        runtime = self.runtime
        conversation = self.identity.id
        detect = runtime.settings.detection and self.request.full_history
        open_obligations = runtime.ledger.open_obligations(conversation)
        with runtime.states_lock:
            findings = check_request(
                transcript, open_obligations, runtime.state(conversation), full_history=detect
            )
        if findings.resolutions:
            token = otel_context.attach(trace.set_span_in_context(self.span))
            try:
                resolved = sum(runtime.resolve(conversation, r) for r in findings.resolutions)
            finally:
                otel_context.detach(token)
            self.span.set_attribute(semconv.REQUEST_RESOLVED, resolved)
        if findings.compacted:
            self.compacted()
        for severed in findings.severed:
            runtime.report_severed(self.span, conversation, severed)
        for orphan in findings.orphans:
            runtime.report_orphan(self.span, orphan)

    def respond(self, response: ModelResponse | None) -> None:
        if not self._claim():
            return
        # The response's attributes go onto the span with the request's last one: one call
        # into the span (and its lock) instead of three.
        attributes: dict[str, Any] = {}
        with internal_errors("recording a model response"):
            if response is not None:
                self._opened(response, attributes)
        self._end(attributes)

    def _end(self, attributes: dict[str, Any] | None = None) -> None:
        with internal_errors("ending a model request span"):
            if not self.owned:
                if attributes:
                    self.span.set_attributes(attributes)
                return  # its owner ends it
            if not self._beside_inference:
                if attributes is None:
                    attributes = {}
                attributes[semconv.GEN_AI_OPERATION_NAME] = semconv.CHAT
            if attributes:
                self.span.set_attributes(attributes)
            self.span.end()

    def _opened(self, response: ModelResponse, attributes: dict[str, Any]) -> None:
        """Open the response's calls; the request span's attributes about the response go
        into `attributes` (`_end` sets them)."""
        runtime = self.runtime
        conversation = self.identity.id
        if response.response_id and self.owned:
            attributes[semconv.GEN_AI_RESPONSE_ID] = response.response_id
        attributes[semconv.RESPONSE_TOOL_CALLS] = len(response.calls)
        request_context = self.span.get_span_context()
        for call in response.calls:
            link = Link(request_context, {semconv.GEN_AI_TOOL_CALL_ID: call.id})
            handle = runtime.recorder.call(
                call.name,
                call.id,
                arguments=call.arguments,
                conversation_id=conversation,
                links=(link,),
                context=self.parent,
                layer=semconv.LAYER_SDK,
            )
            # A framework that recorded the call first keeps it (and its conversation): it
            # resolves it; this conversation's checks do not see it owed.
            if handle.conversation_id == conversation:
                runtime.track(conversation, handle)
        runtime.conversations.remember(
            conversation, (call.id for call in response.calls), response.response_id
        )
        if response.calls and runtime.settings.detection:
            with runtime.states_lock:
                duplicates = check_response(response.calls, runtime.state(conversation))
            for duplicate in duplicates:
                runtime.report_duplicate(self.span, duplicate)

    def fail(self, error: BaseException) -> None:
        if not self._claim() or not self.owned:
            return  # another instrumentation's span: its owner records the failure
        # The SDK's exception is what the application must see, whatever happens here.
        with internal_errors("recording a failed model request"):
            self.span.set_attribute(semconv.ERROR_TYPE, type(error).__qualname__)
            # The SDK's message may quote the request: content, kept only with capture on.
            shown = str(error) if self.runtime.recorder.capture_content else ""
            self.span.set_status(Status(StatusCode.ERROR, shown or None))
        self._end()

    def complete(
        self,
        result: Any,
        extract: Callable[[Any], ModelResponse | None],
        observer: Callable[[], StreamObserver],
        *,
        is_async: bool,
    ) -> Any:
        try:
            if _is_raw(result):  # with_raw_response / with_streaming_response: not read here
                self.respond(None)
                return result
            if self.request.stream:
                if is_async and hasattr(result, "__aiter__"):
                    return AsyncTracedStream(result, observer(), self)
                if not is_async and hasattr(result, "__iter__"):
                    return TracedStream(result, observer(), self)
                self.respond(None)
                return result
            self.respond(extract(result))
        except Exception:
            _log.exception("otel-compaction: reading a model response failed")
            self.respond(None)
        return result


def _is_raw(result: Any) -> bool:
    """True for the SDKs' raw HTTP response wrappers (their body is the caller's to read). A
    response model answers at once: asking a pydantic model for an attribute it lacks raises
    and catches an error inside pydantic (about 4 us, more than reading its tool calls)."""
    if isinstance(result, BaseModel):
        return False
    return hasattr(result, "http_response")


class _attached:  # lower case, as the generator-based context manager it replaces
    """`context` current inside the block (a class: cheaper than a generator per request)."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: Context) -> None:
        self._context = context

    def __enter__(self) -> None:
        self._token = otel_context.attach(self._context)

    def __exit__(self, *_: object) -> None:
        otel_context.detach(self._token)


def _beside(span: Span, context: Context) -> Context:
    """`context` with the parent of `span` current in place of `span`: where the spans of the
    tool calls a request emits start, beside its inference span (a root without a parent)."""
    parent = getattr(span, "parent", None)
    return trace.set_span_in_context(
        NonRecordingSpan(parent) if parent is not None else trace.INVALID_SPAN, context
    )


class Runtime:
    """The instrumentation's shared state: telemetry, conversations, detection state, and the
    tool-call handles it opened."""

    def __init__(self, telemetry: Telemetry, settings: Settings) -> None:
        """Record into `telemetry` as `settings` say."""
        self.telemetry = telemetry
        self.settings = settings
        self.recorder = telemetry.recorder
        self.ledger = telemetry.ledger
        self.metrics = telemetry.metrics
        self.tracer = package_tracer(telemetry.tracer_provider)
        watch(telemetry.tracer_provider)
        self.active = True
        self.conversations = ConversationIndex()
        self.messages = MessageCache(self.ledger.max_conversations)
        """Each conversation's messages as plain dicts, kept between its requests."""
        self.transcripts = TranscriptCache(self.ledger.max_conversations)
        """Each conversation's parse, kept between its requests."""
        self._states: OrderedDict[str, ConversationState] = OrderedDict()
        self.states_lock = threading.Lock()
        self._handles: dict[tuple[str, str], list[ToolCallHandle]] = {}
        self._handles_lock = threading.Lock()

    # -- exchanges ---------------------------------------------------------------------------

    def begin(self, read: Callable[[], ModelRequest]) -> Exchange:
        """Start recording the request `read()` describes; a no-op exchange on any failure."""
        with internal_errors("recording a model request"):
            return self._begin(read())
        return Exchange()

    def _begin(self, request: ModelRequest) -> Exchange:
        plain = self.messages.read(request.messages, request.instructions)
        transcript = None
        if plain is not None:
            transcript = parse_transcript(plain.messages, self.transcripts, key=plain.key)
        identity = self.conversations.identify(
            None if plain is None else plain.messages,
            transcript,
            provider_conversation=request.provider_conversation,
            previous_response_id=request.previous_response_id,
            texts=("", "") if plain is None else plain.texts,
        )
        bookkeeping: dict[str, Any] = {
            semconv.CONVERSATION_SOURCE: identity.source,
            semconv.REQUEST_API: request.api,
            semconv.REQUEST_STREAM: request.stream,
        }
        parent = otel_context.get_current()
        inference = inference_span(trace.get_current_span(parent))
        if inference is not None:
            if semconv.GEN_AI_CONVERSATION_ID not in getattr(inference, "attributes", {}):
                bookkeeping[semconv.GEN_AI_CONVERSATION_ID] = identity.id
            inference.set_attributes(bookkeeping)
            exchange = _Exchange(
                self, request, identity, inference, _beside(inference, parent), owned=False
            )
        else:
            attributes: dict[str, Any] = {
                semconv.GEN_AI_PROVIDER_NAME: request.provider,
                semconv.GEN_AI_CONVERSATION_ID: identity.id,
                **bookkeeping,
            }
            if request.model:
                attributes[semconv.GEN_AI_REQUEST_MODEL] = request.model
            span = self.tracer.start_span(
                semconv.MODEL_REQUEST_SPAN, context=parent, kind=SpanKind.INTERNAL,
                attributes=attributes,
            )  # fmt: skip
            exchange = _Exchange(self, request, identity, span, parent, owned=True)
            if inference_follows(request.api):  # theirs will be the chat span
                exchange.inference_started()
        if compactions.take(identity.id):  # a guarded compactor compacted it since
            exchange.compacted()
        if transcript is not None:
            with internal_errors("checking a model request"):
                exchange.check(transcript)
        return exchange

    # -- state -------------------------------------------------------------------------------

    def state(self, conversation: str) -> ConversationState:
        """The conversation's detection state; use it with `states_lock` held."""
        found = self._states.get(conversation)
        if found is None:
            found = self._states[conversation] = ConversationState()
            while len(self._states) > _MAX_STATES:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(conversation)
        return found

    def track(self, conversation: str, handle: ToolCallHandle) -> None:
        """Remember a call this instrumentation opened, until it is resolved."""
        with self._handles_lock:
            self._handles.setdefault((conversation, handle.id), []).append(handle)
            if len(self._handles) > _PRUNE_AT:
                for key in [k for k, hs in self._handles.items() if all(h.resolved for h in hs)]:
                    del self._handles[key]

    def _open_handle(self, conversation: str, call_id: str) -> ToolCallHandle | None:
        with self._handles_lock:
            handles = self._handles.get((conversation, call_id), ())
            return next((h for h in handles if not h.resolved), None)

    def resolve(self, conversation: str, resolution: Resolution) -> bool:
        """Resolve the earliest open call of the resolution's id through the recorder."""
        resolved = self.recorder.resolve(
            resolution.call_id,
            resolution.content,
            status="error" if resolution.status == "error" else None,
            conversation_id=conversation,
        )
        key = (conversation, resolution.call_id)
        with self._handles_lock:
            handles = self._handles.get(key)
            if handles is not None:
                handles[:] = [h for h in handles if not h.resolved]
                if not handles:
                    del self._handles[key]
        return resolved

    def shutdown(self, reason: str) -> None:
        """Stop recording; abandon (with `reason`) every call opened here that is still open."""
        self.active = False
        with self._handles_lock:
            handles = [h for hs in self._handles.values() for h in hs]
            self._handles.clear()
        for handle in handles:
            if not handle.resolved:
                handle.abandon(reason)  # never raises

    # -- detections --------------------------------------------------------------------------

    def report_severed(self, span: Span, conversation: str, severed: Severed) -> None:
        """A request no longer carries an open call: an event on the request span and on the
        call span (when this instrumentation opened it), and the metric."""
        attributes: dict[str, Any] = {
            semconv.GEN_AI_TOOL_CALL_ID: severed.call_id,
            semconv.GEN_AI_TOOL_NAME: severed.name,
            semconv.OBLIGATION_KIND: "tool_call",
        }
        span.add_event(semconv.EVENT_SEVERED, attributes)
        handle = self._open_handle(conversation, severed.call_id)
        if handle is not None:
            handle.span.add_event(semconv.EVENT_SEVERED, attributes)
        self.telemetry.severed.count(conversation, severed.sequence, "tool_call", severed.name)

    def report_orphan(self, span: Span, orphan: Orphan) -> None:
        """A request carries a result whose call is gone."""
        attributes: dict[str, Any] = {
            semconv.GEN_AI_TOOL_CALL_ID: orphan.call_id,
            semconv.MESSAGE_INDEX: orphan.message_index,
        }
        if orphan.name:
            attributes[semconv.GEN_AI_TOOL_NAME] = orphan.name
        span.add_event(semconv.EVENT_ORPHANED, attributes)
        self.metrics.orphaned_results.add(1, _tool(orphan.name))

    def report_duplicate(self, span: Span, duplicate: Duplicate) -> None:
        """The model repeats a resolved call."""
        span.add_event(
            semconv.EVENT_DUPLICATE,
            {
                semconv.GEN_AI_TOOL_CALL_ID: duplicate.call_id,
                semconv.GEN_AI_TOOL_NAME: duplicate.name,
                semconv.DUPLICATE_OF: duplicate.duplicate_of,
            },
        )
        self.metrics.duplicate_calls.add(1, _tool(duplicate.name))


def _tool(name: str) -> dict[str, str]:
    return {semconv.GEN_AI_TOOL_NAME: name} if name else {}
