"""``thinking_tool_loop``: the cuts Anthropic rejects inside an extended-thinking tool loop,
and only those. Each case names which cuts are closed and why; every verdict is checked
against the provider's own rule (`provider_rules.anthropic_messages_error` on the request a
summary at that cut would make), so the gate holds exactly the cuts the provider forbids."""

from __future__ import annotations

from typing import Any

import pytest
from provider_rules import anthropic_messages_error
from transcript_builders import policy_with

from otel_compaction import CompactionGate
from otel_compaction.transcript import Transcript

THINKING = {"type": "enabled", "budget_tokens": 1024}


def thinking(text: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": "c2ln"}


def use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "status", "input": {"s": call_id}}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def results(*call_ids: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": c, "content": "up"} for c in call_ids],
    }


def closed(messages: list[dict[str, Any]], policy: Any = "default") -> list[int]:
    return CompactionGate(policy).analyse(messages).closed_cuts()


def provider_accepts(messages: list[dict[str, Any]], cut: int) -> bool:
    """Anthropic takes the request a summary of ``messages[:cut]`` makes (with thinking on),
    or rejects it only as it rejects the whole history (a call still awaiting its result, a
    loop that never had a thinking block): the cut adds no rejection of its own."""
    kept = [{"role": "user", "content": "[summary]"}, *messages[cut:]]
    error = anthropic_messages_error({"thinking": THINKING, "messages": kept})
    return (
        error is None
        or anthropic_messages_error({"thinking": THINKING, "messages": messages}) is not None
    )


ASK = {"role": "user", "content": "Check web and db."}
IN_PROGRESS = [
    ASK,  # 0
    assistant(thinking("web first"), use("t1")),  # 1: opens the loop with its thinking block
    results("t1"),  # 2
    assistant(use("t2")),  # 3: continues the turn, no thinking block of its own
    results("t2"),  # 4: the loop is in progress: the next request continues it
]
INTERLEAVED = [*IN_PROGRESS[:3], assistant(thinking("now db"), use("t2")), results("t2")]
ENDED = [
    *IN_PROGRESS,
    assistant({"type": "text", "text": "Both are up."}),  # 5
    {"role": "user", "content": "Thanks."},  # 6
]

CASES = [
    # 3 would open the loop in progress with message 3, which has no thinking block.
    pytest.param(IN_PROGRESS, [0, 1, 3, 5], [0, 1, 5], id="in-progress-cut-3-rejected"),
    # With interleaved thinking message 3 opens with its own thinking block: 3 is accepted.
    pytest.param(INTERLEAVED, [0, 1, 3, 5], [0, 1, 3, 5], id="interleaved-cut-3-accepted"),
    # The loop ended: the next request has no loop in progress, every round may be cut.
    pytest.param(ENDED, [0, 1, 3, 5, 6, 7], [0, 1, 3, 5, 6, 7], id="ended-loop-cut-3-accepted"),
    # No thinking block opens the loop: nothing to keep with it.
    pytest.param(
        [ASK, assistant(use("t1")), results("t1"), assistant(use("t2")), results("t2")],
        [0, 1, 3, 5],
        [0, 1, 3, 5],
        id="no-thinking-cut-like-any-other",
    ),
]


@pytest.mark.parametrize(("messages", "pairing", "gate"), CASES)
def test_closed_cuts_are_the_pairing_cuts_the_provider_accepts(
    messages: list[dict[str, Any]], pairing: list[int], gate: list[int]
) -> None:
    assert Transcript.parse(messages).closed_cuts() == pairing
    assert closed(messages) == gate
    assert gate == [c for c in pairing if provider_accepts(messages, c)]


def test_calls_awaiting_their_results_keep_the_loop_in_progress() -> None:
    # Cut 3 is closed by pairing (t1 answered) but the request after t2's result would open
    # the loop with message 3, without a thinking block; cut 4 is open by pairing.
    awaiting = IN_PROGRESS[:4]
    assert Transcript.parse(awaiting).closed_cuts() == [0, 1, 3]
    assert closed(awaiting) == [0, 1]
    assert not provider_accepts(IN_PROGRESS, 3)


def test_a_loop_in_progress_after_an_ended_one_constrains_only_itself() -> None:
    messages = [*ENDED, *INTERLEAVED[1:3], assistant(use("t3")), results("t3")]
    # Cuts 3 and 5 (inside the ended loop) are accepted; 9 (message 9 has no thinking) is not.
    assert Transcript.parse(messages).closed_cuts() == [0, 1, 3, 5, 6, 7, 9, 11]
    assert closed(messages) == [0, 1, 3, 5, 6, 7, 11]


def test_the_rule_off_leaves_pairing_alone_and_whole_thinking_loop_keeps_the_turn() -> None:
    assert closed(IN_PROGRESS, policy_with(rules={"thinking_tool_loop": "off"})) == [0, 1, 3, 5]
    whole = policy_with(rules={"whole_thinking_loop": "block"})
    assert closed(ENDED, whole) == [0, 1, 6, 7]  # the whole turn, messages 1..5


def test_the_units_follow_the_transcript_as_it_grows() -> None:
    """An appended result makes the loop in progress; the answer after it ends it."""
    gate = CompactionGate()
    grown: list[dict[str, Any]] = []
    seen = []
    for message in ENDED:
        grown.append(message)
        seen.append(gate.analyse(grown, conversation_id="c").closed_cuts())
    assert seen[4] == [0, 1, 5]  # in progress: cut 3 rejected
    assert seen[5] == [0, 1, 3, 5, 6]  # the answer ended the loop
