"""LangChain messages as the transcript the gate reads, and where their conversation is.

`to_openai_messages` turns LangChain messages into OpenAI Chat Completions dicts, exactly one
dict per message, so an index into one list is an index into the other (the cut the gate
approves is a cut of the LangChain list). A failed tool result (``ToolMessage.status ==
"error"``) keeps its failure. `resolve_from_messages` closes, through the recorder, the calls
whose ``ToolMessage`` stands in the transcript although no tool callback reported it (results
written by a human-in-the-loop step, or by a node that runs tools itself).

A conversation is the LangGraph ``thread_id`` of the run (from the run's metadata or config)
when there is one, else the current `otel_compaction.conversation` scope.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, ToolMessage

from otel_compaction.context import current_conversation_id
from otel_compaction.ledger import ResolutionStatus
from otel_compaction.recorder import ToolCallRecorder

__all__ = [
    "SUMMARY_TAG",
    "answered_calls",
    "conversation_of",
    "current_thread_id",
    "resolve_from_messages",
    "thread_id",
    "to_openai_messages",
]

_ROLE_OF_TYPE = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant"})
THREAD_ID = "thread_id"

SUMMARY_TAG = "otel_compaction:summary"
"""Tag on a summarizer's model runs: they are not the agent's turns, and never streamed."""


def to_openai_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """One OpenAI Chat Completions dict per LangChain message, in order.

    Text content is kept (non-text blocks are dropped: the gate reads text and tool calls).
    Tool calls without an id cannot be paired and are left out; a tool message without a call
    id becomes a plain message so the indices still line up.
    """
    return [_to_openai(message) for message in messages]


def _to_openai(message: BaseMessage) -> dict[str, Any]:
    text = str(message.text)
    if isinstance(message, ToolMessage):
        if not message.tool_call_id:
            return {"role": "function", "name": message.name or "", "content": text}
        converted: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": text,
        }
        if message.status == "error":
            converted["error"] = True
        return converted
    if isinstance(message, AIMessage):
        converted = {"role": "assistant", "content": text}
        calls = [
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": json.dumps(call["args"], ensure_ascii=False, default=str),
                },
            }
            for call in message.tool_calls
            if call.get("id")
        ]
        if calls:
            converted["tool_calls"] = calls
        return converted
    if isinstance(message, ChatMessage):
        role = message.role if message.role in _CHAT_ROLES else "user"
        return {"role": role, "content": text}
    return {"role": _ROLE_OF_TYPE.get(message.type, "user"), "content": text}


def answered_calls(messages: Sequence[BaseMessage]) -> dict[str, ToolMessage]:
    """The tool-call ids whose latest call in `messages` has its ``ToolMessage`` after it,
    with that message. Ids are reused across turns, so only the latest call of an id counts."""
    latest: dict[str, ToolMessage | None] = {}
    for message in messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                call_id = call.get("id")
                if call_id:
                    latest[call_id] = None
        elif isinstance(message, ToolMessage):
            call_id = message.tool_call_id
            if call_id in latest and latest[call_id] is None:
                latest[call_id] = message
    return {call_id: answer for call_id, answer in latest.items() if answer is not None}


def resolve_from_messages(
    recorder: ToolCallRecorder, messages: Sequence[BaseMessage], conversation_id: str | None
) -> int:
    """Resolve, through `recorder`, each open call that `messages` show answered; return how
    many were resolved. A ``ToolMessage`` with status ``error`` resolves its call as an error."""
    resolved = 0
    for call_id, answer in answered_calls(messages).items():
        status: ResolutionStatus = "error" if answer.status == "error" else "result"
        if recorder.resolve(
            call_id, answer.content, status=status, conversation_id=conversation_id
        ):
            resolved += 1
    return resolved


def thread_id(*sources: Mapping[str, Any] | None) -> str | None:
    """The first ``thread_id`` found in `sources` (run metadata, ``configurable``)."""
    for source in sources:
        if not source:
            continue
        value = source.get(THREAD_ID)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def current_thread_id() -> str | None:
    """The ``thread_id`` of the LangGraph run executing in this context, if any."""
    try:
        from langgraph.config import get_config

        config = get_config()
    except Exception:  # outside a run, or LangGraph without a config here
        return None
    return thread_id(config.get("metadata"), config.get("configurable"))


def conversation_of(metadata: Mapping[str, Any] | None = None) -> str | None:
    """The conversation of a run: its LangGraph thread, else the current scope."""
    return thread_id(metadata) or current_thread_id() or current_conversation_id()
