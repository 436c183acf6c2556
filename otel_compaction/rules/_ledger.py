"""What the two ledger rules share: the conflicts found when the ledger was matched to the
transcript, reported by the rule that names them."""

from __future__ import annotations

from otel_compaction.rules.base import Finding, ObligationRef, Rule, SpanView


def ledger_rule(name: str, summary: str) -> Rule:
    """The rule reporting the ledger conflicts named `name` (blocking unless lenient)."""

    def check(view: SpanView) -> list[Finding]:
        out: list[Finding] = []
        for conflict in view.analysis.ledger_conflicts:
            index = conflict.message_index
            if conflict.rule != name or (index is not None and not view.start <= index < view.end):
                continue
            ref = ObligationRef(conflict.kind, conflict.id, index, conflict.name)
            detail = f"{ref.describe()}: {conflict.detail}"
            out.append(Finding(name, index, detail, obligation=ref))
        return out

    return Rule(
        name=name,
        kind="ledger",
        summary=summary,
        severities={"default": "block", "strict": "block", "lenient": "warn"},
        check=check,
    )
