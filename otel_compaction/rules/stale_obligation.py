"""``stale_obligation``: an obligation older than the policy's ``stale_after`` (user turns or
seconds in the ledger).

Nothing starves silently: a retry chain or a commitment that goes stale closes (the model has
moved on) and the summary must still say it was never done; a stale tool call or transaction
is runtime state, so it keeps blocking, and this finding says how long it has been waiting.
"""

from __future__ import annotations

from otel_compaction.rules.base import Finding, ObligationRef, Rule, SpanView


def check(view: SpanView) -> list[Finding]:
    """Stale obligations arising in the span."""
    analysis = view.analysis
    out: list[Finding] = []
    if not analysis.stale:
        return out
    for tracked in analysis.obligations_opened_in(view.start, view.end):
        reason = analysis.stale.get((tracked.kind, tracked.id, tracked.opened))
        if reason is None:
            continue
        ref = ObligationRef(
            tracked.kind, tracked.id, tracked.opened, tracked.name, analysis.subjects(tracked)
        )
        detail = f"{ref.describe()} is stale: {reason}"
        out.append(Finding("stale_obligation", tracked.opened, detail, obligation=ref))
    return out


RULE = Rule(
    name="stale_obligation",
    kind="obligation",
    summary="an obligation older than the policy's stale_after",
    severities={"default": "carry", "strict": "carry", "lenient": "warn"},
    check=check,
)
