"""The providers' history rules (``provider_rules``) and the fake server enforcing them.

First the rules as pure functions, on valid and broken histories, to the exact provider
message. Then through the real ``openai`` and ``anthropic`` clients against
``FakeLLMServer(validate=True)``: a broken history raises the SDK's ``BadRequestError`` with
the provider's text and is recorded as rejected, while a valid multi-turn tool loop that
replays the thinking blocks / reasoning items the fake produced passes, streamed and not. The
SDKs also parse the reasoning the fake emits.

The SDK tests skip when ``openai`` or ``anthropic`` cannot be imported, and fail instead when
the ``CI`` environment variable is ``true``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fake_llm_server import (
    FakeLLMServer,
    ToolCall,
)
from llm_clients import (
    anthropic_client,
    openai_client,
)
from loopback import bypass_proxies, http_request
from provider_rules import (
    ProducedItem,
    ProducedResponse,
    anthropic_messages_error,
    anthropic_prefix_error,
    chat_completions_error,
    responses_error,
)

with contextlib.suppress(ImportError):  # the SDK tests skip (or fail under CI) without them
    import anthropic
    import openai
    from anthropic.types import MessageParam, ThinkingConfigParam
    from openai.types.chat import ChatCompletionMessageParam
    from openai.types.responses import EasyInputMessageParam, Response

THINKING = "The user wants Oslo; search first, then answer from the result."
USER_TEXT = "Find me a flight to Oslo."


@pytest.fixture(name="validating_server")
def validating_server_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    """A running ``FakeLLMServer(validate=True)``, stopped after the test."""
    bypass_proxies(monkeypatch)
    with FakeLLMServer(validate=True) as server:
        yield server
    assert not server.errors, "FakeLLMServer failed while serving:\n" + "\n".join(server.errors)


# --------------------------------------------------------------------------
# The exact provider messages
# --------------------------------------------------------------------------


def anthropic_missing_result(index: int, ids: str) -> str:
    """Anthropic's text for tool_use ids left unanswered, expected at ``messages.<index>``."""
    return (
        f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately "
        f"after: {ids}. Each `tool_use` block must have a corresponding `tool_result` block in "
        "the next message."
    )


def anthropic_unexpected_result(index: int, block: int, tool_use_id: str) -> str:
    """Anthropic's text for a tool_result answering no tool_use of the previous message."""
    return (
        f"messages.{index}.content.{block}: unexpected `tool_use_id` found in `tool_result` "
        f"blocks: {tool_use_id}. Each `tool_result` block must have a corresponding `tool_use` "
        "block in the previous message."
    )


def anthropic_thinking_first(index: int, found: str) -> str:
    """Anthropic's text for a final tool loop whose assistant message lacks its thinking."""
    return (
        f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
        f"`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
        "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). "
        "We recommend you include thinking blocks from previous turns. To avoid this "
        "requirement, disable `thinking`. Please consult our documentation at "
        "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
    )


CHAT_ORPHAN_TOOL = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)


def chat_missing_tool_messages(ids: str) -> str:
    """OpenAI's text for tool_calls not answered by the tool messages after them."""
    return (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        f"{ids}"
    )


# --------------------------------------------------------------------------
# Anthropic Messages
# --------------------------------------------------------------------------


def tool_use(tool_use_id: str, name: str = "search") -> dict[str, Any]:
    """An Anthropic ``tool_use`` block."""
    return {"type": "tool_use", "id": tool_use_id, "name": name, "input": {"q": "oslo"}}


def tool_result(tool_use_id: str) -> dict[str, Any]:
    """An Anthropic ``tool_result`` block."""
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": "SK4417"}


def thinking_block(text: str = "hmm") -> dict[str, Any]:
    """An Anthropic ``thinking`` block."""
    return {"type": "thinking", "thinking": text, "signature": "c2ln"}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic user message of ``blocks``."""
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic assistant message of ``blocks``."""
    return {"role": "assistant", "content": list(blocks)}


def claude(*messages: dict[str, Any], thinking: bool = False) -> dict[str, Any]:
    """An Anthropic Messages body, with extended thinking enabled or not."""
    body: dict[str, Any] = {"model": "claude-test", "max_tokens": 2048, "messages": list(messages)}
    if thinking:
        body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    return body


TEXT = {"type": "text", "text": "ok"}
ASK = {"role": "user", "content": USER_TEXT}


def test_anthropic_valid_histories_pass() -> None:
    """Tool uses answered in the next message, string contents, parallel calls: accepted."""
    assert anthropic_messages_error(claude(ASK)) is None
    assert anthropic_messages_error(claude(ASK, {"role": "assistant", "content": "hi"})) is None
    history = claude(
        ASK,
        assistant(TEXT, tool_use("toolu_a"), tool_use("toolu_b")),
        user(tool_result("toolu_b"), tool_result("toolu_a")),
        assistant(TEXT),
        {"role": "user", "content": "thanks"},
    )
    assert anthropic_messages_error(history) is None


def test_anthropic_tool_use_needs_its_result_in_the_next_message() -> None:
    """Unanswered ids are listed, at the index of the message that should have answered."""
    partial = claude(
        ASK, assistant(tool_use("toolu_a"), tool_use("toolu_b")), user(tool_result("toolu_a"))
    )
    assert anthropic_messages_error(partial) == anthropic_missing_result(2, "toolu_b")
    text_instead = claude(
        ASK, assistant(tool_use("toolu_a"), tool_use("toolu_b")), {"role": "user", "content": "?"}
    )
    assert anthropic_messages_error(text_instead) == anthropic_missing_result(2, "toolu_a, toolu_b")
    # The results one message too late do not count: "immediately after".
    late = claude(
        ASK,
        assistant(tool_use("toolu_a")),
        user(TEXT),
        assistant(TEXT),
        user(tool_result("toolu_a")),
    )
    assert anthropic_messages_error(late) == anthropic_missing_result(2, "toolu_a")
    trailing = claude(ASK, assistant(tool_use("toolu_a")))
    assert anthropic_messages_error(trailing) == anthropic_missing_result(2, "toolu_a")


def test_anthropic_tool_result_needs_its_use_in_the_previous_message() -> None:
    """A cut that keeps a result but drops its call is refused at that result block."""
    cut = claude(user(tool_result("toolu_a")), assistant(TEXT))
    assert anthropic_messages_error(cut) == anthropic_unexpected_result(0, 0, "toolu_a")
    wrong_id = claude(
        ASK, assistant(tool_use("toolu_a")), user(tool_result("toolu_a"), tool_result("toolu_z"))
    )
    assert anthropic_messages_error(wrong_id) == anthropic_unexpected_result(2, 1, "toolu_z")


def test_anthropic_thinking_must_open_the_final_tool_loop() -> None:
    """With thinking enabled, the first assistant message of the tool loop in progress starts
    with a thinking block; later assistant messages of the loop, and earlier turns, need not."""
    loop = [
        ASK,
        assistant(thinking_block(), tool_use("toolu_a")),
        user(tool_result("toolu_a")),
        assistant(tool_use("toolu_b")),
        user(tool_result("toolu_b")),
    ]
    assert anthropic_messages_error(claude(*loop, thinking=True)) is None
    redacted = {"type": "redacted_thinking", "data": "b3BhcXVl"}
    assert (
        anthropic_messages_error(
            claude(
                ASK,
                assistant(redacted, tool_use("toolu_a")),
                user(tool_result("toolu_a")),
                thinking=True,
            )
        )
        is None
    )

    stripped = [ASK, assistant(tool_use("toolu_a")), *loop[2:]]
    assert anthropic_messages_error(claude(*stripped, thinking=True)) == anthropic_thinking_first(
        1, "tool_use"
    )
    after_text = [ASK, assistant(TEXT, tool_use("toolu_a")), user(tool_result("toolu_a"))]
    assert anthropic_messages_error(claude(*after_text, thinking=True)) == (
        anthropic_thinking_first(1, "text")
    )
    # Thinking on the second assistant message of the loop does not stand in for the first.
    late_thinking = [
        ASK,
        assistant(tool_use("toolu_a")),
        user(tool_result("toolu_a")),
        assistant(thinking_block(), tool_use("toolu_b")),
        user(tool_result("toolu_b")),
    ]
    assert anthropic_messages_error(claude(*late_thinking, thinking=True)) == (
        anthropic_thinking_first(1, "tool_use")
    )


def test_anthropic_thinking_rule_only_binds_a_loop_in_progress_with_thinking_enabled() -> None:
    """Closed loops, thinking disabled or adaptive: no thinking block is required."""
    stripped = [ASK, assistant(tool_use("toolu_a")), user(tool_result("toolu_a"))]
    assert anthropic_messages_error(claude(*stripped)) is None
    for kind in ("disabled", "adaptive"):
        body = {**claude(*stripped), "thinking": {"type": kind}}
        assert anthropic_messages_error(body) is None
    closed = [*stripped, assistant(TEXT), {"role": "user", "content": "and back?"}]
    assert anthropic_messages_error(claude(*closed, thinking=True)) is None
    # A new loop after a closed one: only the new loop's opener is checked.
    reopened = [
        *closed,
        assistant(thinking_block(), tool_use("toolu_b")),
        user(tool_result("toolu_b")),
    ]
    assert anthropic_messages_error(claude(*reopened, thinking=True)) is None


def test_anthropic_pairing_is_reported_before_thinking() -> None:
    """A history breaking both rules gets the pairing error, the first problem found."""
    cut = claude(
        user(tool_result("toolu_a")),
        assistant(tool_use("toolu_b")),
        user(tool_result("toolu_b")),
        thinking=True,
    )
    assert anthropic_messages_error(cut) == anthropic_unexpected_result(0, 0, "toolu_a")


# --------------------------------------------------------------------------
# OpenAI Responses
# --------------------------------------------------------------------------

PRODUCED = (
    ProducedResponse(
        "resp_1",
        (
            ProducedItem("reasoning", "rs_1"),
            ProducedItem("function_call", "fc_1a", "call_a"),
            ProducedItem("function_call", "fc_1b", "call_b"),
        ),
    ),
    ProducedResponse(
        "resp_2", (ProducedItem("reasoning", "rs_2"), ProducedItem("message", "msg_2"))
    ),
    ProducedResponse("resp_3", (ProducedItem("function_call", "fc_3", "call_c"),)),
)

RS_1 = {"type": "reasoning", "id": "rs_1", "summary": []}
FC_A = {"type": "function_call", "id": "fc_1a", "call_id": "call_a", "name": "f", "arguments": "{}"}
FC_B = {"type": "function_call", "id": "fc_1b", "call_id": "call_b", "name": "f", "arguments": "{}"}
OUT_A = {"type": "function_call_output", "call_id": "call_a", "output": "1"}
OUT_B = {"type": "function_call_output", "call_id": "call_b", "output": "2"}
RS_2 = {"type": "reasoning", "id": "rs_2", "summary": []}
MSG_2 = {"type": "message", "id": "msg_2", "role": "assistant", "content": []}
QUESTION = {"role": "user", "content": USER_TEXT}


def responses(*items: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A Responses body with ``input`` items."""
    return {"model": "gpt-test", "input": list(items), **fields}


def missing_reasoning(item_id: str, kind: str, reasoning: str) -> str:
    """OpenAI's text for an item replayed without the reasoning item it came after."""
    return (
        f"Item '{item_id}' of type '{kind}' was provided without its required 'reasoning' "
        f"item: '{reasoning}'."
    )


def test_responses_valid_histories_pass() -> None:
    """Reasoning then its items (outputs grouped or interleaved), a string input, items the
    server did not produce, outputs chained to a previous response: accepted."""
    assert responses_error({"model": "m", "input": "hi"}, PRODUCED) is None
    grouped = responses(QUESTION, RS_1, FC_A, FC_B, OUT_A, OUT_B, RS_2, MSG_2, QUESTION)
    assert responses_error(grouped, PRODUCED) is None
    interleaved = responses(QUESTION, RS_1, FC_A, OUT_A, FC_B, OUT_B)
    assert responses_error(interleaved, PRODUCED) is None
    no_reasoning = {"type": "function_call", "id": "fc_3", "call_id": "call_c", "name": "f"}
    out_c = {"type": "function_call_output", "call_id": "call_c", "output": "3"}
    assert responses_error(responses(QUESTION, no_reasoning, out_c), PRODUCED) is None
    foreign = {**FC_A, "id": "fc_elsewhere"}
    assert responses_error(responses(foreign, OUT_A), PRODUCED) is None
    chained = responses(OUT_A, previous_response_id="resp_1")
    assert responses_error(chained, PRODUCED) is None


def test_responses_items_need_their_reasoning_right_before() -> None:
    """Dropping, moving or separating the reasoning item is refused at the first item
    generated after it."""
    assert responses_error(responses(QUESTION, FC_A, FC_B, OUT_A, OUT_B), PRODUCED) == (
        missing_reasoning("fc_1a", "function_call", "rs_1")
    )
    assert responses_error(responses(RS_1, QUESTION, FC_A, FC_B, OUT_A, OUT_B), PRODUCED) == (
        "Item 'rs_1' of type 'reasoning' was provided without its required following item."
    )
    # Another response's item between them breaks the chain.
    separated = responses(RS_1, FC_A, RS_2, MSG_2, FC_B, OUT_A, OUT_B)
    assert responses_error(separated, PRODUCED) == missing_reasoning(
        "fc_1b", "function_call", "rs_1"
    )
    assert responses_error(responses(QUESTION, MSG_2), PRODUCED) == missing_reasoning(
        "msg_2", "message", "rs_2"
    )
    # Without what the server produced, nothing ties the items to a reasoning item.
    assert responses_error(responses(QUESTION, FC_A, OUT_A)) is None


def test_responses_reasoning_needs_its_following_item() -> None:
    """A reasoning item whose items were cut away, or answered by an output at once."""
    expected = "Item 'rs_1' of type 'reasoning' was provided without its required following item."
    assert responses_error(responses(QUESTION, RS_1), PRODUCED) == expected
    assert responses_error(responses(RS_1, OUT_A), PRODUCED) == expected


def test_responses_function_call_output_needs_its_call() -> None:
    """An output whose call was cut away (or comes later) is refused, naming the call_id."""
    expected = "No tool call found for function call output with call_id call_a."
    assert responses_error(responses(OUT_A, QUESTION), PRODUCED) == expected
    assert responses_error(responses(OUT_A, RS_1, FC_A, FC_B, OUT_B), PRODUCED) == expected


def test_responses_function_call_needs_its_output() -> None:
    """A call whose output was cut away is refused, naming the call_id."""
    assert responses_error(responses(QUESTION, RS_1, FC_A, FC_B, OUT_A), PRODUCED) == (
        "No tool output found for function call call_b."
    )


# --------------------------------------------------------------------------
# OpenAI Chat Completions
# --------------------------------------------------------------------------


def tool_calls(*ids: str) -> dict[str, Any]:
    """A Chat Completions assistant message calling ``ids``."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
        ],
    }


def tool_message(tool_call_id: str) -> dict[str, Any]:
    """A Chat Completions tool message answering ``tool_call_id``."""
    return {"role": "tool", "tool_call_id": tool_call_id, "content": "ok"}


def chat(*messages: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions body."""
    return {"model": "gpt-test", "messages": list(messages)}


SYSTEM = {"role": "system", "content": "You book flights."}
ASK_CHAT = {"role": "user", "content": USER_TEXT}


def test_chat_valid_histories_pass() -> None:
    """Every call answered by the tool messages right after it, in any order: accepted."""
    history = chat(
        SYSTEM,
        ASK_CHAT,
        tool_calls("call_a", "call_b"),
        tool_message("call_b"),
        tool_message("call_a"),
        {"role": "assistant", "content": "done", "tool_calls": []},
        ASK_CHAT,
    )
    assert chat_completions_error(history) is None


def test_chat_tool_calls_need_their_tool_messages() -> None:
    """Unanswered ids are listed, whether a user message interrupts or the history ends."""
    interrupted = chat(ASK_CHAT, tool_calls("call_a", "call_b"), tool_message("call_a"), ASK_CHAT)
    assert chat_completions_error(interrupted) == chat_missing_tool_messages("call_b")
    trailing = chat(ASK_CHAT, tool_calls("call_a", "call_b"))
    assert chat_completions_error(trailing) == chat_missing_tool_messages("call_a, call_b")


def test_chat_tool_messages_need_their_call() -> None:
    """A tool message first after a cut, or after a user message, is refused; one naming an
    id the previous tool_calls do not hold is refused for that id."""
    assert chat_completions_error(chat(tool_message("call_a"), ASK_CHAT)) == CHAT_ORPHAN_TOOL
    after_user = chat(SYSTEM, ASK_CHAT, tool_message("call_a"))
    assert chat_completions_error(after_user) == CHAT_ORPHAN_TOOL
    wrong = chat(ASK_CHAT, tool_calls("call_a"), tool_message("call_z"))
    assert chat_completions_error(wrong) == (
        "Invalid parameter: 'tool_call_id' of 'call_z' not found in 'tool_calls' of previous "
        "message."
    )


# --------------------------------------------------------------------------
# The fake server enforcing the rules, over raw HTTP
# --------------------------------------------------------------------------


def post(server: FakeLLMServer, path: str, body: Any) -> tuple[int, Any]:
    """POST ``body`` as JSON; return the status and the parsed answer."""
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    status, _, answer = http_request(server.port, "POST", path, data, headers, timeout=10)
    return status, json.loads(answer)


def test_rejections_use_each_providers_error_format(validating_server: FakeLLMServer) -> None:
    """A 400 ``invalid_request_error`` with the provider's message, in the provider's error
    shape; the request is recorded as rejected and the scripted answer stays queued."""
    validating_server.enqueue("messages", "unused")
    validating_server.enqueue("chat", "unused")
    cut = claude(user(tool_result("toolu_a")))
    status, answer = post(validating_server, "/v1/messages", {**cut, "stream": True})
    assert status == 400
    assert answer == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": anthropic_unexpected_result(0, 0, "toolu_a"),
        },
        "request_id": "req_fake",
    }
    status, answer = post(validating_server, "/v1/chat/completions", chat(tool_message("c")))
    assert status == 400
    assert answer == {
        "error": {
            "message": CHAT_ORPHAN_TOOL,
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert validating_server.pending() == 2
    assert [r.rejection for r in validating_server.requests] == [
        anthropic_unexpected_result(0, 0, "toolu_a"),
        CHAT_ORPHAN_TOOL,
    ]
    assert validating_server.rejections == validating_server.requests

    # A valid request is answered with the answer the rejected one left in the queue.
    status, answer = post(validating_server, "/v1/messages", claude(ASK))
    assert status == 200
    assert answer["content"][0]["text"] == "unused"
    assert validating_server.last("messages").rejection is None
    assert len(validating_server.rejections) == 2


def test_rejection_takes_precedence_over_a_missing_script(
    validating_server: FakeLLMServer,
) -> None:
    """Nothing scripted: an invalid history still gets the provider's 400, not the 500."""
    status, answer = post(validating_server, "/v1/responses", responses(OUT_A))
    assert status == 400
    assert answer["error"]["message"] == (
        "No tool call found for function call output with call_id call_a."
    )


def test_validation_is_off_by_default(fake_llm_server: FakeLLMServer) -> None:
    """Without ``validate`` a broken history is answered as scripted; the flag can be turned
    on for a running server."""
    fake_llm_server.enqueue("chat", "served")
    status, answer = post(fake_llm_server, "/v1/chat/completions", chat(tool_message("c")))
    assert status == 200
    assert answer["choices"][0]["message"]["content"] == "served"
    assert fake_llm_server.rejections == []
    fake_llm_server.validate = True
    status, _ = post(fake_llm_server, "/v1/chat/completions", chat(tool_message("c")))
    assert status == 400
    [rejected] = fake_llm_server.rejections
    assert rejected.rejection == CHAT_ORPHAN_TOOL


def test_responses_answers_are_remembered_with_their_reasoning(
    fake_llm_server: FakeLLMServer,
) -> None:
    """Each Responses answer records its items in order: reasoning, message, function calls
    (each with its ``fc_`` item id and its ``call_id``); reset forgets them."""
    fake_llm_server.enqueue(
        "responses",
        "Searching.",
        tool_calls=[ToolCall("f", id="call_x"), ToolCall("g")],
        thinking="t",
    )
    fake_llm_server.enqueue("responses", "plain")
    status, first = post(fake_llm_server, "/v1/responses", responses(QUESTION))
    assert status == 200
    post(fake_llm_server, "/v1/responses", responses(QUESTION))
    produced, plain = fake_llm_server.produced_responses
    assert produced.response_id == first["id"]
    assert [(item.type, item.id, item.call_id) for item in produced.items] == [
        (item["type"], item["id"], item.get("call_id")) for item in first["output"]
    ]
    assert [item.type for item in produced.items] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    assert produced.reasoning_id is not None
    assert produced.reasoning_id.startswith("rs_")
    calls = [item for item in produced.items if item.type == "function_call"]
    assert all(item.id.startswith("fc_") for item in calls)
    assert calls[0].call_id == "call_x"
    assert calls[1].call_id is not None
    assert calls[1].call_id.startswith("call_")
    assert plain.reasoning_id is None
    fake_llm_server.reset()
    assert fake_llm_server.produced_responses == []


# --------------------------------------------------------------------------
# Reasoning output on the wire
# --------------------------------------------------------------------------


def sse_payloads(text: str) -> list[dict[str, Any]]:
    """The JSON ``data`` of each server-sent event."""
    payloads = []
    for frame in text.split("\n\n"):
        for line in frame.split("\n"):
            if line.startswith("data: "):
                payloads.append(json.loads(line.removeprefix("data: ")))
    return payloads


def post_stream(server: FakeLLMServer, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a streamed request; return the payload of each event."""
    data = json.dumps({**body, "stream": True}).encode()
    headers = {"Content-Type": "application/json"}
    status, _, answer = http_request(server.port, "POST", path, data, headers, timeout=10)
    assert status == 200
    return sse_payloads(answer.decode())


def test_thinking_streams_like_anthropic(fake_llm_server: FakeLLMServer) -> None:
    """A thinking block first: opened empty, thinking deltas, the signature last."""
    fake_llm_server.enqueue("messages", "hi", thinking="abcdef")
    payloads = post_stream(fake_llm_server, "/v1/messages", claude(ASK))
    blocks = [p for p in payloads if p["type"].startswith("content_block") and p["index"] == 0]
    assert blocks[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    deltas = [p["delta"] for p in blocks[1:-1]]
    assert deltas[:-1] == [
        {"type": "thinking_delta", "thinking": "abcd"},
        {"type": "thinking_delta", "thinking": "ef"},
    ]
    assert deltas[-1]["type"] == "signature_delta"
    assert deltas[-1]["signature"]
    assert blocks[-1] == {"type": "content_block_stop", "index": 0}


def test_reasoning_streams_like_openai_responses(fake_llm_server: FakeLLMServer) -> None:
    """A reasoning item first, its summary streamed, then the other items shifted by one."""
    fake_llm_server.enqueue("responses", "hi", thinking="abcdef")
    payloads = post_stream(fake_llm_server, "/v1/responses", responses(QUESTION))
    kinds = [p["type"] for p in payloads]
    assert kinds[2:9] == [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
    ]
    added, done = payloads[2]["item"], payloads[8]["item"]
    assert added == {
        "id": done["id"],
        "type": "reasoning",
        "summary": [],
        "encrypted_content": None,
    }
    assert done["summary"] == [{"type": "summary_text", "text": "abcdef"}]
    assert payloads[9]["output_index"] == 1  # the message comes second
    final = payloads[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] > 0


def test_encrypted_reasoning_only_when_included(fake_llm_server: FakeLLMServer) -> None:
    """``include=["reasoning.encrypted_content"]`` adds an opaque ``encrypted_content``."""
    fake_llm_server.enqueue("responses", "a", thinking="t")
    fake_llm_server.enqueue("responses", "b", thinking="t")
    _, plain = post(fake_llm_server, "/v1/responses", responses(QUESTION))
    body = responses(QUESTION, include=["reasoning.encrypted_content"])
    _, included = post(fake_llm_server, "/v1/responses", body)
    assert plain["output"][0]["encrypted_content"] is None
    encrypted = included["output"][0]["encrypted_content"]
    assert isinstance(encrypted, str)
    assert encrypted


@pytest.mark.usefixtures("sdks")
def test_sdks_type_the_raw_reasoning_events(fake_llm_server: FakeLLMServer) -> None:
    """``create(stream=True)`` yields the SDKs' typed reasoning events, strictly validated."""
    fake_llm_server.enqueue("responses", "Hi!", thinking="abcdef")
    fake_llm_server.enqueue("messages", "Hi!", thinking="abcdef")
    with openai_client(fake_llm_server) as client:
        events = list(client.responses.create(model="gpt-test", input="hi", stream=True))
    with anthropic_client(fake_llm_server) as claude_client:
        raw = list(
            claude_client.messages.create(
                model="claude-test",
                max_tokens=2048,
                messages=[{"role": "user", "content": USER_TEXT}],
                thinking={"type": "enabled", "budget_tokens": 1024},
                stream=True,
            )
        )

    assert [type(e).__name__ for e in events[2:9]] == [
        "ResponseOutputItemAddedEvent",
        "ResponseReasoningSummaryPartAddedEvent",
        "ResponseReasoningSummaryTextDeltaEvent",
        "ResponseReasoningSummaryTextDeltaEvent",
        "ResponseReasoningSummaryTextDoneEvent",
        "ResponseReasoningSummaryPartDoneEvent",
        "ResponseOutputItemDoneEvent",
    ]
    done = events[8]
    assert isinstance(done, openai.types.responses.ResponseOutputItemDoneEvent)
    assert isinstance(done.item, openai.types.responses.ResponseReasoningItem)
    completed = events[-1]
    assert isinstance(completed, openai.types.responses.ResponseCompletedEvent)
    assert completed.response.output_text == "Hi!"

    start = raw[1]
    assert isinstance(start, anthropic.types.RawContentBlockStartEvent)
    assert isinstance(start.content_block, anthropic.types.ThinkingBlock)
    deltas = [e.delta for e in raw if isinstance(e, anthropic.types.RawContentBlockDeltaEvent)]
    assert [type(d).__name__ for d in deltas] == [
        "ThinkingDelta",
        "ThinkingDelta",
        "SignatureDelta",
        "TextDelta",
    ]


# --------------------------------------------------------------------------
# Through the real SDK clients
# --------------------------------------------------------------------------


def anthropic_call(
    server: FakeLLMServer, messages: list[MessageParam], *, stream: bool, thinking: bool = True
) -> tuple[anthropic.types.Message, set[str]]:
    """One Messages call with the sync client: the final message, streamed or not, and the
    types of the events the SDK's stream raised (none when not streamed)."""
    config: ThinkingConfigParam | anthropic.Omit = (
        {"type": "enabled", "budget_tokens": 1024} if thinking else anthropic.omit
    )
    with anthropic_client(server) as client:
        if not stream:
            message = client.messages.create(
                model="claude-test", max_tokens=2048, messages=messages, thinking=config
            )
            return message, set()
        with client.messages.stream(
            model="claude-test", max_tokens=2048, messages=messages, thinking=config
        ) as events:
            kinds: set[str] = {event.type for event in events}
            return events.get_final_message(), kinds


@pytest.mark.usefixtures("sdks")
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_anthropic_sdk_parses_thinking_and_replays_it(
    validating_server: FakeLLMServer, stream: bool
) -> None:
    """The SDK parses the thinking block; replaying it with the tool result passes, dropping
    it (a naive cut of the block) raises ``BadRequestError`` with Anthropic's text."""
    validating_server.enqueue(
        "messages",
        "Searching.",
        tool_calls=[ToolCall("search", {"q": "oslo"}, id="toolu_1")],
        thinking=THINKING,
    )
    validating_server.enqueue("messages", "SK4417 on Saturday.")
    first, kinds = anthropic_call(
        validating_server, [{"role": "user", "content": USER_TEXT}], stream=stream
    )
    if stream:  # the SDK's own thinking and signature events were raised
        assert {"thinking", "signature"} <= kinds
    thinking, text, call = first.content
    assert isinstance(thinking, anthropic.types.ThinkingBlock)
    assert thinking.thinking == THINKING
    assert thinking.signature
    assert (text.type, call.type) == ("text", "tool_use")

    result: MessageParam = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "SK4417"}],
    }
    stripped: list[MessageParam] = [
        {"role": "user", "content": USER_TEXT},
        {"role": "assistant", "content": [text, call]},
        result,
    ]
    with pytest.raises(anthropic.BadRequestError) as rejected:
        anthropic_call(validating_server, stripped, stream=stream)
    assert rejected.value.status_code == 400
    assert rejected.value.type == "invalid_request_error"
    assert rejected.value.api_message == anthropic_thinking_first(1, "text")

    kept: list[MessageParam] = [
        {"role": "user", "content": USER_TEXT},
        {"role": "assistant", "content": first.content},
        result,
    ]
    second, _ = anthropic_call(validating_server, kept, stream=stream)
    assert [block.type for block in second.content] == ["text"]
    assert validating_server.pending() == 0
    first_request, naive, guarded = validating_server.requests
    assert validating_server.rejections == [naive]
    assert guarded.json["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": THINKING,
        "signature": thinking.signature,
    }
    assert first_request.rejection is None


@pytest.mark.usefixtures("sdks")
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_anthropic_sdk_rejects_a_cut_tool_loop(
    validating_server: FakeLLMServer, stream: bool
) -> None:
    """A history starting with a tool result, or ending in an unanswered call."""
    orphan: list[MessageParam] = [
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}],
        }
    ]
    with pytest.raises(anthropic.BadRequestError) as rejected:
        anthropic_call(validating_server, orphan, stream=stream, thinking=False)
    assert rejected.value.api_message == anthropic_unexpected_result(0, 0, "toolu_9")

    unanswered: list[MessageParam] = [
        {"role": "user", "content": USER_TEXT},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_9", "name": "f", "input": {}}],
        },
        {"role": "user", "content": "never mind"},
    ]
    with pytest.raises(anthropic.BadRequestError) as rejected:
        anthropic_call(validating_server, unanswered, stream=stream, thinking=False)
    assert rejected.value.api_message == anthropic_missing_result(2, "toolu_9")
    assert len(validating_server.rejections) == 2


def replayable(response: openai.types.responses.Response) -> list[dict[str, Any]]:
    """The output items of ``response`` as input items, the way an application replays them."""
    return [item.model_dump(exclude_none=True) for item in response.output]


@pytest.mark.usefixtures("sdks")
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_responses_sdk_parses_reasoning_and_replays_it(
    validating_server: FakeLLMServer, stream: bool
) -> None:
    """The SDK parses the reasoning item; replaying it before its function call passes,
    dropping it (or the call) raises ``BadRequestError`` with OpenAI's text."""
    validating_server.enqueue(
        "responses", tool_calls=[ToolCall("search", {"q": "oslo"}, id="call_1")], thinking=THINKING
    )
    validating_server.enqueue("responses", "SK4417 on Saturday.")
    question: EasyInputMessageParam = {"role": "user", "content": USER_TEXT}
    first: Response
    second: Response
    with openai_client(validating_server) as client:
        if stream:
            with client.responses.stream(model="gpt-test", input=[question]) as events:
                kinds = {event.type for event in events}
                first = events.get_final_response()
            assert "response.reasoning_summary_text.delta" in kinds
        else:
            first = client.responses.create(model="gpt-test", input=[question])
    reasoning, call = first.output
    assert isinstance(reasoning, openai.types.responses.ResponseReasoningItem)
    assert [part.text for part in reasoning.summary] == [THINKING]
    assert reasoning.id.startswith("rs_")
    assert isinstance(call, openai.types.responses.ResponseFunctionToolCall)
    assert call.id is not None
    assert call.id.startswith("fc_")
    assert call.call_id == "call_1"
    assert first.usage is not None
    assert first.usage.output_tokens_details.reasoning_tokens > 0

    output = {"type": "function_call_output", "call_id": "call_1", "output": "SK4417"}
    reasoning_item, call_item = replayable(first)
    naive: list[Any] = [question, call_item, output]
    orphan: list[Any] = [output]
    guarded: list[Any] = [question, reasoning_item, call_item, output]
    with openai_client(validating_server) as client:
        with pytest.raises(openai.BadRequestError) as rejected:
            client.responses.create(model="gpt-test", input=naive, stream=stream)
        assert rejected.value.status_code == 400
        assert rejected.value.type == "invalid_request_error"
        assert rejected.value.body == {
            "message": missing_reasoning(call.id, "function_call", reasoning.id),
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
        with pytest.raises(openai.BadRequestError, match="No tool call found for function"):
            client.responses.create(model="gpt-test", input=orphan, stream=stream)
        if stream:
            with client.responses.stream(model="gpt-test", input=guarded) as events:
                second = events.get_final_response()
        else:
            second = client.responses.create(model="gpt-test", input=guarded)
    assert second.output_text == "SK4417 on Saturday."
    assert [r.rejection is not None for r in validating_server.requests] == [
        False,
        True,
        True,
        False,
    ]


@pytest.mark.usefixtures("sdks")
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_chat_sdk_rejects_broken_tool_messages_and_passes_a_valid_loop(
    validating_server: FakeLLMServer, stream: bool
) -> None:
    """Chat Completions: orphan tool message and unanswered call rejected; thinking is
    ignored and the replayed loop passes."""
    validating_server.enqueue("chat", tool_calls=[ToolCall("search", id="call_1")], thinking="x")
    validating_server.enqueue("chat", "SK4417.")
    ask: ChatCompletionMessageParam = {"role": "user", "content": USER_TEXT}
    with openai_client(validating_server) as client:
        first = client.chat.completions.create(model="gpt-test", messages=[ask])
        [called] = first.choices[0].message.tool_calls or []
        assert called.id == "call_1"
        assistant_turn: ChatCompletionMessageParam = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "search", "arguments": "{}"},
                }
            ],
        }
        answer: ChatCompletionMessageParam = {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "ok",
        }
        with pytest.raises(openai.BadRequestError) as rejected:
            client.chat.completions.create(model="gpt-test", messages=[answer, ask], stream=stream)
        assert isinstance(rejected.value.body, dict)
        assert rejected.value.body["message"] == CHAT_ORPHAN_TOOL
        with pytest.raises(openai.BadRequestError) as rejected:
            client.chat.completions.create(
                model="gpt-test", messages=[ask, assistant_turn, ask], stream=stream
            )
        assert isinstance(rejected.value.body, dict)
        assert rejected.value.body["message"] == chat_missing_tool_messages("call_1")
        valid = [ask, assistant_turn, answer]
        if stream:
            with client.chat.completions.create(
                model="gpt-test", messages=valid, stream=True
            ) as chunks:
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            text = (
                client.chat.completions.create(model="gpt-test", messages=valid)
                .choices[0]
                .message.content
                or ""
            )
    assert text == "SK4417."
    assert len(validating_server.rejections) == 2


def test_anthropic_prefix_check_binds_a_thinking_block_to_the_messages_before_it() -> None:
    ask = {"role": "user", "content": "check"}
    turn = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "t", "signature": "sig"}, {"type": "text"}],
    }
    prefixes = {"sig": [ask]}
    assert anthropic_prefix_error({"messages": [ask, turn]}, prefixes) is None
    summary = {"role": "user", "content": "[summary]"}
    assert anthropic_prefix_error({"messages": [summary, turn]}, prefixes) == (
        "messages.1.content.0: The block is bound to a different conversation."
    )
    dropping = {"block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    body = {"thinking": dropping, "messages": [summary, turn]}
    assert anthropic_prefix_error(body, prefixes) is None
    assert anthropic_prefix_error({"messages": [summary, turn]}, {}) is None  # not ours: unknown
