"""Incremental analysis: each conversation's parse and scans kept between decisions.

Agents ask "should I compact?" before every model call, each time with the whole transcript.
`AnalysisCache` keeps, per conversation, the parser fed so far and the per-message scans
(`otel_compaction.scans.MessageScans`). When the next list of messages starts with the
messages seen last time, only the appended ones are parsed and scanned; the analysis built
from them is exactly the analysis of the whole list (the rules' folds and the ledger
cross-check run again over what the scans found; no regex reads an old message twice).

Any other change is detected and rebuilds the conversation's state: a shorter list (a
compaction, a truncation), a message replaced by another that is not equal to it (an edit),
a different conversation under the same id, a different policy. A seen message is matched by
identity first and by equality when the caller rebuilt its objects, and the last message
seen is also compared by content, so a message still being written in place (a streamed
reply) is re-read. What is not detected: an *earlier* message object changed in place after
it was analysed; give such a conversation to `AnalysisCache.forget` (or analyse a copy).

State is bounded (least recently used conversations evicted) and thread-safe: one lock per
conversation, so different conversations are analysed in parallel.
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from otel_compaction.analysis import Analysis
from otel_compaction.ledger import LedgerSnapshot
from otel_compaction.policy import Policy
from otel_compaction.scans import MessageScans
from otel_compaction.transcript import Transcript, TranscriptBuilder

__all__ = ["DEFAULT_MAX_CONVERSATIONS", "AnalysisCache", "CacheStats"]

DEFAULT_MAX_CONVERSATIONS = 1_024
"""Conversations kept when the gate has no ledger to take the bound from."""


@dataclass(slots=True)
class CacheStats:
    """How the cache answered: analyses that only read appended messages, analyses built
    from the first message (a new conversation, or a change that was not an append), and
    conversations evicted."""

    extended: int = 0
    built: int = 0
    evicted: int = 0


@dataclass(slots=True)
class _Conversation:
    policy: Policy
    builder: TranscriptBuilder
    scans: MessageScans
    seen: list[Any] = field(default_factory=list)
    last: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


def _content(message: Any) -> str:
    """A message's content as a string, to notice a message written in place."""
    return repr(message)


class AnalysisCache:
    """Per-conversation incremental analysis, least recently used evicted.

    Example:
        >>> from otel_compaction import Policy
        >>> cache = AnalysisCache()
        >>> policy = Policy.load("default")
        >>> messages = [{"role": "user", "content": "book ZFA04Y"}]
        >>> first = cache.analyse(messages, policy, key="c1")
        >>> messages.append({"role": "assistant", "content": "Booked ZFA04Y."})
        >>> second = cache.analyse(messages, policy, key="c1")
        >>> len(second.transcript), cache.stats.extended, cache.stats.built
        (2, 1, 1)
    """

    def __init__(self, max_conversations: int = DEFAULT_MAX_CONVERSATIONS) -> None:
        """Keep the state of at most `max_conversations` conversations."""
        if max_conversations < 1:
            raise ValueError(f"max_conversations must be at least 1, got {max_conversations}")
        self.max_conversations = max_conversations
        self.stats = CacheStats()
        self._conversations: OrderedDict[Any, _Conversation] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._conversations)

    def forget(self, key: Any) -> None:
        """Drop the state kept for conversation `key` (its next analysis rebuilds)."""
        with self._lock:
            self._conversations.pop(key, None)

    def clear(self) -> None:
        """Drop every conversation's state."""
        with self._lock:
            self._conversations.clear()

    def analyse(
        self,
        messages: Sequence[Mapping[str, Any]],
        policy: Policy,
        ledger: LedgerSnapshot | None = None,
        *,
        key: Any = None,
    ) -> Analysis:
        """The analysis of `messages` under `policy` against `ledger`, reusing what was
        parsed and scanned for conversation `key` when `messages` only grew since.

        Raises:
            TranscriptError: a message is malformed (the conversation's state is dropped).
        """
        if isinstance(messages, (str, bytes, Mapping)):
            return Analysis.build(Transcript.parse(messages), policy, ledger)
        messages = messages if isinstance(messages, list) else list(messages)
        state = self._state(key, policy)
        with state.lock:
            start = self._reusable(state, messages, policy)
            if start is None:
                state = self._fresh(key, policy)
                start = 0
                self.stats.built += 1
            else:
                self.stats.extended += 1
            try:
                state.builder.feed(messages, start)
            except Exception:
                self.forget(key)
                raise
            state.seen = messages.copy()
            state.last = _content(messages[-1]) if messages else ""
            transcript = state.builder.transcript(messages)
            return Analysis.build(transcript, policy, ledger, state.scans)

    # -- state -------------------------------------------------------------------------------

    def _state(self, key: Any, policy: Policy) -> _Conversation:
        with self._lock:
            state = self._conversations.get(key)
            if state is not None:
                self._conversations.move_to_end(key)
                return state
        return self._fresh(key, policy)

    def _fresh(self, key: Any, policy: Policy) -> _Conversation:
        state = _Conversation(policy, TranscriptBuilder(), MessageScans(policy))
        with self._lock:
            self._conversations[key] = state
            self._conversations.move_to_end(key)
            while len(self._conversations) > self.max_conversations:
                self._conversations.popitem(last=False)
                self.stats.evicted += 1
        return state

    @staticmethod
    def _reusable(state: _Conversation, messages: list[Any], policy: Policy) -> int | None:
        """How many leading messages are the ones already analysed (None: rebuild)."""
        seen = state.seen
        count = len(seen)
        if state.policy is not policy or len(state.builder) != count:
            return None
        if count == 0 or len(messages) < count:
            return None
        # Rebuilt objects (a framework converting its messages on every call) carry over when
        # they are equal to the ones seen.
        if not all(map(operator.is_, messages[:count], seen)) and any(
            a is not b and a != b for a, b in zip(messages, seen, strict=False)
        ):
            return None
        if _content(messages[count - 1]) != state.last:
            return None  # the last message was still being written
        return count
