"""``open_transaction``: a transaction begun in the span and not ended in it (seed 1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_compaction.rules.base import Discharge, Finding, Rule, SpanView, Tracked, unclosed
from otel_compaction.transcript import ToolCall

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis


class _Stack:
    """Begin/end calls matched as a stack, one call at a time: closed pairs are final."""

    __slots__ = ("closed", "stack", "upto")

    def __init__(self) -> None:
        self.upto = 0
        self.closed: list[Tracked] = []
        self.stack: list[ToolCall] = []


def scan(analysis: Analysis) -> list[Tracked]:
    """Begin/end tool calls (by the policy's name patterns) matched as a stack."""
    policy = analysis.policy
    begin, end = policy.transaction_begin_regex, policy.transaction_end_regex
    if begin is None or end is None:
        return []
    calls = analysis.transcript.calls
    fold = analysis.scans.fold("open_transaction", _Stack, len(calls))
    role = analysis.scans.tool_role
    for call in calls[fold.upto :]:
        kind = role(call.name, begin, end)
        if kind == "begin":
            fold.stack.append(call)
        elif kind == "end" and fold.stack:
            opened = fold.stack.pop()
            status = "rolled_back" if "roll" in call.name.lower() else "committed"
            fold.closed.append(
                Tracked(
                    "open_transaction", "transaction", opened.id, opened.name,
                    opened.message_index, call.message_index, status,
                )
            )  # fmt: skip
    fold.upto = len(calls)
    return fold.closed + [
        Tracked("open_transaction", "transaction", c.id, c.name, c.message_index, None)
        for c in fold.stack
    ]


def check(view: SpanView) -> list[Finding]:
    """Transactions begun in the span and not ended in it, and those only the ledger holds."""
    return unclosed(view, "open_transaction", "transaction", ledger_kind="transaction")


RULE = Rule(
    name="open_transaction",
    kind="obligation",
    summary="a transaction begun in the span and not ended in it",
    severities={"default": "block", "strict": "block", "lenient": "warn"},
    check=check,
    scan=scan,
    discharge=Discharge(
        "transaction",
        "rolled_back",
        "commit or roll it back, or force_terminal() records it rolled back",
    ),
)
