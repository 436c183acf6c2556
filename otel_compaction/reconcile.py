"""The ledger against a transcript: one pairing rule for every caller.

The ledger and a transcript both know tool calls by id, and ids are reused (within one
transcript, and across the turns of a conversation), so which ledger record stands for which
transcript call is a rule. It lives here, and the gate's analysis, passive detection, the
LangChain helpers and the Agents SDK session guard all read the ledger through it:

* the transcript pairs a result with the latest unanswered call of its id before it
  (`otel_compaction.transcript.Transcript`);
* the ledger pairs a resolution with the earliest open obligation of its id
  (`otel_compaction.ledger.ObligationLedger.resolve`), so an id's resolved records come before
  its open ones;
* a ledger record pairs with the transcript's call of the same id **newest with newest**: an
  id's last record with its last call, the one before with the call before, and so back. The
  surplus on either side is the oldest: calls compacted out of the transcript, or records the
  ledger's bounds dropped.

`reconcile_calls` gives every tool-call record its pair and says how the two stand
(`CallState`); `pair_newest` and `pair_earliest` are the rule itself, for obligations of the
other kinds and for results whose call is gone. Everything here is a pure function of what it
is given: no I/O, no locks, linear in the records and calls.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Literal, NamedTuple, TypeVar

from otel_compaction.ledger import Obligation
from otel_compaction.transcript import ToolCall, Transcript

__all__ = [
    "AGREE",
    "DISAGREE",
    "CallPair",
    "CallState",
    "by_id",
    "calls_by_id",
    "pair_earliest",
    "pair_newest",
    "reconcile_calls",
    "unpaired_calls",
]

_T = TypeVar("_T")

CallState = Literal["open", "closed", "gone", "answered", "missing", "severed", "abandoned"]
"""How a tool-call record and its transcript call stand:

* ``open``: open in the ledger, its call in the transcript without a result (they agree);
* ``closed``: resolved in the ledger, its result in the transcript (they agree);
* ``gone``: resolved in the ledger, its call no longer in the transcript (compacted after it
  closed: they agree);
* ``answered``: open in the ledger, but the transcript has its result;
* ``missing``: open in the ledger, but the transcript has no call for it (still running and
  not yet stored, or compacted away while it was owed);
* ``severed``: the ledger recorded its result or error, the transcript has the call without
  it;
* ``abandoned``: the ledger recorded it abandoned, the transcript has the call without a
  result (no result will come: the call is resolved where it stands).
"""

AGREE: frozenset[CallState] = frozenset({"open", "closed", "gone", "abandoned"})
"""The states in which the ledger and the transcript agree."""

DISAGREE: frozenset[CallState] = frozenset({"answered", "missing", "severed"})
"""The states in which they do not."""


class CallPair(NamedTuple):
    """One ledger tool-call record and the transcript call it pairs with (None: none does)."""

    record: Obligation
    call: ToolCall | None
    state: CallState


def by_id(records: Iterable[Obligation], kind: str = "tool_call") -> dict[str, list[Obligation]]:
    """The records of `kind`, by id, each id's in the order given (the ledger's: opening)."""
    out: dict[str, list[Obligation]] = {}
    for record in records:
        if record.kind == kind:
            found = out.get(record.id)
            if found is None:
                out[record.id] = [record]
            else:
                found.append(record)
    return out


def calls_by_id(calls: Sequence[ToolCall]) -> dict[str, list[int]]:
    """The ordinals of each id's calls, in transcript order."""
    out: dict[str, list[int]] = {}
    for call in calls:
        found = out.get(call.id)
        if found is None:
            out[call.id] = [call.ordinal]
        else:
            found.append(call.ordinal)
    return out


def pair_newest(
    records: Sequence[Obligation], items: Sequence[_T]
) -> list[tuple[Obligation, _T | None]]:
    """Pair one id's `records` (in opening order) with its transcript `items` (in transcript
    order), newest with newest; the oldest records pair with None when there are fewer items.

    Example:
        >>> from otel_compaction.ledger import Obligation
        >>> r = [Obligation("tool_call", "c1", "f", "", s, 0) for s in range(2)]
        >>> [(rec.sequence, item) for rec, item in pair_newest(r, ["a", "b", "c"])]
        [(0, 'b'), (1, 'c')]
        >>> [(rec.sequence, item) for rec, item in pair_newest(r, ["c"])]
        [(0, None), (1, 'c')]
    """
    offset = len(items) - len(records)
    return [
        (record, items[offset + at] if offset + at >= 0 else None)
        for at, record in enumerate(records)
    ]


def pair_earliest(
    records: Sequence[Obligation], items: Sequence[_T]
) -> list[tuple[Obligation, _T]]:
    """Pair `records` (open, of one id, in opening order) with resolutions `items` as the
    ledger does: each resolution with the earliest record still open."""
    return list(zip(records, items, strict=False))


def reconcile_calls(
    transcript: Transcript,
    records: Iterable[Obligation],
    ordinals: Mapping[str, Sequence[int]] | None = None,
    *,
    only: Collection[CallState] | None = None,
) -> list[CallPair]:
    """Every tool-call record of `records` with its transcript call and how they stand (those
    in the states `only` names, when given: the caller's, for a cheaper pass).

    Records of other kinds are skipped. The pairs come id by id (ids in the order of their
    first record), each id's in record order. `ordinals` is the transcript's call ordinals by
    id when the caller keeps them (`calls_by_id` of its calls otherwise).
    """
    grouped = by_id(records)
    if not grouped:
        return []
    if ordinals is None:
        ordinals = calls_by_id(transcript.calls)
    calls = transcript.calls
    out: list[CallPair] = []
    append = out.append
    for call_id, recorded in grouped.items():
        shown = ordinals.get(call_id, ())
        offset = len(shown) - len(recorded)
        for at, record in enumerate(recorded, offset):
            # `pair_newest`, inlined: this runs for every record on every decision.
            call = calls[shown[at]] if at >= 0 else None
            if call is None:
                state: CallState = "missing" if record.status is None else "gone"
            elif record.status is None:
                state = "open" if call.result is None else "answered"
            elif call.result is not None:
                state = "closed"
            else:
                state = "abandoned" if record.status == "abandoned" else "severed"
            if only is None or state in only:
                append(CallPair(record, call, state))
    return out


def unpaired_calls(
    transcript: Transcript,
    records: Iterable[Obligation],
    ordinals: Mapping[str, Sequence[int]] | None = None,
) -> list[ToolCall]:
    """The transcript's calls that no tool-call record of `records` pairs with (an id's
    oldest calls beyond its records), in transcript order."""
    if ordinals is None:
        ordinals = calls_by_id(transcript.calls)
    recorded = {call_id: len(found) for call_id, found in by_id(records).items()}
    calls = transcript.calls
    out: list[ToolCall] = []
    for call_id, shown in ordinals.items():
        surplus = len(shown) - recorded.get(call_id, 0)
        out.extend(calls[o] for o in shown[: max(surplus, 0)])
    out.sort(key=_ordinal)
    return out


def _ordinal(call: ToolCall) -> int:
    return call.ordinal
