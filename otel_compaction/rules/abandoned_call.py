"""``abandoned_call``: a call in the span from a run that ended without its result.

`open_tool_call` proves from the transcript that such a call will never be answered (its run
ended with it, a user turn came, and a later run's tool call was answered) and resolves it
abandoned, so it no
longer holds the span; this rule says so, once per call, and the summary must carry it as
abandoned: it never ran to its end, and its effect is unknown.
"""

from __future__ import annotations

from otel_compaction.rules.base import Finding, ObligationRef, Rule, SpanView
from otel_compaction.rules.open_tool_call import dead_calls


def check(view: SpanView) -> list[Finding]:
    """The calls of ended runs arising in the span."""
    analysis = view.analysis
    dead = dead_calls(analysis)
    out: list[Finding] = []
    if not dead:
        return out
    for tracked in analysis.obligations_opened_in(view.start, view.end):
        reason = dead.get(tracked.call) if tracked.rule == "open_tool_call" else None
        if reason is None:
            continue
        ref = ObligationRef("tool_call", tracked.id, tracked.opened, tracked.name)
        detail = f"{ref.describe()} will never be answered, discharged as abandoned: {reason}"
        out.append(Finding("abandoned_call", tracked.opened, detail, obligation=ref))
    return out


RULE = Rule(
    name="abandoned_call",
    kind="obligation",
    summary="a call from a run that ended without its result, discharged as abandoned",
    severities={"default": "carry", "strict": "carry", "lenient": "warn"},
    check=check,
)
