"""A transcript the builder handed out stays as it was while the builder goes on being fed:
the call it showed unanswered stays unanswered in it, its messages stay its messages."""

from __future__ import annotations

import gc
from typing import Any

from otel_compaction.transcript import TranscriptBuilder

CALL: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    ],
}
RESULT: dict[str, Any] = {"role": "tool", "tool_call_id": "c1", "content": "found it"}


def test_a_published_transcript_is_not_changed_by_later_messages() -> None:
    builder = TranscriptBuilder()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "search"}, CALL]
    builder.feed(messages)
    before = builder.transcript(messages)
    messages.append(RESULT)
    builder.feed(messages, 2)
    after = builder.transcript(messages)
    assert (len(before), len(before.calls), len(before.results)) == (2, 1, 0)
    assert before.calls[0].result is None
    assert before.closed_cuts() == [0, 1]
    assert (len(after), len(after.results)) == (3, 1)
    assert after.calls[0].result == 0
    assert after.closed_cuts() == [0, 1, 3]


def test_a_dropped_transcript_leaves_its_lists_to_the_builder() -> None:
    """Without a live transcript to keep as it was, nothing is copied: the history is
    shared, and what the builder hands out next is still exact."""
    builder = TranscriptBuilder()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "search"}, CALL]
    builder.feed(messages)
    entries = builder.transcript(messages).entries
    gc.collect()
    messages.append(RESULT)
    builder.feed(messages, 2)
    after = builder.transcript(messages)
    assert after.entries is entries  # the list handed out before, grown in place
    assert [e.index for e in after.entries] == [0, 1, 2]
    assert after.calls[0].result == 0
    assert after.closed_cuts() == [0, 1, 3]
