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

A rebuild does not read every message again: each message that was seen before (the same
object or an equal one, in the same order; a sliding window drops the oldest messages and
appends new ones) keeps its parsed reading (`TranscriptBuilder.feed` with ``reused``) and
what the policy's patterns found in it (`MessageScans.carry`), and only what depends on its
neighbours is redone (positions, pairing, closedness, units, the rules' folds), so the
transcript and the analysis are exactly the ones a fresh start gives. The last message seen
is read again, as it may have been written in place; the same limit as above holds for the
earlier ones. The search for seen messages is bounded by a few comparisons per message, so a
list that shares nothing with the last one costs little more than a fresh parse.

State is bounded (least recently used conversations evicted) and thread-safe: one lock per
conversation, so different conversations are analysed in parallel.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from otel_compaction._internal_errors import internal_errors
from otel_compaction.analysis import Analysis
from otel_compaction.ledger import LedgerSnapshot
from otel_compaction.policy import Policy
from otel_compaction.rewrites import seen_again
from otel_compaction.scans import MessageScans
from otel_compaction.transcript import Transcript, TranscriptBuilder

__all__ = ["DEFAULT_MAX_CONVERSATIONS", "AnalysisCache", "CacheStats", "TranscriptCache"]

_T = TypeVar("_T")

_CARRYING: Final = internal_errors("taking over the scans of a rewritten conversation")

DEFAULT_MAX_CONVERSATIONS = 1_024
"""Conversations kept when the gate has no ledger to take the bound from."""


@dataclass(slots=True)
class CacheStats:
    """How the cache answered: analyses that only read appended messages, analyses built
    from the first message (a new conversation, or a change that was not an append),
    conversations evicted, and messages of those builds whose parse was taken over from the
    conversation's previous state rather than read again."""

    extended: int = 0
    built: int = 0
    evicted: int = 0
    reused: int = 0


@dataclass(slots=True)
class _Conversation:
    policy: Policy | None
    builder: TranscriptBuilder = field(default_factory=TranscriptBuilder)
    scans: MessageScans | None = None
    seen: list[Any] = field(default_factory=list)
    last: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self, policy: Policy | None) -> None:
        """Start over from the first message (under `lock`)."""
        self.policy = policy
        self.builder = TranscriptBuilder()
        self.scans = MessageScans(policy) if policy is not None else None
        self.seen = []
        self.last = ""


def _content(message: Any) -> str:
    """A message's content as a string, to notice a message written in place."""
    return repr(message)


class TranscriptCache:
    """Per-conversation incremental parsing, least recently used evicted.

    Example:
        >>> cache = TranscriptCache()
        >>> messages = [{"role": "user", "content": "hi"}]
        >>> len(cache.parse(messages, key="c1"))
        1
        >>> messages.append({"role": "assistant", "content": "hello"})
        >>> len(cache.parse(messages, key="c1")), cache.stats.extended
        (2, 1)
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

    def parse(self, messages: Sequence[Mapping[str, Any]], *, key: Any = None) -> Transcript:
        """The transcript of `messages`, parsing only what was appended since conversation
        `key` was last parsed.

        Raises:
            TranscriptError: a message is malformed (the conversation starts over next time).
        """
        return self._with(messages, key, None, lambda transcript, _: transcript)

    def _with(
        self,
        messages: Sequence[Mapping[str, Any]],
        key: Any,
        policy: Policy | None,
        then: Callable[[Transcript, _Conversation], _T],
    ) -> _T:
        """`then(transcript, state)` under the conversation's lock, its transcript brought up
        to date with `messages`."""
        if isinstance(messages, (str, bytes, Mapping)):
            Transcript.parse(messages)  # raises the error that names what is wrong
        listed = messages if isinstance(messages, list) else list(messages)
        state = self._state(key, policy)
        with state.lock:
            start = _reusable(state, listed, policy)
            previous: TranscriptBuilder | None = None
            reused: list[int] | None = None
            scans = state.scans
            if start is None:
                previous, seen = state.builder, state.seen
                if seen and len(previous) == len(seen):
                    reused, count = seen_again(seen, listed)
                    self.stats.reused += count
                state.reset(policy)
                start = 0
                self.stats.built += 1
            else:
                self.stats.extended += 1
            try:
                state.builder.feed(listed, start, previous=previous, reused=reused)
            except Exception:
                state.reset(policy)  # nothing half-fed is kept
                raise
            if reused is not None and previous is not None:
                _carry_scans(state, scans, reused, previous)
            if start == 0:
                state.seen = listed.copy()
            state.last = _content(listed[-1]) if listed else ""
            return then(state.builder.transcript(listed), state)

    def _state(self, key: Any, policy: Policy | None) -> _Conversation:
        with self._lock:
            state = self._conversations.get(key)
            if state is None:
                state = self._conversations[key] = _Conversation(policy)
                while len(self._conversations) > self.max_conversations:
                    self._conversations.popitem(last=False)
                    self.stats.evicted += 1
            else:
                self._conversations.move_to_end(key)
            return state


class AnalysisCache(TranscriptCache):
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
            TranscriptError: a message is malformed (the conversation starts over next time).
        """

        def build(transcript: Transcript, state: _Conversation) -> Analysis:
            return Analysis.build(transcript, policy, ledger, state.scans)

        return self._with(messages, key, policy, build)


def _reusable(state: _Conversation, messages: list[Any], policy: Policy | None) -> int | None:
    """How many leading messages are the ones already parsed (None: start over)."""
    seen = state.seen
    count = len(seen)
    if state.policy is not policy or len(state.builder) != count:
        return None
    if count == 0 or len(messages) < count:
        return None
    # Rebuilt objects (a framework converting its messages on every call) carry over when
    # they are equal to the ones seen: list equality compares by identity first, then by value.
    # The appended messages join `seen` first, so that no copy of the history is made.
    seen.extend(messages[count:])
    if seen != messages or _content(messages[count - 1]) != state.last:
        # Not an append; or the last message was still being written.
        del seen[count:]
        return None
    return count


def _carry_scans(
    state: _Conversation, old: MessageScans | None, reused: list[int], previous: TranscriptBuilder
) -> None:
    """Let the rebuilt `state` take over what the policy's patterns found in each message it
    kept of `previous` (under `old`'s policy only: a change of policy takes nothing over)."""
    new = state.scans
    if old is not None and new is not None and old.policy is new.policy:
        try:
            new.carry(old, reused, previous, state.builder)
        except Exception as fault:  # scanning afresh is always right, only slower
            _CARRYING.failed(fault)
            state.scans = MessageScans(new.policy)
