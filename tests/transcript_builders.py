"""One conversation, written in any of the three transcript formats the gate reads.

`Script` emits the same conversation as OpenAI Chat Completions messages, Anthropic Messages
or OpenAI Responses items and records where every message landed, so tests can state exact
spans and message indices for each format. `policy_with` derives a policy from a shipped one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from otel_compaction import Policy

Message = dict[str, Any]

CHAT, ANTHROPIC, RESPONSES = "openai_chat", "anthropic_messages", "openai_responses"
FORMATS = (CHAT, ANTHROPIC, RESPONSES)
fmt_param = pytest.mark.parametrize("fmt", FORMATS)


@dataclass(frozen=True)
class Call:
    """A tool call to emit: id, tool name and arguments."""

    id: str
    name: str = "search"
    arguments: Mapping[str, Any] = field(default_factory=dict)


class Script:
    """Writes one conversation in `fmt`. Every method returns the index of the (last) message
    it appended; `at[call_id]` is the index of the latest message carrying that call."""

    def __init__(self, fmt: str = CHAT) -> None:
        self.fmt = fmt
        self.messages: list[Message] = []
        self.at: dict[str, int] = {}

    def _add(self, message: Message) -> int:
        self.messages.append(message)
        return len(self.messages) - 1

    @staticmethod
    def _text_item(role: str, text: str) -> Message:
        """A Responses message item."""
        part = "output_text" if role == "assistant" else "input_text"
        return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}

    def system(self, text: str = "You are a careful operations agent.") -> int:
        if self.fmt == RESPONSES:
            return self._add(self._text_item("system", text))
        return self._add({"role": "system", "content": text})

    def user(self, text: str) -> int:
        if self.fmt == RESPONSES:
            return self._add(self._text_item("user", text))
        # Anthropic allows plain string content for user turns.
        return self._add({"role": "user", "content": text})

    def say(self, text: str) -> int:
        if self.fmt == CHAT:
            return self._add({"role": "assistant", "content": text})
        if self.fmt == ANTHROPIC:
            return self._add({"role": "assistant", "content": [{"type": "text", "text": text}]})
        return self._add(self._text_item("assistant", text))

    def call(self, *calls: Call | str, text: str | None = None) -> int:
        """One model response with these calls (Responses: one item per call)."""
        made = [c if isinstance(c, Call) else Call(c) for c in calls]
        if self.fmt == CHAT:
            index = self._add(
                {
                    "role": "assistant",
                    "content": text,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                        }
                        for c in made
                    ],
                }
            )
            self.at.update((c.id, index) for c in made)
            return index
        if self.fmt == ANTHROPIC:
            blocks: list[Message] = [{"type": "text", "text": text}] if text else []
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                for c in made
            ]
            index = self._add({"role": "assistant", "content": blocks})
            self.at.update((c.id, index) for c in made)
            return index
        index = self.say(text) if text else -1
        for c in made:
            index = self._add(
                {
                    "type": "function_call",
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": json.dumps(c.arguments),
                }
            )
            self.at[c.id] = index
        return index

    def result(self, call_id: str, text: str, *, error: bool = False) -> int:
        """The result of `call_id`; `error` sets Anthropic's `is_error` (the text says so too)."""
        if self.fmt == CHAT:
            return self._add({"role": "tool", "tool_call_id": call_id, "content": text})
        if self.fmt == ANTHROPIC:
            block: Message = {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": [{"type": "text", "text": text}],
            }
            if error:
                block["is_error"] = True
            return self._add({"role": "user", "content": [block]})
        return self._add({"type": "function_call_output", "call_id": call_id, "output": text})


def policy_with(base: str = "default", **overrides: Any) -> Policy:
    """A shipped policy with top-level keys replaced (nested mappings are merged)."""
    data = Policy.load(base).model_dump()
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return Policy.model_validate(data)
