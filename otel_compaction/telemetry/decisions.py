"""The gate's decisions as telemetry: a span event per compaction, deferral and refusal, the
decision metrics, and the one producer of the severed-obligations counter."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from opentelemetry.trace import SpanKind, TracerProvider

from otel_compaction.analysis import Analysis
from otel_compaction.gate import Decision, shown_id
from otel_compaction.rules import RULE_OF_KIND, ObligationRef
from otel_compaction.telemetry import semconv
from otel_compaction.telemetry.metrics import CompactionMetrics
from otel_compaction.telemetry.scope import capture_content_enabled, package_tracer

__all__ = ["DecisionTelemetry", "SeveredObligations"]

_log = logging.getLogger(__name__)

_EVENT_OF_ACTION = {
    "compact": semconv.EVENT_COMPACTED,
    "defer": semconv.EVENT_DEFERRED,
    "refuse": semconv.EVENT_REFUSED,
}
_CHARS_PER_TOKEN = 4
_MAX_SEVERED = 65_536


class SeveredObligations:
    """The one producer of ``compaction.obligations.severed``: one point per severed
    obligation, by ``compaction.obligation.kind`` and, for a tool call, ``gen_ai.tool.name``.

    An obligation is severed where it is first established: by a gate evaluation (the ledger
    recorded a resolution the transcript no longer has: ``severed_obligation``) or by passive
    detection (a request no longer carries a call the ledger holds open:
    ``compaction.obligation.severed``). Both name the obligation by its ledger record, so
    evaluating the same transcript again, or detecting what a gate already found, counts
    nothing more. The records counted are remembered within a fixed bound (the oldest are
    forgotten first); a lock is held for the dictionary work only.
    """

    def __init__(self, metrics: CompactionMetrics, limit: int = _MAX_SEVERED) -> None:
        """Count into `metrics`, remembering at most `limit` records."""
        self._counter = metrics.severed
        self._limit = limit
        self._counted: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._lock = threading.Lock()

    def count(self, conversation_id: str | None, sequence: int, kind: str, name: str = "") -> bool:
        """The ledger record `sequence` of `conversation_id` (an obligation of `kind`, for a
        tool call the tool `name`) is severed; True when this is the first time it is."""
        key = (conversation_id or "", sequence)
        with self._lock:
            if key in self._counted:
                return False
            self._counted[key] = None
            if len(self._counted) > self._limit:
                self._counted.popitem(last=False)
        attributes = {semconv.OBLIGATION_KIND: kind}
        if kind == "tool_call" and name:
            attributes[semconv.GEN_AI_TOOL_NAME] = name
        self._counter.add(1, attributes)
        return True


class DecisionTelemetry:
    """A gate observer: one ``compaction.evaluate`` span per decision, an event named for the
    action (``compaction.extended`` too when the span was extended) with the rule names and
    obligation ids, and the decision metrics; the severed obligations its analysis found are
    counted by `severed` (once each)."""

    def __init__(
        self,
        tracer_provider: TracerProvider,
        metrics: CompactionMetrics,
        capture_content: bool | None = None,
        severed: SeveredObligations | None = None,
    ) -> None:
        self._tracer = package_tracer(tracer_provider)
        self._metrics = metrics
        self._capture = capture_content
        self._severed = severed if severed is not None else SeveredObligations(metrics)

    def _id(self, ref: ObligationRef) -> str:
        """A reference's id is its identifier: content, shown only with capture on."""
        capture = capture_content_enabled() if self._capture is None else self._capture
        return ref.id if capture else shown_id(ref)

    def __call__(self, decision: Decision, analysis: Analysis, started_ns: int) -> None:
        rules = _rules(decision, analysis)
        attributes: dict[str, Any] = {
            semconv.ACTION: decision.action,
            semconv.POLICY: decision.policy,
            semconv.CRITICAL: decision.critical,
            semconv.EXTENDED: decision.extended,
            semconv.SPAN_START: decision.span[0],
            semconv.SPAN_END: decision.span[1],
            semconv.REQUESTED_START: decision.requested[0],
            semconv.REQUESTED_END: decision.requested[1],
            semconv.MESSAGES: len(analysis.transcript),
            semconv.MUST_CARRY_IDENTIFIERS: len(decision.must_carry.identifiers),
            semconv.MUST_CARRY_NEGATIVES: len(decision.must_carry.negatives),
        }
        if decision.conversation_id:
            attributes[semconv.GEN_AI_CONVERSATION_ID] = decision.conversation_id
        # What trace UIs show for a span: its kind, and what went in and came out (the
        # obligations by id only with capture on: a reference's id is content).
        capture = capture_content_enabled() if self._capture is None else self._capture
        attributes[semconv.OPENINFERENCE_SPAN_KIND] = "GUARDRAIL"
        start, end = decision.requested
        critical = ", critical" if decision.critical else ""
        attributes[semconv.OPENINFERENCE_INPUT] = (
            f"compact messages {start}:{end} of {len(analysis.transcript)}{critical}"
        )
        attributes[semconv.OPENINFERENCE_OUTPUT] = (
            decision.describe() if capture else decision.outline()
        )
        event: dict[str, Any] = {
            semconv.RULES: rules,
            semconv.OBLIGATION_IDS: [self._id(ref) for ref in decision.obligations],
            semconv.OBLIGATION_KINDS: [ref.kind for ref in decision.obligations],
            semconv.SPAN_START: decision.span[0],
            semconv.SPAN_END: decision.span[1],
        }
        held = _held_tokens(analysis, decision) if decision.action == "defer" else 0
        if decision.action == "defer":
            attributes[semconv.HELD_TOKENS] = held
        try:  # a failing span must not lose the decision's metrics
            span = self._tracer.start_span(
                semconv.EVALUATE_SPAN, kind=SpanKind.INTERNAL, attributes=attributes,
                start_time=started_ns,
            )  # fmt: skip
            if decision.extended:
                span.add_event(semconv.EVENT_EXTENDED, event)
            span.add_event(_EVENT_OF_ACTION[decision.action], event)
            for finding in decision.findings:
                if finding.rule == "abandoned_call" and finding.obligation is not None:
                    span.add_event(
                        semconv.EVENT_ABANDONED,
                        {
                            semconv.OBLIGATION_KIND: finding.obligation.kind,
                            semconv.OBLIGATION_ID: self._id(finding.obligation),
                            semconv.ABANDON_REASON: semconv.ABANDON_REASON_RUN_ENDED,
                        },
                    )
                if finding.rule == "stale_obligation" and finding.obligation is not None:
                    span.add_event(
                        semconv.EVENT_STALE,
                        {
                            semconv.OBLIGATION_KIND: finding.obligation.kind,
                            semconv.OBLIGATION_ID: self._id(finding.obligation),
                        },
                    )
            span.end()
        except Exception:
            _log.exception("otel-compaction: recording a decision span failed")
        if decision.action == "defer":
            self._metrics.held_tokens.add(held)
        first = rules[0] if decision.action != "compact" and rules else "none"
        self._metrics.decisions.add(1, {semconv.ACTION: decision.action, semconv.RULE: first})
        if analysis.ledger is not None:
            conversation = analysis.ledger.conversation_id
            for conflict in analysis.ledger_conflicts:
                if conflict.rule == "severed_obligation" and conflict.sequence is not None:
                    self._severed.count(
                        conversation, conflict.sequence, conflict.kind, conflict.name
                    )


def _rules(decision: Decision, analysis: Analysis) -> list[str]:
    """The rules behind a decision: those that made the span live for a deferral or refusal
    (first blocking position first), those the summary must honour for a compaction."""
    if decision.action == "compact":
        return sorted({f.rule for f in decision.findings})
    if decision.action == "refuse" and decision.ledger_unavailable is not None:
        return ["ledger_unavailable"]
    if decision.action == "refuse":
        live = [f.rule for f in decision.findings if f.obligation in decision.obligations]
        if live:
            return list(dict.fromkeys(live))
    # A deferral's findings are the older span's: name the requested span's obligations by
    # their kind's rule and by any disagreement of the ledger about them.
    rules: list[str] = []
    for ref in decision.obligations:
        if ref.kind == "atomic_unit":  # its id is "<rule>@<first message>"
            rules.append(ref.id.split("@", 1)[0])
        else:
            rules.append(RULE_OF_KIND.get(ref.kind, ref.kind))
        rules.extend(
            conflict.rule
            for conflict in analysis.ledger_conflicts
            if (conflict.kind, conflict.id, conflict.message_index)
            == (ref.kind, ref.id, ref.message_index)
        )
    return list(dict.fromkeys(rules))


def _held_tokens(analysis: Analysis, decision: Decision) -> int:
    entries = analysis.transcript.entries
    chars = sum(e.chars for e in entries[decision.span[1] : decision.requested[1]])
    return -(-chars // _CHARS_PER_TOKEN)
