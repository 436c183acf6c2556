"""``reasoning_item``: an OpenAI Responses reasoning item stays with the items of its response
after it (the next one, through the last message or function call). Each case names the closed
cuts and why, checked against the provider's rule (`provider_rules.responses_error` on the
input a summary at that cut makes). ``split_response`` is off here, so that only this rule
speaks; a hosted ``web_search_call`` is bound to nothing of its own."""

from __future__ import annotations

from typing import Any

import pytest
from provider_rules import ProducedItem, ProducedResponse, responses_error
from transcript_builders import policy_with

from otel_compaction import CompactionGate
from otel_compaction.transcript import Transcript

ONLY_THIS_RULE = policy_with(rules={"split_response": "off"})


def closed(items: list[dict[str, Any]]) -> list[int]:
    return CompactionGate(ONLY_THIS_RULE).analyse(items).closed_cuts()


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def said(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }


REASONING = {"type": "reasoning", "id": "rs_1", "summary": []}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "up"}
SEARCH = {"type": "web_search_call", "id": "ws_1", "status": "completed"}


def produced(items: list[dict[str, Any]]) -> list[ProducedResponse]:
    """The response the model produced: the items from the reasoning item to the last of its
    own (everything but inputs)."""
    own = [
        ProducedItem(i["type"], i["id"], i.get("call_id"))
        for i in items
        if "id" in i and i.get("role") != "user"
    ]
    return [ProducedResponse("resp_1", tuple(own))]


def provider_accepts(items: list[dict[str, Any]], cut: int) -> bool:
    """The Responses API takes the input a summary of ``items[:cut]`` makes."""
    body = {"input": [user("[summary]"), *items[cut:]]}
    return responses_error(body, produced(items)) is None


CASES = [
    # The call needs its reasoning item: cut 2 would part them.
    pytest.param([user("hi"), REASONING, CALL, OUTPUT], [0, 1, 2, 4], [0, 1, 4], id="call"),
    # A message item needs its reasoning item as well: cut 2 would part them.
    pytest.param([user("hi"), REASONING, said("msg_1", "Up.")], [0, 1, 2, 3], [0, 1, 3], id="msg"),
    # A hosted search between them is part of the response: cuts 2 and 3 would part the
    # message from its reasoning item.
    pytest.param(
        [user("hi"), REASONING, SEARCH, said("msg_1", "Up.")],
        [0, 1, 2, 3, 4],
        [0, 1, 4],
        id="search-between-reasoning-and-message",
    ),
]


@pytest.mark.parametrize(("items", "pairing", "gate"), CASES)
def test_closed_cuts_are_the_pairing_cuts_the_provider_accepts(
    items: list[dict[str, Any]], pairing: list[int], gate: list[int]
) -> None:
    assert Transcript.parse(items).closed_cuts() == pairing
    assert closed(items) == gate
    assert gate == [c for c in pairing if provider_accepts(items, c)]


def test_a_web_search_call_is_bound_to_no_message_of_its_own() -> None:
    # No reasoning item: nothing the provider documents ties the search to the message after it.
    items = [user("hi"), SEARCH, said("msg_1", "Up.")]
    assert closed(items) == [0, 1, 2, 3]
    assert CompactionGate().analyse(items).closed_cuts() == [0, 1, 2, 3]  # split_response too


def test_a_reasoning_item_is_not_left_before_a_summary() -> None:
    # A span starting at cut 2 keeps the reasoning item and summarizes what it preceded.
    items = [user("hi"), REASONING, CALL, OUTPUT, user("ok")]
    decision = CompactionGate(ONLY_THIS_RULE).evaluate(items, 2, 5, raise_on_refuse=False)
    assert decision.action == "refuse"
    assert [o.id for o in decision.obligations] == ["reasoning_item@1"]
