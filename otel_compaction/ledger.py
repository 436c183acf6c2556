"""The obligation ledger: the runtime's live table of what it still owes, per conversation.

The ledger is the source of truth the transcript is checked against. It is thread-safe (one
lock, held only for dictionary work), bounded, and pairs a resolution with the earliest open
obligation of the same id. (The transcript pairs a result with the call it follows; the two
differ only for an id reused while its first call is still open.)

The in-memory ledger here is the default: one process's table. `ObligationLedger.from_url`
(or ``OTEL_COMPACTION_LEDGER_URL``) selects a shared store instead, the same API on PostgreSQL
(`otel_compaction.stores.postgres`), for a fleet of workers serving the same conversations:
there an open obligation has an owner (a worker identity) whose heartbeat tells whether it is
alive, an open obligation whose owner's heartbeat lapsed is *orphaned* (`LedgerSnapshot.orphaned`,
never closed by itself), and `ObligationLedger.decision_lock` is a lock across processes.

Three bounds keep it from growing with calls that never resolve: conversations (the least
recently touched goes first), records per conversation (resolved history goes before open
records) and open obligations across conversations (the oldest open one goes first). Each open
record a bound drops is reported to the ``on_overflow`` listeners, so that whoever holds
something for it (the recorder's live span) lets it go too. Every bound is kept in constant
time per opening.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from time import time_ns
from typing import Any, Literal, cast

from otel_compaction._internal_errors import internal_errors

__all__ = [
    "DEFAULT_CONVERSATION",
    "DecisionTurn",
    "LedgerSnapshot",
    "Obligation",
    "ObligationKind",
    "ObligationLedger",
    "Orphan",
    "ResolutionStatus",
    "default_ledger",
]

ObligationKind = Literal[
    "tool_call", "transaction", "retry", "commitment", "tool_result", "background_task", "approval"
]
ResolutionStatus = Literal[
    "result", "error", "abandoned", "given_up", "withdrawn", "rolled_back", "absorbed", "denied"
]
"""``result``/``error``/``abandoned`` end a tool call; the forced terminal states of the other
kinds are ``given_up`` (a retry chain), ``withdrawn`` (a commitment), ``rolled_back`` (a
transaction), ``absorbed`` (a result with no call) and ``denied`` (an approval request)."""

DEFAULT_CONVERSATION = ""

_LISTENER = internal_errors("a ledger listener")
_OVERFLOW_LISTENER = internal_errors("a ledger overflow listener")


@dataclass(frozen=True, slots=True)
class Obligation:
    """One obligation as the ledger knows it. ``status`` is None while it is open;
    ``error_type`` is what failed (an ``error.type``) when the resolution says so."""

    kind: ObligationKind
    id: str
    name: str
    conversation_id: str
    sequence: int
    opened_at_ns: int
    status: ResolutionStatus | None = None
    resolved_at_ns: int | None = None
    error_type: str | None = None

    @property
    def is_open(self) -> bool:
        """True until a terminal resolution is recorded."""
        return self.status is None

    @property
    def age_seconds(self) -> float:
        """Seconds from opening to resolution, or to now while open."""
        end = self.resolved_at_ns if self.resolved_at_ns is not None else time.time_ns()
        return (end - self.opened_at_ns) / 1e9


class _Fields:
    """`Obligation`'s slots without its frozenness: the ledger fills a record in here and
    then gives it its class (same slots, same layout), two records per tool call. A frozen
    dataclass's initialiser sets each field through ``object.__setattr__``, about five times
    the cost of these plain stores."""

    __slots__ = Obligation.__slots__


def _record(
    kind: ObligationKind,
    obligation_id: str,
    name: str,
    conversation_id: str,
    sequence: int,
    opened_at_ns: int,
    status: ResolutionStatus | None,
    resolved_at_ns: int | None,
    error_type: str | None,
) -> Obligation:
    """``Obligation(...)`` with every field given, for the ledger's hot path."""
    fields: Any = _Fields()  # the slots, typed by `Obligation` once it has its class
    fields.kind = kind
    fields.id = obligation_id
    fields.name = name
    fields.conversation_id = conversation_id
    fields.sequence = sequence
    fields.opened_at_ns = opened_at_ns
    fields.status = status
    fields.resolved_at_ns = resolved_at_ns
    fields.error_type = error_type
    fields.__class__ = Obligation
    return cast("Obligation", fields)


@dataclass(frozen=True, slots=True)
class Orphan:
    """An open obligation whose owner (the worker that opened it) stopped heartbeating: its
    result will never come from there, and nothing closes it but an explicit resolution.

    ``silent_seconds`` is how long ago the owner's last heartbeat was (None when the owner
    never registered or shut down).
    """

    obligation: Obligation
    owner: str
    silent_seconds: float | None

    @property
    def discharge(self) -> str:
        """How to discharge it, from any worker."""
        o = self.obligation
        return (
            f"resolve it from any worker: ledger.resolve({o.conversation_id!r}, {o.id!r}, "
            f"'abandoned', kind={o.kind!r}) (or with the result, when it is known), or "
            "GuardedCompactor.force_terminal(refusal)"
        )

    def describe(self) -> str:
        """One line naming it, its owner and how to discharge it."""
        o = self.obligation
        silent = (
            "has shut down"
            if self.silent_seconds is None
            else f"last heartbeat {self.silent_seconds:.0f} s ago"
        )
        return f"{o.kind} {o.id} orphaned (owner {self.owner} {silent}): {self.discharge}"


@dataclass(frozen=True, slots=True)
class LedgerSnapshot:
    """An immutable copy of one conversation's records, in the order they were opened;
    ``orphaned`` lists the open ones whose owner stopped heartbeating (a shared store only).
    ``unavailable`` says why the records are not the whole truth (the store is unreachable,
    or writes of the conversation still wait in an outbox), None when they are."""

    conversation_id: str
    obligations: tuple[Obligation, ...]
    orphaned: tuple[Orphan, ...] = ()
    unavailable: str | None = None

    def open(self) -> tuple[Obligation, ...]:
        """The obligations still open."""
        return tuple(o for o in self.obligations if o.is_open)

    def tool_calls(self) -> tuple[Obligation, ...]:
        """The tool-call records, open or resolved, in emission order."""
        return tuple(o for o in self.obligations if o.kind == "tool_call")


class DecisionTurn:
    """One worker's turn at deciding and applying a compaction of a conversation, held by
    `ObligationLedger.decision_lock`.

    On a shared store the turn holds the conversation's lock across processes and knows
    which transcript states were already compacted: `compacted` says whether one with this
    fingerprint was, and `record` notes one (both take effect when the turn ends without an
    error). In one process (the in-memory ledger) the transcript is the caller's own, so
    there is nothing to fence: `shared` is False and `compacted` is always False.
    """

    shared = False

    def compacted(self, fingerprint: str) -> bool:
        """Whether a transcript state with this fingerprint was already compacted."""
        return False

    def record(self, fingerprint: str) -> None:
        """Note that the transcript state with this fingerprint is compacted now."""


class _KeyedLocks:
    """A re-entrant lock per key, kept only while someone holds or waits for it."""

    __slots__ = ("_guard", "_locks")

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.RLock, list[int]]] = {}

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.setdefault(key, (threading.RLock(), [0]))
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._guard:
                users[0] -= 1
                if not users[0]:
                    del self._locks[key]


_MEMORY_TURN = DecisionTurn()


class _Conversation:
    __slots__ = ("open_by_id", "records", "resolved")

    def __init__(self) -> None:
        # sequence -> record, in opening order; open ids map to a FIFO of sequences (a list:
        # almost always of one element, and far smaller than a deque).
        self.records: OrderedDict[int, Obligation] = OrderedDict()
        self.open_by_id: dict[tuple[str, str], list[int]] = {}
        # The resolved records' sequences in resolution order: the record bound drops the
        # first of them without walking past the open records before it.
        self.resolved: deque[int] = deque()


class ObligationLedger:
    """Live obligations per conversation (``gen_ai.conversation.id``).

    Example:
        >>> ledger = ObligationLedger()
        >>> _ = ledger.open("conv-1", "tool_call", "call_1", name="search")
        >>> [o.id for o in ledger.open_obligations("conv-1")]
        ['call_1']
        >>> ledger.resolve("conv-1", "call_1").status
        'result'
        >>> ledger.open_obligations("conv-1")
        ()
    """

    def __init__(
        self,
        *,
        max_conversations: int = 1_000,
        max_records_per_conversation: int = 1_000,
        max_open: int = 10_000,
        on_overflow: Callable[[Obligation], None] | None = None,
        on_change: Callable[[Obligation, Obligation | None], None] | None = None,
    ) -> None:
        """Create a ledger.

        The defaults bound what a process holds however many calls never resolve: at most
        10,000 open obligations, about 40 MB with the recorder's live spans (an open tool call
        holds about 3.9 KB, its span most of it; 0.5 to 0.6 KB in the ledger alone), and a
        resolved history of at most 1,000 records in each of 1,000 conversations (about 0.35 KB
        a record: 350 MB only if every conversation is that long; lower
        `max_records_per_conversation` for a process serving many long conversations at once).
        Raise `max_open` for one that really has more calls open at once. Every open obligation
        a bound drops is counted (``compaction.ledger.overflow``) and reported to the
        `on_overflow` listeners; the recorder ends its span as abandoned, ``evicted``.

        Args:
            max_conversations: conversations kept; the least recently touched goes first.
            max_records_per_conversation: records kept per conversation; resolved ones
                are dropped before open ones, the first resolved first.
            max_open: open obligations kept across conversations; the one opened first goes
                first.
            on_overflow: called (outside the lock) with each open record a bound dropped.
            on_change: called (outside the lock) with the new record and the one it replaced
                (None when opening).

        Raises:
            ValueError: a bound is below 1.
        """
        for bound, value in (
            ("max_conversations", max_conversations),
            ("max_records_per_conversation", max_records_per_conversation),
            ("max_open", max_open),
        ):
            if value < 1:
                raise ValueError(f"{bound} must be at least 1, got {value}")
        self._lock = threading.Lock()
        self._conversations: OrderedDict[str, _Conversation] = OrderedDict()
        self._sequence = itertools.count()
        self._max_conversations = max_conversations
        self._max_records = max_records_per_conversation
        self._max_open = max_open
        # Every open record's sequence -> its conversation, in opening order: the open bound
        # drops the first, and the oldest open obligation is read from it.
        self._open_order: OrderedDict[int, str] = OrderedDict()
        self._open_counts: dict[ObligationKind, int] = {}
        self._change_listeners: list[Callable[[Obligation, Obligation | None], None]] = []
        self._resolve_listeners: list[Callable[[Obligation], None]] = []
        self._overflow_listeners: list[Callable[[Obligation], None]] = []
        self._decision_locks = _KeyedLocks()
        self.subscribe(on_change=on_change, on_overflow=on_overflow)

    @classmethod
    def from_url(cls, url: str | None = None, **options: Any) -> ObligationLedger:
        """The ledger a URL names: ``memory:`` (or None/empty: ``OTEL_COMPACTION_LEDGER_URL``
        when set, else memory) for this in-memory ledger, ``postgresql://...`` for the
        shared store on PostgreSQL (needs the ``postgres`` extra). `options` go to the
        store's constructor (the bounds here; `PostgresLedger`'s for PostgreSQL).

        Raises:
            StoreError: the URL (named with the variable it came from) is not one of these,
                or its store cannot be reached.
        """
        from otel_compaction.stores import open_ledger

        return open_ledger(url, **options)

    @property
    def owner(self) -> str | None:
        """The worker identity recorded as the owner of what this process opens (a shared
        store); None in memory, where every record is this process's own."""
        return None

    @contextmanager
    def decision_lock(self, conversation_id: str | None) -> Iterator[DecisionTurn]:
        """Hold the conversation's decision lock while deciding and applying a compaction.

        In memory, a re-entrant lock per conversation in this process; on a shared store, a
        lock across every worker of the store (see `DecisionTurn`)."""
        with self._decision_locks.hold(conversation_id or DEFAULT_CONVERSATION):
            yield _MEMORY_TURN

    def orphaned_counts(self) -> dict[ObligationKind, int]:
        """Open obligations whose owner stopped heartbeating, by kind, across the store
        (always empty in memory: this process is alive while it asks)."""
        return {}

    def close(self) -> None:
        """Release what the ledger holds outside memory (a shared store's connections and
        heartbeat); nothing to do in memory. The ledger is unusable afterwards only for a
        shared store."""

    @property
    def max_conversations(self) -> int:
        """Conversations kept; the least recently touched goes first."""
        return self._max_conversations

    @property
    def max_records_per_conversation(self) -> int:
        """Records kept per conversation; resolved ones are dropped before open ones."""
        return self._max_records

    @property
    def max_open(self) -> int:
        """Open obligations kept across conversations; the one opened first goes first."""
        return self._max_open

    def subscribe(
        self,
        *,
        on_change: Callable[[Obligation, Obligation | None], None] | None = None,
        on_overflow: Callable[[Obligation], None] | None = None,
        on_resolve: Callable[[Obligation], None] | None = None,
    ) -> None:
        """Add listeners: `on_change(new, old)` on every open and resolve (old is None when
        opening), `on_resolve(record)` on every terminal resolution only (with the resolved
        record), `on_overflow(record)` for each open record a bound dropped. Listeners run
        outside the lock; one that raises is logged and does not stop the others."""
        if on_change is not None:
            self._change_listeners.append(on_change)
        if on_resolve is not None:
            self._resolve_listeners.append(on_resolve)
        if on_overflow is not None:
            self._overflow_listeners.append(on_overflow)

    def open(
        self,
        conversation_id: str | None,
        kind: ObligationKind,
        obligation_id: str,
        *,
        name: str = "",
    ) -> Obligation:
        """Record a new open obligation and return it."""
        conversation_id = conversation_id or DEFAULT_CONVERSATION
        dropped: list[Obligation] | None = None  # open records a bound dropped: rare, then many
        key = (kind, obligation_id)
        lock = self._lock
        lock.acquire()  # not ``with``: half the cost, twice per tool call
        try:
            # The sequence is taken under the lock, so that records of one id are queued in
            # the order of their sequence numbers (earliest first), whatever the threads do.
            sequence = next(self._sequence)
            record = _record(
                kind, obligation_id, name, conversation_id, sequence, time_ns(), None, None, None
            )
            conversations = self._conversations
            if conversation_id in conversations:
                conversation = conversations[conversation_id]
                conversations.move_to_end(conversation_id)
            else:
                dropped = []
                conversation = self._conversation(conversation_id, dropped)
            records = conversation.records
            records[sequence] = record
            open_by_id = conversation.open_by_id
            if key in open_by_id:
                open_by_id[key].append(sequence)
            else:
                open_by_id[key] = [sequence]
            open_order = self._open_order
            open_order[sequence] = conversation_id
            counts = self._open_counts
            counts[kind] = counts.get(kind, 0) + 1
            if len(records) > self._max_records:
                if conversation.resolved:  # resolved history goes first, the first first
                    del records[conversation.resolved.popleft()]
                else:  # every record is open: the oldest goes
                    dropped = dropped if dropped is not None else []
                    dropped.append(self._evict_first_open(conversation))
            if len(open_order) > self._max_open:
                dropped = dropped if dropped is not None else []
                dropped.append(self._evict_oldest_open())
        finally:
            lock.release()
        if dropped or self._change_listeners:
            self._notify(record, None, dropped or ())
        return record

    def resolve(
        self,
        conversation_id: str | None,
        obligation_id: str,
        status: ResolutionStatus = "result",
        *,
        kind: ObligationKind = "tool_call",
        error_type: str | None = None,
    ) -> Obligation | None:
        """Resolve the earliest open obligation with this id; None if there is none.

        `error_type` names what failed (an ``error.type``), for a resolution that is an error.
        """
        conversation_id = conversation_id or DEFAULT_CONVERSATION
        key = (kind, obligation_id)
        lock = self._lock
        lock.acquire()
        try:
            conversations = self._conversations
            if conversation_id not in conversations:
                return None
            conversation = conversations[conversation_id]
            open_by_id = conversation.open_by_id
            waiting = open_by_id.get(key)
            if not waiting:
                return None
            conversations.move_to_end(conversation_id)  # resolving touches it too
            if len(waiting) == 1:
                sequence = waiting[0]
                del open_by_id[key]
            else:
                sequence = waiting.pop(0)
            records = conversation.records
            before = records[sequence]
            del self._open_order[sequence]
            conversation.resolved.append(sequence)
            after = _record(
                kind,
                obligation_id,
                before.name,
                conversation_id,
                sequence,
                before.opened_at_ns,
                status,
                time_ns(),
                error_type,
            )
            records[sequence] = after
            self._open_counts[kind] -= 1
        finally:
            lock.release()
        if self._resolve_listeners or self._change_listeners:
            self._notify(after, before, ())
        return after

    def rekey(
        self,
        conversation_id: str | None,
        old_id: str,
        new_id: str,
        *,
        kind: ObligationKind = "tool_call",
    ) -> Obligation | None:
        """Give the earliest open obligation `old_id` its real id (an instrumentation may learn
        a call's id only when the call ends)."""
        conversation_id = conversation_id or DEFAULT_CONVERSATION
        with self._lock:
            conversation = self._conversations.get(conversation_id)
            waiting = conversation.open_by_id.get((kind, old_id)) if conversation else None
            if conversation is None or not waiting:
                return None
            sequence = waiting.pop(0)
            if not waiting:
                del conversation.open_by_id[(kind, old_id)]
            record = replace(conversation.records[sequence], id=new_id)
            conversation.records[sequence] = record
            queue = conversation.open_by_id.setdefault((kind, new_id), [])
            queue.append(sequence)
            queue.sort()  # keep the FIFO in opening order
            return record

    def snapshot(self, conversation_id: str | None) -> LedgerSnapshot:
        """An immutable copy of the conversation's records."""
        conversation_id = conversation_id or DEFAULT_CONVERSATION
        with self._lock:
            conversation = self._conversations.get(conversation_id)
            records = tuple(conversation.records.values()) if conversation else ()
        return LedgerSnapshot(conversation_id, records)

    def open_obligations(self, conversation_id: str | None = None) -> tuple[Obligation, ...]:
        """Open obligations of one conversation, or of all when `conversation_id` is None."""
        with self._lock:
            if conversation_id is not None:
                found = self._conversations.get(conversation_id)
                if found is None:
                    return ()
                # From the index of open records: as costly as the open obligations, not as
                # the conversation's whole history (auto-instrumentation asks on every request).
                sequences = sorted(s for waiting in found.open_by_id.values() for s in waiting)
                return tuple(found.records[s] for s in sequences)
            return tuple(
                record
                for conversation in self._conversations.values()
                for record in conversation.records.values()
                if record.is_open
            )

    def oldest_open(self) -> Obligation | None:
        """The open obligation opened earliest, across conversations."""
        with self._lock:
            first = next(iter(self._open_order.items()), None)
            if first is None:
                return None
            sequence, conversation_id = first
            return self._conversations[conversation_id].records[sequence]

    def forget(self, conversation_id: str) -> None:
        """Drop a finished conversation's records."""
        with self._lock:
            forgotten = self._conversations.pop(conversation_id, None)
            if forgotten is not None:
                self._uncount(forgotten.records.values())

    def conversations(self) -> tuple[str, ...]:
        """Ids of the conversations the ledger holds."""
        with self._lock:
            return tuple(self._conversations)

    def open_counts(self) -> dict[ObligationKind, int]:
        """How many obligations of each kind are open, across conversations (every kind
        ever opened is listed, with 0 once all of it is resolved)."""
        with self._lock:
            return dict(self._open_counts)

    # -- internals (lock held) ---------------------------------------------------------------

    def _conversation(self, conversation_id: str, dropped: list[Obligation]) -> _Conversation:
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            conversation = self._conversations[conversation_id] = _Conversation()
            while len(self._conversations) > self._max_conversations:
                _, evicted = self._conversations.popitem(last=False)
                lost = [r for r in evicted.records.values() if r.is_open]
                self._uncount(lost)
                dropped.extend(lost)
        else:
            self._conversations.move_to_end(conversation_id)
        return conversation

    def _evict_first_open(self, conversation: _Conversation) -> Obligation:
        """Drop the conversation's oldest record, when all of them are open."""
        _, record = conversation.records.popitem(last=False)
        self._unindex(conversation, record)
        return record

    def _evict_oldest_open(self) -> Obligation:
        """Drop the open record opened first, across conversations."""
        sequence, conversation_id = next(iter(self._open_order.items()))
        conversation = self._conversations[conversation_id]
        record = conversation.records.pop(sequence)
        self._unindex(conversation, record)
        return record

    def _unindex(self, conversation: _Conversation, record: Obligation) -> None:
        """Take an open record that left `conversation.records` out of every index."""
        self._uncount((record,))
        key = (record.kind, record.id)
        waiting = conversation.open_by_id.get(key)
        if waiting:
            waiting.remove(record.sequence)
            if not waiting:
                del conversation.open_by_id[key]

    def _uncount(self, records: Iterable[Obligation]) -> None:
        """Uncount the open ones of `records`, which left the ledger."""
        for record in records:
            if record.is_open:
                self._open_counts[record.kind] -= 1
                del self._open_order[record.sequence]

    def _notify(
        self, record: Obligation, before: Obligation | None, dropped: Sequence[Obligation]
    ) -> None:
        # Each listener guarded on its own by a ``try``, free while nothing fails: the age
        # histogram listens to every resolution.
        for listener in self._change_listeners:
            try:
                listener(record, before)
            except Exception as error:
                _LISTENER.failed(error)
        if before is not None:
            for resolved in self._resolve_listeners:
                try:
                    resolved(record)
                except Exception as error:
                    _LISTENER.failed(error)
        for lost in dropped:
            for overflow in self._overflow_listeners:
                try:
                    overflow(lost)
                except Exception as error:
                    _OVERFLOW_LISTENER.failed(error)


def default_ledger(**options: Any) -> ObligationLedger:
    """The ledger ``OTEL_COMPACTION_LEDGER_URL`` names, else a new in-memory ledger (the
    constructor with `options`, when the variable is unset, without reading anything else)."""
    if not os.environ.get("OTEL_COMPACTION_LEDGER_URL"):
        return ObligationLedger(**options)
    return ObligationLedger.from_url(None, **options)
