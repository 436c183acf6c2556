"""An instrumented request reads only what its conversation appended, and finds exactly what a
full pass over the whole request finds: the conversion to plain dicts, the first texts of the
conversation's identity, and the passive detection checks, on growing conversations, after a
compaction, after an edit, and on every prefix of the real corpus."""

from __future__ import annotations

import random
from typing import Any

import pytest
from conftest import Transcript as Record
from pydantic import BaseModel
from test_incremental import random_transcript

from otel_compaction.incremental import TranscriptCache
from otel_compaction.instrumentation._requests import MessageCache, opening, plain_messages
from otel_compaction.instrumentation.conversation import OpeningTexts, first_texts
from otel_compaction.instrumentation.detection import (
    ConversationState,
    EmittedCall,
    check_request,
    check_response,
)
from otel_compaction.ledger import ObligationLedger
from otel_compaction.transcript import Transcript

Messages = list[dict[str, Any]]
CONV = "conv-1"
SUMMARY = {"role": "user", "content": "Summary: the earlier steps are done."}


class _Message(BaseModel):
    role: str
    content: str


def random_messages(seed: int) -> Messages:
    rng = random.Random(seed)
    return random_transcript(rng, rng.randrange(30, 80))


def state_of(state: ConversationState) -> list[Any]:
    """Everything the detection state remembers, in order."""
    kinds = (
        state.resolved,
        state.pending,
        state.names,
        state.seen_pairs,
        state.reported_severed,
        state.reported_orphans,
    )
    return [list(kind.items.items()) for kind in kinds]


class Replay:
    """One conversation's requests checked twice: with the state's index kept between
    requests, and with every transcript indexed whole (the full pass)."""

    def __init__(self) -> None:
        self.transcripts = TranscriptCache()
        self.ledger = ObligationLedger()
        self.incremental = ConversationState()
        self.full = ConversationState()
        self.emitted = 0  # messages whose calls the "model" emitted (opened in the ledger)

    def request(self, messages: Messages, *, grew: bool = True) -> None:
        transcript = self.transcripts.parse(messages, key="c")
        if grew:  # the calls of the appended messages were emitted by the previous responses
            emitted = [
                EmittedCall(call.id, call.name, call.arguments)
                for call in transcript.calls
                if call.message_index >= self.emitted
            ]
            for call in emitted:
                self.ledger.open(CONV, "tool_call", call.id, name=call.name)
            assert check_response(emitted, self.incremental) == check_response(emitted, self.full)
        self.emitted = len(messages)
        owed = self.ledger.open_obligations(CONV)
        self.full.index.clear()
        found = check_request(transcript, owed, self.incremental)
        assert found == check_request(transcript, owed, self.full), f"{len(messages)} messages"
        assert state_of(self.incremental) == state_of(self.full)
        for resolution in found.resolutions:
            self.ledger.resolve(CONV, resolution.call_id)

    def grow(self, messages: Messages, start: int = 1) -> None:
        """Every prefix of `messages` from `start` on, one request each, on one growing list."""
        growing = list(messages[:start])
        self.request(growing)
        index = self.incremental.index.calls
        for message in messages[start:]:
            growing.append(message)
            self.request(growing)
        assert self.incremental.index.calls is index  # extended all along, never read whole


# -- detection -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_detection_on_growing_random_conversations_is_the_full_pass(seed: int) -> None:
    replay = Replay()
    replay.grow(random_messages(seed))
    assert replay.transcripts.stats.built == 1


def test_detection_on_every_prefix_of_the_corpus_is_the_full_pass(corpus: list[Record]) -> None:
    compared = 0
    for record in corpus:
        replay = Replay()
        replay.grow(record.messages)
        compared += len(record.messages)
    assert compared == sum(len(record.messages) for record in corpus)


@pytest.mark.parametrize("seed", range(6))
def test_detection_after_a_compaction_mid_way_is_the_full_pass(seed: int) -> None:
    messages = random_messages(seed)
    half = len(messages) // 2
    replay = Replay()
    replay.grow(messages[:half])
    # The compactor replaced the older half (open calls among it are severed) with a summary.
    compacted = [messages[0], SUMMARY, *messages[half - 4 : half]]
    replay.request(compacted, grew=False)
    for message in messages[half:]:
        compacted.append(message)
        replay.request(compacted)
    assert replay.transcripts.stats.built == 2


@pytest.mark.parametrize("seed", range(6))
def test_detection_after_an_edit_or_a_different_list_is_the_full_pass(seed: int) -> None:
    messages = random_messages(seed)
    replay = Replay()
    replay.grow(messages[: len(messages) // 2])
    edited = [dict(m) for m in messages]
    edited[3] = {"role": "tool", "tool_call_id": "stray", "content": "rewritten"}
    replay.request(edited[: len(messages) // 2], grew=False)
    replay.request(random_messages(seed + 100), grew=False)  # another conversation, same id
    replay.request(edited, grew=False)
    assert replay.transcripts.stats.built == 4


def test_a_severed_call_is_found_by_the_incremental_pass_once() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "deploy", "arguments": "{}"}}
        ],
    }
    replay = Replay()
    replay.grow([{"role": "system", "content": "Deploy."}, {"role": "user", "content": "go"}, call])
    compacted: Messages = [{"role": "system", "content": "Deploy."}, SUMMARY]
    replay.request(compacted, grew=False)
    assert [(r.sequence, r.id) for r in replay.ledger.open_obligations(CONV)] == [(0, "c9")]
    assert list(replay.incremental.reported_severed.items) == [0]
    compacted.append({"role": "user", "content": "and now?"})
    replay.request(compacted)
    assert list(replay.incremental.reported_severed.items) == [0]


# -- conversion and first texts ------------------------------------------------------------------


def read_and_compare(cache: MessageCache, messages: Any, instructions: Any = None) -> Any:
    """The cache reads `messages` as the full conversion does; returns what it read."""
    read = cache.read(messages, instructions)
    expected = plain_messages(messages, instructions=instructions)
    assert read is not None and expected is not None
    assert read.messages == expected
    assert read.texts == first_texts(expected)
    assert read.key == opening(expected)
    return read


def test_a_growing_list_converts_only_what_was_appended() -> None:
    cache = MessageCache()
    messages: list[Any] = [_Message(role="user", content="book ZFA04Y")]
    first = read_and_compare(cache, messages, "You book flights.")
    for n in range(5):
        messages.append(_Message(role="assistant", content=f"step {n}"))
        read = read_and_compare(cache, messages, "You book flights.")
        # What was handed out before is handed out again: the parse knows it by identity.
        assert all(a is b for a, b in zip(read.messages, first.messages, strict=False))
        first = read


def test_rebuilt_but_equal_messages_carry_over() -> None:
    """A framework that builds new message objects for every call."""
    cache = MessageCache()
    history = [_Message(role="user", content="go")]
    history += [_Message(role="assistant", content=f"step {n}") for n in range(4)]
    first = read_and_compare(cache, [m.model_copy() for m in history])
    history.append(_Message(role="user", content="next"))
    second = read_and_compare(cache, [m.model_copy() for m in history])
    assert all(a is b for a, b in zip(second.messages[:-2], first.messages, strict=False))


def test_the_last_message_written_in_place_is_converted_again() -> None:
    cache = MessageCache()
    reply = _Message(role="assistant", content="Boo")
    messages: list[Any] = [_Message(role="user", content="go"), SUMMARY, SUMMARY, reply]
    read_and_compare(cache, messages)
    reply.content = "Booked."
    assert read_and_compare(cache, messages).messages[-1]["content"] == "Booked."


@pytest.mark.parametrize(
    "change",
    ["compaction", "truncation", "edit", "instructions", "different list"],
)
def test_a_change_that_is_not_an_append_is_converted_whole(change: str) -> None:
    cache = MessageCache()
    messages: list[Any] = [{"role": "user", "content": "go"}]
    messages += [_Message(role="assistant", content=f"step {n}") for n in range(6)]
    read_and_compare(cache, messages, "Be brief.")
    instructions = "Be brief."
    if change == "compaction":
        changed = [messages[0], SUMMARY, *messages[4:]]
    elif change == "truncation":
        changed = messages[:3]
    elif change == "edit":
        changed = list(messages)
        changed[2] = _Message(role="assistant", content="edited")
    elif change == "instructions":
        changed, instructions = messages, "Be thorough."
    else:
        changed = [_Message(role="user", content="go"), _Message(role="system", content="x")]
    read_and_compare(cache, changed, instructions)
    read_and_compare(cache, messages, "Be brief.")


def test_first_texts_of_a_growing_list_read_each_message_once() -> None:
    texts = OpeningTexts()
    messages: Messages = []
    conversation: Messages = [
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"},
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "system", "content": "later"},
    ]
    for message in conversation:
        messages.append(message)
        assert texts.scan(messages, len(messages) - 1) == first_texts(messages)
    assert texts.scanned == 4  # both found: nothing after the developer message is read
    assert texts.scan(messages[:1], 0) == ("", "")  # not an extension: read again
    assert texts.scan(messages, 1) == ("Be brief.", "first")


def test_first_texts_of_the_corpus_match_on_every_prefix(corpus: list[Record]) -> None:
    for record in corpus[::5]:
        cache = MessageCache()
        growing: Messages = []
        for message in record.messages:
            growing.append(message)
            read_and_compare(cache, growing)


def test_the_conversion_state_is_bounded() -> None:
    cache = MessageCache(max_conversations=3)
    for n in range(10):
        read_and_compare(cache, [{"role": "user", "content": f"conversation {n}"}])
    assert len(cache) == 3


# -- the parse ----------------------------------------------------------------------------------


def units_on_every_prefix(messages: Messages) -> None:
    cache = TranscriptCache()
    growing: Messages = []
    for message in messages:
        growing.append(message)
        assert cache.parse(growing, key="c").units == Transcript.parse(growing).units


@pytest.mark.parametrize("seed", range(40))
def test_atomic_units_of_growing_random_conversations_are_those_of_a_full_parse(
    seed: int,
) -> None:
    units_on_every_prefix(random_messages(seed))


def test_atomic_units_of_every_corpus_prefix_are_those_of_a_full_parse(
    corpus: list[Record],
) -> None:
    for record in corpus:
        units_on_every_prefix(record.messages)
