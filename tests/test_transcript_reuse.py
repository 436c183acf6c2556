"""A rewritten transcript (a sliding window, a truncation, a compaction, an edit) reuses the
parse of every message it shares with the previous request of its conversation, and the
result is exactly the transcript a fresh parse gives: every entry, call, result, closed cut
and unit, field by field, on random transcripts (with reused call ids, parallel calls, server
tools, Responses items, thinking loops) and on the corpus. The gate also keeps what the
policy's patterns found in each shared message, and decides exactly as a fresh gate."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from conftest import Transcript as Record
from test_incremental import answers, random_transcript

from otel_compaction import CompactionGate, Policy, identifiers
from otel_compaction.errors import TranscriptError
from otel_compaction.incremental import AnalysisCache, TranscriptCache
from otel_compaction.scans import MessageScans
from otel_compaction.transcript import Transcript

Messages = list[Any]


def assert_same(got: Transcript, messages: Messages, label: str = "") -> None:
    """`got` is, field by field, the fresh parse of `messages`."""
    fresh = Transcript.parse(messages)
    assert got.messages == messages, label
    assert len(got.entries) == len(fresh.entries), label
    for mine, theirs in zip(got.entries, fresh.entries, strict=True):
        assert mine == theirs, f"{label}: entry {theirs.index}"
    for mine_call, fresh_call in zip(got.calls, fresh.calls, strict=True):
        assert mine_call == fresh_call, f"{label}: call {fresh_call.ordinal}"
    assert len(got.calls) == len(fresh.calls), label
    for mine_result, fresh_result in zip(got.results, fresh.results, strict=True):
        assert mine_result == fresh_result, f"{label}: result {fresh_result.ordinal}"
    assert len(got.results) == len(fresh.results), label
    assert got.format == fresh.format, label
    assert got.closedness == fresh.closedness, label
    assert got.units == fresh.units, label
    assert [c.id for c in got.open_calls()] == [c.id for c in fresh.open_calls()], label
    assert [r.call_id for r in got.orphan_results()] == [
        r.call_id for r in fresh.orphan_results()
    ], label


def server_tool_turns(rng: random.Random, count: int) -> Messages:
    """Anthropic turns with server tools resolved inside the message (ids reused across
    messages, a result before its own call, a second result for one call), client calls
    answered in the next message, and thinking loops."""
    messages: Messages = [{"role": "user", "content": "Find and book it."}]
    for turn in range(count):
        server = f"srvtoolu_{rng.randrange(3)}"  # reused across messages
        client = f"toolu_{rng.randrange(4)}"
        blocks: list[dict[str, Any]] = []
        if rng.random() < 0.3:
            blocks.append({"type": "thinking", "thinking": "plan", "signature": "s"})
        if rng.random() < 0.3:  # a result before its own call pairs with an earlier one
            blocks.append(
                {"type": "web_search_tool_result", "tool_use_id": server, "content": [turn]}
            )
        blocks.append({"type": "server_tool_use", "id": server, "name": "web_search", "input": {}})
        if rng.random() < 0.8:
            blocks.append({"type": "web_search_tool_result", "tool_use_id": server, "content": []})
        if rng.random() < 0.2:  # a second result for the same call
            blocks.append(
                {"type": "web_search_tool_result", "tool_use_id": server, "content": ["again"]}
            )
        blocks.append({"type": "text", "text": f"Step {turn}: ZFA0{turn}Y."})
        if rng.random() < 0.7:
            blocks.append({"type": "tool_use", "id": client, "name": "book", "input": {"n": turn}})
        messages.append({"role": "assistant", "content": blocks})
        if rng.random() < 0.8:
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": client, "content": "ok"}
            if rng.random() < 0.2:
                result["is_error"] = True
            messages.append({"role": "user", "content": [result]})
        elif rng.random() < 0.5:
            messages.append({"role": "user", "content": "go on"})
    return messages


def rewrite(rng: random.Random, messages: Messages, pool: Messages) -> Messages:
    """A random change of the kind agents make between requests; `pool` supplies messages
    to append or insert."""

    def fresh(count: int) -> Messages:
        start = rng.randrange(len(pool))
        return copy.deepcopy(pool[start : start + count])

    n = len(messages)
    roll = rng.random()
    if roll < 0.25 and n > 2:  # a sliding window: the oldest drop, new ones arrive
        keep = 1 if rng.random() < 0.7 else 0
        dropped = rng.randrange(1, max(2, n // 3))
        return messages[:keep] + messages[keep + dropped :] + fresh(rng.randrange(0, 4))
    if roll < 0.35 and n > 1:  # a truncation
        return messages[: rng.randrange(1, n)]
    if roll < 0.5 and n > 3:  # a compaction: a span becomes a summary
        start = rng.randrange(0, n - 2)
        end = rng.randrange(start + 1, n)
        summary = {"role": "user", "content": f"Summary of {end - start} messages."}
        return [*messages[:start], summary, *messages[end:]]
    if roll < 0.6 and n:  # an edit of one message (a copy: the old one stays as it was)
        edited = list(messages)
        at = rng.randrange(n)
        edited[at] = copy.deepcopy(pool[rng.randrange(len(pool))])
        return edited
    if roll < 0.7:  # the same messages rebuilt by a framework: equal, not identical
        rebuilt: Messages = json.loads(json.dumps(messages))
        return rebuilt
    if roll < 0.8 and n > 1:  # a message removed from the middle, another inserted
        changed = list(messages)
        del changed[rng.randrange(n)]
        changed.insert(rng.randrange(len(changed) + 1), copy.deepcopy(pool[0]))
        return changed
    if roll < 0.9 and n > 1:  # two neighbours swapped
        swapped = list(messages)
        at = rng.randrange(n - 1)
        swapped[at], swapped[at + 1] = swapped[at + 1], swapped[at]
        return swapped
    return messages + fresh(rng.randrange(1, 4))  # an append


def random_pool(seed: int) -> Messages:
    """A random transcript to rewrite: server tools and thinking loops for odd seeds, chat
    turns with reused ids and parallel calls for even ones."""
    rng = random.Random(seed)
    if seed % 2:
        return server_tool_turns(rng, rng.randrange(5, 25))
    return random_transcript(rng, rng.randrange(10, 60))


def walk(cache: TranscriptCache, start: Messages, pool: Messages, seed: int, steps: int) -> None:
    """`steps` random rewrites from `start`, each parsed by `cache` and compared."""
    rng = random.Random(seed)
    messages = list(start)
    for step in range(steps):
        messages = rewrite(rng, messages, pool) or [pool[0]]
        assert_same(cache.parse(messages, key="c"), messages, f"seed {seed}, step {step}")


@pytest.mark.parametrize("seed", range(40))
def test_random_rewrites_of_random_transcripts_parse_as_fresh(seed: int) -> None:
    pool = random_pool(seed)
    cache = TranscriptCache()
    walk(cache, pool, pool, seed, 40)
    assert cache.stats.built > 10  # rewrites, not appends
    assert cache.stats.reused > 0


def test_random_rewrites_of_corpus_transcripts_parse_as_fresh(corpus: list[Record]) -> None:
    cache = TranscriptCache()
    reused = 0
    for number, record in enumerate(corpus):
        cache.clear()
        before = cache.stats.reused
        walk(cache, record.messages, record.messages, number, 12)
        reused += cache.stats.reused - before
    assert reused > sum(len(r.messages) for r in corpus)  # most messages came again


def test_a_sliding_window_reads_only_the_new_messages_and_the_last_seen() -> None:
    """Each request drops the oldest call and result and appends a new pair: the messages
    kept are not read again, except the previous last one, which may have been written in
    place. The calls reuse their ids every third request."""

    def pair(k: int) -> Messages:
        call_id = f"call_{k % 3}"
        call = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        return [
            {"role": "assistant", "content": f"step {k}", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": f"done {k}"},
        ]

    cache = TranscriptCache()
    system = {"role": "system", "content": "You operate the fleet."}
    for n in range(8, 20):
        # Rebuilt every request, as a framework does: equal objects, not the same ones.
        messages = [dict(system)] + [m for k in range(n - 7, n) for m in pair(k)]
        before = cache.stats.reused
        assert_same(cache.parse(messages, key="w"), messages, f"request {n}")
        if n > 8:
            # 15 messages: the system message and 11 of the pairs come again; the previous
            # last result, the new call and the new result are read.
            assert cache.stats.reused - before == 12
    assert cache.stats.extended == 0


def test_a_message_changed_in_place_after_it_was_seen() -> None:
    """As documented: the previous last message is always read again, so a reply written in
    place is seen even when the list is also rewritten; an earlier message object changed in
    place keeps its old parse until `forget`."""
    cache = TranscriptCache()
    messages: Messages = [
        {"role": "system", "content": "You book flights."},
        {"role": "user", "content": "book ZFA04Y"},
        {"role": "assistant", "content": "Booking."},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "Let me"},
    ]
    cache.parse(messages, key="c")
    messages[-1]["content"] = "Let me check the booking."  # the streamed reply grew
    window = [messages[0], *messages[2:]]  # and the oldest user turn dropped
    assert_same(cache.parse(window, key="c"), window)
    assert cache.stats.reused == 3  # system, "Booking." and "thanks"; not the last

    window[1]["content"] = "Booked ZFA04Y, confirmation 77."  # an earlier message, in place
    rewritten = [window[0], *window[1:], {"role": "user", "content": "and the hotel?"}][1:]
    stale = cache.parse(rewritten, key="c")
    assert stale.entries[0].text == "Booking."  # the documented limit: not noticed
    cache.forget("c")
    assert_same(cache.parse(rewritten, key="c"), rewritten)
    assert cache.parse(rewritten, key="c").entries[0].text == "Booked ZFA04Y, confirmation 77."


def test_a_malformed_message_in_a_rewrite_raises_as_a_fresh_parse_does() -> None:
    cache = TranscriptCache()
    messages: Messages = random_transcript(random.Random(5), 30)
    cache.parse(messages, key="c")
    broken = [*messages[5:], {"role": "robot", "content": "?"}]
    with pytest.raises(TranscriptError) as fresh_error:
        Transcript.parse(broken)
    with pytest.raises(TranscriptError) as cached_error:
        cache.parse(broken, key="c")
    assert str(cached_error.value) == str(fresh_error.value)
    assert cached_error.value.message_index == len(broken) - 1
    window = messages[5:]
    assert_same(cache.parse(window, key="c"), window)  # nothing half-fed was kept


def test_a_list_that_shares_nothing_is_parsed_whole() -> None:
    cache = TranscriptCache()
    first = random_transcript(random.Random(1), 50)
    other = [m for m in random_transcript(random.Random(2), 50) if m not in first]
    cache.parse(first, key="c")
    assert_same(cache.parse(other, key="c"), other)
    assert cache.stats.reused == 0


def analyse_walk(policy: Policy, pool: Messages, seed: int, steps: int) -> CompactionGate:
    """`steps` random rewrites from `pool`, each answered by one incremental gate and by a
    fresh one: decisions, findings, must_carry, closed cuts and obligations all equal."""
    rng = random.Random(seed)
    gate = CompactionGate(policy)
    messages = list(pool)
    for step in range(steps):
        messages = rewrite(rng, messages, pool) or [pool[0]]
        fresh = CompactionGate(policy, incremental=False)
        assert answers(gate, messages, "c") == answers(fresh, messages, "c"), (
            f"seed {seed}, step {step}"
        )
    return gate


@pytest.mark.parametrize("seed", range(24))
def test_random_rewrites_of_random_transcripts_decide_as_fresh(seed: int) -> None:
    pool = random_pool(seed)
    policy = Policy.load(("default", "strict", "lenient")[seed % 3])
    gate = analyse_walk(policy, pool, seed, 25)
    assert gate.cache is not None
    assert gate.cache.stats.built > 5
    assert gate.cache.stats.reused > 0


def test_random_rewrites_of_corpus_transcripts_decide_as_fresh(corpus: list[Record]) -> None:
    policy = Policy.load("default")
    reused = 0
    for number, record in enumerate(corpus[::5]):
        gate = analyse_walk(policy, record.messages, number, 6)
        assert gate.cache is not None
        reused += gate.cache.stats.reused
    assert reused > 0


def test_a_sliding_window_scans_only_the_messages_it_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gate's patterns read a shared message once: after a window moves, only the texts
    of the messages parsed anew (the new pair and the previous last one) are scanned."""
    scanned: list[str] = []
    find = identifiers.find_identifiers

    def counting(text: str, *args: Any, **kwargs: Any) -> list[str]:
        scanned.append(text)
        return find(text, *args, **kwargs)

    monkeypatch.setattr("otel_compaction.scans.find_identifiers", counting)

    def pair(k: int) -> Messages:
        function = {"name": "book", "arguments": json.dumps({"code": f"ZF{k:03}Y"})}
        call = {"id": f"call_{k}", "type": "function", "function": function}
        return [
            {"role": "assistant", "content": f"Booking ZF{k:03}Y.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{k}", "content": f"booked ZF{k:03}Y"},
        ]

    gate = CompactionGate("default")
    system = {"role": "system", "content": "You book flights."}
    for n in range(8, 16):
        messages = [dict(system)] + [m for k in range(n - 7, n) for m in pair(k)]
        scanned.clear()
        got = answers(gate, messages, "w")
        read = sorted(scanned)
        assert got == answers(CompactionGate(gate.policy, incremental=False), messages, "w")
        if n > 8:
            # The previous last result, the new call (its text and arguments) and its result.
            assert read == sorted(
                [f"booked ZF{n - 2:03}Y", f"Booking ZF{n - 1:03}Y.",
                 json.dumps({"code": f"ZF{n - 1:03}Y"}), f"booked ZF{n - 1:03}Y"]
            )  # fmt: skip


def test_a_rewrite_under_another_policy_takes_no_scans_over() -> None:
    """One conversation analysed under one policy, then rewritten (its last message edited)
    and analysed under another: what the first policy's patterns found is not the second's."""
    arguments = json.dumps({"user_id": "mia_li_3668"})
    call = {"id": "c1", "type": "function", "function": {"name": "find", "arguments": arguments}}
    base: Messages = [
        {"role": "system", "content": "You change bookings."},
        {"role": "user", "content": "Move my booking, I am mia_li_3668."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ZFA04Y, ticket 4417730215"},
        {"role": "assistant", "content": "Booking ZFA04Y, ticket 4417730215: which date?"},
        {"role": "user", "content": "The 12th."},
    ]
    default = Policy.load("default")
    data = default.model_dump()
    data["name"] = "digits"
    data["patterns"]["identifiers"]["patterns"] = [r"\d{8,}"]
    digits = Policy.model_validate(data)
    cache = AnalysisCache()
    carried: dict[str, tuple[str, ...]] = {}
    for turn, policy in enumerate((default, digits, default, digits)):
        messages = [*base[:-1], {"role": "user", "content": f"The {12 + turn}th."}]
        checker = CompactionGate(policy, incremental=False)
        got = checker.evaluate(cache.analyse(messages, policy, key="c"), 1, 4)
        assert got == checker.evaluate(messages, 1, 4), f"turn {turn}, {policy.name}"
        carried[policy.name] = got.must_carry.identifiers
    assert cache.stats.reused > 0
    assert "ZFA04Y" in carried["default"]
    assert carried["digits"] == ("4417730215",)


def test_a_fault_taking_scans_over_scans_afresh(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Taking scans over only saves time: if it fails, the rewrite is scanned afresh and
    decides as a fresh gate, and the fault is logged."""

    def broken(*_: Any) -> None:
        raise RuntimeError("carry")

    monkeypatch.setattr(MessageScans, "carry", broken)
    pool = random_pool(6)
    gate = analyse_walk(Policy.load("default"), pool, 6, 8)
    assert gate.cache is not None and gate.cache.stats.reused > 0
    assert "taking over the scans of a rewritten conversation failed" in caplog.text
