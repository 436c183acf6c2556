"""LangChain's human-in-the-loop middleware as the re-issue guard of an agent.

`interrupt_on_reissue` gives ``HumanInTheLoopMiddleware`` (langchain v1) an ``interrupt_on``
entry per tool that asks the reviewer exactly when a call repeats a side effect a compaction
removed from the agent's context (`ToolCallRecorder.reissue_of`: the judgement the
``compaction.reissue`` event and the CLI hooks use), with a description naming the earlier
call, its outcome and when it ran. Any other call of those tools runs without a question.

The entry's ``when`` predicate reads the recorder's side-effect ledger only: it gives the same
answer when the run resumes (the reviewed call has not run in between), as the middleware
requires. The conversation is the run's LangGraph ``thread_id``, else the current
`otel_compaction.conversation` scope, as `ObligationCallbackHandler` files the calls.

Example:
    >>> from langchain.agents.middleware import HumanInTheLoopMiddleware  # doctest: +SKIP
    >>> review = HumanInTheLoopMiddleware(
    ...     interrupt_on=interrupt_on_reissue(["post_message", "deploy"], telemetry.recorder)
    ... )  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from langchain.agents.middleware import InterruptOnConfig, ToolCallRequest
from langchain.agents.middleware.human_in_the_loop import DecisionType
from langchain_core.messages import ToolCall
from langchain_core.tools import BaseTool

from otel_compaction.integrations.approval import reissue_question
from otel_compaction.integrations.langchain.messages import conversation_of, thread_id
from otel_compaction.recorder import ToolCallRecorder
from otel_compaction.reissue import SideEffectRecord

__all__ = ["interrupt_on_reissue"]


def interrupt_on_reissue(
    tools: Iterable[str | BaseTool],
    recorder: ToolCallRecorder,
    *,
    allowed_decisions: Sequence[DecisionType] = ("approve", "reject"),
) -> dict[str, bool | InterruptOnConfig]:
    """``interrupt_on`` entries for `tools` that interrupt a call only when it re-issues a
    compacted-away side effect recorded by `recorder` (the one the agent's tool calls are
    recorded through: ``telemetry.recorder``).

    Merge them with entries of your own (``{**interrupt_on_reissue(...), "rm": True}``); an
    entry of yours for the same tool replaces this one.

    Args:
        tools: the tools to guard, by name or as the tools themselves.
        recorder: the recorder whose side-effect ledger judges re-issues.
        allowed_decisions: what the reviewer may answer.

    Raises:
        ValueError: `allowed_decisions` is empty (the middleware would not ask).
    """
    if not allowed_decisions:
        raise ValueError("allowed_decisions needs at least one decision")

    def repeated(request: ToolCallRequest) -> bool:
        return _original(recorder, request.tool_call, _conversation(request)) is not None

    def description(tool_call: ToolCall, state: Any, runtime: Any) -> str:
        original = _original(recorder, tool_call, conversation_of())
        return reissue_question(original) if original is not None else ""

    names = [tool if isinstance(tool, str) else tool.name for tool in tools]
    # A literal: the type checker reads every key of the middleware's TypedDict as required.
    config = {"allowed_decisions": list(allowed_decisions), "description": description,
              "when": repeated}  # fmt: skip
    entries: dict[str, bool | InterruptOnConfig] = {
        name: cast("InterruptOnConfig", dict(config)) for name in names
    }
    return entries


def _conversation(request: ToolCallRequest) -> str | None:
    config: Any = getattr(request.runtime, "config", None) or {}
    return thread_id(config.get("metadata"), config.get("configurable")) or conversation_of()


def _original(
    recorder: ToolCallRecorder, tool_call: ToolCall, conversation: str | None
) -> SideEffectRecord | None:
    return recorder.reissue_of(
        tool_call["name"], tool_call.get("args") or {}, conversation_id=conversation
    )
