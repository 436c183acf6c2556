"""What the provider-atomicity rules share: a unit kind of the transcript as a cut constraint.

Each unit is tracked like an obligation that opens at its first message and resolves at its
last, so the gate extends a span over a unit it cuts and defers to a cut outside every unit,
exactly as it does for a tool call and its result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from otel_compaction.rules.base import (
    Discharge,
    Finding,
    Rule,
    Severity,
    SpanView,
    Tracked,
    straddling,
)

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis

BLOCKING: Final[Mapping[str, Severity]] = {
    "default": "block",
    "strict": "block",
    "lenient": "block",
}
"""A provider's own rule: a cut it rejects is blocked under every built-in policy."""


def atomicity_rule(
    name: str, what: str, summary: str, severities: Mapping[str, Severity] = BLOCKING
) -> Rule:
    """The rule for the transcript's units of kind `name` (blocking under every built-in
    policy unless `severities` says otherwise)."""

    def scan(analysis: Analysis) -> list[Tracked]:
        return [
            Tracked(name, "atomic_unit", f"{name}@{u.first}", what, u.first, u.last, "result")
            for u in analysis.transcript.units
            if u.kind == name
        ]

    def check(view: SpanView) -> list[Finding]:
        return straddling(view, name, what)

    return Rule(
        name=name,
        kind="atomicity",
        summary=summary,
        severities=dict(severities),
        check=check,
        scan=scan,
        discharge=Discharge("atomic_unit", None, "compact the whole unit or none of it"),
    )
