"""What every rule shares: the rule record, its findings, and the span it answers for.

A rule is one `Rule`: its name, the kind of thing it finds, its severity under each built-in
policy, an optional scan (run once per analysis over the whole transcript) and a check (run per
span over what the scans found). Checks are pure functions of a `SpanView`; they do no I/O and
keep no state.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis

__all__ = [
    "DEFAULT_REMEDY",
    "Discharge",
    "Finding",
    "ObligationRef",
    "Rule",
    "RuleKind",
    "Severity",
    "SpanView",
    "Tracked",
    "straddling",
    "unclosed",
]

Severity = Literal["block", "carry", "warn", "off"]

RuleKind = Literal["obligation", "quiescence", "atomicity", "ledger"]
"""``obligation``: something is still owed; ``quiescence``: what a summary must keep (seed 2);
``atomicity``: a cut the provider would reject; ``ledger``: the ledger and transcript disagree."""

DEFAULT_REMEDY: Final = "resolve it in the runtime, then ask again"
"""What a refusal says of an obligation whose kind no rule declares."""


@dataclass(frozen=True, slots=True)
class Discharge:
    """The obligation a rule's findings name (`ObligationRef.kind`) and how it ends.

    ``status`` is the terminal state `GuardedCompactor.force_terminal` records for it (None
    when nothing can be forced: a negative to carry, a cut to move); ``remedy`` is what a
    refusal tells the orchestrator to do about it.
    """

    kind: str
    status: str | None
    remedy: str = DEFAULT_REMEDY


OPEN: Final = sys.maxsize
"""Where an obligation without a resolution resolves, in lists of positions (after any cut)."""


@dataclass(frozen=True, slots=True)
class Tracked:
    """One obligation (or atomic unit) found in the transcript.

    ``opened`` is the message index where it arises, ``resolved`` where its terminal
    resolution stands (None when it never does). ``rule`` names the rule that reports it;
    ``status`` is its terminal state (``open`` while it has none).
    """

    rule: str
    kind: str
    id: str
    name: str
    opened: int
    resolved: int | None
    status: str = "open"
    subjects: tuple[str, ...] = ()
    """What it is about (argument values, the promised action's words), for verification;
    a tool call's are read from its arguments when asked (`Analysis.subjects`)."""
    call: int = field(default=-1, compare=False)
    """The ordinal of the tool call it is, or -1."""

    def resolved_as(self, resolved: int | None, status: str) -> Tracked:
        """A copy resolved at message `resolved` with `status` (`dataclasses.replace`, without
        its introspection: the rules resolve every call this way)."""
        return Tracked(
            self.rule, self.kind, self.id, self.name, self.opened, resolved, status,
            self.subjects, self.call,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ObligationRef:
    """An obligation named in a finding or a decision."""

    kind: str
    id: str
    message_index: int | None
    name: str = ""
    subjects: tuple[str, ...] = field(default=(), compare=False)
    """What it is about (argument values, the promised action's words), for verification."""
    siblings: tuple[tuple[str, ...], ...] = field(default=(), compare=False)
    """The subjects of the other calls of the same tool in the span a summary replaces."""

    def describe(self) -> str:
        """``tool_call search (call_1) at message 4``."""
        where = f" at message {self.message_index}" if self.message_index is not None else ""
        shown = self.id or "without an id"
        label = f"{self.name} ({shown})" if self.name and self.name != self.id else shown
        return f"{self.kind} {label}{where}"

    @property
    def discharge(self) -> str:
        """How to discharge it (the remedy of the rule that declares its kind)."""
        from otel_compaction.rules.registry import remedy

        return remedy(self.kind)


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


Check = Callable[[SpanView], list[Finding]]
Scan = Callable[["Analysis"], Any]


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of the registry.

    ``severities`` gives its severity under each built-in policy (``default``, ``strict``,
    ``lenient``). ``scan`` runs once per analysis; what it returns is kept as
    ``analysis.facts[name]``, and when it is a list of `Tracked` they join the obligations the
    gate extends over and defers around. ``check`` answers for one span.
    """

    name: str
    kind: RuleKind
    summary: str
    severities: Mapping[str, Severity]
    check: Check
    scan: Scan | None = None
    discharge: Discharge | None = None
    """The obligation its findings name and how it is discharged (None: they name none)."""


def _detail(tracked: Tracked, what: str, end: int) -> str:
    if tracked.resolved is None and not tracked.id:
        return (
            f"{what} {tracked.name!r} (without an id) is never resolved: no result could be "
            "paired with it by position, as several calls without an id were waiting; give "
            "each call an id"
        )
    if tracked.resolved is None:
        return f"{what} {tracked.name!r} ({tracked.id}) is never resolved"
    return (
        f"{what} {tracked.name!r} ({tracked.id}) resolves at message {tracked.resolved}, "
        f"after the span ends at {end}"
    )


def unclosed(view: SpanView, rule: str, what: str, ledger_kind: str | None = None) -> list[Finding]:
    """Obligations of `rule` arising in the span whose resolution is not in the span, and
    those of `ledger_kind` that only the ledger knows (no place in the transcript)."""
    out: list[Finding] = []
    for tracked in view.analysis.unresolved_in(view.start, view.end):
        if tracked.rule != rule:
            continue
        out.append(
            Finding(
                rule, tracked.opened, _detail(tracked, what, view.end),
                obligation=ObligationRef(tracked.kind, tracked.id, tracked.opened, tracked.name),
            )
        )  # fmt: skip
    if ledger_kind is not None:
        for record in view.analysis.ledger_only:
            if record.kind == ledger_kind:
                ref = ObligationRef(record.kind, record.id, None, record.name)
                out.append(
                    Finding(rule, None, f"{ref.describe()} is open in the ledger", obligation=ref)
                )
    return out


def straddling(view: SpanView, rule: str, what: str) -> list[Finding]:
    """Atomic units of `rule` that a cut of the span falls inside: the unit starts before a
    cut and ends at or after it."""
    out: list[Finding] = []
    units: list[Tracked] = view.analysis.facts.get(rule) or []
    for unit in units:
        last = unit.resolved if unit.resolved is not None else unit.opened
        for cut in (view.start, view.end):
            if unit.opened < cut <= last:
                detail = (
                    f"the cut before message {cut} falls inside {what} "
                    f"(messages {unit.opened}..{last})"
                )
                ref = ObligationRef("atomic_unit", unit.id, unit.opened, unit.name)
                out.append(Finding(rule, unit.opened, detail, obligation=ref))
                break
    return out
