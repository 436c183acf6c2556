"""A request's messages as the instrumentation reads them: plain dict messages are handed on as
they are (no copy per request), SDK objects inside them become dicts, and the caller's messages
are never changed."""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletionMessageFunctionToolCall

from otel_compaction.instrumentation._requests import plain_messages

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "restart", "arguments": '{"service": "svc-1"}'},
}


def test_plain_dict_messages_are_handed_on_as_they_are() -> None:
    messages: list[Any] = [
        {"role": "user", "content": "Restart svc-1."},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "restarted"},
        {"role": "user", "content": [{"type": "text", "text": "Thanks."}]},
    ]

    plain = plain_messages(messages)

    assert plain is not None
    assert all(read is given for read, given in zip(plain, messages, strict=True))


def test_sdk_tool_calls_and_tuples_inside_dict_messages_become_lists_of_dicts() -> None:
    sdk_call = ChatCompletionMessageFunctionToolCall.model_validate(CALL)
    calls_message = {"role": "assistant", "content": "Restarting.", "tool_calls": [sdk_call]}
    parts_message = {"role": "user", "content": ({"type": "text", "text": "Go on."},)}
    messages: list[Any] = [calls_message, parts_message]
    snapshot = repr(messages)

    plain = plain_messages(messages)

    assert plain == [
        {"role": "assistant", "content": "Restarting.", "tool_calls": [CALL]},
        {"role": "user", "content": [{"type": "text", "text": "Go on."}]},
    ]
    assert plain is not None and plain[0] is not calls_message and plain[1] is not parts_message
    assert repr(messages) == snapshot  # the caller's messages are untouched
    assert calls_message["tool_calls"][0] is sdk_call
