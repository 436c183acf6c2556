"""Exceptions raised by otel-compaction.

`CompactionRefused` is the one exception the library raises on purpose during normal
operation: the gate refuses a compaction that would sever an open obligation. The two
names used by the specification, `OpenObligationError` and `LiveSpanCompactionError`,
are subclasses, so code written against either name catches the refusal.
Input and policy problems have their own errors, each naming what is wrong and where.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from otel_compaction.gate import Decision


class CompactionError(Exception):
    """Base class of every error this package raises."""


class TranscriptError(CompactionError, ValueError):
    """A transcript cannot be read: the message names the message index and the problem."""

    def __init__(self, message: str, *, message_index: int | None = None) -> None:
        where = f"message {message_index}: " if message_index is not None else ""
        super().__init__(f"{where}{message}")
        self.message_index = message_index


class PolicyError(CompactionError, ValueError):
    """A policy file is unusable: the message names the file, the key path and what was expected."""


class CompactionRefused(CompactionError, RuntimeError):
    """The gate refused a compaction; `decision` names every open obligation that caused it."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        super().__init__(decision.describe())

    @property
    def obligations(self) -> tuple[object, ...]:
        """The open obligations that made the span live."""
        return tuple(self.decision.obligations)


class OpenObligationError(CompactionRefused):
    """Refused because compaction would sever a tool call, transaction, retry or commitment."""


class LiveSpanCompactionError(CompactionRefused):
    """Refused because the span is live: a negative result, an unbound reference or no archive."""
