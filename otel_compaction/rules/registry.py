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
)
from otel_compaction.rules.base import Rule, Severity

__all__ = ["BUILTIN_POLICIES", "RULES", "RULE_NAMES", "severities_of"]

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
        reasoning_item.RULE,
        split_response.RULE,
    )
}

RULE_NAMES: Final[tuple[str, ...]] = tuple(RULES)


def severities_of(policy: str) -> dict[str, Severity]:
    """Every rule's severity under the built-in policy `policy`."""
    return {name: rule.severities[policy] for name, rule in RULES.items()}
