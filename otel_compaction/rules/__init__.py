"""The rules: one module each, listed in one registry (`otel_compaction.rules.registry`).

A rule has a name, a kind, its severity under each built-in policy, an optional scan over the
whole transcript (run once per `Analysis`) and a check over a span (a pure function of a
`SpanView`). The gate gives each finding its severity from the policy; a rule whose severity
is ``off`` is not checked. Adding a rule is one module here and one line in the registry.
"""

from __future__ import annotations

from otel_compaction.rules.base import (
    Discharge,
    Finding,
    ObligationRef,
    Rule,
    Severity,
    SpanView,
    Tracked,
)
from otel_compaction.rules.registry import (
    BUILTIN_POLICIES,
    DISCHARGE,
    RULE_NAMES,
    RULE_OF_KIND,
    RULES,
    remedy,
    severities_of,
)

__all__ = [
    "BUILTIN_POLICIES",
    "DISCHARGE",
    "RULES",
    "RULE_NAMES",
    "RULE_OF_KIND",
    "Discharge",
    "Finding",
    "ObligationRef",
    "Rule",
    "Severity",
    "SpanView",
    "Tracked",
    "remedy",
    "run_rules",
    "severities_of",
]


def run_rules(view: SpanView) -> list[Finding]:
    """Every enabled rule over `view`, each finding with its policy severity, in
    transcript order."""
    severities = view.analysis.severities(view.addressable)
    out: list[Finding] = []
    for name, rule in RULES.items():
        severity = severities[name]
        if severity == "off":
            continue
        for found in rule.check(view):
            # Without a place in the transcript a finding cannot make a span live; it is reported.
            level: Severity = (
                "warn" if found.message_index is None and severity == "block" else severity
            )
            out.append(
                found
                if found.severity == level
                else Finding(found.rule, found.message_index, found.detail, level, found.obligation)
            )
    out.sort(key=lambda f: f.message_index if f.message_index is not None else -1)
    return out
