"""The OpenAI SDK: Chat Completions and Responses, sync and async, streamed and not.

Wrapped: ``create`` and ``parse`` of ``chat.completions`` and of ``responses``, on the sync and
async resources. The ``.stream()`` helpers of both APIs call ``create(stream=True)``, so they
are covered by it. Tool calls are read from the first choice (Chat Completions: ``tool_calls``
of type ``function`` and ``custom``) or from the output items (Responses: ``function_call``,
``custom_tool_call``, ``computer_call``). A streamed response opens its calls only once it
completed: the chunk carrying a ``finish_reason``, or the ``response.completed`` event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from otel_compaction.instrumentation._requests import ModelRequest, ModelResponse, plain
from otel_compaction.instrumentation._runtime import Runtime
from otel_compaction.instrumentation._wrapping import Api, Patches, traced_method
from otel_compaction.instrumentation.detection import EmittedCall

__all__ = ["MODULE", "instrument"]

MODULE = "openai"
"""The module whose import triggers `instrument`."""

_PROVIDER = "openai"
_METHODS = ("create", "parse")


def instrument(runtime: Runtime, patches: Patches) -> None:
    """Wrap the Chat Completions and Responses methods of the installed SDK."""
    from openai.resources.chat.completions import AsyncCompletions, Completions

    resources: list[tuple[type[Any], Api, bool]] = [
        (Completions, CHAT, False),
        (AsyncCompletions, CHAT, True),
    ]
    try:
        from openai.resources.responses import AsyncResponses, Responses
    except ImportError:  # an SDK older than the Responses API
        pass
    else:
        resources += [(Responses, RESPONSES, False), (AsyncResponses, RESPONSES, True)]
    for owner, api, is_async in resources:
        for method in _METHODS:
            patches.wrap(owner, method, traced_method(runtime, api, is_async=is_async))


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# -- Chat Completions -------------------------------------------------------------------------


def _chat_request(kwargs: Mapping[str, Any]) -> ModelRequest:
    return ModelRequest(
        api="chat.completions",
        provider=_PROVIDER,
        model=_str(kwargs.get("model")),
        stream=kwargs.get("stream") is True,
        messages=kwargs.get("messages"),
    )


def _chat_call(tool_call: Any) -> EmittedCall | None:
    kind = getattr(tool_call, "type", "function")
    if kind == "custom":
        custom = getattr(tool_call, "custom", None)
        name, arguments = getattr(custom, "name", None), getattr(custom, "input", None)
    else:
        function = getattr(tool_call, "function", None)
        name, arguments = getattr(function, "name", None), getattr(function, "arguments", None)
    call_id = _str(getattr(tool_call, "id", None))
    if call_id is None or not isinstance(name, str) or not name:
        return None
    return EmittedCall(call_id, name, arguments)


def _chat_response(completion: Any) -> ModelResponse:
    calls: list[EmittedCall] = []
    choices = getattr(completion, "choices", None) or ()
    if choices:
        message = getattr(choices[0], "message", None)
        for tool_call in getattr(message, "tool_calls", None) or ():
            emitted = _chat_call(tool_call)
            if emitted is not None:
                calls.append(emitted)
    return ModelResponse(_str(getattr(completion, "id", None)), tuple(calls))


class _ChatStream:
    """Joins the first choice's tool-call deltas: id and name first, arguments in fragments."""

    def __init__(self) -> None:
        self.response_id: str | None = None
        self.calls: dict[int, tuple[list[str], list[str]]] = {}  # index -> ([id, name], args)
        self.finished = False

    def add(self, chunk: Any) -> None:
        if self.response_id is None:
            self.response_id = _str(getattr(chunk, "id", None))
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "index", 0) != 0:
                continue
            tool_calls = getattr(getattr(choice, "delta", None), "tool_calls", None)
            if tool_calls:  # most chunks carry text only
                self._join(tool_calls)
            if getattr(choice, "finish_reason", None):
                self.finished = True

    def _join(self, tool_calls: Iterable[Any]) -> None:
        calls = self.calls
        for tool_call in tool_calls:
            entry = calls.get(tool_call.index)
            if entry is None:
                entry = calls[tool_call.index] = (["", ""], [])
            head, arguments = entry
            head[0] = getattr(tool_call, "id", None) or head[0]
            function = getattr(tool_call, "function", None)
            head[1] = getattr(function, "name", None) or head[1]
            fragment = getattr(function, "arguments", None)
            if fragment:
                arguments.append(fragment)

    def response(self) -> ModelResponse:
        if not self.finished:
            return ModelResponse(self.response_id)
        calls = tuple(
            EmittedCall(head[0], head[1], "".join(arguments))
            for _, (head, arguments) in sorted(self.calls.items())
            if head[0] and head[1]
        )
        return ModelResponse(self.response_id, calls)


CHAT = Api(read=_chat_request, extract=_chat_response, observer=_ChatStream)


# -- Responses --------------------------------------------------------------------------------


def _responses_request(kwargs: Mapping[str, Any]) -> ModelRequest:
    conversation = plain(kwargs.get("conversation"))
    if isinstance(conversation, Mapping):
        conversation = conversation.get("id")
    return ModelRequest(
        api="responses",
        provider=_PROVIDER,
        model=_str(kwargs.get("model")),
        stream=kwargs.get("stream") is True,
        messages=kwargs.get("input"),
        instructions=kwargs.get("instructions"),
        provider_conversation=_str(conversation),
        previous_response_id=_str(kwargs.get("previous_response_id")),
    )


def _responses_calls(output: Iterable[Any]) -> tuple[EmittedCall, ...]:
    calls: list[EmittedCall] = []
    for item in output:
        kind = getattr(item, "type", None)
        if kind == "function_call":
            name, arguments = getattr(item, "name", None), getattr(item, "arguments", None)
        elif kind == "custom_tool_call":
            name, arguments = getattr(item, "name", None), getattr(item, "input", None)
        elif kind == "computer_call":
            name, arguments = "computer_call", plain(getattr(item, "action", None))
        else:
            continue
        call_id = _str(getattr(item, "call_id", None))
        if call_id is not None and isinstance(name, str) and name:
            calls.append(EmittedCall(call_id, name, arguments))
    return tuple(calls)


def _responses_response(response: Any) -> ModelResponse:
    output = getattr(response, "output", None) or ()
    return ModelResponse(_str(getattr(response, "id", None)), _responses_calls(output))


class _ResponsesStream:
    """Collects finished output items; the ``response.completed`` event has them all."""

    def __init__(self) -> None:
        self.response_id: str | None = None
        self.items: list[Any] = []
        self.final: Any = None

    def add(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind == "response.output_item.done":
            self.items.append(getattr(event, "item", None))
        elif kind in ("response.created", "response.in_progress", "response.completed"):
            response = getattr(event, "response", None)
            self.response_id = _str(getattr(response, "id", None)) or self.response_id
            if kind == "response.completed":
                self.final = response

    def response(self) -> ModelResponse:
        if self.final is None:
            return ModelResponse(self.response_id)
        output = getattr(self.final, "output", None) or self.items
        return ModelResponse(self.response_id, _responses_calls(output))


RESPONSES = Api(read=_responses_request, extract=_responses_response, observer=_ResponsesStream)
