"""The compaction gate: compact, extend, defer or refuse, before any compaction happens.

`CompactionGate.evaluate` is the obligation-closure decision made exact:

1. A pairing break (or any blocking obligation) whose resolution exists later in the
   transcript: extend the span's end forward to the first cut that closes them, within the
   policy's extension limit (without limit when critical: the alternative is a refusal), and
   compact the extended span.
2. No blocking finding: compact, with ``must_carry`` (identifiers used after the span, negative
   results inside it, the obligations still open) for the summarizer.
3. A blocking finding, not critical, and a non-empty closed span ``[start, c)`` before the first
   blocking position: defer, compacting that older span and holding the live one verbatim.
4. Otherwise refuse: raise `CompactionRefused` naming every open obligation.

The ledger of the conversation is cross-checked on every evaluation, combined with what the
gate's obligation sources (`otel_compaction.sources`) read from the engines that own the work
just before it: open in either means open. An obligation the
ledger reports orphaned (its owner, another worker of a shared ledger, stopped heartbeating)
never resolves by itself: a span over it is refused, not deferred, naming it and how to
discharge it (`Decision.orphaned`). Observers registered with
`CompactionGate.add_observer` see every decision (the telemetry hooks in here); an observer's
failure is logged and never changes a decision.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from otel_compaction.analysis import Analysis, Negative
from otel_compaction.context import current_conversation_id
from otel_compaction.errors import (
    CompactionError,
    CompactionRefused,
    LedgerUnavailableError,
    LiveSpanCompactionError,
    OpenObligationError,
)
from otel_compaction.incremental import DEFAULT_MAX_CONVERSATIONS, AnalysisCache
from otel_compaction.ledger import DEFAULT_CONVERSATION, LedgerSnapshot, ObligationLedger, Orphan
from otel_compaction.policy import Policy
from otel_compaction.rules import (
    RULE_OF_KIND,
    RULES,
    Finding,
    ObligationRef,
    SpanView,
    Tracked,
    run_rules,
)
from otel_compaction.sources import ObligationSource, ObligationSources, SourceReading
from otel_compaction.stores import StoreError
from otel_compaction.transcript import Transcript

__all__ = ["Action", "CompactionGate", "Decision", "MustCarry", "SpanError"]

_log = logging.getLogger(__name__)

Action = Literal["compact", "defer", "refuse"]

# Rules whose blocking findings are obligations (something is still owed, or a unit the
# provider needs whole); the quiescence rules refuse with LiveSpanCompactionError.
_OBLIGATION_RULES = frozenset(name for name, rule in RULES.items() if rule.kind != "quiescence")
# How many shorter spans the deferral search tries before it gives up and refuses.
_MAX_DEFERRAL_PROBES = 64


class SpanError(CompactionError, ValueError):
    """The requested span is not a span of this transcript."""


@dataclass(frozen=True, slots=True)
class MustCarry:
    """What a summary of the span must still say, verified after summarizing."""

    identifiers: tuple[str, ...] = ()
    negatives: tuple[Negative, ...] = ()
    pending: tuple[ObligationRef, ...] = ()
    abandoned: tuple[ObligationRef, ...] = ()
    """Calls resolved as abandoned through the ledger: no result will ever come."""
    identifiers_left_out: int = 0
    """Identifiers past the policy's ``max_identifiers``: the archive handle covers them."""


def shown_id(ref: ObligationRef) -> str:
    """An obligation's id as telemetry names it without content capture: a reference's id is
    the identifier itself (content), so it is named by the message where it is first seen."""
    return f"reference@{ref.message_index}" if ref.kind == "reference" else ref.id


@dataclass(frozen=True, slots=True)
class Decision:
    """The gate's answer for one requested span.

    ``span`` is the span to compact (extended when ``extended``), the older closed span for a
    deferral, or the requested span for a refusal. ``obligations`` names what made the
    requested span live; ``findings`` lists everything the rules found in ``span``.
    """

    action: Action
    span: tuple[int, int]
    requested: tuple[int, int]
    obligations: tuple[ObligationRef, ...] = ()
    findings: tuple[Finding, ...] = ()
    must_carry: MustCarry = field(default_factory=MustCarry)
    extended: bool = False
    critical: bool = False
    policy: str = "default"
    conversation_id: str | None = None
    orphaned: tuple[Orphan, ...] = ()
    """The conversation's orphaned obligations (a shared ledger): open, their owner gone."""
    ledger_unavailable: str | None = None
    """Why the ledger could not say what is open (a store outage): then the gate refuses."""

    @property
    def blocking(self) -> tuple[Finding, ...]:
        """The findings whose severity is ``block``."""
        return tuple(f for f in self.findings if f.severity == "block")

    def describe(self) -> str:
        """One line a person can act on."""
        start, end = self.span
        named = "; ".join(ref.describe() for ref in self.obligations) or "none"
        if self.action == "refuse" and self.ledger_unavailable is not None:
            return f"refusing compaction of span {start}:{end}: {_unknown(self)}"
        if self.action == "refuse":
            remedies = (
                "; ".join(f"{ref.describe()}: {ref.discharge}" for ref in self.obligations)
                or "none"
            )
            orphaned = "".join(f"; {orphan.describe()}" for orphan in self.orphaned)
            return (
                f"refusing compaction of span {start}:{end}: open obligations "
                f"(and how to discharge them): {remedies}{orphaned}"
            )
        if self.action == "defer":
            rs, re_ = self.requested
            return (
                f"deferring span {rs}:{re_} (open obligations: {named}); "
                f"compacting the closed span {start}:{end} instead"
            )
        how = " (extended to close a pairing break)" if self.extended else ""
        return f"compacting span {start}:{end}{how}"

    def outline(self) -> str:
        """`describe` without content, for logs: each obligation by kind and `shown_id`."""
        start, end = self.span
        named = ", ".join(f"{ref.kind} {shown_id(ref)}" for ref in self.obligations) or "none"
        if self.action == "refuse" and self.ledger_unavailable is not None:
            return f"refusing compaction of span {start}:{end}: {_unknown(self)}"
        if self.action == "refuse":
            return f"refusing compaction of span {start}:{end}: open obligations {named}"
        if self.action == "defer":
            return (
                f"deferring span {self.requested[0]}:{self.requested[1]} (open obligations "
                f"{named}); compacting the closed span {start}:{end} instead"
            )
        return self.describe()

    def to_dict(self) -> dict[str, Any]:
        """The decision in the CLI's JSON contract."""
        return {
            "action": self.action,
            "span": list(self.span),
            "requested": list(self.requested),
            "extended": self.extended,
            "critical": self.critical,
            "policy": self.policy,
            "obligations": [_ref_dict(r) for r in self.obligations],
            "findings": [finding_dict(f) for f in self.findings],
            "must_carry": {
                "identifiers": list(self.must_carry.identifiers),
                "negatives": [
                    {
                        "message_index": n.message_index,
                        "call_id": n.call_id,
                        "tool": n.tool,
                        "text": n.text,
                    }
                    for n in self.must_carry.negatives
                ],
                "pending": [_ref_dict(r) for r in self.must_carry.pending],
                "abandoned": [_ref_dict(r) for r in self.must_carry.abandoned],
                "identifiers_left_out": self.must_carry.identifiers_left_out,
            },
            "orphaned": [_orphan_dict(o) for o in self.orphaned],
        }

    def raise_if_refused(self) -> Decision:
        """Raise the refusal for a ``refuse`` decision; return self otherwise."""
        if self.action == "refuse":
            raise refusal_error(self)
        return self


def _unknown(decision: Decision) -> str:
    return (
        "the obligation ledger cannot say what is open, so nothing is compacted blind "
        f"({decision.ledger_unavailable}); compaction proceeds once the store answers and "
        "what waits in its outbox is replayed"
    )


def _orphan_dict(orphan: Orphan) -> dict[str, Any]:
    o = orphan.obligation
    return {
        "kind": o.kind,
        "id": o.id,
        "name": o.name,
        "owner": orphan.owner,
        "silent_seconds": orphan.silent_seconds,
        "discharge": orphan.discharge,
    }


def _ref_dict(ref: ObligationRef) -> dict[str, Any]:
    return {
        "kind": ref.kind,
        "id": ref.id,
        "name": ref.name,
        "message_index": ref.message_index,
        "discharge": ref.discharge,
    }


def finding_dict(finding: Finding) -> dict[str, Any]:
    """A finding in the CLI's JSON contract."""
    return {
        "rule": finding.rule,
        "message_index": finding.message_index,
        "severity": finding.severity,
        "detail": finding.detail,
    }


def refusal_error(decision: Decision) -> CompactionRefused:
    """The named refusal for `decision`: obligations first, liveness otherwise."""
    rules = {f.rule for f in decision.blocking}
    if decision.ledger_unavailable is not None:
        return LedgerUnavailableError(decision)
    if rules & _OBLIGATION_RULES or not rules:
        return OpenObligationError(decision)
    return LiveSpanCompactionError(decision)


Observer = Callable[[Decision, Analysis, int], None]
"""Called with the decision, the analysis it came from, and when evaluation began (ns)."""


class CompactionGate:
    """Decides whether a span of a transcript may be compacted.

    Example:
        >>> gate = CompactionGate("default")
        >>> messages = [
        ...     {"role": "user", "content": "book it"},
        ...     {"role": "assistant", "content": None, "tool_calls": [{"id": "c1",
        ...      "type": "function", "function": {"name": "book", "arguments": "{}"}}]},
        ...     {"role": "tool", "tool_call_id": "c1", "content": "booked ZFA04Y"},
        ...     {"role": "assistant", "content": "Booked ZFA04Y."},
        ... ]
        >>> decision = gate.evaluate(messages, 0, 2)
        >>> decision.action, decision.span, decision.extended
        ('compact', (0, 3), True)
    """

    def __init__(
        self,
        policy: Policy | str = "default",
        *,
        ledger: ObligationLedger | None = None,
        incremental: bool = True,
        sources: Iterable[ObligationSource] | ObligationSources | None = None,
    ) -> None:
        """Create a gate.

        Args:
            policy: a `Policy`, a built-in policy name or a policy file path.
            ledger: the live obligation ledger to cross-check; None for transcript-only checks.
            sources: engines read before every decision (`otel_compaction.sources`), combined
                with the ledger: open in either means open.
            incremental: keep each conversation's parse and scans between evaluations, so
                that a transcript which only grew costs its new messages (see
                `otel_compaction.incremental`); as many conversations as the ledger keeps.
        """
        self.policy = (policy if isinstance(policy, Policy) else Policy.load(policy)).compile()
        self.ledger = ledger
        self.cache: AnalysisCache | None = None
        """The per-conversation incremental state (None when not `incremental`)."""
        if incremental:
            bound = ledger.max_conversations if ledger is not None else DEFAULT_MAX_CONVERSATIONS
            self.cache = AnalysisCache(bound)
        self.sources: ObligationSources | None = None
        """The obligation sources consulted before every decision (None: the ledger only)."""
        if sources is not None:
            self.sources = (
                sources if isinstance(sources, ObligationSources) else ObligationSources(sources)
            )
        self._observers: list[Observer] = []

    def add_observer(self, observer: Observer) -> None:
        """Call `observer(decision, analysis, started_ns)` after every evaluation."""
        self._observers.append(observer)

    def analyse(
        self,
        transcript: Transcript | Sequence[Mapping[str, Any]],
        *,
        conversation_id: str | None = None,
        readings: Sequence[SourceReading] | None = None,
    ) -> Analysis:
        """Parse (if needed) and analyse `transcript` against the conversation's ledger
        (`conversation_id`, else the current conversation scope), combined with what the
        gate's sources read now (or the `readings` a caller on an event loop read for it). A
        list of messages is analysed incrementally: only what was appended since this
        conversation's last analysis is parsed and scanned."""
        conversation_id = conversation_id or current_conversation_id()
        snapshot = None
        if self.ledger is not None:
            try:
                snapshot = self.ledger.snapshot(conversation_id)
            except StoreError as error:  # an outage: the gate refuses rather than guess
                key = conversation_id or DEFAULT_CONVERSATION
                snapshot = LedgerSnapshot(key, (), unavailable=str(error))
        if self.sources:
            key = conversation_id or DEFAULT_CONVERSATION
            if readings is None:
                readings = self.sources.read(key)
            snapshot = self.sources.combine(snapshot or LedgerSnapshot(key, ()), readings).snapshot
        if isinstance(transcript, Transcript):
            return Analysis.build(transcript, self.policy, snapshot)
        if self.cache is None:
            return Analysis.build(Transcript.parse(transcript), self.policy, snapshot)
        return self.cache.analyse(transcript, self.policy, snapshot, key=conversation_id)

    def evaluate(
        self,
        transcript: Transcript | Analysis | Sequence[Mapping[str, Any]],
        start: int,
        end: int,
        *,
        critical: bool = False,
        conversation_id: str | None = None,
        addressable: bool = False,
        raise_on_refuse: bool = True,
        readings: Sequence[SourceReading] | None = None,
    ) -> Decision:
        """Decide on compacting messages ``start..end-1``.

        Args:
            transcript: messages, a parsed `Transcript`, or an `Analysis` to reuse.
            start: first message of the requested span (raised to the protected head).
            end: one past the last message of the requested span.
            critical: the budget is critical: no deferral, compact the span or refuse.
            conversation_id: the conversation whose ledger is cross-checked; the current
                conversation scope when None.
            addressable: the span will be archived verbatim (reversible compaction).
            raise_on_refuse: raise the refusal (the default) instead of returning it.
            readings: what the gate's sources read, when the caller read them (on its event
                loop: `ObligationSources.aread`); read now when None.

        Raises:
            CompactionRefused: the span is live and cannot be deferred (when
                `raise_on_refuse`), as `OpenObligationError` or `LiveSpanCompactionError`.
            SpanError: the span is empty, out of range or inside the protected head.
        """
        started_ns = time.time_ns()
        conversation_id = conversation_id or current_conversation_id()
        analysis = (
            transcript
            if isinstance(transcript, Analysis)
            else self.analyse(transcript, conversation_id=conversation_id, readings=readings)
        )
        decision = _decide(
            analysis,
            start,
            end,
            critical=critical,
            addressable=addressable,
            conversation_id=conversation_id,
        )
        if analysis.ledger is not None and analysis.ledger.orphaned:
            decision = _over_orphans(decision, analysis.ledger.orphaned)
        if analysis.ledger is not None and analysis.ledger.unavailable is not None:
            decision = _unavailable(decision, analysis.ledger.unavailable)
        for observer in self._observers:
            try:
                observer(decision, analysis, started_ns)
            except Exception:  # an observer must never change a decision
                _log.exception("otel-compaction: decision observer failed")
        if raise_on_refuse:
            decision.raise_if_refused()
        return decision

    def check(
        self,
        transcript: Transcript | Analysis | Sequence[Mapping[str, Any]],
        *,
        conversation_id: str | None = None,
    ) -> list[Finding]:
        """Every finding over the whole transcript, as if all of it were one span."""
        analysis = (
            transcript
            if isinstance(transcript, Analysis)
            else self.analyse(transcript, conversation_id=conversation_id)
        )
        view = SpanView(analysis, 0, len(analysis.transcript), addressable=True)
        return run_rules(view)


def _decide(
    analysis: Analysis,
    start: int,
    end: int,
    *,
    critical: bool,
    addressable: bool,
    conversation_id: str | None,
) -> Decision:
    n = len(analysis.transcript)
    if not 0 <= start < end <= n:
        raise SpanError(
            f"span {start}:{end} is not a non-empty span of the {n} messages "
            f"(0 <= START < END <= {n})"
        )
    requested = (start, end)
    start = max(start, analysis.head)
    if start >= end:
        raise SpanError(f"span {requested[0]}:{end} lies inside the protected head, span 0:{start}")

    def decision(action: Action, span: tuple[int, int], **extra: Any) -> Decision:
        return Decision(
            action=action,
            span=span,
            requested=requested,
            critical=critical,
            policy=analysis.policy.name,
            conversation_id=conversation_id,
            **extra,
        )

    extended_end, stoppers = _extension(analysis, start, end, addressable, critical)
    for candidate in dict.fromkeys((extended_end, end)):
        findings = run_rules(SpanView(analysis, start, candidate, addressable))
        if not any(f.severity == "block" for f in findings):
            return decision(
                "compact",
                (start, candidate),
                findings=tuple(findings),
                must_carry=must_carry(analysis, findings, start, candidate),
                extended=candidate != end,
            )

    blocking = [f for f in findings if f.severity == "block"]
    named = tuple(dict.fromkeys(f.obligation for f in blocking if f.obligation is not None))
    if stoppers:
        named = _extension_blockers(analysis, start, end, named, stoppers)
    if not critical:
        deferred = _deferral(analysis, start, blocking, addressable)
        if deferred is not None:
            c, older = deferred
            return decision(
                "defer",
                (start, c),
                obligations=named,
                findings=tuple(older),
                must_carry=must_carry(analysis, older, start, c),
            )
    # A refusal reports the span as requested (the contract), protected head included.
    return decision("refuse", requested, obligations=named, findings=tuple(findings))


def _over_orphans(decision: Decision, orphans: tuple[Orphan, ...]) -> Decision:
    """`decision` knowing the conversation's orphans; refused when it compacts or defers
    over one (deferring waits for a resolution an orphan never gets)."""
    refs = {(r.kind, r.id): r for r in decision.obligations}
    for finding in decision.findings:
        if finding.obligation is not None:
            refs.setdefault((finding.obligation.kind, finding.obligation.id), finding.obligation)
    over = [o for o in orphans if (o.obligation.kind, o.obligation.id) in refs]
    if not over or decision.action == "refuse":
        return replace(decision, orphaned=orphans)
    named = list(decision.obligations)
    findings = [f for f in decision.findings if f.severity == "block"]
    for orphan in over:
        o = orphan.obligation
        ref = refs[(o.kind, o.id)]
        if ref not in named:
            named.append(ref)
        rule = RULE_OF_KIND.get(o.kind, "ledger_mismatch")
        findings.append(Finding(rule, ref.message_index, orphan.describe(), "block", ref))
    return replace(
        decision,
        action="refuse",
        span=decision.requested,
        obligations=tuple(named),
        findings=tuple(findings),
        must_carry=MustCarry(),
        extended=False,
        orphaned=orphans,
    )


def _unavailable(decision: Decision, reason: str) -> Decision:
    """`decision` when the ledger could not say what is open: a refusal naming why."""
    finding = Finding("ledger_unavailable", None, reason, "block")
    return replace(
        decision,
        action="refuse",
        span=decision.requested,
        findings=(finding,),
        must_carry=MustCarry(),
        extended=False,
        ledger_unavailable=reason,
    )


def _extension(
    analysis: Analysis, start: int, end: int, addressable: bool, critical: bool
) -> tuple[int, list[Tracked]]:
    """The first cut at or after `end` that closes every blocking obligation arising in the
    span, or `end` itself when none exists within the extension limit; with what stopped the
    extension then: the blocking obligations that never resolve, or resolve past the limit
    (discharging those, not the calls whose results are already there, lets it proceed)."""
    # When the budget is critical the only alternative is a refusal, and compacting more than
    # asked is safe, so the limit gives way.
    limit = len(analysis.transcript) if critical else end + analysis.policy.extension_limit
    target = end
    blocking = analysis.blocking_rules(addressable)
    stoppers: list[Tracked] = []
    # Only what the span leaves unresolved at `end` moves the target; then what arises in
    # the messages the extension takes in.
    for tracked in analysis.unresolved_in(start, end):
        if tracked.rule in blocking:
            if tracked.resolved is None:
                return end, []  # the span itself holds it: its finding names it
            target = max(target, tracked.resolved + 1)
    if target > limit:
        return end, []
    obligations = analysis.obligations
    i = analysis.obligations_index(end)
    while i < len(obligations) and obligations[i].opened < target:
        tracked = obligations[i]
        i += 1
        if tracked.rule not in blocking:
            continue
        if tracked.resolved is None or tracked.resolved + 1 > limit:
            stoppers.append(tracked)
            continue
        target = max(target, tracked.resolved + 1)
    if stoppers:
        return end, stoppers
    if target != end and not analysis.pair_closed[target]:
        return end, []
    return target, []


def _extension_blockers(
    analysis: Analysis,
    start: int,
    end: int,
    named: tuple[ObligationRef, ...],
    stoppers: list[Tracked],
) -> tuple[ObligationRef, ...]:
    """What a refusal names when the span would close by extending it but for `stoppers`:
    the span's own obligations whose resolution is not in the transcript, then the stoppers.
    The span's calls whose results stand after it are left out: discharging them changes
    nothing, so naming them would bring the same refusal back forever."""
    resolved_later = {
        (t.kind, t.id, t.opened)
        for t in analysis.unresolved_in(start, end)
        if t.resolved is not None
    }
    kept = [r for r in named if (r.kind, r.id, r.message_index) not in resolved_later]
    kept += (ObligationRef(t.kind, t.id, t.opened, t.name, analysis.subjects(t)) for t in stoppers)
    return tuple(dict.fromkeys(kept))


def _deferral(
    analysis: Analysis, start: int, blocking: list[Finding], addressable: bool
) -> tuple[int, list[Finding]] | None:
    """The largest closed span ``[start, c)`` before the first blocking position that has no
    blocking finding of its own, with its findings."""
    if not analysis.pair_closed[start]:
        return None
    first = min((f.message_index for f in blocking if f.message_index is not None), default=None)
    probes = 0
    while first is not None and first > start and probes < _MAX_DEFERRAL_PROBES:
        probes += 1
        cut = _last_quiescent_cut(analysis, start, first, addressable)
        if cut is None:
            return None
        findings = run_rules(SpanView(analysis, start, cut, addressable))
        blocked = [f.message_index for f in findings if f.severity == "block"]
        if not blocked:
            return cut, findings
        first = min((i for i in blocked if i is not None), default=None)
    return None


def _last_quiescent_cut(
    analysis: Analysis, start: int, limit: int, addressable: bool
) -> int | None:
    """The largest cut c in ``start+1..limit`` that is pairing-closed and past the resolution
    of every blocking obligation arising in ``[start, c)``."""
    obligations = analysis.obligations
    blocking = analysis.blocking_rules(addressable)
    i = analysis.obligations_index(start)
    reach = start
    best: int | None = None
    for cut in range(start + 1, limit + 1):
        # Fold in the obligations arising in message cut-1.
        while i < len(obligations) and obligations[i].opened < cut:
            tracked = obligations[i]
            i += 1
            if tracked.rule in blocking:
                resolved = tracked.resolved
                reach = max(
                    reach, len(analysis.transcript) + 1 if resolved is None else resolved + 1
                )
        if reach <= cut and analysis.pair_closed[cut]:
            best = cut
    return best


def _by_tool(owed: Iterable[tuple[str, tuple[str, ...]]]) -> dict[str, list[tuple[str, ...]]]:
    """The subjects of each (tool, subjects) owed, by tool."""
    found: dict[str, list[tuple[str, ...]]] = {}
    for tool, subjects in owed:
        found.setdefault(tool, []).append(subjects)
    return found


def _siblings(
    by_tool: Mapping[str, list[tuple[str, ...]]], tool: str, subjects: tuple[str, ...]
) -> tuple[tuple[str, ...], ...]:
    """The other calls of `tool` owed the same way, by their subjects, each once."""
    return tuple(dict.fromkeys(s for s in by_tool.get(tool, ()) if s != subjects))


def must_carry(
    analysis: Analysis,
    findings: list[Finding],
    start: int,
    end: int,
    *,
    levels: tuple[str, ...] = ("carry",),
) -> MustCarry:
    """What a summary of ``[start, end)`` must carry, from the span's `findings` of a
    severity in `levels`: the identifiers and negatives, the obligations still pending at the
    cut (stale ones included), those only the ledger holds, and the calls abandoned through
    the ledger."""
    carried = [f for f in findings if f.severity in levels]
    identifiers = tuple(
        f.obligation.id for f in carried if f.rule == "unresolved_reference" and f.obligation
    )
    left_out = 0
    if any(f.rule == "unresolved_reference" for f in carried):
        from otel_compaction.rules.unresolved_reference import owed

        left_out = owed(analysis, start, end)[1]  # remembered from the span's check
    negative_at = {f.message_index for f in carried if f.rule == "null_result"}
    # Each negative and each pending call is told apart from the other calls of its tool
    # owed the same way: the failed ones, the pending ones (`otel_compaction.binding`).
    in_span = analysis.negatives_in(start, end)
    failed = _by_tool((n.tool, n.subjects) for n in in_span)
    negatives = tuple(
        replace(n, siblings=_siblings(failed, n.tool, n.subjects))
        for n in in_span
        if n.message_index in negative_at
    )
    still_open = [(o, analysis.subjects(o)) for o in analysis.pending_at(0, end)]
    waiting = _by_tool((o.name, subjects) for o, subjects in still_open if o.call >= 0)
    pending = [
        ObligationRef(
            o.kind, o.id, o.opened, o.name, subjects,
            _siblings(waiting, o.name, subjects) if o.call >= 0 else (),
        )
        for o, subjects in still_open
    ]  # fmt: skip
    pending += [f.obligation for f in carried if f.rule == "stale_obligation" and f.obligation]
    pending += [ObligationRef(r.kind, r.id, None, r.name) for r in analysis.ledger_only]
    # Only the ledger records an obligation abandoned.
    recorded = analysis.ledger is not None and bool(analysis.ledger.obligations)
    abandoned = [
        ObligationRef(o.kind, o.id, o.opened, o.name)
        for o in (analysis.obligations if recorded else ())
        if o.status == "abandoned"
    ]
    # ...or the transcript proves a call's run ended without it (`abandoned_call`).
    abandoned += [f.obligation for f in carried if f.rule == "abandoned_call" and f.obligation]
    return MustCarry(
        identifiers, negatives, tuple(dict.fromkeys(pending)), tuple(dict.fromkeys(abandoned)),
        left_out,
    )  # fmt: skip
