"""Compactions as telemetry: the span of each applied compaction, and the compactions applied
in this process, noted per conversation until a model request says so.

`apply_span` is the ``compaction.apply`` span `GuardedCompactor` makes around applying a
decision: the tokens before and after, the span compacted, the archive handle, why nothing was
compacted, a rejected summary (what it missed: identifiers and positions only unless content
capture is on) and, when applying fails, ``error.type`` (the exception's message only with
capture on, as it may name what the summary lost).

`GuardedCompactor` notes each compaction it applies (`note`, under the decision's conversation);
the auto-instrumentation takes the note (`take`) when that conversation's next model request
starts and sets ``gen_ai.conversation.compacted`` ``true`` on the request's inference span. A
note is taken once: only the first request after the compaction is marked, and a request is
never marked ``false``. A compaction without a conversation (no id given, no
`otel_compaction.conversation` scope) is not noted; passive detection still sees the
transcript shrink. Bounded (the oldest notes are forgotten first) and thread-safe.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from otel_compaction.telemetry import semconv

if TYPE_CHECKING:
    from otel_compaction.compactor import CompactionResult

__all__ = ["ApplySpan", "apply_span", "note", "take"]

_MAX_NOTES = 10_000
_notes: OrderedDict[str, None] = OrderedDict()
_lock = threading.Lock()


def note(conversation_id: str | None) -> None:
    """A compaction was applied to `conversation_id`'s transcript (nothing without an id)."""
    if not conversation_id:
        return
    with _lock:
        _notes[conversation_id] = None
        _notes.move_to_end(conversation_id)
        while len(_notes) > _MAX_NOTES:
            _notes.popitem(last=False)


def take(conversation_id: str) -> bool:
    """Whether a compaction was noted for `conversation_id` since the last `take`; the note
    is cleared.

    Example:
        >>> note("conv-9")
        >>> take("conv-9"), take("conv-9")
        (True, False)
    """
    with _lock:
        if conversation_id not in _notes:
            return False
        del _notes[conversation_id]
        return True


class ApplySpan:
    """The ``compaction.apply`` span of one compaction, open while it is applied."""

    def __init__(self, span: trace.Span, capture: bool) -> None:
        self.span = span
        self.capture = capture

    def record(self, result: CompactionResult) -> None:
        """Put `result` on the span; an applied compaction is also noted (`note`)."""
        decision = result.decision
        attributes: dict[str, Any] = {
            semconv.TOKENS_BEFORE: result.tokens_before,
            semconv.TOKENS_AFTER: result.tokens_after,
            semconv.COMPACTED: result.compacted,
            semconv.SUMMARY_ATTEMPTS: result.attempts,
            semconv.VERIFIED: bool(result.verification and result.verification.ok),
        }
        if decision is not None:
            attributes[semconv.ACTION] = decision.action
            if decision.conversation_id:
                attributes[semconv.GEN_AI_CONVERSATION_ID] = decision.conversation_id
        if result.span is not None:
            attributes[semconv.SPAN_START], attributes[semconv.SPAN_END] = result.span
        if result.archive_handle:
            attributes[semconv.ARCHIVE_HANDLE] = result.archive_handle
        if not result.compacted:
            attributes[semconv.HOLD_REASON] = result.reason
        attributes[semconv.OUTCOME] = result.outcome
        # What trace UIs show: the span's kind, what went in, what came out (the summary
        # itself only with capture on).
        attributes[semconv.OPENINFERENCE_SPAN_KIND] = "CHAIN"
        attributes[semconv.OPENINFERENCE_INPUT] = f"{result.tokens_before} tokens"
        outcome = f"{result.outcome}: {result.tokens_before} -> {result.tokens_after} tokens"
        if not result.compacted and result.reason:
            outcome += f" ({result.reason})"
        summary = result.summary if self.capture and result.compacted else None
        attributes[semconv.OPENINFERENCE_OUTPUT] = summary or outcome
        self.span.set_attributes(attributes)
        verification = result.verification
        if not result.compacted and verification is not None and not verification.ok:
            missing = verification.describe() if self.capture else verification.outline()
            self.span.add_event(semconv.EVENT_SUMMARY_REJECTED, {semconv.MISSING: list(missing)})
        if result.compacted and decision is not None:
            note(decision.conversation_id)


@contextlib.contextmanager
def apply_span(tracer: trace.Tracer, capture: bool) -> Iterator[ApplySpan]:
    """The ``compaction.apply`` span around applying a compaction (current while it runs).
    `capture`: whether content (an exception's message) may go on it."""
    with tracer.start_as_current_span(
        semconv.APPLY_SPAN,
        kind=SpanKind.INTERNAL,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield ApplySpan(span, capture)
        except Exception as exc:
            span.set_attribute(semconv.ERROR_TYPE, type(exc).__qualname__)
            span.set_status(Status(StatusCode.ERROR, str(exc) if capture else None))
            if capture:
                span.record_exception(exc)
            raise
