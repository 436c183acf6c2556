"""Exceptions raised by otel-compaction.

`CompactionRefused` is the one exception the library raises on purpose during normal
operation: the gate refuses a compaction that would sever an open obligation. The two
names used by the specification, `OpenObligationError` and `LiveSpanCompactionError`,
are subclasses, so code written against either name catches the refusal.
Input, policy and archive problems have their own errors, each naming what is wrong and where.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from otel_compaction.gate import Decision
    from otel_compaction.rules import ObligationRef


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


class ArchiveError(CompactionError):
    """The archive cannot do what was asked: an unknown handle, a corrupt or foreign file.

    The message names the database path (and the handle, when one is involved); both are
    also kept as attributes.
    """

    def __init__(
        self, message: str, *, path: str | os.PathLike[str] | None = None, handle: str | None = None
    ) -> None:
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)
        self.handle = handle


class CompactionRefused(CompactionError, RuntimeError):
    """The gate refused a compaction; `decision` names every open obligation that caused it."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        super().__init__(decision.describe())

    @property
    def obligations(self) -> tuple[ObligationRef, ...]:
        """The open obligations that made the span live."""
        return tuple(self.decision.obligations)


class OpenObligationError(CompactionRefused):
    """Refused because compaction would sever a tool call, transaction, retry or commitment."""


class LiveSpanCompactionError(CompactionRefused):
    """Refused because the span is live: a negative result, an unbound reference or no archive."""


class LedgerUnavailableError(CompactionRefused):
    """Refused because the obligation ledger could not say what is open (its store is
    unreachable, or writes of the conversation still wait in its outbox)."""
