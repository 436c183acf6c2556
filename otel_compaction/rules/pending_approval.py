"""``pending_approval``: an OpenAI Responses ``mcp_approval_request`` that no
``mcp_approval_response`` has answered yet.

With ``require_approval`` on a remote MCP tool, the model does not call the tool: it emits an
``mcp_approval_request`` item (its ``id``, the ``server_label``, the tool ``name`` and
``arguments``) and waits for the client to send an ``mcp_approval_response`` item whose
``approval_request_id`` names it, with ``approve`` true or false. Until then the call is owed
to the user: a summary that drops the request leaves a response with nothing to answer, or an
agent that no longer knows it asked. The request closes at its response (``approved`` or
``denied``), or through `force_terminal` (recorded denied: nothing ran).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from otel_compaction.rules.base import Discharge, Finding, Rule, SpanView, Tracked, unclosed

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis

_REQUEST: Final = "mcp_approval_request"
_RESPONSE: Final = "mcp_approval_response"


class _Approvals:
    __slots__ = ("found", "open", "upto")

    def __init__(self) -> None:
        self.upto = 0  # messages read
        self.found: list[Tracked] = []
        self.open: dict[str, int] = {}  # request id -> its place in `found`, while unanswered


def _name(item: Mapping[str, Any]) -> str:
    server, tool = item.get("server_label"), item.get("name")
    parts = [p for p in (server, tool) if isinstance(p, str) and p]
    return ".".join(parts) or _REQUEST


def scan(analysis: Analysis) -> list[Tracked]:
    """Every approval request with where its response answers it (None while unanswered)."""
    transcript = analysis.transcript
    entries, messages = transcript.entries, transcript.messages
    fold = analysis.scans.fold("pending_approval", _Approvals, len(entries))
    for entry in entries[fold.upto :]:
        if entry.item not in (_REQUEST, _RESPONSE):
            continue
        item = messages[entry.index]
        if entry.item == _REQUEST:
            request = item.get("id")
            if isinstance(request, str) and request:
                fold.open[request] = len(fold.found)
                name = _name(item)
                fold.found.append(
                    Tracked(
                        "pending_approval", "approval", request, name, entry.index, None,
                        subjects=(name,),
                    )
                )  # fmt: skip
            continue
        at = fold.open.pop(str(item.get("approval_request_id")), None)
        if at is not None:  # a response to no request here answers nothing the span holds
            status = "approved" if item.get("approve") is True else "denied"
            fold.found[at] = fold.found[at].resolved_as(entry.index, status)
    fold.upto = len(entries)
    return fold.found.copy()


def check(view: SpanView) -> list[Finding]:
    """Approval requests in the span whose response is not in it."""
    return unclosed(view, "pending_approval", "approval request", "approval")


RULE = Rule(
    name="pending_approval",
    kind="obligation",
    summary="an MCP approval request in the span not yet approved or denied in it",
    severities={"default": "block", "strict": "block", "lenient": "warn"},
    check=check,
    scan=scan,
    discharge=Discharge(
        "approval",
        "denied",
        "answer it with an mcp_approval_response (approve or deny), or force_terminal() "
        "records it denied",
    ),
)
