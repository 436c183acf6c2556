"""``null_result``: a negative result in the span: "searched, found nothing" must survive as a
negative, or its absence reads as "never searched" (seed 2).

A negative says something was not the case: an absence (not found, no matches, an empty
search result), a failure, or a rejection. A command that succeeded with no output is silent
success, not a negative. Tools whose output means nothing (a scratchpad) are ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_compaction.rules.base import Discharge, Finding, ObligationRef, Rule, SpanView

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis, Negative
    from otel_compaction.transcript import ToolResult


def scan(analysis: Analysis) -> list[Negative]:
    """Every negative result, with what its call was about."""
    from otel_compaction.analysis import NEGATIVE_OUTCOMES, RESULT_HEAD, Negative

    ignored = set(analysis.policy.patterns.null_result.ignore_tools)
    transcript = analysis.transcript
    outcomes = analysis.outcomes

    def negative(result: ToolResult) -> list[Negative]:
        outcome = outcomes[result.ordinal]
        if outcome not in NEGATIVE_OUTCOMES:
            return []
        call = transcript.call_of(result)
        tool = call.name if call is not None else ""
        if tool in ignored:
            return []
        excerpt = _excerpt(analysis, result.text[:RESULT_HEAD]) or "(empty result)"
        subjects = analysis.scans.subjects(call)
        return [Negative(result.message_index, result.call_id, tool, excerpt, subjects, outcome)]

    return analysis.scans.appended("null_result", transcript.results, negative)


def _excerpt(analysis: Analysis, head: str) -> str:
    """About 200 characters of the result around what makes it negative (a tool's preamble,
    such as a shell's exit-status header, is not what the summary must say)."""
    flat = " ".join(head.split())
    policy = analysis.policy
    for regex in (policy.rejection_regex, policy.null_regex, policy.error_regex):
        found = regex
        match = found.search(flat) if found is not None else None
        if match is not None:
            start = max(0, match.start() - 60)
            return ("…" if start else "") + flat[start : start + 200]
    return flat[:200]


def check(view: SpanView) -> list[Finding]:
    """Negative results in the span."""
    analysis = view.analysis
    severity = analysis.severities(view.addressable)["null_result"]

    def finding(n: Negative) -> tuple[Finding]:
        return (
            Finding(
                "null_result", n.message_index,
                f"{n.tool or 'tool'} ({n.call_id}) returned a negative result: {n.text}",
                severity,
                ObligationRef("negative_result", n.call_id, n.message_index, n.tool),
            ),
        )  # fmt: skip

    # One finding per negative while the conversation grows, at the policy's severity.
    found = analysis.scans.appended(f"null_result findings {severity}", analysis.negatives, finding)
    return found[slice(*analysis.negatives_between(view.start, view.end))]


RULE = Rule(
    name="null_result",
    kind="quiescence",
    summary='a negative result ("not found", empty search, error, rejection) to keep as one',
    severities={"default": "carry", "strict": "block", "lenient": "warn"},
    check=check,
    scan=scan,
    discharge=Discharge("negative_result", None),
)
