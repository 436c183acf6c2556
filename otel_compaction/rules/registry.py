"""The registry: every rule, in the order the gate runs them. Adding a rule is one module
under ``rules/`` and one line here; policies, the CLI and telemetry read the names from here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from otel_compaction.rules import (
    abandoned_call,
    dangling_commitment,
    ledger_mismatch,
    not_addressable,
    null_result,
    open_background_task,
    open_tool_call,
    open_transaction,
    orphan_result,
    pending_approval,
    pending_retry,
    reasoning_item,
    severed_obligation,
    split_response,
    stale_obligation,
    thinking_tool_loop,
    unmatched_result,
    unresolved_reference,
    whole_thinking_loop,
)
from otel_compaction.rules.base import DEFAULT_REMEDY, Rule, Severity

__all__ = [
    "BUILTIN_POLICIES",
    "DISCHARGE",
    "RULES",
    "RULE_NAMES",
    "RULE_OF_KIND",
    "remedy",
    "severities_of",
]

BUILTIN_POLICIES: Final = ("default", "strict", "lenient")

RULES: Final[Mapping[str, Rule]] = {
    rule.name: rule
    for rule in (
        open_tool_call.RULE,
        orphan_result.RULE,
        unmatched_result.RULE,
        open_transaction.RULE,
        pending_retry.RULE,
        dangling_commitment.RULE,
        open_background_task.RULE,
        pending_approval.RULE,
        stale_obligation.RULE,
        abandoned_call.RULE,
        null_result.RULE,
        unresolved_reference.RULE,
        not_addressable.RULE,
        ledger_mismatch.RULE,
        severed_obligation.RULE,
        thinking_tool_loop.RULE,
        whole_thinking_loop.RULE,
        reasoning_item.RULE,
        split_response.RULE,
    )
}

RULE_NAMES: Final[tuple[str, ...]] = tuple(RULES)


def _declared() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    rule_of: dict[str, str] = {}
    status_of: dict[str, str] = {}
    remedy_of: dict[str, str] = {}
    shared: set[str] = set()
    for rule in RULES.values():
        if rule.discharge is None:
            continue
        kind = rule.discharge.kind
        if kind in remedy_of:  # several rules name it (the provider's atomic units)
            shared.add(kind)
            continue
        rule_of[kind] = rule.name
        remedy_of[kind] = rule.discharge.remedy
        if rule.discharge.status is not None:
            status_of[kind] = rule.discharge.status
    return {k: v for k, v in rule_of.items() if k not in shared}, status_of, remedy_of


_RULE_OF_KIND, _STATUS_OF_KIND, _REMEDY_OF_KIND = _declared()

RULE_OF_KIND: Final[Mapping[str, str]] = _RULE_OF_KIND
"""The rule whose findings name obligations of each kind (kinds that one rule alone names)."""

DISCHARGE: Final[Mapping[str, str]] = _STATUS_OF_KIND
"""The terminal state `GuardedCompactor.force_terminal` records for each obligation kind."""


def remedy(kind: str) -> str:
    """How an obligation of `kind` is discharged, as a refusal names it."""
    return _REMEDY_OF_KIND.get(kind, DEFAULT_REMEDY)


def severities_of(policy: str) -> dict[str, Severity]:
    """Every rule's severity under the built-in policy `policy`."""
    return {name: rule.severities[policy] for name, rule in RULES.items()}
