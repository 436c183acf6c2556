"""Facts about a transcript that every rule and every span evaluation reads.

`Analysis` is built once per (transcript, policy, ledger snapshot) in a single pass over the
shared facts (each result's outcome, the user turns, the ledger matched to the transcript),
then each rule's own scan from the registry. The obligations the scans find are kept sorted by
where they arise, with where they resolve, so span questions are answered by bisecting these
tables and evaluating many spans costs no re-scan.

The ledger is the runtime's word on what is open: a transcript obligation that the ledger
records as discharged (a call abandoned, a retry given up, a commitment withdrawn, a
transaction rolled back, a stray result absorbed) is resolved where it arose.
"""

from __future__ import annotations

import bisect
import itertools
import json
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from otel_compaction.ledger import LedgerSnapshot, Obligation
from otel_compaction.policy import Policy
from otel_compaction.reconcile import DISAGREE, CallPair, CallState, pair_newest, reconcile_calls
from otel_compaction.rules.base import OPEN, Severity, Tracked
from otel_compaction.rules.registry import RULES
from otel_compaction.scans import RESULT_HEAD, MessageScans, Outcome
from otel_compaction.transcript import ToolCall, Transcript, closed_cuts_of

__all__ = [
    "RESULT_HEAD",
    "Analysis",
    "LedgerConflict",
    "Negative",
    "Outcome",
    "Tracked",
    "call_target",
]

NEGATIVE_OUTCOMES = frozenset({"failure", "absence", "rejection"})
# Kinds whose discharge the ledger records for transcript obligations (tool calls have their
# own, richer comparison).
_LEDGER_DISCHARGED = (
    "transaction", "retry", "commitment", "tool_result", "background_task", "approval",
)  # fmt: skip
# The pairings of a tool-call record and its call that the comparison acts on.
_COMPARED: frozenset[CallState] = DISAGREE | frozenset({"abandoned"})


@dataclass(frozen=True, slots=True)
class Negative:
    """A negative result: what the summary must still say was not the case.

    ``subjects`` are what the call was about (its argument values), by which a summary may
    name it; ``outcome`` is ``failure``, ``absence`` or ``rejection``.
    """

    message_index: int
    call_id: str
    tool: str
    text: str
    subjects: tuple[str, ...] = ()
    outcome: str = "absence"
    siblings: tuple[tuple[str, ...], ...] = field(default=(), compare=False)
    """The subjects of the other calls of the same tool in the span a summary replaces, from
    which it must tell this one apart (`otel_compaction.binding`)."""


@dataclass(frozen=True, slots=True)
class LedgerConflict:
    """The ledger and the transcript disagree about one obligation (``sequence``: its ledger
    record's)."""

    rule: str
    kind: str
    id: str
    name: str
    message_index: int | None
    detail: str
    sequence: int | None = None


_T = TypeVar("_T")
_OPENED = operator.attrgetter("opened")
_MESSAGE_INDEX = operator.attrgetter("message_index")


_RESOLVED = operator.attrgetter("resolved")


def _resolved_at(o: Tracked) -> int:
    return OPEN if o.resolved is None else o.resolved


def _unresolved_positions(tracked: list[Tracked]) -> list[int]:
    """Where in `tracked` the obligations without a resolution stand (few among many: the
    search runs in C)."""
    resolved = list(map(_RESOLVED, tracked))
    out: list[int] = []
    at = -1
    while True:
        try:
            at = resolved.index(None, at + 1)
        except ValueError:
            return out
        out.append(at)


def call_target(call: ToolCall) -> str:
    """A call's arguments in one canonical form (a retry of the same target compares equal)."""
    try:
        return json.dumps(json.loads(call.arguments), sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return " ".join(call.arguments.split())


class _Order:
    """One conversation's obligations in order at its last analysis (see `Analysis._merged`):
    the lists, where each call stands in them, and what they were made from."""

    __slots__ = (
        "call_at", "changed", "changes", "latest", "obligations", "opened_at", "raw",
        "resolved_at", "turns", "upto",
    )  # fmt: skip

    def __init__(self) -> None:
        self.upto = 0  # calls in the lists
        self.changed: list[int] | None = None  # the calls' log of replacements, and its length
        self.changes = 0
        self.raw: list[Tracked] | None = None  # the other obligations, before stale marks
        self.turns = 0  # user turns the stale marks were made with
        self.latest = -1  # where the last of the other obligations arises
        self.obligations: list[Tracked] = []
        self.opened_at: list[int] = []
        self.resolved_at: list[int] = []
        self.call_at: list[int] = []  # by call ordinal: its place in the lists

    def keep(
        self,
        obligations: list[Tracked],
        opened_at: list[int],
        resolved_at: list[int],
        call_at: list[int],
        count: int,
        changed: list[int],
    ) -> None:
        """Remember lists of `count` calls, `changed` read to its end (they are never changed
        after: the next analysis copies them)."""
        self.obligations, self.opened_at, self.resolved_at = obligations, opened_at, resolved_at
        self.call_at, self.upto, self.changed, self.changes = call_at, count, changed, len(changed)

    def extended(
        self, calls: list[Tracked], opened: list[int], resolved: list[int], changed: list[int]
    ) -> tuple[list[Tracked], list[int], list[int]]:
        """The lists with the calls replaced since, and the new calls (which arise after every
        other obligation) appended."""
        obligations = self.obligations.copy()
        opened_at, resolved_at = self.opened_at.copy(), self.resolved_at.copy()
        call_at, upto = self.call_at, self.upto
        for ordinal in changed[self.changes :]:
            if ordinal < upto:
                at = call_at[ordinal]
                obligations[at] = calls[ordinal]
                resolved_at[at] = resolved[ordinal]
        count = len(calls)
        if count > upto:
            first = len(obligations)
            obligations += calls[upto:]
            opened_at += opened[upto:count]
            resolved_at += resolved[upto:count]
            call_at.extend(range(first, first + count - upto))  # only ever appended to
        self.keep(obligations, opened_at, resolved_at, call_at, count, changed)
        return obligations, opened_at, resolved_at


class Analysis:
    """Everything the rules need, computed once. Build with `Analysis.build`."""

    def __init__(
        self,
        transcript: Transcript,
        policy: Policy,
        ledger: LedgerSnapshot | None = None,
        scans: MessageScans | None = None,
    ) -> None:
        self.transcript = transcript
        self.policy = policy
        self.ledger = ledger
        self.scans = scans if scans is not None else MessageScans(policy)
        self._blocking: dict[bool, frozenset[str]] = {}
        self._memo: dict[tuple[Any, ...], Any] = {}
        """The policy's per-message scans (shared by the analyses of one growing
        conversation)."""
        self.abandoned: set[int] = set()
        self.ledger_conflicts: list[LedgerConflict] = []
        self.ledger_only: list[Obligation] = []
        self._ledger_records: dict[str, dict[str, list[Obligation]]] = {}
        if ledger is not None:
            self._match_ledger(ledger)
        self.outcomes: list[Outcome] = self.scans.outcomes(transcript.results, transcript.calls)
        self.user_turns = self.scans.user_turns(transcript)
        self.head = self._protected_head()
        self.facts: dict[str, Any] = {}
        parts: list[list[Tracked]] = []
        for rule in RULES.values():
            if rule.scan is None:
                continue
            found = rule.scan(self)
            self.facts[rule.name] = found
            if isinstance(found, list) and found and isinstance(found[0], Tracked):
                parts.append(found)
        self.stale: dict[tuple[str, str, int], str] = {}
        calls = self.facts.get("open_tool_call")
        if not self._ledger_records and not self.abandoned and parts and parts[0] is calls:
            self.obligations, self.opened_at, self.resolved_at = self._merged(parts[0], parts[1:])
        else:
            self.obligations, self.opened_at, self.resolved_at = self._sorted(parts)
        self.negatives: list[Negative] = self.facts.get("null_result") or []
        self.negative_at = list(map(_MESSAGE_INDEX, self.negatives))
        self.units_by_rule: dict[str, list[Tracked]] = {
            rule.name: self.facts.get(rule.name) or []
            for rule in RULES.values()
            if rule.kind == "atomicity" and self.severities()[rule.name] == "block"
        }
        """The atomic units of each atomicity rule whose severity blocks."""
        self.pair_closed = self._closed()

    @classmethod
    def build(
        cls,
        transcript: Transcript,
        policy: Policy,
        ledger: LedgerSnapshot | None = None,
        scans: MessageScans | None = None,
    ) -> Analysis:
        """Analyse `transcript` under `policy`, cross-checked against `ledger` when given;
        `scans` carries what earlier analyses of the same messages already scanned."""
        return cls(transcript, policy, ledger, scans)

    # -- span queries ------------------------------------------------------------------------

    def severities(self, addressable: bool = False) -> dict[str, Severity]:
        """Every rule's severity under the policy (relaxed when the span is archived)."""
        return self.policy.severities[addressable]

    def blocking_rules(self, addressable: bool = False) -> frozenset[str]:
        """The rules whose findings block a span (relaxed when it is archived)."""
        found = self._blocking.get(addressable)
        if found is None:
            found = self._blocking[addressable] = frozenset(
                name
                for name, severity in self.severities(addressable).items()
                if severity == "block"
            )
        return found

    def subjects(self, tracked: Tracked) -> tuple[str, ...]:
        """What `tracked` is about: a tool call's argument values (read from the call when
        first asked: most calls are never named in a decision), else its own subjects."""
        if tracked.call < 0:
            return tracked.subjects
        return self.scans.subjects(self.transcript.calls[tracked.call])

    def span_memo(self, key: tuple[Any, ...], compute: Callable[[], _T]) -> _T:
        """`compute()` once per analysis and `key` (what a span query costs is paid once
        when the gate asks it again: a check, then the must-carry of the same span)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return cast("_T", self._memo[key])

    def closed_cuts(self) -> list[int]:
        """Every cut the policy lets a span start or end at: no call before it lacks its
        result before it, and no atomic unit the policy enforces spans it."""
        return [i for i, closed in enumerate(self.pair_closed) if closed]

    def obligations_index(self, start: int) -> int:
        """Position in `obligations` of the first obligation arising at or after `start`."""
        return bisect.bisect_left(self.opened_at, start)

    def obligations_opened_in(self, start: int, end: int) -> list[Tracked]:
        """Obligations arising in messages ``start..end-1``."""
        lo = bisect.bisect_left(self.opened_at, start)
        hi = bisect.bisect_left(self.opened_at, end)
        return self.obligations[lo:hi]

    def unresolved_in(self, start: int, end: int) -> list[Tracked]:
        """Obligations arising in messages ``start..end-1`` whose resolution is not among
        them (never resolved, or resolved at or after `end`), in order; once per span."""

        def compute() -> list[Tracked]:
            lo = bisect.bisect_left(self.opened_at, start)
            hi = bisect.bisect_left(self.opened_at, end)
            # Most resolve before `end`: the test runs in C over where each resolves.
            open_at_end = map(end.__le__, self.resolved_at[lo:hi])
            return [self.obligations[i] for i in itertools.compress(range(lo, hi), open_at_end)]

        return self.span_memo(("unresolved", start, end), compute)

    def negatives_in(self, start: int, end: int) -> list[Negative]:
        """Negative results in messages ``start..end-1``."""
        return self.negatives[slice(*self.negatives_between(start, end))]

    def negatives_between(self, start: int, end: int) -> tuple[int, int]:
        """Where in `negatives` those of messages ``start..end-1`` begin and end."""
        lo = bisect.bisect_left(self.negative_at, start)
        return lo, bisect.bisect_left(self.negative_at, end, lo)

    def pending_at(self, start: int, end: int) -> list[Tracked]:
        """Obligations arising before `end` (and not before `start`) still open at the cut
        `end`, atomic units and stray results aside."""
        return [
            o
            for o in self.unresolved_in(start, end)
            if o.kind not in ("atomic_unit", "tool_result")
        ]

    def turns_between(self, first: int, last: int) -> int:
        """User turns in messages ``first+1..last``."""
        return bisect.bisect_right(self.user_turns, last) - bisect.bisect_right(
            self.user_turns, first
        )

    # -- shared facts ------------------------------------------------------------------------

    def _protected_head(self) -> int:
        head = self.policy.protected_head
        roles = set(head.roles)
        index = 0
        for entry in self.transcript.entries:
            if entry.role not in roles:
                break
            index += 1
        return min(len(self.transcript), index + head.messages)

    def _closed(self) -> bytearray:
        """Cut closedness: tool calls (abandoned ones resolved where they were opened) and
        the atomic units whose rule blocks."""
        if not self.abandoned:
            # The parse's closedness, with the cuts inside each blocking unit opened.
            closed = bytearray(self.transcript.closedness)
            for units in self.units_by_rule.values():
                for unit in units:
                    last = len(closed) - 1 if unit.resolved is None else unit.resolved
                    if last > unit.opened:
                        closed[unit.opened + 1 : last + 1] = bytes(last - unit.opened)
            return closed
        pairs: list[tuple[int, int | None]] = []
        for o in self.obligations:
            if o.kind == "tool_call" or (
                o.kind == "atomic_unit" and self.policy.severity(o.rule) == "block"
            ):
                pairs.append((o.opened, o.resolved))
        return closed_cuts_of(len(self.transcript), pairs)

    def _sorted(self, parts: list[list[Tracked]]) -> tuple[list[Tracked], list[int], list[int]]:
        """Every rule's obligations (`parts`, in registry order) resolved by the ledger, marked
        stale, sorted by where they arise (ties in that order); where each arises, and where
        each resolves (`OPEN` for none)."""
        tracked = [o for found in parts for o in found]
        if self._ledger_records:
            tracked = self._discharged_by_ledger(tracked)
        tracked = self._stale(tracked)
        obligations = sorted(tracked, key=_OPENED)
        return obligations, list(map(_OPENED, obligations)), list(map(_resolved_at, obligations))

    def _merged(
        self, calls: list[Tracked], others: list[list[Tracked]]
    ) -> tuple[list[Tracked], list[int], list[int]]:
        """What `_sorted` gives when the ledger resolves nothing, without reading every call:
        the calls are in order already (their fold keeps where each arises and which are
        unanswered), and the few other obligations are inserted in between them. When those
        are the same as at the conversation's last analysis, its order is taken over: only
        the calls answered since are replaced and the new calls appended."""
        from otel_compaction.rules.open_tool_call import in_order

        opened, resolved, unanswered, changed = in_order(self)
        raw = [o for found in others for o in found]
        rest = raw.copy()
        ages: dict[tuple[str, str], float] = {}
        pending = [i for i, o in enumerate(rest) if o.resolved is None]
        if self._stales():
            ages = self._ledger_ages()
            for ordinal in unanswered:
                self._mark_stale(calls[ordinal], ages)
            for position in pending:
                rest[position] = self._mark_stale(rest[position], ages)
        count = len(calls)
        last = self.scans.fold("obligations in order", _Order, count)
        if (
            last.changed is changed
            # The stale marks of the other obligations are those made last time.
            and not ages
            and (not pending or last.turns == len(self.user_turns))
            and (count == last.upto or opened[last.upto] > last.latest)
            and last.raw == raw
        ):
            return last.extended(calls, opened, resolved, changed)
        rest.sort(key=_OPENED)
        cuts = [bisect.bisect_right(opened, o.opened, 0, count) for o in rest]
        obligations, opened_at, resolved_at = calls.copy(), opened[:count], resolved[:count]
        # From the last, so that the earlier cuts stay where they were; ties keep the order
        # of the concatenation (calls first, then the others in order).
        for o, cut in zip(reversed(rest), reversed(cuts), strict=True):
            obligations.insert(cut, o)
            opened_at.insert(cut, o.opened)
            resolved_at.insert(cut, _resolved_at(o))
        call_at: list[int] = []
        at = 0
        for shift, cut in enumerate(cuts):
            call_at.extend(range(at + shift, cut + shift))
            at = cut
        call_at.extend(range(at + len(cuts), count + len(cuts)))
        last.keep(obligations, opened_at, resolved_at, call_at, count, changed)
        last.raw, last.turns = raw, len(self.user_turns)
        last.latest = rest[-1].opened if rest else -1
        return obligations, opened_at, resolved_at

    def _stales(self) -> bool:
        after = self.policy.stale_after
        return after.turns is not None or (after.seconds is not None and self.ledger is not None)

    def _stale(self, tracked: list[Tracked]) -> list[Tracked]:
        """Mark obligations older than the policy's ``stale_after``. A retry chain or a
        commitment closes when it goes stale (the model has moved on); a tool call or a
        transaction is runtime state and stays open, reported as stale."""
        if not self._stales():
            return tracked
        ages = self._ledger_ages()
        out = list(tracked)
        for position in _unresolved_positions(out):
            out[position] = self._mark_stale(out[position], ages)
        return out

    def _mark_stale(self, o: Tracked, ages: dict[tuple[str, str], float]) -> Tracked:
        """`o` (unresolved) marked in `stale` when it is stale; closed there when it is a
        retry chain or a commitment."""
        if o.kind in ("atomic_unit", "tool_result"):
            return o
        after = self.policy.stale_after
        stale_at: int | None = None
        reason = ""
        if after.turns is not None:
            following = bisect.bisect_right(self.user_turns, o.opened)
            if following + after.turns - 1 < len(self.user_turns):
                stale_at = self.user_turns[following + after.turns - 1]
                reason = f"{after.turns} user turns have passed since message {o.opened}"
        age = ages.get((o.kind, o.id))
        if not reason and after.seconds is not None and age is not None and age >= after.seconds:
            reason = f"open for {age:.0f} s (stale after {after.seconds:g} s)"
        if not reason:
            return o
        self.stale[(o.kind, o.id, o.opened)] = reason
        if o.kind in ("retry", "commitment") and stale_at is not None:
            return o.resolved_as(stale_at, "stale")
        return o

    def _ledger_ages(self) -> dict[tuple[str, str], float]:
        if self.ledger is None:
            return {}
        return {(o.kind, o.id): o.age_seconds for o in self.ledger.obligations if o.is_open}

    # -- the ledger against the transcript ---------------------------------------------------

    def _match_ledger(self, ledger: LedgerSnapshot) -> None:
        """Pair ledger tool-call records with transcript calls (`otel_compaction.reconcile`:
        newest with newest) and keep what disagrees; keep the other kinds' records for
        `_discharged_by_ledger`."""
        calls: list[Obligation] = []
        for record in ledger.obligations:
            if record.kind == "tool_call":
                calls.append(record)
            else:
                self._ledger_records.setdefault(record.kind, {}).setdefault(record.id, []).append(
                    record
                )
        if calls:
            by_id = self.scans.calls_by_id(self.transcript.calls)
            for pair in reconcile_calls(self.transcript, calls, by_id, only=_COMPARED):
                self._compare(pair)

    def _discharged_by_ledger(self, tracked: list[Tracked]) -> list[Tracked]:
        """Resolve transcript obligations the ledger records as discharged (newest with
        newest, as for tool calls); open records nothing in the transcript matches are
        `ledger_only`."""
        by_key: dict[tuple[str, str], list[int]] = {}
        for position, o in enumerate(tracked):
            if o.kind in _LEDGER_DISCHARGED:
                by_key.setdefault((o.kind, o.id), []).append(position)
        out = list(tracked)
        for kind in _LEDGER_DISCHARGED:
            for obligation_id, recorded in self._ledger_records.get(kind, {}).items():
                for record, at in pair_newest(recorded, by_key.get((kind, obligation_id), [])):
                    if at is None:
                        if record.is_open:
                            self.ledger_only.append(record)
                    elif not record.is_open:
                        o = out[at]
                        out[at] = o.resolved_as(o.opened, record.status or "result")
        for kind, by_id in self._ledger_records.items():
            if kind in _LEDGER_DISCHARGED:
                continue
            self.ledger_only.extend(r for rs in by_id.values() for r in rs if r.is_open)
        return out

    def _compare(self, pair: CallPair) -> None:
        record, call, state = pair.record, pair.call, pair.state
        if state == "missing":
            self.ledger_conflicts.append(
                LedgerConflict(
                    "ledger_mismatch", record.kind, record.id, record.name, None,
                    "open in the ledger, but its call is not in the transcript",
                    record.sequence,
                )
            )  # fmt: skip
        elif call is None:  # gone: closed, then compacted away
            return
        elif state == "answered":
            result = self.transcript.results[call.result or 0]
            self.ledger_conflicts.append(
                LedgerConflict(
                    "ledger_mismatch", record.kind, record.id, call.name, call.message_index,
                    f"open in the ledger, but the transcript has its result at message "
                    f"{result.message_index}",
                    record.sequence,
                )
            )  # fmt: skip
        elif state == "abandoned":
            self.abandoned.add(call.ordinal)
        elif state == "severed":
            self.ledger_conflicts.append(
                LedgerConflict(
                    "severed_obligation", record.kind, record.id, call.name, call.message_index,
                    f"the ledger recorded its {record.status}, but the transcript has no result",
                    record.sequence,
                )
            )  # fmt: skip
