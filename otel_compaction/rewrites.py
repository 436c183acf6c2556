"""Which messages of a rewritten list were seen before: what a sliding window, a truncation or
a compaction keeps of the previous request, so that what was computed for a message (its
parse, its scans, its token count) is taken over instead of computed again."""

from __future__ import annotations

from typing import Any

__all__ = ["seen_again"]


def seen_again(seen: list[Any], messages: list[Any]) -> tuple[list[int], int]:
    """For each of `messages`, the index of the seen message it is again (the same object or an
    equal one), or -1; and how many were found. Seen messages are matched in order, the search
    bounded to about two comparisons per seen message; the last one seen is never matched (it
    may have been written in place since)."""
    count = len(seen) - 1
    found = [-1] * len(messages)
    matched = 0
    budget = 2 * count + 16  # comparisons left for searching past a message not seen
    expected = 0  # the seen message the next one should be, when the order is kept
    for index, message in enumerate(messages):
        if expected >= count:
            break
        candidate = seen[expected]
        if message is not candidate and message != candidate:
            if budget <= 0:
                continue
            try:
                # Identity first, then equality, in C.
                at = seen.index(message, expected + 1, count)
            except ValueError:
                budget -= count - expected - 1
                continue
            budget -= at - expected
            expected = at
        found[index] = expected
        expected += 1
        matched += 1
    return found, matched
