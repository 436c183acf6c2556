"""The OpenAI Agents SDK's own model interface, scripted turn by turn, for the tests.

`ScriptedModel` implements the SDK's ``Model``: each ``get_response`` answers with the next
turn of its script (function calls the model emits, `call`; a final answer, `text`) and keeps
the input it was given. Import this module inside the ``try`` block that imports ``agents``:
without the SDK it raises the same ``ImportError``.
"""

from __future__ import annotations

import json
from typing import Any

from agents import ModelResponse, Usage
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

__all__ = ["ScriptedModel", "call", "text"]


def call(call_id: str, name: str, **arguments: Any) -> ResponseFunctionToolCall:
    """A function call the model emits."""
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments),
        type="function_call",
        status="completed",
    )


def text(words: str) -> ResponseOutputMessage:
    """A final answer."""
    return ResponseOutputMessage(
        id=f"msg_{abs(hash(words))}",
        content=[ResponseOutputText(text=words, type="output_text", annotations=[])],
        role="assistant",
        status="completed",
        type="message",
    )


class ScriptedModel(Model):
    """The SDK's ``Model`` interface, answering turn by turn from a script."""

    def __init__(self, *turns: list[Any], response_ids: bool = False) -> None:
        self.turns = list(turns)
        self.response_ids = response_ids
        self.inputs: list[Any] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(args[1] if len(args) > 1 else kwargs.get("input"))
        response_id = f"resp_{len(self.inputs)}" if self.response_ids else None
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=response_id)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests do not stream")
