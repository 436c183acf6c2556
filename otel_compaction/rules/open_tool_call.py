"""``open_tool_call``: a tool call in the span whose result is not in the span (seed 1).

A call from a run that has ended without its result is no longer open: it will never be
answered. That is proved from the transcript alone, and only so: the call has no result (nor
a long-running tool's interim one) anywhere, the model's run ended with it (nothing of the
model's stands between its response and the next user turn), and a later run made a tool
call that was answered. A provider rejects a transcript where a call lacks its result before
later turns, so the conversation went on, through a whole tool round, without it. (A model
that only speaks after the turn, "still waiting", may be talking over a call its runtime holds
in flight: not a proof.) Such a call is resolved as abandoned where
it arose (the ``abandoned_call`` rule reports it, and the summary must say it never ran to
its end), unless the ledger holds it open (the runtime's word that it is still in flight) or
the policy turns ``abandoned_call`` off.
Without this, a call whose process died would hold every later span for good (Google ADK's
issue 7236: an orphaned call stops its compaction forever).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from otel_compaction.rules.base import OPEN, Discharge, Finding, Rule, SpanView, Tracked, unclosed

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis
    from otel_compaction.transcript import Entry


class _Calls:
    """One `Tracked` per call (by ordinal), resolved as the results arrive."""

    __slots__ = (
        "changed", "interim", "opened", "resolved", "results", "tracked", "unanswered", "upto",
    )  # fmt: skip

    def __init__(self) -> None:
        self.upto = 0  # calls folded
        self.results = 0  # results folded
        self.tracked: list[Tracked] = []
        self.opened: list[int] = []  # where each call arises (calls come in transcript order)
        self.resolved: list[int] = []  # where each resolves (`OPEN` while it has no result)
        self.unanswered: dict[int, None] = {}  # the ordinals without a result, ascending
        self.changed: list[int] = []  # the ordinals replaced in `tracked`, in turn
        self.interim: set[int] = set()  # the ordinals answered for now by an interim result

    def extend(self, analysis: Analysis) -> None:
        transcript, outcomes = analysis.transcript, analysis.outcomes
        calls, results, tracked = transcript.calls, transcript.results, self.tracked
        for call in calls[self.upto :]:
            tracked.append(
                Tracked(
                    "open_tool_call", "tool_call", call.id, call.name, call.message_index,
                    None, "open", (), call.ordinal,
                )
            )  # fmt: skip
            self.opened.append(call.message_index)
            self.resolved.append(OPEN)
            self.unanswered[call.ordinal] = None
        for result in results[self.results :]:
            if result.interim and result.call is not None:
                self.interim.add(result.call)  # a long-running call: its final result will come
            elif result.call is not None:
                status = "error" if outcomes[result.ordinal] == "failure" else "result"
                before = tracked[result.call]
                tracked[result.call] = before.resolved_as(result.message_index, status)
                self.resolved[result.call] = result.message_index
                self.changed.append(result.call)
                self.unanswered.pop(result.call, None)
        self.upto, self.results = len(calls), len(results)


def scan(analysis: Analysis) -> list[Tracked]:
    """Every call with where it resolves: its result, or where it was opened when the ledger
    records it abandoned."""
    fold = analysis.scans.fold("open_tool_call", _Calls, len(analysis.transcript.calls))
    fold.extend(analysis)
    out = fold.tracked.copy()
    if analysis.policy.severity("abandoned_call") != "off":
        analysis.abandoned.update(dead_calls(analysis))
    for ordinal in analysis.abandoned:
        if out[ordinal].resolved is None:
            out[ordinal] = out[ordinal].resolved_as(out[ordinal].opened, "abandoned")
    return out


def in_order(analysis: Analysis) -> tuple[list[int], list[int], list[int], list[int]]:
    """Of the calls `scan` returned for `analysis` (in transcript order, so sorted by where
    they arise): where each arises, where each resolves (`OPEN` for none), the ordinals of
    those without a result, ascending, and the ordinals whose call was replaced (resolved), in
    turn. The first, second and last lists are the conversation's own, growing with it: read
    them, do not keep them (but the last, to know what was replaced since)."""
    fold = analysis.scans.fold("open_tool_call", _Calls, len(analysis.transcript.calls))
    return fold.opened, fold.resolved, list(fold.unanswered), fold.changed


def _ended_at(entries: Sequence[Entry], call: int, turn: int) -> bool:
    """True when the model's run ended with the response holding the call at message `call`:
    between it and the user's turn at `turn` stand only the rest of that response (more
    calls, no prose) and results. (A model that spoke or called again before the turn went on
    in the same run, as if the call had been answered: not a proof.)"""
    at = call + 1
    while at < turn and entries[at].role == "assistant" and entries[at].calls:
        if entries[at].text.strip():
            return False
        at += 1
    return all(e.role != "assistant" for e in entries[at:turn])


def _next_round(analysis: Analysis, turn: int) -> tuple[int, int] | None:
    """The first tool round after the user's turn at `turn`: where a call of the model's
    stands and where its result does (the runtime sent the conversation on, twice, without
    the unanswered call)."""
    transcript = analysis.transcript
    for entry in transcript.entries[turn + 1 :]:
        for ordinal in entry.calls:
            answer = transcript.calls[ordinal].result
            if answer is not None:
                return entry.index, transcript.results[answer].message_index
    return None


def dead_calls(analysis: Analysis) -> Mapping[int, str]:
    """The unanswered calls of ended runs (by ordinal), each with why it will never be
    answered: see the module. Once per analysis."""

    def compute() -> dict[int, str]:
        fold = analysis.scans.fold("open_tool_call", _Calls, len(analysis.transcript.calls))
        turns, entries = analysis.user_turns, analysis.transcript.entries
        calls = analysis.transcript.calls
        held: set[str] = set()
        if analysis.ledger is not None:
            held = {o.id for o in analysis.ledger.open() if o.kind == "tool_call"}
        out: dict[int, str] = {}
        rounds: dict[int, tuple[int, int] | None] = {}  # by user turn: calls share turns
        for ordinal in fold.unanswered:
            call = calls[ordinal]
            if ordinal in fold.interim or call.id in held:
                continue
            at = bisect.bisect_right(turns, call.message_index)
            if at == len(turns):
                break  # no user turn after it, nor after any later call
            turn = turns[at]
            if not _ended_at(entries, call.message_index, turn):
                continue
            if turn not in rounds:
                rounds[turn] = _next_round(analysis, turn)
            went_on = rounds[turn]
            if went_on is None:
                break
            out[ordinal] = (
                f"its run ended without its result: the user spoke at message {turn}, and a "
                f"later call at message {went_on[0]} was answered at message {went_on[1]}"
            )
        return out

    return analysis.span_memo(("dead calls",), compute)


def check(view: SpanView) -> list[Finding]:
    """Calls arising in the span without their resolution in it."""
    return unclosed(view, "open_tool_call", "tool call")


RULE = Rule(
    name="open_tool_call",
    kind="obligation",
    summary="a call in the span whose result is not in the span",
    severities={"default": "block", "strict": "block", "lenient": "block"},
    check=check,
    scan=scan,
    discharge=Discharge(
        "tool_call",
        "abandoned",
        "append its result, or force_terminal() records it abandoned",
    ),
)
