"""The obligations of an analysis, merged into the tool calls' own order, are exactly the
sorted, stale-marked list the rules' obligations make: on every corpus transcript, on random
transcripts, grown one message at a time, under every built-in policy."""

from __future__ import annotations

import random
from typing import Any

import pytest
from conftest import Transcript as Record
from test_incremental import random_transcript
from transcript_builders import policy_with

from otel_compaction import CompactionGate, Policy
from otel_compaction.analysis import Analysis
from otel_compaction.rules import RULES, Tracked
from otel_compaction.rules.base import OPEN


def assert_same_as_sorted(analysis: Analysis) -> None:
    parts: list[list[Tracked]] = []
    for rule in RULES.values():
        found: Any = analysis.facts.get(rule.name)
        if rule.scan is not None and isinstance(found, list) and found:
            parts += [found] if isinstance(found[0], Tracked) else []
    merged = (
        analysis.obligations, analysis.opened_at, analysis.resolved_at,
        list(analysis.stale.items()),
    )  # fmt: skip
    analysis.stale = {}
    obligations, opened_at, resolved_at = analysis._sorted(parts)
    assert merged == (obligations, opened_at, resolved_at, list(analysis.stale.items()))
    assert resolved_at == [OPEN if o.resolved is None else o.resolved for o in obligations]


def grow(messages: list[dict[str, Any]], policy: Policy) -> int:
    gate = CompactionGate(policy)
    for length in range(1, len(messages) + 1):
        assert_same_as_sorted(gate.analyse(messages[:length], conversation_id="c"))
    return len(messages)


@pytest.mark.parametrize("name", ["default", "strict", "lenient"])
def test_every_prefix_of_the_corpus(corpus: list[Record], name: str) -> None:
    policy = Policy.load(name)
    records = corpus if name == "default" else corpus[::5]
    assert sum(grow(r.messages, policy) for r in records) > 0


@pytest.mark.parametrize("seed", range(12))
def test_every_prefix_of_random_transcripts(seed: int) -> None:
    rng = random.Random(seed)
    grow(random_transcript(rng, rng.randrange(40, 120)), Policy.load("default"))


def test_stale_calls_commitments_and_retries_are_marked_alike() -> None:
    """Unanswered calls and promises with many user turns after them: both orders mark the
    same obligations stale and close the same promises."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for turn in range(6):
        messages.append({"role": "user", "content": f"step {turn}"})
        messages.append(
            {
                "role": "assistant",
                "content": "I will check the flight status next.",
                "tool_calls": [
                    {
                        "id": f"c{turn}",
                        "type": "function",
                        "function": {"name": "search", "arguments": "{}"},
                    }
                ],
            }
        )
        if turn % 2:
            messages.append(
                {"role": "tool", "tool_call_id": f"c{turn}", "content": "Error: timed out"}
            )
    # The unanswered calls' runs ended without them: kept open here, so that they go stale.
    kept = policy_with("default", rules={"abandoned_call": "off"})
    analysis = CompactionGate(kept).analyse(messages, conversation_id="s")
    assert analysis.stale  # the case is exercised
    assert_same_as_sorted(analysis)
