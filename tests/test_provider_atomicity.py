"""Cuts the provider would reject are never closed cuts, and the others are: inside the
Anthropic extended-thinking tool loop in progress (unless the first message kept opens with
its own thinking block; a loop that ended is cut between its rounds), between an OpenAI
Responses reasoning item and what it produced, inside one response split over several
messages.

The gate tests check every closed cut of such transcripts; the end-to-end tests run the real
SDKs against the fake server with the providers' validation on, and show that a naive cut at a
pairing-closed boundary inside such a unit makes the next request fail with the provider's own
400, while the guarded compactor's next request succeeds. Thinking blocks kept after a summary
pass the prefix check of preserved thinking only when dropped (by the compactor or the API).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, ToolCall
from loopback import bypass_proxies
from transcript_builders import policy_with

from otel_compaction import CompactionGate, ExtractiveSummarizer, GuardedCompactor
from otel_compaction.analysis import Analysis
from otel_compaction.transcript import Transcript

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

PADDING = "Keep an exact record of every service and its state. " * 60


def closed(messages: list[dict[str, Any]], policy: Any = "default") -> list[int]:
    gate = CompactionGate(policy)
    analysis: Analysis = gate.analyse(messages)
    return analysis.closed_cuts()


def thinking_loop() -> list[dict[str, Any]]:
    """Anthropic: an answered question, then a thinking turn with two tool rounds, answered."""
    return [
        {"role": "user", "content": "hello " + PADDING},  # 0
        {"role": "assistant", "content": "Hello! What should I check?"},  # 1
        {"role": "user", "content": "Check web and db."},  # 2
        {
            "role": "assistant",  # 3: opens the loop with its thinking block
            "content": [
                {"type": "thinking", "thinking": "web first", "signature": "c2ln"},
                {"type": "tool_use", "id": "toolu_1", "name": "status", "input": {"s": "web"}},
            ],
        },
        {
            "role": "user",  # 4
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "up"}],
        },
        {
            "role": "assistant",  # 5: continues the turn, no thinking block of its own
            "content": [
                {"type": "tool_use", "id": "toolu_2", "name": "status", "input": {"s": "db"}}
            ],
        },
        {
            "role": "user",  # 6
            "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "up"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Both are up."}]},  # 7
        {"role": "user", "content": "Thanks."},  # 8
    ]


def test_a_thinking_tool_loop_that_ended_is_cut_between_its_rounds() -> None:
    messages = thinking_loop()
    pairing = [0, 1, 2, 3, 5, 7, 8, 9]
    assert Transcript.parse(messages).closed_cuts() == pairing
    # The loop ended (message 7 answers, 8 is the user's): the next request has no loop in
    # progress, so a summary may replace its first round.
    assert closed(messages) == pairing
    decision = CompactionGate().evaluate(messages, 0, 5)
    assert (decision.action, decision.span, decision.extended) == ("compact", (0, 5), False)


def test_no_closed_cut_inside_the_thinking_tool_loop_in_progress() -> None:
    messages = thinking_loop()[:7]  # the loop in progress: the last message is a tool result
    assert Transcript.parse(messages).closed_cuts() == [0, 1, 2, 3, 5, 7]
    # Cut 5 would open the loop with message 5, which has no thinking block of its own.
    assert closed(messages) == [0, 1, 2, 3, 7]
    off = policy_with(rules={"thinking_tool_loop": "off"})
    assert closed(messages, off) == [0, 1, 2, 3, 5, 7]
    decision = CompactionGate().evaluate(messages, 0, 5, critical=True)
    assert (decision.action, decision.span, decision.extended) == ("compact", (0, 7), True)


def test_the_whole_thinking_turn_is_kept_together_when_the_policy_says_so() -> None:
    messages = thinking_loop()
    whole = policy_with(rules={"whole_thinking_loop": "block"})
    assert closed(messages, whole) == [0, 1, 2, 3, 8, 9]
    assert closed(messages, "strict") == [0, 1, 2, 3, 8, 9]


def test_a_loop_without_thinking_is_cut_like_any_other() -> None:
    messages = thinking_loop()[:7]
    messages[3]["content"] = messages[3]["content"][1:]
    assert closed(messages) == [0, 1, 2, 3, 5, 7]


def reasoning_items() -> list[dict[str, Any]]:
    """Responses: a reasoning item and the call it produced; a second with its message."""
    return [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},  # 1
        {
            "type": "function_call",  # 2
            "id": "fc_1",
            "call_id": "call_1",
            "name": "status",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "up"},  # 3
        {"type": "reasoning", "id": "rs_2", "summary": []},  # 4
        {
            "type": "message",  # 5
            "role": "assistant",
            "content": [{"type": "output_text", "text": "It is up."}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ok"}]},
    ]


def test_no_closed_cut_between_a_reasoning_item_and_what_it_produced() -> None:
    messages = reasoning_items()
    assert Transcript.parse(messages).closed_cuts() == [0, 1, 2, 4, 5, 6, 7]
    assert closed(messages) == [0, 1, 4, 6, 7]
    off = policy_with(rules={"reasoning_item": "off", "split_response": "off"})
    assert closed(messages, off) == [0, 1, 2, 4, 5, 6, 7]


def test_no_closed_cut_inside_a_split_response() -> None:
    # Anthropic messages that share one response id, and consecutive Chat assistant messages.
    anthropic_split: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"id": "msg_1", "role": "assistant", "content": [{"type": "text", "text": "On it."}]},
        {
            "id": "msg_1",
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "run", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
        },
        {"id": "msg_2", "role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        {"id": "msg_3", "role": "assistant", "content": [{"type": "text", "text": "Anything?"}]},
    ]
    # Messages 4 and 5 carry different ids: two responses, so the cut between them is closed.
    assert closed(anthropic_split) == [0, 1, 4, 5, 6]
    chat_split: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "On it."},
        {"role": "assistant", "content": "Still on it."},
        {"role": "user", "content": "ok"},
    ]
    assert closed(chat_split) == [0, 1, 3, 4]
    assert closed(chat_split, policy_with(rules={"split_response": "off"})) == [0, 1, 2, 3, 4]


# -- end to end: the next request after a naive cut fails, after the guarded one succeeds --------


@pytest.fixture(name="server")
def server_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    bypass_proxies(monkeypatch)
    with FakeLLMServer(validate=True) as server:
        yield server


def summary_of(messages: list[Any], start: int, end: int) -> str:
    return "[Summary] " + " | ".join(str(m)[:40] for m in messages[start:end])


def guarded_messages(history: list[Any], cut: int) -> list[Any]:
    """What the guarded compactor makes of a request to compact up to `cut`."""
    compactor = GuardedCompactor(ExtractiveSummarizer(), budget=500)
    result = compactor.compact(history, force=True, critical=True, end=cut)
    assert result.compacted is True, result.reason
    assert result.span is not None and result.span[1] != cut  # the cut was moved
    return result.messages


def test_anthropic_rejects_the_naive_cut_inside_a_thinking_loop(server: FakeLLMServer) -> None:
    client = anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="t", max_retries=0)
    thinking: Any = {"type": "enabled", "budget_tokens": 1024}

    def ask(messages: list[Any]) -> Any:
        return client.messages.create(
            model="claude-test", max_tokens=2048, thinking=thinking, messages=messages
        )

    history: list[Any] = [{"role": "user", "content": "Check web and db. " + PADDING}]
    server.enqueue("messages", thinking="web first", tool_calls=[ToolCall("status", {"s": "web"})])
    first = ask(history)
    history.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
    web = next(b.id for b in first.content if b.type == "tool_use")
    history.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": web, "content": "up"}]}
    )
    server.enqueue("messages", tool_calls=[ToolCall("status", {"s": "db"})])
    second = ask(history)
    history.append({"role": "assistant", "content": [b.model_dump() for b in second.content]})
    db = next(b.id for b in second.content if b.type == "tool_use")
    history.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": db, "content": "up"}]}
    )
    # Cut 3 is pairing-closed (toolu_1 answered, toolu_2 not yet emitted), but it falls inside
    # the thinking tool loop: the continued turn loses its thinking block.
    assert Transcript.parse(history).is_closed(3)
    naive = [{"role": "user", "content": summary_of(history, 0, 3)}, *history[3:]]
    server.enqueue("messages", "Both are up.")
    with pytest.raises(anthropic.BadRequestError) as rejected:
        ask(naive)
    assert "Expected `thinking` or `redacted_thinking`, but found `tool_use`" in str(rejected.value)
    answer = ask(guarded_messages(history, 3))
    assert answer.content[-1].text == "Both are up."
    assert len(server.rejections) == 1


def test_anthropic_takes_a_cut_at_a_response_with_its_own_thinking_block(
    server: FakeLLMServer,
) -> None:
    """Interleaved thinking: each response of the loop opens with a thinking block, so the
    loop in progress may be cut between its rounds; the guarded compactor cuts exactly there
    and the next request succeeds."""
    client = anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="t", max_retries=0)
    thinking: Any = {"type": "enabled", "budget_tokens": 1024}

    def ask(messages: list[Any]) -> Any:
        return client.messages.create(
            model="claude-test", max_tokens=2048, thinking=thinking, messages=messages
        )

    history: list[Any] = [{"role": "user", "content": "Check web and db. " + PADDING}]
    for step, target in (("web first", "web"), ("now db", "db")):
        server.enqueue("messages", thinking=step, tool_calls=[ToolCall("status", {"s": target})])
        reply = ask(history)
        history.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        [call] = [b.id for b in reply.content if b.type == "tool_use"]
        history.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call, "content": "up"}],
            }
        )
    assert 3 in CompactionGate().analyse(history).closed_cuts()
    compactor = GuardedCompactor(ExtractiveSummarizer(), budget=500)
    result = compactor.compact(history, force=True, critical=True, end=3)
    assert (result.compacted, result.span) == (True, (0, 3))
    server.enqueue("messages", "Both are up.")
    assert ask(result.messages).content[-1].text == "Both are up."
    assert server.rejections == []


def test_responses_rejects_the_naive_cut_after_a_reasoning_item(server: FakeLLMServer) -> None:
    client = openai.OpenAI(base_url=server.openai_base_url, api_key="t", max_retries=0)

    def ask(items: list[Any]) -> Any:
        return client.responses.create(model="gpt-test", input=items, reasoning={"effort": "low"})

    history: list[Any] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PADDING}]}
    ]
    server.enqueue("responses", thinking="look it up", tool_calls=[ToolCall("status", {})])
    first = ask(history)
    history += [item.model_dump(exclude_none=True) for item in first.output]
    [call] = [item for item in first.output if item.type == "function_call"]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "up"})
    assert [item["type"] for item in history] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    # Cut 2 is pairing-closed (no call before it), but it parts the call from its reasoning.
    assert Transcript.parse(history).is_closed(2)
    summary = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": summary_of(history, 0, 2)}],
    }
    server.enqueue("responses", "It is up.")
    with pytest.raises(openai.BadRequestError) as rejected:
        ask([summary, *history[2:]])
    assert "was provided without its required 'reasoning' item" in str(rejected.value)
    answer = ask(guarded_messages(history, 2))
    assert answer.output_text == "It is up."
    assert len(server.rejections) == 1


# -- preserved thinking: thinking blocks kept after a summary the client wrote ----------------


def preserved_thinking_history() -> tuple[list[Any], dict[str, list[Any]]]:
    """An ended thinking loop, a user turn, and a thinking loop in progress; each thinking
    block's prefix (the messages it was produced after), by signature."""
    history: list[Any] = [
        {"role": "user", "content": "Check web. " + PADDING},  # 0
        {
            "role": "assistant",  # 1
            "content": [
                {"type": "thinking", "thinking": "web", "signature": "sig-1"},
                {"type": "tool_use", "id": "toolu_1", "name": "status", "input": {"s": "web"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Web is up."}]},  # 3
        {"role": "user", "content": "Now db."},  # 4
        {
            "role": "assistant",  # 5
            "content": [
                {"type": "thinking", "thinking": "db", "signature": "sig-2"},
                {"type": "tool_use", "id": "toolu_2", "name": "status", "input": {"s": "db"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2"}]},  # 6
    ]
    return history, {"sig-1": history[:1], "sig-2": history[:5]}


@pytest.mark.parametrize(
    ("kept_thinking", "binding", "accepted"),
    [
        pytest.param("keep", None, False, id="kept-blocks-fail-the-prefix-check"),
        pytest.param("drop", None, True, id="dropped-blocks-pass"),
        pytest.param("keep", "drop_block", True, id="kept-blocks-the-api-drops"),
    ],
)
def test_thinking_kept_after_a_summary_is_dropped_or_kept_as_the_provider_needs(
    kept_thinking: Any, binding: str | None, accepted: bool
) -> None:
    from provider_rules import anthropic_messages_error, anthropic_prefix_error

    history, prefixes = preserved_thinking_history()
    compactor = GuardedCompactor(ExtractiveSummarizer(), budget=500, kept_thinking=kept_thinking)
    result = compactor.compact(history, force=True, critical=True, end=3)
    assert result.compacted is True and result.span == (0, 3)
    thinking: dict[str, Any] = {"type": "adaptive"}
    if binding is not None:
        thinking["block_binding"] = {"prefix_mismatch_behavior": binding}
    body = {"thinking": thinking, "messages": result.messages}
    assert anthropic_messages_error(body) is None  # pairing and the loop in progress are sound
    assert (anthropic_prefix_error(body, prefixes) is None) is accepted
    kept_blocks = [b["type"] for b in result.messages[-2]["content"]]
    assert kept_blocks == (["tool_use"] if kept_thinking == "drop" else ["thinking", "tool_use"])
    assert history[5]["content"][0]["type"] == "thinking"  # the caller's list is untouched
