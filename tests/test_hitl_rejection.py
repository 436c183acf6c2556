"""LangChain's human-in-the-loop rejection is a resolution and a negative, never a retry.

The rejection is written by LangChain's own `HumanInTheLoopMiddleware` (a ``ToolMessage``
with ``status="error"``: "User rejected the tool call ... Do not retry this tool call unless
..."), in a real agent run interrupted and resumed with a reject decision.
"""

from __future__ import annotations

from typing import Any

import pytest
from frameworks import require_framework

from otel_compaction import CompactionGate

try:
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.messages import ToolCall as LcToolCall
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from otel_compaction.integrations.langchain.messages import to_openai_messages
except ImportError as error:
    MISSING: ImportError | None = error
else:
    MISSING = None
require_framework(MISSING, "langchain>=1.0 (with langgraph)", "langchain")


class _FakeModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@tool
def delete_branch(name: str) -> str:
    """Delete a git branch."""
    raise AssertionError("a rejected call must never run")


def rejected_run() -> list[dict[str, Any]]:
    replies = iter(
        [
            AIMessage(
                content="",
                tool_calls=[
                    LcToolCall(
                        name="delete_branch",
                        args={"name": "release-7"},
                        id="call_del_1",
                        type="tool_call",
                    )
                ],
            ),
            AIMessage(content="Understood: I did not delete release-7."),
        ]
    )
    agent = create_agent(
        _FakeModel(messages=replies),
        tools=[delete_branch],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"delete_branch": True})],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "hitl-1"}}
    agent.invoke({"messages": [("user", "Delete the release-7 branch.")]}, config)
    final = agent.invoke(Command(resume={"decisions": [{"type": "reject"}]}), config)
    messages = final["messages"]
    rejection = next(m for m in messages if isinstance(m, ToolMessage))
    assert rejection.status == "error"
    text = str(rejection.content)
    assert text.startswith("User rejected the tool call for `delete_branch`")
    assert "Do not retry this tool call" in text
    return to_openai_messages(messages)


@pytest.mark.parametrize("critical", [False, True])
def test_a_rejected_call_compacts_under_default(critical: bool) -> None:
    messages = rejected_run()
    decision = CompactionGate("default").evaluate(messages, 0, len(messages), critical=critical)
    assert (decision.action, decision.span) == ("compact", (0, len(messages)))
    assert decision.blocking == ()
    # The rejection is what the summary must say was not done.
    [negative] = decision.must_carry.negatives
    assert (negative.call_id, negative.tool, negative.outcome) == (
        "call_del_1",
        "delete_branch",
        "rejection",
    )


def test_the_span_ending_on_the_rejection_compacts_too() -> None:
    messages = rejected_run()
    rejection = next(i for i, m in enumerate(messages) if m.get("role") == "tool")
    decision = CompactionGate("default").evaluate(messages, 0, rejection + 1, critical=True)
    assert (decision.action, decision.span) == ("compact", (0, rejection + 1))
