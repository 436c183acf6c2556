"""``pending_approval``: an OpenAI Responses ``mcp_approval_request`` is owed until an
``mcp_approval_response`` naming it approves or denies it; `force_terminal` records it denied.
"""

from __future__ import annotations

from typing import Any

import pytest

from otel_compaction import CompactionGate, CompactionRefused, GuardedCompactor
from otel_compaction.analysis import Analysis
from otel_compaction.policy import Policy
from otel_compaction.transcript import Transcript

PADDING = "Please keep a careful record of everything in this conversation. " * 40


def item(role: str, text: str) -> dict[str, Any]:
    part = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}


REQUEST = {
    "type": "mcp_approval_request",
    "id": "mcpr_682d498e3bd4",
    "server_label": "deepwiki",
    "name": "ask_question",
    "arguments": '{"repoName":"modelcontextprotocol/modelcontextprotocol","question":"why?"}',
}


def response(approve: bool, request: str = "mcpr_682d498e3bd4") -> dict[str, Any]:
    return {"type": "mcp_approval_response", "approval_request_id": request, "approve": approve}


def asked() -> list[dict[str, Any]]:
    return [
        item("user", PADDING),
        item("assistant", "Understood."),
        item("user", "Ask it."),
        REQUEST,
    ]


def approvals(messages: list[dict[str, Any]]) -> list[tuple[str, int, int | None, str]]:
    analysis = Analysis.build(Transcript.parse(messages), Policy.load("default").compile())
    return [(o.id, o.opened, o.resolved, o.status) for o in analysis.facts["pending_approval"]]


def test_a_request_without_its_response_is_open() -> None:
    assert approvals(asked()) == [("mcpr_682d498e3bd4", 3, None, "open")]
    decision = CompactionGate("default").evaluate(asked(), 0, 4)
    assert (decision.action, decision.span) == ("defer", (0, 3))
    assert [(r.kind, r.id) for r in decision.obligations] == [("approval", "mcpr_682d498e3bd4")]


@pytest.mark.parametrize(("approve", "status"), [(True, "approved"), (False, "denied")])
def test_its_response_closes_it(approve: bool, status: str) -> None:
    messages = [*asked(), response(approve), item("assistant", "Done.")]
    assert approvals(messages) == [("mcpr_682d498e3bd4", 3, 4, status)]
    decision = CompactionGate("default").evaluate(messages, 0, 4)  # extended over the response
    assert (decision.action, decision.span) == ("compact", (0, 5))


def test_a_response_to_another_request_leaves_it_open() -> None:
    messages = [*asked(), response(True, request="mcpr_other")]
    assert approvals(messages) == [("mcpr_682d498e3bd4", 3, None, "open")]


def test_force_terminal_records_it_denied_and_the_compaction_proceeds() -> None:
    compactor = GuardedCompactor(budget=200)
    with pytest.raises(CompactionRefused) as refused:
        compactor.compact(asked(), conversation_id="mcp-1", critical=True, end=4)
    [ref] = refused.value.obligations
    assert ref.discharge.startswith("answer it with an mcp_approval_response (approve or deny)")
    assert compactor.force_terminal(refused.value) == 1
    records = compactor.ledger.snapshot("mcp-1").obligations
    assert [(r.kind, r.id, r.status) for r in records] == [
        ("approval", "mcpr_682d498e3bd4", "denied")
    ]
    result = compactor.compact(asked(), conversation_id="mcp-1", critical=True, end=4)
    assert result.compacted is True, result.reason
