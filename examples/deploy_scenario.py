"""The fake model's built-in scenario: a deploy agent whose context fills up mid-run.

The example agents all run this conversation, whatever their SDK or framework, so that each of
their traces shows the gate deferring one compaction and refusing another:

=====  ==================================================  ============================
turn   the model answers                                   usage it reports (input)
=====  ==================================================  ============================
1      calls ``check_health(service="web-7")``             an estimate of the request
2      says it will confirm the rollout with the on-call   `SOFT_TOKENS` (over half of
       engineer (a promise), and calls ``deploy``          `CONTEXT_WINDOW`)
3      calls ``verify(service="web-7")``                   `CRITICAL_TOKENS` (over 90%)
4      the final answer                                    an estimate of the request
=====  ==================================================  ============================

An agent that compacts above half its window asks at turn 2, while ``deploy`` is in flight:
the gate compacts the older, closed turn and holds the live one (``compaction.deferred``). At
turn 3 the budget is critical, deferring is no longer allowed, and ``verify`` is in flight:
the gate refuses (``compaction.refused``).

The turn is read from the request, never from the server's memory, so one server answers any
number of agents, in parallel, through any of the three APIs: each tool call's id carries its
turn (``call_t2_<random>``), and a request is at the turn after that of the last result it
carries. A history compacted in between still carries its latest result, which is never
compacted while the agent waits for the model's next answer. Standard library only.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

from fake_model_server import Api, RecordedRequest, Reply, ToolCall

__all__ = [
    "CONTEXT_WINDOW",
    "CRITICAL_TOKENS",
    "FINAL_ANSWER",
    "SOFT_TOKENS",
    "deploy_scenario",
]

CONTEXT_WINDOW = 16_000
"""The context window, in tokens, that the scenario's usage figures are relative to."""

SOFT_TOKENS = 9_000
"""The input tokens turn 2 reports: over half of `CONTEXT_WINDOW`, below 90%."""

CRITICAL_TOKENS = 15_000
"""The input tokens turn 3 reports: over 90% of `CONTEXT_WINDOW`."""

FINAL_ANSWER = "web-7 runs build 1234 and passed verification."

PROMISE = (
    "web-7 is healthy. I'll confirm the rollout with the on-call engineer before closing "
    "the ticket."
)
"""Turn 2's text: a commitment the run never keeps, so it stays open to the end."""

_RESULT_ID = re.compile(r"^(?:call|toolu)_t(\d+)_")


def _result_ids(api: Api | None, body: Any) -> Iterator[str]:
    """The call ids of the tool results `body` carries, oldest first."""
    if not isinstance(body, dict):
        return
    if api == "responses":
        items = body.get("input")
        for item in items if isinstance(items, list) else ():
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                yield str(item.get("call_id"))
        return
    for message in body.get("messages") or ():
        if not isinstance(message, dict):
            continue
        if api == "chat" and message.get("role") == "tool":
            yield str(message.get("tool_call_id"))
        content = message.get("content")
        for block in content if api == "messages" and isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_result":
                yield str(block.get("tool_use_id"))


def turn_of(request: RecordedRequest) -> int:
    """The turn `request` is at: 1 with no result of this scenario, else one past the turn of
    the last result it carries."""
    turn = 1
    for call_id in _result_ids(request.api, request.body):
        match = _RESULT_ID.match(call_id)
        if match:
            turn = int(match.group(1)) + 1
    return turn


def _call(request: RecordedRequest, turn: int, name: str, **arguments: str) -> ToolCall:
    prefix = "toolu" if request.api == "messages" else "call"
    return ToolCall(name, arguments, id=f"{prefix}_t{turn}_{uuid.uuid4().hex[:12]}")


def deploy_scenario(request: RecordedRequest) -> Reply:
    """The model's answer to `request`, by the turn the request is at (see the module)."""
    turn = turn_of(request)
    if turn == 1:
        return Reply(tool_calls=(_call(request, turn, "check_health", service="web-7"),))
    if turn == 2:
        deploy = _call(request, turn, "deploy", service="web-7", build="1234")
        return Reply(PROMISE, (deploy,), input_tokens=SOFT_TOKENS)
    if turn == 3:
        verify = _call(request, turn, "verify", service="web-7")
        return Reply(tool_calls=(verify,), input_tokens=CRITICAL_TOKENS)
    return Reply(FINAL_ANSWER)
