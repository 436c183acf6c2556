"""``not_addressable``: the span will not be archived verbatim, so only the summary would
remain and it must pass the contradiction probe (seed 2's reversible compaction)."""

from __future__ import annotations

from otel_compaction.rules.base import Discharge, Finding, ObligationRef, Rule, SpanView


def check(view: SpanView) -> list[Finding]:
    """One finding for an unarchived span."""
    if view.addressable:
        return []
    return [
        Finding(
            "not_addressable", view.start,
            "the span is not archived verbatim; the summary must pass the contradiction probe",
            obligation=ObligationRef("archive", f"{view.start}:{view.end}", view.start),
        )
    ]  # fmt: skip


RULE = Rule(
    name="not_addressable",
    kind="quiescence",
    summary="the span is not archived, so only the summary would remain",
    severities={"default": "carry", "strict": "block", "lenient": "off"},
    check=check,
    discharge=Discharge("archive", None),
)
