"""``unmatched_result``: a result whose call is nowhere in the transcript, or a second result
for a call already answered.

Such a result splits nothing (there is no call to sever it from), and the frameworks drop or
summarize it (LangChain summarizes it away, pydantic-ai drops it, OpenHands drops the
duplicate), so by default it is reported and never blocks. Where a policy blocks it,
`force_terminal` records it absorbed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_compaction.rules.base import Discharge, Finding, ObligationRef, Rule, SpanView, Tracked

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis


class _Unmatched:
    __slots__ = ("answered", "found", "upto")

    def __init__(self) -> None:
        self.upto = 0
        self.answered: set[str] = set()
        self.found: list[Tracked] = []


def scan(analysis: Analysis) -> list[Tracked]:
    """Every result paired with no call, telling duplicates from results with no call."""
    results = analysis.transcript.results
    fold = analysis.scans.fold("unmatched_result", _Unmatched, len(results))
    for result in results[fold.upto :]:
        if result.call is not None:
            fold.answered.add(result.call_id)
            continue
        name = "duplicate result" if result.call_id in fold.answered else "result without a call"
        fold.found.append(
            Tracked(
                "unmatched_result", "tool_result", result.call_id, name, result.message_index,
                None,
            )
        )  # fmt: skip
    fold.upto = len(results)
    return fold.found.copy()


def check(view: SpanView) -> list[Finding]:
    """Unmatched results in the span not yet absorbed."""
    out: list[Finding] = []
    for tracked in view.analysis.unresolved_in(view.start, view.end):
        if tracked.rule != "unmatched_result" or tracked.resolved is not None:
            continue
        what = (
            "a second result for an already answered call"
            if tracked.name == "duplicate result"
            else "a result whose call is not in the transcript"
        )
        ref = ObligationRef("tool_result", tracked.id, tracked.opened, tracked.name)
        out.append(
            Finding("unmatched_result", tracked.opened, f"{tracked.id}: {what}", obligation=ref)
        )
    return out


RULE = Rule(
    name="unmatched_result",
    kind="obligation",
    summary="a result with no call anywhere, or a second result for an answered call",
    severities={"default": "warn", "strict": "block", "lenient": "warn"},
    check=check,
    scan=scan,
    discharge=Discharge(
        "tool_result",
        "absorbed",
        "force_terminal() records the result absorbed",
    ),
)
