"""The Agents SDK's tool approval as the re-issue guard of an agent.

`approve_reissues` gives a function tool a ``needs_approval`` policy that pauses the run (the
call comes back in ``RunResult.interruptions``, to ``approve`` or ``reject`` on the run's state)
exactly when the call repeats a side effect a compaction removed from the agent's context
(`ToolCallRecorder.reissue_of`: the judgement the ``compaction.reissue`` event and the CLI hooks
use), besides whenever the tool's own policy asks. `reissue_reason` is the question for the
reviewer of such an interruption: the earlier call, its outcome and when it ran.

The recorder learns which calls left the context from `CompactionGuardSession` (given
``recorder=``) or any `GuardedCompactor` on its telemetry, and learns the calls themselves from
`ObligationTracingProcessor` (`otel_compaction.integrations.openai_agents.instrument`). The
conversation is the run's ``group_id`` (``RunConfig.group_id``), else the current
`otel_compaction.conversation` scope, as the processor files the calls.

Example:
    >>> guarded = approve_reissues(post_message, telemetry.recorder)  # doctest: +SKIP
    >>> agent = Agent(name="ops", tools=[guarded])  # doctest: +SKIP
    >>> result = await Runner.run(agent, "...", run_config=RunConfig(group_id="chat-7"))  # doctest: +SKIP
    >>> for item in result.interruptions:  # doctest: +SKIP
    ...     print(reissue_reason(item, telemetry.recorder))
"""  # noqa: E501

from __future__ import annotations

import copy
import inspect
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.items import ToolApprovalItem

from otel_compaction.context import current_conversation_id
from otel_compaction.integrations.approval import reissue_question
from otel_compaction.integrations.openai_agents.tracing import current_group_id
from otel_compaction.recorder import ToolCallRecorder

__all__ = ["approve_reissues", "reissue_reason"]


def approve_reissues(tool: FunctionTool, recorder: ToolCallRecorder) -> FunctionTool:
    """A copy of `tool` whose calls need approval when they re-issue a compacted-away side
    effect recorded by `recorder`, or when `tool`'s own ``needs_approval`` says so (a tool
    that always needs approval still always does). `tool` itself is not changed."""
    own = tool.needs_approval
    name = tool.name

    async def needs_approval(
        context: RunContextWrapper[Any], parameters: dict[str, Any], call_id: str
    ) -> bool:
        if own is True:
            return True
        if callable(own):
            asked: Any = own(context, parameters, call_id)
            if inspect.isawaitable(asked):  # declared awaitable; the SDK accepts a bool too
                asked = await asked
            if asked:
                return True
        return recorder.reissue_of(name, parameters, conversation_id=_conversation()) is not None

    guarded = copy.copy(tool)
    guarded.needs_approval = needs_approval
    return guarded


def reissue_reason(
    item: ToolApprovalItem, recorder: ToolCallRecorder, *, conversation_id: str | None = None
) -> str | None:
    """Why `item` (one of a run's ``interruptions``) waits for approval when it is a re-issue:
    the earlier call, its outcome and when it ran; None when it is not one. `conversation_id`
    is the run's ``group_id`` (the current `conversation` scope when None)."""
    name, arguments = item.tool_name or item.name, item.arguments
    if not name or arguments is None:
        return None
    conversation = conversation_id or _conversation()
    original = recorder.reissue_of(name, arguments, conversation_id=conversation)
    return reissue_question(original) if original is not None else None


def _conversation() -> str | None:
    return current_group_id() or current_conversation_id()
