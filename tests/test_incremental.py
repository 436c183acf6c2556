"""The incremental analysis decides exactly as a fresh one, on every prefix of every corpus
transcript and of random transcripts, and notices every change that is not an append."""

from __future__ import annotations

import json
import random
import threading
from typing import Any

import pytest
from conftest import Transcript as Record

from otel_compaction import CompactionGate, Policy
from otel_compaction.errors import CompactionError
from otel_compaction.incremental import AnalysisCache

Messages = list[dict[str, Any]]


def answers(gate: CompactionGate, messages: Messages, key: str) -> list[Any]:
    """Everything a caller can observe: decisions on three spans (with their findings and
    must_carry), every finding over the whole transcript, and the closed cuts."""
    out: list[Any] = []
    n = len(messages)
    for end in dict.fromkeys((max(1, n // 2), max(1, n - 1), n)):
        try:
            out.append(gate.evaluate(messages, 0, end, conversation_id=key, raise_on_refuse=False))
        except CompactionError as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    analysis = gate.analyse(messages, conversation_id=key)
    out.append(gate.check(analysis))
    out.append(analysis.closed_cuts())
    out.append([(o.kind, o.id, o.opened, o.resolved, o.status) for o in analysis.obligations])
    return out


def grow_and_compare(messages: Messages, policy: Policy, key: str = "c") -> int:
    """Append `messages` one at a time to one list; at every length, the incremental gate
    answers as a fresh one. Returns how many prefixes were compared."""
    incremental = CompactionGate(policy)
    growing: Messages = []
    for message in messages:
        growing.append(message)
        fresh = CompactionGate(policy, incremental=False)
        assert answers(incremental, growing, key) == answers(fresh, growing, key), (
            f"prefix of {len(growing)} messages"
        )
    assert incremental.cache is not None
    assert incremental.cache.stats.built == 1  # the first message; every other was an append
    return len(messages)


def test_every_prefix_of_every_corpus_transcript(corpus: list[Record]) -> None:
    policy = Policy.load("default")
    compared = sum(grow_and_compare(record.messages, policy) for record in corpus)
    assert compared == sum(len(r.messages) for r in corpus)


@pytest.mark.parametrize("name", ["strict", "lenient"])
def test_prefixes_under_the_other_builtin_policies(corpus: list[Record], name: str) -> None:
    policy = Policy.load(name)
    for record in corpus[::10]:
        grow_and_compare(record.messages, policy)


# -- random valid transcripts --------------------------------------------------------------------

_TEXTS = [
    "Booked ZFA04Y for mia_li_3668.",
    "I will check the flight status next.",
    "Let me verify /srv/app/main.py before I edit it.",
    "No results found for that query.",
    "Error: timed out",
    "If you would like, I can retry.",
    "Sent to ops@example.com; commit 3f9a2c1d.",
    "Done.",
    "",
]


def random_transcript(rng: random.Random, length: int) -> Messages:
    """Chat Completions with parallel calls, reused ids, unanswered and stray results,
    failures and retries, commitments and identifiers."""
    messages: Messages = [{"role": "system", "content": "You are an agent."}]
    open_ids: list[str] = []
    used: list[str] = []
    while len(messages) < length:
        roll = rng.random()
        if roll < 0.2:
            messages.append({"role": "user", "content": rng.choice(_TEXTS) or "go on"})
        elif roll < 0.5:
            calls = []
            for _ in range(rng.choice((1, 1, 1, 2, 3))):
                call_id = rng.choice(used) if used and rng.random() < 0.1 else f"c{len(used)}"
                used.append(call_id)
                open_ids.append(call_id)
                arguments = {"target": rng.choice(["ZFA04Y", "/srv/app/main.py", "q1"])}
                if rng.random() < 0.1:
                    arguments["run_in_background"] = True  # type: ignore[assignment]
                name = rng.choice(["search", "book", "begin_transaction", "commit", "Bash"])
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                )
            messages.append(
                {"role": "assistant", "content": rng.choice(_TEXTS), "tool_calls": calls}
            )
        elif roll < 0.8 and open_ids:
            call_id = open_ids.pop(rng.randrange(len(open_ids)))
            text = rng.choice([*_TEXTS, "with ID: bg_42", "status: completed bg_42"])
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif roll < 0.85:
            messages.append({"role": "tool", "tool_call_id": "stray", "content": "late"})
        elif roll < 0.9:
            # A Responses reasoning item and its call, answered later.
            call_id = f"r{len(used)}"
            used.append(call_id)
            messages.append({"type": "reasoning", "id": f"rs{len(messages)}", "summary": []})
            messages.append(
                {"type": "function_call", "call_id": call_id, "name": "search", "arguments": "{}"}
            )
            if rng.random() < 0.7:
                messages.append(
                    {
                        "type": "function_call_output",
                        "call_id": call_id,
                        "output": rng.choice(_TEXTS),
                    }
                )
        elif roll < 0.95:
            # An Anthropic turn that thinks before its tool call, and the result.
            call_id = f"t{len(used)}"
            used.append(call_id)
            messages.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "s"},
                        {"type": "tool_use", "id": call_id, "name": "book", "input": {}},
                    ],
                }
            )
            if rng.random() < 0.7:
                messages.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": call_id, "content": "ok"}
                        ],
                    }
                )
        else:
            messages.append({"role": "assistant", "content": rng.choice(_TEXTS)})
    return messages


@pytest.mark.parametrize("seed", range(12))
def test_every_prefix_of_random_transcripts(seed: int) -> None:
    rng = random.Random(seed)
    grow_and_compare(random_transcript(rng, rng.randrange(20, 70)), Policy.load("default"))


# -- changes that are not appends ----------------------------------------------------------------


def corpus_like(seed: int = 3) -> Messages:
    return random_transcript(random.Random(seed), 40)


def same_as_fresh(gate: CompactionGate, messages: Messages) -> None:
    assert answers(gate, messages, "c") == answers(
        CompactionGate(gate.policy, incremental=False), messages, "c"
    )


def test_a_compaction_truncation_or_edit_rebuilds() -> None:
    gate = CompactionGate("default")
    assert gate.cache is not None
    messages = corpus_like()
    same_as_fresh(gate, messages)
    built = gate.cache.stats.built
    compacted = [
        messages[0],
        {"role": "user", "content": "Summary: booked ZFA04Y."},
        *messages[20:],
    ]
    same_as_fresh(gate, compacted)
    same_as_fresh(gate, compacted[:10])  # truncated
    edited = [dict(m) for m in compacted[:10]]
    edited[3] = {"role": "assistant", "content": "I will verify the booking."}
    same_as_fresh(gate, edited)
    assert gate.cache.stats.built >= built + 3


def test_rebuilt_but_equal_objects_carry_over() -> None:
    """A framework that converts its messages on every call passes new, equal objects."""
    gate = CompactionGate("default")
    assert gate.cache is not None
    messages = corpus_like()
    same_as_fresh(gate, messages[:20])
    built = gate.cache.stats.built
    same_as_fresh(gate, json.loads(json.dumps(messages)))
    assert gate.cache.stats.built == built


def test_the_last_message_written_in_place_is_read_again() -> None:
    gate = CompactionGate("default")
    messages = corpus_like()[:12]
    messages.append({"role": "assistant", "content": "Let me"})
    same_as_fresh(gate, messages)
    messages[-1]["content"] = "Let me verify the booking ZFA04Y."  # a streamed reply grows
    same_as_fresh(gate, messages)


def test_an_earlier_message_changed_in_place_needs_forget() -> None:
    """The documented limit: an earlier message mutated after it was analysed is not
    noticed, and `forget` is the way out."""
    gate = CompactionGate("default")
    assert gate.cache is not None
    messages = [
        {"role": "user", "content": "book it"},
        {"role": "assistant", "content": "Booked."},
        {"role": "user", "content": "thanks"},
    ]
    gate.analyse(messages, conversation_id="c")
    messages[1]["content"] = "I will verify the booking."
    stale = gate.analyse(messages, conversation_id="c")
    assert not [o for o in stale.obligations if o.kind == "commitment"]
    gate.cache.forget("c")
    assert [o.kind for o in gate.analyse(messages, conversation_id="c").obligations] == [
        "commitment"
    ]


def test_a_malformed_appended_message_raises_and_keeps_nothing_half_fed() -> None:
    gate = CompactionGate("default")
    messages: Messages = [{"role": "user", "content": "hi"}]
    gate.analyse(messages, conversation_id="c")
    messages.append({"role": "robot", "content": "?"})
    with pytest.raises(CompactionError, match="unknown role 'robot'"):
        gate.analyse(messages, conversation_id="c")
    messages[-1] = {"role": "assistant", "content": "hello"}
    same_as_fresh(gate, messages)


def test_state_is_bounded_least_recently_used_first() -> None:
    cache = AnalysisCache(max_conversations=2)
    policy = Policy.load("default")
    conversations = {key: corpus_like(seed) for seed, key in enumerate("abc")}
    for key in "ab":
        cache.analyse(conversations[key], policy, key=key)
    cache.analyse(conversations["a"], policy, key="a")  # a is now the most recent
    cache.analyse(conversations["c"], policy, key="c")  # evicts b
    assert len(cache) == 2 and cache.stats.evicted == 1
    extended = cache.stats.extended
    cache.analyse(conversations["a"], policy, key="a")
    assert cache.stats.extended == extended + 1
    cache.analyse(conversations["b"], policy, key="b")
    assert cache.stats.built == 4  # a, b, c, and b again


def test_conversations_grow_in_parallel_on_one_gate() -> None:
    gate = CompactionGate("default")
    failures: list[str] = []

    def grow(seed: int) -> None:
        messages = random_transcript(random.Random(seed), 50)
        growing: Messages = []
        for message in messages:
            growing.append(message)
            got = answers(gate, growing, f"conversation-{seed}")
            fresh = CompactionGate("default", incremental=False)
            if got != answers(fresh, growing, f"conversation-{seed}"):
                failures.append(f"seed {seed} at {len(growing)}")
                return

    threads = [threading.Thread(target=grow, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
