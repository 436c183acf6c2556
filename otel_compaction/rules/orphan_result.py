"""``orphan_result``: a result in the span whose call stands before the span.

Cutting there splits the pair: the kept part would answer a call it no longer shows. (A
result with no call anywhere is `unmatched_result`: the cut does not split anything.)
"""

from __future__ import annotations

from otel_compaction.rules.base import Discharge, Finding, ObligationRef, Rule, SpanView


def check(view: SpanView) -> list[Finding]:
    """Results in the span answering a call before it."""
    transcript = view.analysis.transcript
    out: list[Finding] = []
    if transcript.is_closed(view.start):
        return out  # every call before the span has its result before it
    for entry in transcript.entries[view.start : view.end]:
        for ordinal in entry.results:
            result = transcript.results[ordinal]
            call = transcript.call_of(result)
            if call is None or call.message_index >= view.start:
                continue
            detail = (
                f"result for {result.call_id} answers the call at message "
                f"{call.message_index}, before the span starts at {view.start}"
            )
            ref = ObligationRef("orphaned_call", result.call_id, call.message_index, call.name)
            out.append(Finding("orphan_result", result.message_index, detail, obligation=ref))
    return out


RULE = Rule(
    name="orphan_result",
    kind="obligation",
    summary="a result in the span whose call stands before the span",
    severities={"default": "block", "strict": "block", "lenient": "block"},
    check=check,
    discharge=Discharge(
        "orphaned_call",
        None,
        "start the span at a closed cut, before the call",
    ),
)
