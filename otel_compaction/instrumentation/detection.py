"""Passive detection: what a compactor you do not control did to a conversation, read from the
requests the agent sends and the tool calls the model emits.

For each request, given the conversation's open obligations and the request's parsed messages:

* **resolutions**: the tool results that answer calls the ledger holds open. The ledger's
  records pair with the request's calls by `otel_compaction.reconcile`'s rule (same id, newest
  with newest: ids are reused); a result whose call is gone from the messages still answers
  the earliest open call of its id left without a call (the tool did run).
* **severed**: a tool call the ledger holds open that the request carries neither as a call nor
  as a result: compaction cut it while it was owed.
* **orphaned**: a tool result with no call of its id before it in the request.
* **compacted**: the request's transcript is shorter than the conversation's previous one: a
  compactor replaced older messages by a summary, dropped them (a sliding window, pruning) or
  both. Not seen: a rewrite that leaves the transcript as long as it was.

For each model response, given the calls it emits:

* **duplicate**: a call with the same tool and arguments (compared as canonical JSON) as a call
  already resolved in the conversation: the agent is about to repeat a side effect.

Each finding is reported once per conversation: `ConversationState` remembers what was reported
and which calls resolved, within fixed bounds (oldest entries are forgotten first). Severed,
orphan and compaction checks need the whole transcript; when the provider keeps the history
(OpenAI Responses with ``previous_response_id`` or ``conversation``) the caller says so and
only resolutions and duplicates are computed. The functions do no I/O and touch nothing but
the state they are given; the caller serialises access to one state.

A conversation's requests repeat its history, so the state also keeps a `TranscriptIndex` of
the last transcript checked: when the next one extends it (it shares its parsed messages, as
the incremental parse of `otel_compaction.incremental` hands them out), only the appended
messages are read; any other transcript is indexed whole. The findings are exactly those of a
full pass over the transcript, within the state's bounds: a full pass would remember again,
on every request, a resolved call the bounded state has forgotten; the index remembers each
call once, when its result arrives.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any, Generic, Literal, TypeVar

from otel_compaction.ledger import Obligation
from otel_compaction.reconcile import CallPair, CallState, pair_earliest, reconcile_calls
from otel_compaction.transcript import Entry, ToolResult, Transcript

__all__ = [
    "ConversationState",
    "Duplicate",
    "EmittedCall",
    "Orphan",
    "RequestFindings",
    "Resolution",
    "Severed",
    "TranscriptIndex",
    "check_request",
    "check_response",
    "fingerprint",
]

_OWED: frozenset[CallState] = frozenset({"answered", "missing"})  # what a request may change
_SPAN_KEY = "span:"  # the span processor's id for a call whose id is not known yet

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class EmittedCall:
    """A tool call in a model response. ``arguments`` as the provider gave them: JSON text
    (OpenAI) or an object (Anthropic ``input``)."""

    id: str
    name: str
    arguments: Any = None


@dataclass(frozen=True, slots=True)
class Resolution:
    """A tool result in the request answering an open call."""

    call_id: str
    status: Literal["result", "error"]
    content: str
    message_index: int


@dataclass(frozen=True, slots=True)
class Severed:
    """An open call the request no longer carries; ``sequence`` is its ledger record's."""

    call_id: str
    name: str
    sequence: int


@dataclass(frozen=True, slots=True)
class Orphan:
    """A tool result whose call is gone; ``name`` is the tool's when the ledger knows it."""

    call_id: str
    name: str
    message_index: int


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A call repeating the tool and arguments of the resolved call ``duplicate_of``."""

    call_id: str
    name: str
    duplicate_of: str


@dataclass(frozen=True, slots=True)
class RequestFindings:
    """What one request resolved, whether it shows a compaction, and what compaction lost."""

    resolutions: tuple[Resolution, ...] = ()
    severed: tuple[Severed, ...] = ()
    orphans: tuple[Orphan, ...] = ()
    compacted: bool = False


class _Bounded(Generic[K, V]):
    """A dict that forgets its oldest entries beyond `limit`."""

    __slots__ = ("items", "limit")

    def __init__(self, limit: int) -> None:
        self.items: dict[K, V] = {}
        self.limit = limit

    def put(self, key: K, value: V) -> None:
        self.items[key] = value
        if len(self.items) > self.limit:
            del self.items[next(iter(self.items))]

    def first(self, key: K, value: V) -> bool:
        """Store `value` unless `key` is present; True when it was stored."""
        if key in self.items:
            return False
        self.put(key, value)
        return True


class _Resolved:
    """Resolved calls by fingerprint (the first call id of each), as a `_Bounded` map whose
    fingerprints are computed only when it is read: a call's result arrives on every tool turn,
    while the map is read only for a response that emits calls. Entries are added in the order
    they are given, so the map read is the one immediate additions would have built."""

    __slots__ = ("_map", "_waiting")

    def __init__(self, limit: int) -> None:
        self._map: _Bounded[str, str] = _Bounded(limit)
        # (fingerprint, name, arguments, call id): the fingerprint, or what it is made from.
        self._waiting: list[tuple[str | None, str, Any, str]] = []

    @property
    def items(self) -> dict[str, str]:
        """Fingerprint -> the first resolved call id with it."""
        if self._waiting:
            self._flush()
        return self._map.items

    def add(self, name: str, arguments: Any, call_id: str) -> None:
        """A call resolved (kept unless a call with its fingerprint is already there)."""
        self._waiting.append((None, name, arguments, call_id))
        if len(self._waiting) >= self._map.limit:
            self._flush()

    def add_fingerprint(self, key: str, call_id: str) -> None:
        """`add` of a call whose fingerprint is known."""
        self._waiting.append((key, "", None, call_id))
        if len(self._waiting) >= self._map.limit:
            self._flush()

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        for key, name, arguments, call_id in waiting:
            self._map.first(fingerprint(name, arguments) if key is None else key, call_id)


class TranscriptIndex:
    """The calls and orphaned results of the last transcript checked, by call id, brought up
    to date by reading only what a later transcript appended to it."""

    __slots__ = ("_calls", "_entries", "_last", "_results", "calls", "loose")

    def __init__(self) -> None:
        """An index of nothing."""
        self.clear()

    def clear(self) -> None:
        """Forget everything: the next transcript is read whole."""
        self.calls: dict[str, list[int]] = {}
        """Call id -> the ordinals of its calls, in transcript order."""
        self.loose: dict[str, list[ToolResult]] = {}
        """Call id -> its results without a call, in transcript order."""
        self._entries = 0  # entries indexed; the last of them is `_last`
        self._last: Entry | None = None
        self._calls = 0
        self._results = 0

    def update(self, transcript: Transcript) -> list[int]:
        """Index `transcript`; returns the ordinals, ascending, of the calls whose result it
        is the first transcript to show (every answered call when it is read whole)."""
        entries = transcript.entries
        seen = self._entries
        # The parser never reuses a message's entry in another parse, so the same entry at the
        # same place means the same parse, extended.
        if seen and (len(entries) < seen or entries[seen - 1] is not self._last):
            self.clear()
        calls, results = transcript.calls, transcript.results
        for call in calls[self._calls :]:
            found = self.calls.get(call.id)
            if found is None:
                self.calls[call.id] = [call.ordinal]
            else:
                found.append(call.ordinal)
        answered: list[int] = []
        for result in results[self._results :]:
            if result.call is None:
                self.loose.setdefault(result.call_id, []).append(result)
            elif not result.interim:  # a long-running call's interim answer leaves it open
                answered.append(result.call)
        self._entries = len(entries)
        self._last = entries[-1] if entries else None
        self._calls, self._results = len(calls), len(results)
        answered.sort()
        return answered


class ConversationState:
    """What detection remembers about one conversation, bounded by `limit` entries per kind,
    and the index of its last transcript."""

    __slots__ = (
        "index",
        "length",
        "names",
        "pending",
        "reported_orphans",
        "reported_severed",
        "resolved",
        "seen_pairs",
    )

    def __init__(self, limit: int = 4_096) -> None:
        """Create an empty state."""
        self.resolved = _Resolved(limit)  # fingerprint -> first call id
        self.pending: _Bounded[str, str] = _Bounded(limit)  # emitted call id -> fingerprint
        self.names: _Bounded[str, str] = _Bounded(limit)  # call id -> tool name
        self.seen_pairs: _Bounded[tuple[str, str, str], None] = _Bounded(limit)
        self.reported_severed: _Bounded[int, None] = _Bounded(limit)
        self.reported_orphans: _Bounded[str, None] = _Bounded(limit)
        self.index = TranscriptIndex()
        self.length = 0
        """Entries of the last transcript checked with the whole history."""

    def duplicate_of(self, call: EmittedCall) -> str | None:
        """The id of the resolved call that `call` repeats, if any."""
        return self.resolved.items.get(fingerprint(call.name, call.arguments))


def fingerprint(name: str, arguments: Any) -> str:
    """A call's tool and arguments, compared as canonical JSON (key order and spacing ignored).

    Example:
        >>> fingerprint("book", '{"seat": "4A", "flight": "SK1"}') == fingerprint(
        ...     "book", {"flight": "SK1", "seat": "4A"})
        True
    """
    value = arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except ValueError:
            value = arguments
    try:
        canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        canonical = repr(value)
    return hashlib.sha256(f"{name}\x00{canonical}".encode()).hexdigest()[:32]


def check_request(
    transcript: Transcript,
    open_obligations: Iterable[Obligation],
    state: ConversationState,
    *,
    full_history: bool = True,
) -> RequestFindings:
    """Resolutions, severed calls and orphaned results of one request (see the module), given
    the conversation's open obligations in the order they were opened."""
    owed = [
        record
        for record in open_obligations
        if record.is_open and record.kind == "tool_call" and not record.id.startswith(_SPAN_KEY)
    ]
    index = state.index
    _remember_pairs(transcript, index.update(transcript), state)
    compacted = False
    if full_history:
        compacted = len(transcript.entries) < state.length
        state.length = len(transcript.entries)
    loose = index.loose
    if not owed and not loose:
        return RequestFindings(compacted=compacted)
    resolutions: list[Resolution] = []
    severed: list[Severed] = []
    pairs = reconcile_calls(transcript, owed, index.calls, only=_OWED)
    for call_id, of_id in groupby(pairs, _record_id):
        missing: list[Obligation] = []
        for pair in of_id:
            if pair.state == "answered" and pair.call is not None:
                resolutions.append(_resolution(transcript.results[pair.call.result or 0]))
            elif pair.state == "missing":
                missing.append(pair.record)
        # A result whose call is gone still answers an open call of its id (the tool ran):
        # the earliest, as the ledger resolves it.
        answered = pair_earliest(missing, loose.get(call_id, ()))
        for _record, result in answered:
            resolutions.append(_resolution(result))
            fingerprinted = state.pending.items.pop(call_id, None)
            if fingerprinted is not None:
                state.resolved.add_fingerprint(fingerprinted, call_id)
        if full_history:
            severed.extend(
                Severed(call_id, record.name, record.sequence)
                for record in missing[len(answered) :]
                if state.reported_severed.first(record.sequence, None)
            )
    orphans: list[Orphan] = []
    if full_history and loose:
        for call_id, results in loose.items():
            if state.reported_orphans.first(call_id, None):
                name = next((r.name for r in owed if r.id == call_id), None)
                if name is None:
                    name = state.names.items.get(call_id, "")
                orphans.append(Orphan(call_id, name, results[0].message_index))
    return RequestFindings(tuple(resolutions), tuple(severed), tuple(orphans), compacted)


def _record_id(pair: CallPair) -> str:
    return pair.record.id


def check_response(calls: Sequence[EmittedCall], state: ConversationState) -> tuple[Duplicate, ...]:
    """The emitted calls that repeat a resolved call; every call is remembered as pending."""
    duplicates: list[Duplicate] = []
    for call in calls:
        key = fingerprint(call.name, call.arguments)
        earlier = state.resolved.items.get(key)
        if earlier is not None and earlier != call.id:
            duplicates.append(Duplicate(call.id, call.name, earlier))
        state.pending.put(call.id, key)
        state.names.put(call.id, call.name)
    return tuple(duplicates)


def _resolution(result: ToolResult) -> Resolution:
    return Resolution(result.call_id, result.status, result.text, result.message_index)


def _remember_pairs(transcript: Transcript, answered: list[int], state: ConversationState) -> None:
    """Every call the transcript shows answered (`answered`: those not remembered from an
    earlier transcript it extends) is a resolved call of the conversation."""
    for ordinal in answered:
        call = transcript.calls[ordinal]
        if state.seen_pairs.first((call.id, call.name, call.arguments), None):
            state.resolved.add(call.name, call.arguments, call.id)
            state.pending.items.pop(call.id, None)
            state.names.put(call.id, call.name)
