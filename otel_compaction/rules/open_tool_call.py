"""``open_tool_call``: a tool call in the span whose result is not in the span (seed 1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_compaction.rules.base import Finding, Rule, SpanView, Tracked, unclosed

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis


def scan(analysis: Analysis) -> list[Tracked]:
    """Every call with where it resolves: its result, or where it was opened when the ledger
    records it abandoned."""
    out: list[Tracked] = []
    results = analysis.transcript.results
    for call in analysis.transcript.calls:
        if call.result is not None:
            resolved: int | None = results[call.result].message_index
            status = "error" if analysis.failed[call.result] else "result"
        elif call.ordinal in analysis.abandoned:
            resolved, status = call.message_index, "abandoned"
        else:
            resolved, status = None, "open"
        out.append(
            Tracked(
                "open_tool_call", "tool_call", call.id, call.name, call.message_index,
                resolved, status, analysis.scans.subjects(call),
            )
        )  # fmt: skip
    return out


def check(view: SpanView) -> list[Finding]:
    """Calls arising in the span without their resolution in it."""
    return unclosed(view, "open_tool_call", "tool call")


RULE = Rule(
    name="open_tool_call",
    kind="obligation",
    summary="a call in the span whose result is not in the span",
    severities={"default": "block", "strict": "block", "lenient": "block"},
    check=check,
    scan=scan,
)
