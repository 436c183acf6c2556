"""Another GenAI instrumentation's inference span for a model request, when there is one.

One model request is one ``chat``-like span. Instrumentations that wrap the SDK methods this
package wraps (opentelemetry-instrumentation-openai-v2, OpenLLMetry's
opentelemetry-instrumentation-openai and -anthropic) run outside its wrapper whatever the
installation order (`_wrapping`), so their span has started when an exchange begins: the
exchange puts its bookkeeping on that span and makes none of its own (`inference_span`). Most
make their span current around the SDK call; OpenLLMetry's Anthropic instrumentation does not,
so the span that started last in the caller's context, still open, a child of the current span,
is taken instead. Instrumentations that wrap lower (OpenInference wraps the HTTP request) start
their span inside the call and end it before the response is read back, so the exchange keeps a
span of its own; `InferenceWatch` tells the exchange that an inference span started inside it,
and that span then does not claim the ``chat`` operation. One starts its span only after the SDK
call has returned (OpenLLMetry's OpenAI instrumentation, for the Responses API): while it is
instrumented, `inference_follows` says so and the exchange's own span does not claim ``chat``
either.

An inference span is a recording span of another instrumentation scope that says so at its
start: ``gen_ai.operation.name`` an inference operation (``chat``, ``text_completion``,
``generate_content``), ``openinference.span.kind`` ``LLM``, or OpenLLMetry's older
``llm.request.type`` ``chat`` or ``completion``. One that already carries a request's
bookkeeping (``compaction.conversation.source``) is not taken again.

The watch is a span processor added once per SDK tracer provider and kept for the provider's
life: it keeps only a weak reference to the inference span last started outside an exchange,
per thread and asyncio task (a context variable), and never raises into the host.
"""

from __future__ import annotations

import sys
import threading
import weakref
from contextvars import ContextVar
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.trace import Span, TracerProvider

from otel_compaction._internal_errors import internal_errors
from otel_compaction.telemetry import semconv

__all__ = [
    "InferenceWatch",
    "Watched",
    "adoptable",
    "inference_follows",
    "inference_span",
    "is_inference_span",
    "watch",
    "watching",
]

_EXCHANGE = otel_context.create_key("otel_compaction.exchange")
_STARTED: ContextVar[weakref.ref[Span] | None] = ContextVar(
    "otel_compaction.inference_started", default=None
)
"""The inference span last started in this context outside an exchange."""
_INFERENCE_OPERATIONS = frozenset({semconv.CHAT, semconv.TEXT_COMPLETION, semconv.GENERATE_CONTENT})
_OPENLLMETRY_REQUEST_TYPES = frozenset({"chat", "completion"})


class Watched(Protocol):
    """An exchange told when an inference span starts inside it."""

    def inference_started(self) -> None:
        """Another instrumentation started an inference span within the request."""


def is_inference_span(span: Any) -> bool:
    """Whether `span` is another instrumentation's inference span (see the module)."""
    scope = getattr(span, "instrumentation_scope", None)
    if scope is None or scope.name == semconv.SCOPE:
        return False
    attributes = getattr(span, "attributes", None)
    if not attributes:
        return False
    return (
        attributes.get(semconv.GEN_AI_OPERATION_NAME) in _INFERENCE_OPERATIONS
        or attributes.get(semconv.OPENINFERENCE_SPAN_KIND) == semconv.OPENINFERENCE_LLM
        or attributes.get(semconv.OPENLLMETRY_REQUEST_TYPE) in _OPENLLMETRY_REQUEST_TYPES
    )


def adoptable(span: Span) -> bool:
    """Whether the current `span` is an inference span to carry a request's bookkeeping."""
    if not span.is_recording() or not is_inference_span(span):
        return False
    return semconv.CONVERSATION_SOURCE not in getattr(span, "attributes", {})


def inference_span(current: Span) -> Span | None:
    """The inference span to carry the bookkeeping of a request that begins under `current`:
    `current` itself when it is one (`adoptable`), else the one another instrumentation started
    last in this context without making it current, while it is open and a child of `current`
    (it wraps the SDK call this request is); None when there is neither."""
    if adoptable(current):
        return current
    reference = _STARTED.get()
    started = None if reference is None else reference()
    if started is None or not adoptable(started):
        return None
    parent = getattr(started, "parent", None)
    under = current.get_span_context()
    if under.is_valid:
        beneath = parent is not None and parent.span_id == under.span_id
    else:
        beneath = parent is None
    return started if beneath else None


_AFTER_THE_CALL: dict[str, tuple[tuple[str, str], ...]] = {
    # API: (module, instrumentor) of instrumentations whose inference span for a request of
    # that API starts once the SDK call has returned.
    "responses": (("opentelemetry.instrumentation.openai", "OpenAIInstrumentor"),),  # OpenLLMetry
}


def inference_follows(api: str) -> bool:
    """Whether an instrumentation that is on makes the inference span of an `api` request only
    after the SDK call returns (so `inference_span` cannot find it). Imports nothing: an
    instrumentation that is on was imported by whoever turned it on."""
    for module, name in _AFTER_THE_CALL.get(api, ()):
        found = sys.modules.get(module)
        instrumentor = getattr(found, name, None) if found is not None else None
        if instrumentor is None:
            continue
        with internal_errors("asking whether another instrumentation is on"):
            if instrumentor().is_instrumented_by_opentelemetry:  # a singleton: no new state
                return True
    return False


def watching(exchange: Watched, context: Context) -> Context:
    """`context` with `exchange` as the one an inference span starting in it belongs to."""
    return otel_context.set_value(_EXCHANGE, exchange, context)


class InferenceWatch(SpanProcessor):
    """Tells the exchange whose context an inference span starts in that it started; keeps the
    one that starts outside an exchange for `inference_span`."""

    @internal_errors("watching for inference spans")
    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        if not is_inference_span(span):
            return
        exchange = otel_context.get_value(_EXCHANGE, parent_context)
        if exchange is not None:
            exchange.inference_started()  # type: ignore[attr-defined]
        else:
            _STARTED.set(weakref.ref(span))

    def on_end(self, span: ReadableSpan) -> None:
        return None

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


_WATCHED: weakref.WeakKeyDictionary[SdkTracerProvider, InferenceWatch] = weakref.WeakKeyDictionary()
_WATCH_LOCK = threading.Lock()


def watch(provider: TracerProvider) -> None:
    """Add the watch to `provider` (an SDK provider; others cannot take processors), once."""
    if not isinstance(provider, SdkTracerProvider):
        return
    with _WATCH_LOCK:
        if provider in _WATCHED:
            return
        watcher = _WATCHED[provider] = InferenceWatch()
    provider.add_span_processor(watcher)
