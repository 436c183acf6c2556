"""The rules: one small pure function each, all with the same signature, listed in `RULES`.

A rule reads a `SpanView` (the analysed transcript, the span ``[start, end)``, whether the span
will be archived verbatim) and returns its findings. Rules do no I/O and keep no state; what
they need was computed once by `Analysis`. The gate gives each finding its severity from the
policy; a rule whose severity is ``off`` is not run at all. Adding a rule touches only this
table and the policy's severity list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from otel_compaction.analysis import Analysis, Tracked
from otel_compaction.policy import RULE_NAMES, Severity

__all__ = ["RULES", "Finding", "ObligationRef", "SpanView", "run_rules"]


@dataclass(frozen=True, slots=True)
class ObligationRef:
    """An obligation named in a finding or a decision."""

    kind: str
    id: str
    message_index: int | None
    name: str = ""

    def describe(self) -> str:
        """``tool_call search (call_1) at message 4``."""
        where = f" at message {self.message_index}" if self.message_index is not None else ""
        label = f"{self.name} ({self.id})" if self.name and self.name != self.id else self.id
        return f"{self.kind} {label}{where}"


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a rule found. ``message_index`` is None when it has no place in the
    transcript (an obligation only the ledger knows)."""

    rule: str
    message_index: int | None
    detail: str
    severity: Severity = "warn"
    obligation: ObligationRef | None = None


@dataclass(frozen=True, slots=True)
class SpanView:
    """The question a rule answers: what in ``[start, end)`` stops it being quiescent."""

    analysis: Analysis
    start: int
    end: int
    addressable: bool = False


Rule = Callable[[SpanView], list[Finding]]


_LEDGER_KIND_RULE = {
    "transaction": "open_transaction",
    "retry": "pending_retry",
    "commitment": "dangling_commitment",
}


def _unclosed(view: SpanView, rule: str, what: str) -> list[Finding]:
    """Obligations of `rule` arising in the span whose resolution is not in the span, and
    those of its kind that only the ledger knows (no place in the transcript)."""
    out: list[Finding] = []
    for tracked in view.analysis.obligations_opened_in(view.start, view.end):
        if tracked.rule != rule or _closed_within(tracked, view.end):
            continue
        out.append(
            Finding(
                rule, tracked.opened, _detail(tracked, what, view.end),
                obligation=ObligationRef(tracked.kind, tracked.id, tracked.opened, tracked.name),
            )
        )  # fmt: skip
    for record in view.analysis.ledger_only:
        if _LEDGER_KIND_RULE.get(record.kind) == rule:
            ref = ObligationRef(record.kind, record.id, None, record.name)
            out.append(
                Finding(rule, None, f"{ref.describe()} is open in the ledger", obligation=ref)
            )
    return out


def _closed_within(tracked: Tracked, end: int) -> bool:
    return tracked.resolved is not None and tracked.resolved < end


def _detail(tracked: Tracked, what: str, end: int) -> str:
    if tracked.resolved is None:
        return f"{what} {tracked.name!r} ({tracked.id}) is never resolved"
    return (
        f"{what} {tracked.name!r} ({tracked.id}) resolves at message {tracked.resolved}, "
        f"after the span ends at {end}"
    )


def open_tool_call(view: SpanView) -> list[Finding]:
    """A tool call in the span without its result in the span."""
    return _unclosed(view, "open_tool_call", "tool call")


def orphan_result(view: SpanView) -> list[Finding]:
    """A result in the span whose call is missing, or stands before the span."""
    transcript = view.analysis.transcript
    out: list[Finding] = []
    for entry in transcript.entries[view.start : view.end]:
        for ordinal in entry.results:
            result = transcript.results[ordinal]
            call = transcript.call_of(result)
            if call is None:
                detail = f"result for {result.call_id} has no earlier unanswered call"
            elif call.message_index < view.start:
                detail = (
                    f"result for {result.call_id} answers the call at message "
                    f"{call.message_index}, before the span starts at {view.start}"
                )
            else:
                continue
            ref = ObligationRef("tool_result", result.call_id, result.message_index)
            out.append(Finding("orphan_result", result.message_index, detail, obligation=ref))
    return out


def open_transaction(view: SpanView) -> list[Finding]:
    """A transaction begun in the span and not ended in it."""
    return _unclosed(view, "open_transaction", "transaction")


def pending_retry(view: SpanView) -> list[Finding]:
    """A failed call whose retry chain has not succeeded within the span."""
    return _unclosed(view, "pending_retry", "failed call")


def dangling_commitment(view: SpanView) -> list[Finding]:
    """A promise ("I will verify X") in the span with no tool call after it in the span."""
    return _unclosed(view, "dangling_commitment", "commitment")


def null_result(view: SpanView) -> list[Finding]:
    """A negative result in the span: its absence would read as "never searched"."""
    return [
        Finding(
            "null_result", n.message_index,
            f"{n.tool or 'tool'} ({n.call_id}) returned a negative result: {n.text}",
            obligation=ObligationRef("negative_result", n.call_id, n.message_index, n.tool),
        )
        for n in view.analysis.negatives_in(view.start, view.end)
    ]  # fmt: skip


def unresolved_reference(view: SpanView) -> list[Finding]:
    """An identifier first seen in the span and still used after it."""
    return [
        Finding(
            "unresolved_reference", i.first,
            f"{i.value!r} is first seen at message {i.first} and used until message {i.last}",
            obligation=ObligationRef("reference", i.value, i.first),
        )
        for i in view.analysis.identifiers_bound_in(view.start, view.end)
    ]  # fmt: skip


def not_addressable(view: SpanView) -> list[Finding]:
    """The span will not be archived verbatim, so only the summary would remain."""
    if view.addressable:
        return []
    return [
        Finding(
            "not_addressable", view.start,
            "the span is not archived verbatim; the summary must pass the contradiction probe",
            obligation=ObligationRef("archive", f"{view.start}:{view.end}", view.start),
        )
    ]  # fmt: skip


def _ledger(view: SpanView, rule: str) -> list[Finding]:
    out: list[Finding] = []
    for conflict in view.analysis.ledger_conflicts:
        index = conflict.message_index
        if conflict.rule != rule or (index is not None and not view.start <= index < view.end):
            continue
        ref = ObligationRef(conflict.kind, conflict.id, index, conflict.name)
        out.append(Finding(rule, index, f"{ref.describe()}: {conflict.detail}", obligation=ref))
    return out


def ledger_mismatch(view: SpanView) -> list[Finding]:
    """The ledger holds an obligation open that the transcript resolved or no longer has."""
    return _ledger(view, "ledger_mismatch")


def severed_obligation(view: SpanView) -> list[Finding]:
    """The ledger recorded a resolution the transcript does not have."""
    return _ledger(view, "severed_obligation")


RULES: dict[str, Rule] = {
    "open_tool_call": open_tool_call,
    "orphan_result": orphan_result,
    "open_transaction": open_transaction,
    "pending_retry": pending_retry,
    "dangling_commitment": dangling_commitment,
    "null_result": null_result,
    "unresolved_reference": unresolved_reference,
    "not_addressable": not_addressable,
    "ledger_mismatch": ledger_mismatch,
    "severed_obligation": severed_obligation,
}
assert tuple(RULES) == RULE_NAMES


def run_rules(view: SpanView) -> list[Finding]:
    """Every enabled rule over `view`, each finding with its policy severity, in
    transcript order."""
    policy = view.analysis.policy
    out: list[Finding] = []
    for name, rule in RULES.items():
        severity = policy.severity(name, addressable=view.addressable)
        if severity == "off":
            continue
        for found in rule(view):
            # Without a place in the transcript a finding cannot make a span live; it is reported.
            level: Severity = (
                "warn" if found.message_index is None and severity == "block" else severity
            )
            out.append(
                Finding(found.rule, found.message_index, found.detail, level, found.obligation)
            )
    out.sort(key=lambda f: f.message_index if f.message_index is not None else -1)
    return out
