"""``open_tool_call``: a tool call in the span whose result is not in the span (seed 1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_compaction.rules.base import OPEN, Finding, Rule, SpanView, Tracked, unclosed

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis


class _Calls:
    """One `Tracked` per call (by ordinal), resolved as the results arrive."""

    __slots__ = ("changed", "opened", "resolved", "results", "tracked", "unanswered", "upto")

    def __init__(self) -> None:
        self.upto = 0  # calls folded
        self.results = 0  # results folded
        self.tracked: list[Tracked] = []
        self.opened: list[int] = []  # where each call arises (calls come in transcript order)
        self.resolved: list[int] = []  # where each resolves (`OPEN` while it has no result)
        self.unanswered: dict[int, None] = {}  # the ordinals without a result, ascending
        self.changed: list[int] = []  # the ordinals replaced in `tracked`, in turn

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
            if result.call is not None and not result.interim:  # an interim result leaves it open
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
)
