"""`GuardedCompactor.compact(end=...)`: a framework's own planned cut, put to the gate."""

from __future__ import annotations

from typing import Any

import pytest

from otel_compaction import GuardedCompactor

_BULK = "x" * 2_000

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You book trips."},
    {"role": "user", "content": "Find flights to Oslo. " + _BULK},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "2 flights on Saturday. " + _BULK},
    {"role": "assistant", "content": "Two flights on Saturday."},
    {"role": "user", "content": "Book the first."},
    {"role": "assistant", "content": "Booking it."},
]


def test_end_is_the_requested_span_and_the_gate_still_extends_it() -> None:
    compactor = GuardedCompactor(budget=100_000)

    result = compactor.compact(MESSAGES, end=3, force=True)

    assert result.decision is not None
    assert result.decision.requested == (1, 3)  # from the protected head (the system prompt)
    assert (result.decision.action, result.decision.span, result.decision.extended) == (
        "compact",
        (1, 4),
        True,
    )
    assert result.compacted and result.span == (1, 4)
    assert result.messages[0] is MESSAGES[0] and result.messages[2:] == MESSAGES[4:]


def test_end_inside_the_head_compacts_nothing_and_a_bad_end_is_an_error() -> None:
    compactor = GuardedCompactor(budget=100_000)

    held = compactor.compact(MESSAGES, end=1, force=True)

    assert (held.compacted, held.reason) == (
        False,
        "nothing between the protected head and the requested end",
    )
    assert held.messages == MESSAGES
    with pytest.raises(ValueError, match=r"end must be a cut of the transcript \(0\.\.7\), got 8"):
        compactor.compact(MESSAGES, end=8, force=True)
