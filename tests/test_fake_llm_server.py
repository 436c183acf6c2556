"""The fake LLM server answers the real ``openai`` and ``anthropic`` clients like the providers.

Every API (Chat Completions, Responses, Messages) x {sync, async} x {streamed, not} returns
scripted text and tool calls that the real SDK clients parse to the exact scripted values, with
strict response validation on. The wire format (SSE framing, event types and sequence numbers,
provider error bodies) and the server's lifecycle are checked over raw HTTP, without the SDKs.

The SDK tests skip when ``openai`` or ``anthropic`` cannot be imported, and fail instead when
the ``CI`` environment variable is ``true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from fake_llm_server import (
    Api,
    FakeLLMServer,
    RawReply,
    ToolCall,
)
from llm_clients import (
    API_KEY,
    anthropic_client,
    async_anthropic_client,
    async_openai_client,
    openai_client,
)
from loopback import assert_refused, http_request

with contextlib.suppress(ImportError):  # the SDK tests skip (or fail under CI) without them
    import anthropic
    import openai
    from anthropic.types import MessageParam
    from openai.types.chat import ChatCompletionMessageParam

Mode = Literal["sync", "async"]

TEXT = "Zürich → Oslo: nothing direct on Friday; SK4417 flies Saturday at 09:10."
SEARCH_ARGS = {"to": "OSL", "day": "Saturday", "filters": {"direct": True, "max_stops": 0}}
BOOK_ARGS = '{"flight":"SK4417","seats":2,"note":"window, ünd aisle"}'
CALL_IDS: dict[Api, tuple[str, str]] = {
    "chat": ("call_Sx8kQ1", "call_Bk20pZ"),
    "responses": ("call_Rs77aa", "call_Rs77ab"),
    "messages": ("toolu_01Search", "toolu_01Book"),
}
APIS: tuple[Api, ...] = ("chat", "responses", "messages")
USER_TEXT = "Find me a flight to Oslo."


# --------------------------------------------------------------------------
# What the clients parsed, normalised across the three APIs
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """The text and tool calls ``(id, name, arguments)`` a client parsed from one answer.

    OpenAI arguments are the JSON text as received; Anthropic's ``input`` is an object.
    """

    text: str | None
    calls: tuple[tuple[str, str, Any], ...] = ()
    deltas: int = 0
    """How many text or argument fragments a stream delivered (0 when not streamed)."""


def expected_calls(api: Api) -> tuple[tuple[str, str, Any], ...]:
    """The scripted tool calls as the client of ``api`` must parse them."""
    search_id, book_id = CALL_IDS[api]
    if api == "messages":
        return (
            (search_id, "search_flights", SEARCH_ARGS),
            (book_id, "book_flight", json.loads(BOOK_ARGS)),
        )
    return (
        (search_id, "search_flights", json.dumps(SEARCH_ARGS, separators=(",", ":"))),
        (book_id, "book_flight", BOOK_ARGS),
    )


def script_tool_calls(server: FakeLLMServer, api: Api) -> None:
    """Script two tool calls (object and text arguments) as the next answer of ``api``."""
    search_id, book_id = CALL_IDS[api]
    server.enqueue(
        api,
        tool_calls=[
            ToolCall("search_flights", SEARCH_ARGS, id=search_id),
            ToolCall("book_flight", BOOK_ARGS, id=book_id),
        ],
    )


def _chat_messages() -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": USER_TEXT}]


def _anthropic_messages() -> list[MessageParam]:
    return [{"role": "user", "content": USER_TEXT}]


# -- OpenAI Chat Completions ------------------------------------------------------------------


class _ChunkJoiner:
    """Joins streamed chat completion chunks the way an application does."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.calls: dict[int, list[str]] = {}
        self.deltas = 0
        self.finish: str | None = None

    def add(self, chunk: openai.types.chat.ChatCompletionChunk) -> None:
        assert chunk.object == "chat.completion.chunk"
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                self.text = (self.text or "") + delta.content
                self.deltas += 1
            for call in delta.tool_calls or []:
                entry = self.calls.setdefault(call.index, ["", "", ""])
                if call.id:
                    entry[0] = call.id
                if call.function and call.function.name:
                    entry[1] = call.function.name
                if call.function and call.function.arguments:
                    entry[2] += call.function.arguments
                    self.deltas += 1
            if choice.finish_reason:
                self.finish = choice.finish_reason

    def outcome(self) -> Outcome:
        calls = tuple((c[0], c[1], c[2]) for _, c in sorted(self.calls.items()))
        assert self.finish == ("tool_calls" if calls else "stop")
        return Outcome(self.text, calls, self.deltas)


def _chat_outcome(completion: openai.types.chat.ChatCompletion) -> Outcome:
    assert completion.object == "chat.completion"
    [choice] = completion.choices
    message = choice.message
    calls = tuple(
        (call.id, call.function.name, call.function.arguments)
        for call in message.tool_calls or []
        if call.type == "function"
    )
    assert len(calls) == len(message.tool_calls or [])
    assert choice.finish_reason == ("tool_calls" if calls else "stop")
    return Outcome(message.content, calls)


def chat_sync(server: FakeLLMServer, stream: bool) -> Outcome:
    """One Chat Completions call with the sync client."""
    with openai_client(server) as client:
        if not stream:
            return _chat_outcome(
                client.chat.completions.create(model="gpt-test", messages=_chat_messages())
            )
        joiner = _ChunkJoiner()
        with client.chat.completions.create(
            model="gpt-test", messages=_chat_messages(), stream=True
        ) as chunks:
            for chunk in chunks:
                joiner.add(chunk)
        return joiner.outcome()


async def chat_async(server: FakeLLMServer, stream: bool) -> Outcome:
    """One Chat Completions call with the async client."""
    async with async_openai_client(server) as client:
        if not stream:
            return _chat_outcome(
                await client.chat.completions.create(model="gpt-test", messages=_chat_messages())
            )
        joiner = _ChunkJoiner()
        chunks = await client.chat.completions.create(
            model="gpt-test", messages=_chat_messages(), stream=True
        )
        async with chunks:
            async for chunk in chunks:
                joiner.add(chunk)
        return joiner.outcome()


# -- OpenAI Responses -------------------------------------------------------------------------


def _response_outcome(response: openai.types.responses.Response, deltas: int = 0) -> Outcome:
    assert response.object == "response"
    assert response.status == "completed"
    calls = tuple(
        (item.call_id, item.name, item.arguments)
        for item in response.output
        if item.type == "function_call"
    )
    has_message = any(item.type == "message" for item in response.output)
    return Outcome(response.output_text if has_message else None, calls, deltas)


def _count_response_deltas(event: openai.types.responses.ResponseStreamEvent) -> int:
    return int(
        event.type in ("response.output_text.delta", "response.function_call_arguments.delta")
    )


def responses_sync(server: FakeLLMServer, stream: bool) -> Outcome:
    """One Responses call with the sync client (``responses.stream`` when streamed)."""
    with openai_client(server) as client:
        if not stream:
            return _response_outcome(client.responses.create(model="gpt-test", input=USER_TEXT))
        deltas = 0
        with client.responses.stream(model="gpt-test", input=USER_TEXT) as events:
            for event in events:
                deltas += _count_response_deltas(event)
            final = events.get_final_response()
        return _response_outcome(final, deltas)


async def responses_async(server: FakeLLMServer, stream: bool) -> Outcome:
    """One Responses call with the async client (``responses.stream`` when streamed)."""
    async with async_openai_client(server) as client:
        if not stream:
            return _response_outcome(
                await client.responses.create(model="gpt-test", input=USER_TEXT)
            )
        deltas = 0
        async with client.responses.stream(model="gpt-test", input=USER_TEXT) as events:
            async for event in events:
                deltas += _count_response_deltas(event)
            final = await events.get_final_response()
        return _response_outcome(final, deltas)


# -- Anthropic Messages -----------------------------------------------------------------------


def _message_outcome(message: anthropic.types.Message, deltas: int = 0) -> Outcome:
    assert message.type == "message"
    assert message.role == "assistant"
    texts = [block.text for block in message.content if block.type == "text"]
    calls = tuple(
        (block.id, block.name, block.input) for block in message.content if block.type == "tool_use"
    )
    assert message.stop_reason == ("tool_use" if calls else "end_turn")
    return Outcome("".join(texts) if texts else None, calls, deltas)


def _count_message_deltas(event: object) -> int:
    if not isinstance(event, anthropic.types.RawContentBlockDeltaEvent):
        return 0
    delta = event.delta
    if delta.type == "text_delta":
        return 1
    return int(delta.type == "input_json_delta" and delta.partial_json != "")


def messages_sync(server: FakeLLMServer, stream: bool) -> Outcome:
    """One Messages call with the sync client (``messages.stream`` when streamed)."""
    with anthropic_client(server) as client:
        if not stream:
            return _message_outcome(
                client.messages.create(
                    model="claude-test", max_tokens=256, messages=_anthropic_messages()
                )
            )
        deltas = 0
        with client.messages.stream(
            model="claude-test", max_tokens=256, messages=_anthropic_messages()
        ) as events:
            for event in events:
                deltas += _count_message_deltas(event)
            final = events.get_final_message()
        return _message_outcome(final, deltas)


async def messages_async(server: FakeLLMServer, stream: bool) -> Outcome:
    """One Messages call with the async client (``messages.stream`` when streamed)."""
    async with async_anthropic_client(server) as client:
        if not stream:
            return _message_outcome(
                await client.messages.create(
                    model="claude-test", max_tokens=256, messages=_anthropic_messages()
                )
            )
        deltas = 0
        async with client.messages.stream(
            model="claude-test", max_tokens=256, messages=_anthropic_messages()
        ) as events:
            async for event in events:
                deltas += _count_message_deltas(event)
            final = await events.get_final_message()
        return _message_outcome(final, deltas)


def call(server: FakeLLMServer, api: Api, mode: Mode, stream: bool) -> Outcome:
    """Make one call to ``api`` with the real client in ``mode``; return what it parsed."""
    if mode == "sync":
        sync = {"chat": chat_sync, "responses": responses_sync, "messages": messages_sync}[api]
        return sync(server, stream)
    run = {"chat": chat_async, "responses": responses_async, "messages": messages_async}[api]
    return asyncio.run(run(server, stream))


# --------------------------------------------------------------------------
# The real clients, every API x mode x streaming
# --------------------------------------------------------------------------


@pytest.mark.usefixtures("sdks")
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("api", APIS)
def test_real_clients_parse_text_and_tool_calls(
    fake_llm_server: FakeLLMServer, api: Api, mode: Mode, stream: bool
) -> None:
    """Text, then two tool calls: the client parses the exact scripted values."""
    fake_llm_server.enqueue(api, TEXT)
    script_tool_calls(fake_llm_server, api)

    text = call(fake_llm_server, api, mode, stream)
    tools = call(fake_llm_server, api, mode, stream)

    assert text.text == TEXT
    assert text.calls == ()
    assert tools.text is None
    assert tools.calls == expected_calls(api)
    if stream:  # several fragments were joined, not one blob
        assert text.deltas == -(-len(TEXT) // fake_llm_server.chunk_chars)
        assert tools.deltas > 2
    assert fake_llm_server.pending() == 0

    first, second = fake_llm_server.requests_to(api)
    assert fake_llm_server.requests == [first, second]
    for request in (first, second):
        assert request.method == "POST"
        assert request.stream is stream
        assert request.json["model"] == ("claude-test" if api == "messages" else "gpt-test")
        auth = (request.headers.get("authorization"), request.headers.get("x-api-key"))
        assert f"Bearer {API_KEY}" in auth or API_KEY in auth
        if api == "messages":
            assert request.json["max_tokens"] == 256
            assert request.json["messages"] == [{"role": "user", "content": USER_TEXT}]
            assert "anthropic-version" in request.headers
        elif api == "chat":
            assert request.json["messages"] == [{"role": "user", "content": USER_TEXT}]
        else:
            assert request.json["input"] == USER_TEXT


@pytest.mark.usefixtures("sdks")
@pytest.mark.parametrize("api", APIS)
def test_text_and_tool_calls_in_one_answer(fake_llm_server: FakeLLMServer, api: Api) -> None:
    """An answer with text and tool calls, streamed: both reach the client, in order."""
    search_id, book_id = CALL_IDS[api]
    fake_llm_server.enqueue(
        api,
        "Searching, then booking.",
        tool_calls=[
            ToolCall("search_flights", SEARCH_ARGS, id=search_id),
            ToolCall("book_flight", BOOK_ARGS, id=book_id),
        ],
    )
    outcome = call(fake_llm_server, api, "sync", True)
    assert outcome.text == "Searching, then booking."
    assert outcome.calls == expected_calls(api)


@pytest.mark.usefixtures("sdks")
def test_generated_ids_and_model_override(fake_llm_server: FakeLLMServer) -> None:
    """Without ids the server makes unique ones; ``model`` overrides the echoed name."""
    fake_llm_server.enqueue(
        "chat", tool_calls=[ToolCall("a"), ToolCall("b", {"x": 1})], model="gpt-served"
    )
    fake_llm_server.enqueue("messages", tool_calls=[ToolCall("a"), ToolCall("b", {"x": 1})])
    with openai_client(fake_llm_server) as client:
        completion = client.chat.completions.create(model="gpt-test", messages=_chat_messages())
    with anthropic_client(fake_llm_server) as claude:
        message = claude.messages.create(
            model="claude-test", max_tokens=64, messages=_anthropic_messages()
        )
    assert completion.model == "gpt-served"
    assert message.model == "claude-test"
    chat_calls = _chat_outcome(completion).calls
    claude_calls = _message_outcome(message).calls
    assert [(name, args) for _, name, args in chat_calls] == [("a", "{}"), ("b", '{"x":1}')]
    assert [(name, args) for _, name, args in claude_calls] == [("a", {}), ("b", {"x": 1})]
    ids = [i for i, _, _ in chat_calls + claude_calls]
    assert len(set(ids)) == 4
    assert all(i.startswith("call_") for i in ids[:2])
    assert all(i.startswith("toolu_") for i in ids[2:])


@pytest.mark.usefixtures("sdks")
def test_raw_event_streams_are_typed_by_the_sdks(fake_llm_server: FakeLLMServer) -> None:
    """``create(stream=True)`` yields the SDKs' typed events, in the providers' order."""
    fake_llm_server.enqueue("responses", "Hi!", tool_calls=[ToolCall("f", {"k": "v"}, id="c1")])
    fake_llm_server.enqueue("messages", "Hi!", tool_calls=[ToolCall("f", {"k": "v"}, id="t1")])
    with openai_client(fake_llm_server) as client:
        events = list(client.responses.create(model="gpt-test", input="hi", stream=True))
    with anthropic_client(fake_llm_server) as claude:
        raw = list(
            claude.messages.create(
                model="claude-test", max_tokens=64, messages=_anthropic_messages(), stream=True
            )
        )

    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [type(e).__name__ for e in events] == [
        "ResponseCreatedEvent",
        "ResponseInProgressEvent",
        "ResponseOutputItemAddedEvent",
        "ResponseContentPartAddedEvent",
        "ResponseTextDeltaEvent",
        "ResponseTextDoneEvent",
        "ResponseContentPartDoneEvent",
        "ResponseOutputItemDoneEvent",
        "ResponseOutputItemAddedEvent",
        "ResponseFunctionCallArgumentsDeltaEvent",
        "ResponseFunctionCallArgumentsDeltaEvent",
        "ResponseFunctionCallArgumentsDeltaEvent",
        "ResponseFunctionCallArgumentsDoneEvent",
        "ResponseOutputItemDoneEvent",
        "ResponseCompletedEvent",
    ]
    completed = events[-1]
    assert isinstance(completed, openai.types.responses.ResponseCompletedEvent)
    assert completed.response.output_text == "Hi!"

    assert [type(e).__name__ for e in raw] == [
        "RawMessageStartEvent",
        "RawContentBlockStartEvent",
        "RawContentBlockDeltaEvent",
        "RawContentBlockStopEvent",
        "RawContentBlockStartEvent",
        *["RawContentBlockDeltaEvent"] * 4,  # "", then '{"k":"v"}' in 4-character pieces
        "RawContentBlockStopEvent",
        "RawMessageDeltaEvent",
        "RawMessageStopEvent",
    ]
    start = raw[0]
    assert isinstance(start, anthropic.types.RawMessageStartEvent)
    assert start.message.content == []
    assert start.message.stop_reason is None


@pytest.mark.usefixtures("sdks")
def test_chat_stream_usage_chunk(fake_llm_server: FakeLLMServer) -> None:
    """With ``stream_options.include_usage`` a last chunk without choices carries the usage."""
    fake_llm_server.enqueue("chat", "ok")
    with (
        openai_client(fake_llm_server) as client,
        client.chat.completions.create(
            model="gpt-test",
            messages=_chat_messages(),
            stream=True,
            stream_options={"include_usage": True},
        ) as chunks,
    ):
        received = list(chunks)
    assert all(chunk.usage is None for chunk in received[:-1])
    last = received[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == 1
    assert last.usage.total_tokens == last.usage.prompt_tokens + 1


@pytest.mark.usefixtures("sdks")
def test_scripted_and_unscripted_errors_raise_the_sdk_errors(
    fake_llm_server: FakeLLMServer,
) -> None:
    """An `ErrorReply` raises the status's SDK error; a request with nothing scripted is a
    500 naming the API."""
    fake_llm_server.enqueue_error("chat", 429, "slow down", type="rate_limit_error")
    fake_llm_server.enqueue_error("messages", 529, "overloaded", type="overloaded_error")
    with openai_client(fake_llm_server) as client, anthropic_client(fake_llm_server) as claude:
        with pytest.raises(openai.RateLimitError, match="slow down"):
            client.chat.completions.create(model="gpt-test", messages=_chat_messages())
        with pytest.raises(anthropic.APIStatusError, match="overloaded") as overloaded:
            claude.messages.create(
                model="claude-test", max_tokens=64, messages=_anthropic_messages()
            )
        assert overloaded.value.status_code == 529
        unscripted = "no reply scripted for the {} API"
        with pytest.raises(openai.InternalServerError, match=unscripted.format("responses")):
            client.responses.create(model="gpt-test", input="hi")
        with pytest.raises(anthropic.InternalServerError, match=unscripted.format("messages")):
            claude.messages.create(
                model="claude-test", max_tokens=64, messages=_anthropic_messages()
            )
    assert len(fake_llm_server.requests) == 4  # no retries: max_retries=0


@pytest.mark.usefixtures("sdks")
def test_raw_reply_is_sent_verbatim(fake_llm_server: FakeLLMServer) -> None:
    """A `RawReply` reaches the client as is (here: a completion with no choices)."""
    body = {
        "id": "chatcmpl-empty",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [],
    }
    fake_llm_server.enqueue_reply("chat", RawReply(body))
    with openai_client(fake_llm_server) as client:
        completion = client.chat.completions.create(model="gpt-test", messages=_chat_messages())
    assert completion.id == "chatcmpl-empty"
    assert completion.choices == []


@pytest.mark.usefixtures("sdks")
def test_concurrent_clients_are_served_in_parallel(fake_llm_server: FakeLLMServer) -> None:
    """Eight threads at once, one shared client: every scripted answer is served once."""
    answers = [f"answer {n}" for n in range(8)]
    for answer in answers:
        fake_llm_server.enqueue("chat", answer)
    with openai_client(fake_llm_server) as client:

        def ask(_: int) -> str | None:
            completion = client.chat.completions.create(model="gpt-test", messages=_chat_messages())
            return completion.choices[0].message.content

        with ThreadPoolExecutor(max_workers=8) as pool:
            got = list(pool.map(ask, range(8)))
    assert sorted(a or "" for a in got) == answers
    assert fake_llm_server.pending() == 0


# --------------------------------------------------------------------------
# The wire format, over raw HTTP (no SDK needed)
# --------------------------------------------------------------------------


def post(
    server: FakeLLMServer,
    path: str,
    body: Any,
    headers: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """POST ``body`` (JSON unless bytes); return the status, content type and body text."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    status, content_type, answer = http_request(server.port, "POST", path, data, sent, timeout=10)
    return status, content_type, answer.decode()


def sse(text: str) -> list[tuple[str | None, str]]:
    """Split a server-sent event stream into ``(event name, data)`` pairs."""
    events: list[tuple[str | None, str]] = []
    for frame in text.split("\n\n"):
        if not frame:
            continue
        name: str | None = None
        data: list[str] = []
        for line in frame.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            else:
                assert field == "data", line
                data.append(value)
        events.append((name, "\n".join(data)))
    return events


def test_requests_are_recorded_with_body_headers_and_query(
    fake_llm_server: FakeLLMServer,
) -> None:
    """The parsed body, lower-cased headers, path and query of each request are recorded."""
    fake_llm_server.enqueue("chat", "hello")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    status, content_type, text = post(
        fake_llm_server, "/v1/chat/completions?trace=1", body, {"X-Custom": "Yes"}
    )
    assert (status, content_type) == (200, "application/json")
    answer = json.loads(text)
    assert answer["object"] == "chat.completion"
    assert answer["model"] == "m"
    assert answer["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "hello",
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    [request] = fake_llm_server.requests
    assert (request.api, request.method, request.path, request.query) == (
        "chat",
        "POST",
        "/v1/chat/completions",
        "trace=1",
    )
    assert request.body == body
    assert request.headers["x-custom"] == "Yes"
    assert request.stream is False
    assert fake_llm_server.last("chat") == request


def test_chat_stream_is_data_only_sse_ending_in_done(fake_llm_server: FakeLLMServer) -> None:
    """Chunks as ``data:`` lines, no event names; each tool call opens with its index, id and
    name, then its arguments arrive in fragments; ``data: [DONE]`` ends the stream."""
    fake_llm_server.enqueue("chat", "abcdefg", tool_calls=[ToolCall("f", {"k": "value"}, id="c")])
    status, content_type, text = post(
        fake_llm_server, "/v1/chat/completions", {"model": "m", "messages": [], "stream": True}
    )
    assert status == 200
    assert content_type.startswith("text/event-stream")
    events = sse(text)
    assert all(name is None for name, _ in events)
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    assert {chunk["id"] for chunk in chunks} == {chunks[0]["id"]}
    assert deltas[0] == {"role": "assistant", "content": "", "refusal": None}
    assert [d["content"] for d in deltas if d.get("content")] == ["abcd", "efg"]
    tool_deltas = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert tool_deltas[0] == {
        "index": 0,
        "id": "c",
        "type": "function",
        "function": {"name": "f", "arguments": ""},
    }
    assert all(set(d) == {"index", "function"} for d in tool_deltas[1:])
    assert "".join(d["function"]["arguments"] for d in tool_deltas) == '{"k":"value"}'
    assert deltas[-1] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_responses_stream_events_carry_type_and_sequence_number(
    fake_llm_server: FakeLLMServer,
) -> None:
    """Each event is named after its ``type``; ``sequence_number`` counts from 0."""
    fake_llm_server.enqueue("responses", "hello", tool_calls=[ToolCall("f", {}, id="c")])
    _, _, text = post(
        fake_llm_server, "/v1/responses", {"model": "m", "input": "x", "stream": True}
    )
    events = sse(text)
    payloads = [json.loads(data) for _, data in events]
    assert [name for name, _ in events] == [p["type"] for p in payloads]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    assert [p["type"] for p in payloads] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert payloads[0]["response"]["status"] == "in_progress"
    final = payloads[-1]["response"]
    assert final["status"] == "completed"
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["call_id"] == "c"


def test_messages_stream_names_every_event(fake_llm_server: FakeLLMServer) -> None:
    """Anthropic's stream: ``event:`` names matching each ``type``, a ping, text and
    input-JSON deltas, and the stop reason on ``message_delta``."""
    fake_llm_server.enqueue("messages", "hi", tool_calls=[ToolCall("f", {"a": 1}, id="t")])
    _, _, text = post(
        fake_llm_server,
        "/v1/messages",
        {"model": "m", "max_tokens": 10, "messages": [], "stream": True},
    )
    events = sse(text)
    payloads = [json.loads(data) for _, data in events]
    assert [name for name, _ in events] == [p["type"] for p in payloads]
    assert [p["type"] for p in payloads] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert payloads[3]["delta"] == {"type": "text_delta", "text": "hi"}
    json_parts = [p["delta"]["partial_json"] for p in payloads[6:9]]
    assert json_parts == ["", '{"a"', ":1}"]
    assert payloads[10]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/v1/chat/completions", {"model": "m"}, 500, "no reply scripted for the chat API"),
        ("/v1/messages", {"model": "m"}, 500, "no reply scripted for the messages API"),
        ("/v1/embeddings", {"model": "m"}, 404, "no endpoint /v1/embeddings"),
        ("/v1/responses", b"not json", 400, "body is not a JSON object"),
    ],
)
def test_problems_are_answered_as_provider_errors(
    fake_llm_server: FakeLLMServer, path: str, body: Any, status: int, message: str
) -> None:
    """Unscripted requests, unknown paths and bad bodies get the provider's error shape."""
    got_status, _, text = post(fake_llm_server, path, body)
    assert got_status == status
    error = json.loads(text)
    if path == "/v1/messages":
        assert error["type"] == "error"
    assert message in error["error"]["message"]
    assert len(fake_llm_server.requests) == 1


def test_scripting_rejects_bad_input() -> None:
    """Unknown APIs, non-object Anthropic arguments and empty chunks are refused early."""
    server = FakeLLMServer()
    with pytest.raises(ValueError, match="unknown API"):
        server.enqueue("embeddings", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="JSON object"):
        _ = ToolCall("f", "[1, 2]").arguments_object
    with pytest.raises(ValueError, match="chunk_chars"):
        FakeLLMServer(chunk_chars=0)
    server.enqueue("messages", "a")
    server.enqueue_error("chat", 500, "boom")
    assert (server.pending("messages"), server.pending()) == (1, 2)
    server.reset()
    assert server.pending() == 0


@pytest.fixture(name="idle_connection")
def idle_connection_fixture() -> Iterator[list[socket.socket]]:
    """Sockets a test opens, closed after it."""
    sockets: list[socket.socket] = []
    yield sockets
    for sock in sockets:
        sock.close()


def test_threaded_and_stops_cleanly(idle_connection: list[socket.socket]) -> None:
    """A half-sent request does not block other clients, and stopping does not wait for it:
    the port is released and the stalled connection is closed."""
    server = FakeLLMServer().start()
    port = server.port
    stalled = socket.create_connection(("127.0.0.1", port), timeout=5)
    idle_connection.append(stalled)
    stalled.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n")
    server.enqueue("chat", "still served")
    status, _, text = post(server, "/v1/chat/completions", {"model": "m", "messages": []})
    assert status == 200
    assert json.loads(text)["choices"][0]["message"]["content"] == "still served"

    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 3
    assert stalled.recv(1) == b""  # closed by the server
    assert_refused(port)
    server.stop()  # idempotent
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.url


def test_context_manager_starts_and_stops() -> None:
    """``with`` serves on an ephemeral loopback port and releases it on exit."""
    with FakeLLMServer() as server:
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert server.openai_base_url == server.url + "/v1"
        assert server.anthropic_base_url == server.url
        port = server.port
        with pytest.raises(RuntimeError, match="already running"):
            server.start()
    assert_refused(port)
