"""Compacting on the usage the model reports: the step the example agents share.

An agent that knows its context window compacts once the model reports more than half of it
used, and tells the gate the budget is critical above 90% (deferring is then no longer
allowed). `GuardedCompactor` asks the gate for the span from the protected head to now: it
compacts it, compacts an older closed span and holds the live one (a deferral), or refuses,
and a refusal is an outcome to report, not an error: the history stays as it was.
"""

from __future__ import annotations

from typing import Any

from otel_compaction import CompactionRefused, GuardedCompactor, Telemetry

__all__ = ["CONTEXT_WINDOW", "UsageBudget"]

CONTEXT_WINDOW = 16_000
"""The example model's context window, in tokens."""


class UsageBudget:
    """Compacts a transcript by the usage the model reported for it."""

    def __init__(self, telemetry: Telemetry, window: int = CONTEXT_WINDOW) -> None:
        """Compact on `window` tokens, recording each decision with `telemetry`."""
        self.window = window
        self.compactor = GuardedCompactor(budget=window, telemetry=telemetry)

    def compact(self, messages: list[Any], used: int) -> list[Any]:
        """The transcript to go on with, after `used` input tokens: compacted where the gate
        allows it above half the window, else `messages` as they are; prints the outcome."""
        if used <= self.window // 2:
            return messages
        try:
            result = self.compactor.compact(
                messages, force=True, end=len(messages), critical=used > 0.9 * self.window
            )
        except CompactionRefused as refused:
            print(f"compaction at {used} tokens: refused ({refused})")
            return messages
        print(f"compaction at {used} tokens: {result.outcome}")
        return result.messages
