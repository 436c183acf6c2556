"""`LedgerSpanProcessor`: the ledger fed from ``execute_tool`` spans of any instrumentation.

Some instrumentations set ``gen_ai.tool.call.id`` only when the span ends; the processor keys
such a span by its span id until then. Spans of this package's own recorder are skipped: the
recorder writes the ledger itself, so sampling can never blind it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.trace import StatusCode
from opentelemetry.util.types import Attributes

from otel_compaction._internal_errors import internal_errors
from otel_compaction.context import current_conversation_id
from otel_compaction.ledger import ObligationLedger
from otel_compaction.telemetry import semconv

__all__ = ["LedgerSpanProcessor", "is_obligation_span"]


def is_obligation_span(name: str, attributes: Attributes) -> bool:
    """True for spans that open an obligation: ``execute_tool`` spans of any instrumentation."""
    if attributes and attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.EXECUTE_TOOL:
        return True
    return name == semconv.EXECUTE_TOOL or name.startswith(semconv.EXECUTE_TOOL + " ")


class LedgerSpanProcessor(SpanProcessor):
    """Feeds the ledger from ``execute_tool`` spans made by any instrumentation.

    Spans of this package's own recorder are skipped (the recorder writes the ledger itself).
    A span without ``gen_ai.tool.call.id`` at start is tracked by its span id and re-keyed
    when the id appears at the end. Open entries are held in a dict keyed by span id, no more
    of them than the ledger keeps open obligations (`ObligationLedger.max_open`: a span that
    never ends is forgotten once that many started after it); `shutdown` abandons whatever is
    still open. No callback raises: an internal fault is logged.
    """

    def __init__(self, ledger: ObligationLedger) -> None:
        self.ledger = ledger
        self._open: OrderedDict[int, tuple[str | None, str]] = OrderedDict()
        self._lock = threading.Lock()

    @internal_errors("feeding the ledger from a started span")
    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        scope = span.instrumentation_scope
        if scope is not None and scope.name == semconv.SCOPE:
            return
        attributes = span.attributes or {}
        if not is_obligation_span(span.name, attributes):
            return
        context = span.get_span_context()
        if context is None:
            return
        conversation = attributes.get(semconv.GEN_AI_CONVERSATION_ID)
        conversation_id = str(conversation) if conversation else current_conversation_id()
        call_id = attributes.get(semconv.GEN_AI_TOOL_CALL_ID)
        key = str(call_id) if call_id else f"span:{context.span_id:016x}"
        name = attributes.get(semconv.GEN_AI_TOOL_NAME) or span.name
        self.ledger.open(conversation_id, "tool_call", key, name=str(name))
        with self._lock:
            self._open[context.span_id] = (conversation_id, key)
            if len(self._open) > self.ledger.max_open:
                self._open.popitem(last=False)  # the ledger dropped its record: oldest first

    @internal_errors("feeding the ledger from an ended span")
    def on_end(self, span: ReadableSpan) -> None:
        context = span.get_span_context()
        if context is None:
            return
        with self._lock:
            entry = self._open.pop(context.span_id, None)
        if entry is None:
            return
        conversation_id, key = entry
        call_id = (span.attributes or {}).get(semconv.GEN_AI_TOOL_CALL_ID)
        if call_id and str(call_id) != key:
            self.ledger.rekey(conversation_id, key, str(call_id))
            key = str(call_id)
        if span.status.status_code == StatusCode.ERROR:
            error_type = (span.attributes or {}).get(semconv.ERROR_TYPE)
            self.ledger.resolve(
                conversation_id,
                key,
                "error",
                error_type=str(error_type) if error_type else semconv.ERROR_TYPE_OTHER,
            )
        else:
            self.ledger.resolve(conversation_id, key, "result")

    def shutdown(self) -> None:
        with self._lock:
            leftover = list(self._open.values())
            self._open.clear()
        for conversation_id, key in leftover:
            with internal_errors("abandoning an open span's obligation at shutdown"):
                self.ledger.resolve(conversation_id, key, "abandoned")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True
