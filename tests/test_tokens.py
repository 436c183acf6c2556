"""Token counts: no tokenizer download at run time, and each message counted once."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from otel_compaction import GuardedCompactor
from otel_compaction.tokens import (
    MessageTokens,
    cached_encoding_path,
    char_estimate,
    counter_name,
    default_token_counter,
)


def test_without_a_cached_encoding_the_estimate_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tiktoken would fetch its encoding over the network: with an empty cache directory
    the counter is the estimate, and nothing is fetched."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    import tiktoken.load

    def no_network(*_: object, **__: object) -> bytes:
        raise AssertionError("tried to download a tokenizer")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    assert cached_encoding_path() is None
    assert default_token_counter() is char_estimate
    assert counter_name(char_estimate) == "estimate (4 characters a token)"


def test_a_cached_encoding_is_found_where_tiktoken_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    (tmp_path / "fb374d419588a4632f3f557e76b4b70aebbca790").write_bytes(b"")
    assert cached_encoding_path() == tmp_path / "fb374d419588a4632f3f557e76b4b70aebbca790"


def test_a_growing_transcript_counts_each_message_once() -> None:
    tokens = MessageTokens(char_estimate)
    messages: list[dict[str, str]] = [{"role": "user", "content": "x" * 40}]
    for turn in range(50):
        messages.append({"role": "assistant", "content": f"reply {turn}"})
        assert tokens.total(messages) == MessageTokens(char_estimate).total(messages)
    # Each message once, and the last one of every call once more (it may have grown).
    assert tokens.counted == len(messages) + 49


def test_the_last_message_written_in_place_is_counted_again() -> None:
    tokens = MessageTokens(char_estimate)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}]
    before = tokens.total(messages)
    messages[-1]["content"] = "a" * 400
    assert tokens.total(messages) == MessageTokens(char_estimate).total(messages) > before + 90


def test_should_compact_costs_the_new_messages() -> None:
    compactor = GuardedCompactor(budget=10**6, token_counter=char_estimate)
    messages: list[dict[str, str]] = []
    for turn in range(200):
        messages.append({"role": "user", "content": f"question {turn}"})
        compactor.should_compact(messages)
    assert compactor.token_counts.counted <= 2 * len(messages)


def test_an_edited_shortened_or_rebuilt_transcript_totals_as_a_fresh_count() -> None:
    """Whatever the list became since the last call, the total is that of a fresh count: an
    earlier message replaced, the list cut short, equal messages rebuilt, a tuple."""
    tokens = MessageTokens(char_estimate)
    messages: list[dict[str, str]] = [
        {"role": "user", "content": "x" * 40},
        {"role": "assistant", "content": "y" * 80},
        {"role": "user", "content": "z"},
    ]

    def fresh(listed: Any) -> int:
        return MessageTokens(char_estimate).total(listed)

    assert tokens.total(messages) == fresh(messages)
    messages[0] = {"role": "user", "content": "w" * 400}  # an edit, not an append
    messages.append({"role": "assistant", "content": "ok"})
    assert tokens.total(messages) == fresh(messages)
    assert tokens.total(messages[:2]) == fresh(messages[:2])
    assert tokens.total(messages) == fresh(messages)
    rebuilt = [dict(m) for m in messages]
    counted = tokens.counted
    assert tokens.total(rebuilt) == fresh(rebuilt)
    assert tokens.counted - counted == 1  # equal objects carry over; the last is counted again
    assert tokens.total(tuple(messages)) == fresh(messages)


def test_a_sliding_window_counts_only_the_messages_it_has_not_seen() -> None:
    """A window that drops the oldest messages and appends new ones (a new list of new, equal
    objects each call) counts the new messages and the previous last one, nothing else."""
    tokens = MessageTokens(char_estimate)
    history = [{"role": "user", "content": f"turn {k} " + "x" * k} for k in range(300)]
    system = {"role": "system", "content": "You operate the fleet."}
    for end in range(40, 300, 3):
        window = [dict(system)] + [dict(m) for m in history[end - 30 : end]]
        counted = tokens.counted
        assert tokens.total(window) == MessageTokens(char_estimate).total(window)
        if end > 40:
            assert tokens.counted - counted == 4  # three new ones and the previous last


def test_random_rewrites_total_as_a_fresh_count() -> None:
    rng = random.Random(11)
    pool = [{"role": "user", "content": "x" * rng.randrange(200)} for _ in range(60)]
    tokens = MessageTokens(char_estimate)
    messages = pool[:20]
    for _ in range(300):
        roll = rng.random()
        if roll < 0.3:
            messages = messages[rng.randrange(len(messages) + 1) :] + rng.sample(pool, 3)
        elif roll < 0.5:
            messages = messages[: rng.randrange(len(messages) + 1)]
        elif roll < 0.7 and messages:
            messages = list(messages)
            messages[rng.randrange(len(messages))] = rng.choice(pool)
        else:
            messages = messages + rng.sample(pool, 2)
        assert tokens.total(messages) == MessageTokens(char_estimate).total(messages)
        assert tokens.per_message(messages) == MessageTokens(char_estimate).per_message(messages)
