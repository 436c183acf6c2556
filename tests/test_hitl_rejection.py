"""LangChain's human-in-the-loop middleware: a rejection is a resolution and a negative, never
a retry; and `interrupt_on_reissue` makes the middleware ask about a re-issue after compaction.

The rejection is written by LangChain's own `HumanInTheLoopMiddleware` (a ``ToolMessage``
with ``status="error"``: "User rejected the tool call ... Do not retry this tool call unless
..."), in a real agent run interrupted and resumed with a reject decision. For re-issues a real
``create_agent`` agent posts a message; the guarded summarization middleware compacts the post
away; when the model posts the same message again the middleware asks the reviewer, naming the
earlier post, and a rejection keeps the tool from running. A repeat still in context, and a
post of other text, run without a question.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from frameworks import require_framework
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from otel_compaction import CompactionGate, Telemetry, configure

try:
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.messages import ToolCall as LcToolCall
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from otel_compaction.integrations import langchain as lc
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


# -- a re-issue after compaction, put to the reviewer ---------------------------------------------

NOTE = "web-7 is deployed; " + "the rollout finished on every node without errors. " * 30


def _post(call_id: str, text: str) -> AIMessage:
    call = LcToolCall(
        name="post_message", args={"channel": "ops", "text": text}, id=call_id, type="tool_call"
    )
    return AIMessage(content="", tool_calls=[call])


@pytest.fixture(name="telemetry")
def telemetry_fixture() -> Iterator[Telemetry]:
    telemetry = configure(
        tracer_provider=TracerProvider(), meter_provider=MeterProvider(), set_global=False
    )
    lc.instrument(telemetry)
    yield telemetry
    lc.uninstrument()


def _agent(
    telemetry: Telemetry, replies: list[Any], posted: list[str], mode: Any = "batched"
) -> Any:
    @tool
    def post_message(channel: str, text: str) -> str:
        """Post a message to a channel."""
        posted.append(text)
        return f"posted to #{channel}"

    return create_agent(
        _FakeModel(messages=iter(replies)),
        tools=[post_message],
        middleware=[
            lc.GuardedSummarizationMiddleware(("tokens", 400), ("messages", 1)),
            HumanInTheLoopMiddleware(
                interrupt_on=lc.interrupt_on_reissue([post_message], telemetry.recorder),
                interrupt_mode=mode,
            ),
        ],
        checkpointer=InMemorySaver(),
    )


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_a_repeated_post_after_compaction_is_put_to_the_reviewer(
    telemetry: Telemetry, mode: str
) -> None:
    posted: list[str] = []
    agent = _agent(
        telemetry,
        [_post("c1", NOTE), "Posted.", _post("c2", NOTE), "Understood: not posted again."],
        posted,
        mode,
    )
    config: Any = {"configurable": {"thread_id": "t1"}}
    agent.invoke({"messages": [("user", "Post the deploy note to #ops.")]}, config)
    paused = agent.invoke({"messages": [("user", "Did the team hear about web-7?")]}, config)

    [question] = paused["__interrupt__"]
    [request] = question.value["action_requests"] if mode == "batched" else [question.value]
    assert (request["name"], request["args"]) == ("post_message", {"channel": "ops", "text": NOTE})
    assert request["description"].startswith("otel-compaction: this call repeats post_message `")
    assert "(call c1), which already ran at " in request["description"]
    assert "with outcome success: posted to #ops." in request["description"]

    answer: Any = (
        {"decisions": [{"type": "reject"}]}
        if mode == "batched"
        else {question.id: {"type": "reject"}}
    )
    final = agent.invoke(Command(resume=answer), config)
    rejection = [m for m in final["messages"] if isinstance(m, ToolMessage)][-1]
    assert (rejection.tool_call_id, rejection.status) == ("c2", "error")
    assert posted == [NOTE]  # the repeat never ran
    assert final["messages"][-1].content == "Understood: not posted again."


def test_other_text_and_a_repeat_in_context_run_without_a_question(
    telemetry: Telemetry,
) -> None:
    posted: list[str] = []
    agent = _agent(
        telemetry,
        [_post("c1", "short"), _post("c2", "short"), _post("c3", "other"), "Done."],
        posted,
    )
    config: Any = {"configurable": {"thread_id": "t2"}}
    final = agent.invoke({"messages": [("user", "Post it.")]}, config)

    assert "__interrupt__" not in final
    assert posted == ["short", "short", "other"]  # nothing compacted: each ran
