"""The ledger and the archive on PostgreSQL, shared by a fleet of workers.

`PostgresLedger` is an `ObligationLedger` whose records live in PostgreSQL, and
`PostgresArchive` an `Archive` whose spans do; select them with a ``postgresql://`` URL
(``OTEL_COMPACTION_LEDGER_URL``, ``OTEL_COMPACTION_ARCHIVE_URL``, or ``from_url``). Each
creates its tables on first use (``otel_compaction_*``, under a lock, so workers starting
together do not race).

Guarantees:

* **Keys.** An obligation is keyed by conversation, kind, obligation id and sequence (a number
  the database assigns, increasing across the fleet). At most one record of a (conversation,
  kind, id) is open at a time.
* **Idempotent.** Opening what is already open returns the open record and changes nothing (a
  retried event, or the same call seen by two workers); resolving what is not open returns
  None and changes nothing. Two workers resolving the same obligation at once: exactly one
  resolves it. An id may be opened again once its record is resolved (a new sequence).
* **Owners and heartbeats.** Each ledger is a worker (`worker_identity`), the owner of what it
  opens. A background thread refreshes the worker's heartbeat every `heartbeat_interval`
  seconds (default 5); a worker whose heartbeat is older than `heartbeat_timeout` (default 30)
  or that closed its ledger has lapsed. The database's clock decides, so workers' clocks need
  not agree.
* **Orphans.** An open obligation whose owner lapsed is orphaned: never closed by itself,
  listed in `LedgerSnapshot.orphaned` (so the gate refuses to compact over it, naming it and
  how to discharge it), counted by `orphaned_counts` and logged once per worker. Any worker
  discharges it with `resolve` (``abandoned``, or the result when it is known).
* **One decision at a time.** `decision_lock` holds a transaction-scoped advisory lock of the
  conversation (``pg_advisory_xact_lock``) while a compaction is decided and applied, and
  remembers which transcript states were compacted, so that two workers never both compact
  the same one.
* **Telemetry sums.** `open_counts` and `oldest_open` are what *this* worker owns, so that the
  open-obligation gauges summed over workers are the fleet's; `orphaned_counts` is the fleet's
  (every worker observes the same number: aggregate it with ``max``).
* **Archive.** Spans are content-addressed exactly as in SQLite (the same handle for the same
  bytes); a re-insert keeps the first row, and recall from any process returns the stored
  bytes, checked against their SHA-256.

Database failures raise `StoreError` naming the store (its URL, password masked) and the
operation; the recorder's guard keeps them out of the host agent. Use a ledger in the process
that made it: after a fork, make a new one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Literal, NoReturn

import psycopg
from psycopg import sql

from otel_compaction.archive import _META_COLUMNS, _SPAN_COLUMNS, Archive, ArchivedSpan
from otel_compaction.errors import ArchiveError
from otel_compaction.ledger import (
    DEFAULT_CONVERSATION,
    DecisionTurn,
    LedgerSnapshot,
    Obligation,
    ObligationKind,
    ObligationLedger,
    Orphan,
    ResolutionStatus,
)
from otel_compaction.stores import StoreError, redact, worker_identity
from otel_compaction.stores.outbox import DEFAULT_OUTBOX_LIMIT, Outbox, default_outbox_dir

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DEFAULT_HEARTBEAT_TIMEOUT",
    "PostgresArchive",
    "PostgresLedger",
]

_log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_INTERVAL: Final = 5.0
"""Seconds between a worker's heartbeats."""

DEFAULT_HEARTBEAT_TIMEOUT: Final = 30.0
"""Seconds without a heartbeat after which a worker has lapsed and its open obligations are
orphaned (six missed heartbeats at the default interval)."""

# The advisory locks' first key ("otca" as in the SQLite archive's application id), so that
# they never meet the application's own advisory locks; the schema's lock is the next one.
_LOCK_NAMESPACE: Final = 0x6F746361
_SCHEMA_LOCK: Final = (_LOCK_NAMESPACE + 1, 0)
_POOL_SIZE: Final = 8

_OBLIGATIONS: Final = "otel_compaction_obligations"
_WORKERS: Final = "otel_compaction_workers"
_COMPACTIONS: Final = "otel_compaction_compactions"
_SPANS: Final = "otel_compaction_archived_spans"
_APPLIED: Final = "otel_compaction_outbox_applied"
_SIDE_EFFECTS: Final = "otel_compaction_side_effects"

_LEDGER_SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS {_OBLIGATIONS} (
    conversation_id text NOT NULL,
    kind            text NOT NULL,
    obligation_id   text NOT NULL,
    sequence        bigserial,
    name            text NOT NULL DEFAULT '',
    status          text,
    error_type      text,
    owner           text NOT NULL,
    opened_at_ns    bigint NOT NULL,
    resolved_at_ns  bigint,
    resolved_by     text,
    PRIMARY KEY (conversation_id, kind, obligation_id, sequence)
);
CREATE UNIQUE INDEX IF NOT EXISTS {_OBLIGATIONS}_open
    ON {_OBLIGATIONS} (conversation_id, kind, obligation_id) WHERE status IS NULL;
CREATE INDEX IF NOT EXISTS {_OBLIGATIONS}_conversation
    ON {_OBLIGATIONS} (conversation_id, sequence);
CREATE INDEX IF NOT EXISTS {_OBLIGATIONS}_owner
    ON {_OBLIGATIONS} (owner, sequence) WHERE status IS NULL;
CREATE TABLE IF NOT EXISTS {_WORKERS} (
    owner        text PRIMARY KEY,
    host         text NOT NULL,
    pid          integer NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz
);
CREATE TABLE IF NOT EXISTS {_COMPACTIONS} (
    conversation_id text NOT NULL,
    fingerprint     text NOT NULL,
    owner           text NOT NULL,
    compacted_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_id, fingerprint)
);
CREATE TABLE IF NOT EXISTS {_APPLIED} (
    write_id   text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""

_ARCHIVE_SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS {_SPANS} (
    handle          text PRIMARY KEY,
    sha256          text NOT NULL,
    conversation_id text,
    span_start      integer NOT NULL,
    span_end        integer NOT NULL,
    message_count   integer NOT NULL,
    size            integer NOT NULL,
    created_at      double precision NOT NULL,
    policy          text,
    summary         text,
    data            bytea NOT NULL,
    stored          bigserial
);
CREATE INDEX IF NOT EXISTS {_SPANS}_conversation ON {_SPANS} (conversation_id, span_start);
CREATE TABLE IF NOT EXISTS {_SIDE_EFFECTS} (
    conversation_id text NOT NULL,
    sequence        integer NOT NULL,
    call_id         text NOT NULL,
    fingerprint     text NOT NULL,
    scope           text NOT NULL,
    kind            text NOT NULL,
    tool            text NOT NULL,
    target          text NOT NULL,
    outcome         text NOT NULL,
    result          text NOT NULL,
    completed_at    double precision,
    in_context      integer NOT NULL,
    asked           integer NOT NULL DEFAULT 0,
    PRIMARY KEY (conversation_id, sequence, call_id)
);
"""

_RECORD_COLUMNS: Final = (
    "kind, obligation_id, name, conversation_id, sequence, opened_at_ns, status, "
    "resolved_at_ns, error_type"
)

# A conversation's open records and its newest resolved ones, with, for each open record of
# another owner, the seconds since that owner's heartbeat (infinity: shut down or unknown).
_SNAPSHOT: Final = f"""
SELECT {_RECORD_COLUMNS}, owner,
    CASE WHEN status IS NULL AND owner <> %(me)s THEN coalesce((
        SELECT extract(epoch FROM now() - w.heartbeat_at)::float8 FROM {_WORKERS} w
        WHERE w.owner = o.owner), 'Infinity') END
FROM (
    SELECT * FROM {_OBLIGATIONS} WHERE conversation_id = %(c)s AND status IS NULL
    UNION ALL (
        SELECT * FROM {_OBLIGATIONS} WHERE conversation_id = %(c)s AND status IS NOT NULL
        ORDER BY sequence DESC LIMIT %(n)s
    )
) o ORDER BY sequence
"""

Connection = psycopg.Connection[tuple[Any, ...]]


class _Pool:
    """A few autocommit connections to one database, reused across threads; a connection
    that failed is closed, not reused."""

    def __init__(self, url: str, source: str, size: int = _POOL_SIZE) -> None:
        self.url = url
        self.source = source
        self.size = size
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def fail(self, doing: str, error: Exception) -> NoReturn:
        """Raise `StoreError` for `error`, met while `doing`."""
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise StoreError(
            f"{self.source}={redact(self.url)!r}: PostgreSQL failed while {doing}: {detail}"
        ) from error

    def connect(self, doing: str) -> Connection:
        """A new connection (autocommit), for `doing`."""
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.Error as error:
            self.fail(f"{doing} (connecting)", error)

    @contextmanager
    def connection(self, doing: str) -> Iterator[Connection]:
        """A connection for `doing`; database errors become `StoreError`."""
        with self._lock:
            if self._closed:
                raise StoreError(f"{self.source}={redact(self.url)!r}: the store is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self.connect(doing)
        healthy = False
        try:
            yield conn
            healthy = True
        except psycopg.Error as error:
            self.fail(doing, error)
        finally:
            reusable = (
                healthy
                and not conn.closed
                and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            )
            with self._lock:
                if reusable and not self._closed and len(self._idle) < self.size:
                    self._idle.append(conn)
                    conn = None
            if conn is not None:
                conn.close()

    def create_schema(self, schema: str) -> None:
        """Create tables under the schema lock (concurrent ``CREATE ... IF NOT EXISTS`` of
        one table can fail)."""
        with self.connection("creating its tables") as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _SCHEMA_LOCK)
            for statement in schema.split(";"):
                if statement.strip():
                    conn.execute(statement.strip())

    def close(self) -> None:
        """Close every idle connection; later use raises `StoreError`."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _record(row: Sequence[Any]) -> Obligation:
    kind, obligation_id, name, conversation_id, sequence, opened, status, resolved, error = row
    return Obligation(
        kind, obligation_id, name, conversation_id, sequence, opened, status, resolved, error
    )


def _open(conn: Connection, conversation_id: str, write: dict[str, Any]) -> tuple[Obligation, bool]:
    """Apply an open: the record, and whether it is new (False: it was open already)."""
    key = (conversation_id, write["kind"], write["id"])
    while True:
        row = conn.execute(
            f"INSERT INTO {_OBLIGATIONS} (conversation_id, kind, obligation_id, name, "
            "owner, opened_at_ns) VALUES (%s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (conversation_id, kind, obligation_id) WHERE status IS NULL "
            f"DO NOTHING RETURNING {_RECORD_COLUMNS}",
            (*key, write["name"], write["owner"], write["at"]),
        ).fetchone()
        if row is not None:
            return _record(row), True
        existing = conn.execute(
            f"SELECT {_RECORD_COLUMNS} FROM {_OBLIGATIONS} WHERE conversation_id = %s "
            "AND kind = %s AND obligation_id = %s AND status IS NULL",
            key,
        ).fetchone()
        if existing is not None:
            return _record(existing), False
        # resolved between the two statements: open it anew


def _resolve(conn: Connection, conversation_id: str, write: dict[str, Any]) -> Sequence[Any] | None:
    """Apply a resolution: the resolved row, or None when nothing of that id was open."""
    return conn.execute(
        f"UPDATE {_OBLIGATIONS} SET status = %s, error_type = %s, resolved_at_ns = %s, "
        "resolved_by = %s WHERE conversation_id = %s AND kind = %s "
        f"AND obligation_id = %s AND status IS NULL RETURNING {_RECORD_COLUMNS}",
        (
            write["status"],
            write["error_type"],
            write["at"],
            write["owner"],
            conversation_id,
            write["kind"],
            write["id"],
        ),
    ).fetchone()


def _rekey(conn: Connection, conversation_id: str, write: dict[str, Any]) -> Sequence[Any] | None:
    """Apply a renaming: the renamed row, or None when `id` is not open or `new_id` is."""
    try:
        with conn.transaction():
            return conn.execute(
                f"UPDATE {_OBLIGATIONS} SET obligation_id = %s WHERE conversation_id = %s "
                "AND kind = %s AND obligation_id = %s AND status IS NULL "
                f"RETURNING {_RECORD_COLUMNS}",
                (write["new_id"], conversation_id, write["kind"], write["id"]),
            ).fetchone()
    except psycopg.errors.UniqueViolation:
        return None


_APPLY: Final = {"open": _open, "resolve": _resolve, "rekey": _rekey}


def _replay(conn: Connection, write_id: str, conversation_id: str, write: dict[str, Any]) -> None:
    """Apply one write of an outbox unless the store applied it already, in one transaction
    with the note that it did."""
    with conn.transaction():
        fresh = conn.execute(
            f"INSERT INTO {_APPLIED} (write_id) VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1",
            (write_id,),
        ).fetchone()
        if fresh is not None:
            _APPLY[write["op"]](conn, conversation_id, write)


def _outage(error: StoreError) -> bool:
    """Whether `error` is the store being unreachable (worth queueing for), not a fault of
    the write itself."""
    return isinstance(error.__cause__, psycopg.OperationalError | psycopg.InterfaceError)


class _PostgresTurn(DecisionTurn):
    """A decision turn holding the conversation's advisory lock in `conn`'s transaction."""

    shared = True

    def __init__(self, conn: Connection, conversation_id: str, owner: str) -> None:
        self._conn = conn
        self._conversation_id = conversation_id
        self._owner = owner

    def compacted(self, fingerprint: str) -> bool:
        """Whether any worker compacted the transcript state `fingerprint` names."""
        row = self._conn.execute(
            f"SELECT 1 FROM {_COMPACTIONS} WHERE conversation_id = %s AND fingerprint = %s",
            (self._conversation_id, fingerprint),
        ).fetchone()
        return row is not None

    def record(self, fingerprint: str) -> None:
        """Note the transcript state `fingerprint` as compacted (when the turn commits)."""
        self._conn.execute(
            f"INSERT INTO {_COMPACTIONS} (conversation_id, fingerprint, owner) "
            "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (self._conversation_id, fingerprint, self._owner),
        )


class PostgresLedger(ObligationLedger):
    """The obligation ledger in PostgreSQL, shared by every worker that opens the same URL.

    Example (with a server at ``url``)::

        ledger = PostgresLedger("postgresql://agent@db/agents")
        ledger.open("conv-1", "tool_call", "call_1", name="search")
        # in any other worker, now or after this one died:
        PostgresLedger("postgresql://agent@db/agents").resolve("conv-1", "call_1", "abandoned")
    """

    def __init__(
        self,
        url: str,
        *,
        owner: str | None = None,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT,
        source: str = "the URL given",
        max_conversations: int = 1_000,
        max_records_per_conversation: int = 1_000,
        max_open: int = 10_000,
        on_overflow: Callable[[Obligation], None] | None = None,
        on_change: Callable[[Obligation, Obligation | None], None] | None = None,
        outbox: str | Path | Literal[False] | None = None,
        outbox_limit: int = DEFAULT_OUTBOX_LIMIT,
    ) -> None:
        """Connect, create the tables if needed, register this worker, start its heartbeat
        and replay what the outbox holds (this worker's, and any a dead worker on this host
        left behind for the same store).

        Args:
            url: the libpq URL of the database (``postgresql://USER@HOST:PORT/DATABASE``).
            owner: this worker's identity (`worker_identity` when None).
            heartbeat_interval: seconds between heartbeats.
            heartbeat_timeout: seconds without a heartbeat after which a worker has lapsed
                (more than twice the interval).
            source: where the URL came from, for error messages (a variable's name).
            max_records_per_conversation: the resolved records a snapshot holds at most,
                the newest (every open record is in it); the other bounds are kept for the
                API (the store is on disk, nothing is evicted).
            on_overflow: as for `ObligationLedger` (never called: nothing is evicted).
            on_change: as for `ObligationLedger`, for what this worker does.
            outbox: the directory of the outbox (`default_outbox_dir` when None); False
                switches it off, and then a write during an outage raises `StoreError`.
            outbox_limit: the writes the outbox holds at most.

        Raises:
            StoreError: the database cannot be reached or its tables created.
            ValueError: a bound is below 1, or the heartbeat timeout is not more than twice
                the interval.
        """
        super().__init__(
            max_conversations=max_conversations,
            max_records_per_conversation=max_records_per_conversation,
            max_open=max_open,
            on_overflow=on_overflow,
            on_change=on_change,
        )
        if heartbeat_interval <= 0 or heartbeat_timeout <= 2 * heartbeat_interval:
            raise ValueError(
                f"heartbeat_timeout ({heartbeat_timeout:g} s) must be more than twice "
                f"heartbeat_interval ({heartbeat_interval:g} s), and both positive"
            )
        self._owner = worker_identity(owner)
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self._pool = _Pool(url, source)
        self._kinds: set[ObligationKind] = set()
        self._reported: set[tuple[str, str, str, int]] = set()
        self._local = threading.local()
        self._pool.create_schema(_LEDGER_SCHEMA)
        self._replaying = threading.RLock()
        self._outbox: Outbox | None = None
        self._adopted: list[Outbox] = []
        if outbox is not False:
            directory = default_outbox_dir() if outbox is None else Path(outbox)
            self._outbox = Outbox(directory, redact(url), self._owner, limit=outbox_limit)
            self._adopted = [
                Outbox(directory, redact(url), self._owner, path=path)
                for path in self._outbox.orphaned_files()
            ]
        with self._pool.connection("registering the worker") as conn:
            conn.execute(
                f"INSERT INTO {_WORKERS} (owner, host, pid, heartbeat_at) "
                "VALUES (%s, %s, %s, now()) ON CONFLICT (owner) DO UPDATE "
                "SET host = EXCLUDED.host, pid = EXCLUDED.pid, heartbeat_at = now()",
                (self._owner, socket.gethostname(), os.getpid()),
            )
            # Workers gone for a day that own nothing open: every restart is a new identity.
            conn.execute(
                f"DELETE FROM {_WORKERS} w WHERE (w.heartbeat_at IS NULL "
                "OR w.heartbeat_at < now() - interval '1 day') AND NOT EXISTS ("
                f"SELECT 1 FROM {_OBLIGATIONS} o WHERE o.owner = w.owner AND o.status IS NULL)"
            )
        self._stopped = threading.Event()
        self._heartbeat = threading.Thread(
            target=self._beat, name=f"otel-compaction heartbeat {self._owner}", daemon=True
        )
        self._heartbeat.start()
        self.replay()

    @property
    def owner(self) -> str:
        """This worker's identity, the owner of what it opens."""
        return self._owner

    @property
    def url(self) -> str:
        """The database's URL, its password masked."""
        return redact(self._pool.url)

    def __repr__(self) -> str:
        return f"PostgresLedger({self.url!r}, owner={self._owner!r})"

    # -- heartbeat -------------------------------------------------------------------------

    def heartbeat(self) -> None:
        """Refresh this worker's heartbeat now (the background thread does it every
        `heartbeat_interval` seconds)."""
        with self._pool.connection("refreshing the heartbeat") as conn:
            updated = conn.execute(
                f"UPDATE {_WORKERS} SET heartbeat_at = now() WHERE owner = %s", (self._owner,)
            ).rowcount
            if not updated:  # the row was removed (a cleanup): register again
                conn.execute(
                    f"INSERT INTO {_WORKERS} (owner, host, pid, heartbeat_at) "
                    "VALUES (%s, %s, %s, now()) ON CONFLICT (owner) DO NOTHING",
                    (self._owner, socket.gethostname(), os.getpid()),
                )

    def _beat(self) -> None:
        failing = False
        while not self._stopped.wait(self.heartbeat_interval):
            try:
                self.heartbeat()
                self.replay()
            except Exception as error:  # the thread must outlive a database outage
                if not failing:
                    _log.warning("otel-compaction: heartbeat failed (will retry): %s", error)
                failing = True
            else:
                if failing:
                    _log.warning("otel-compaction: heartbeat restored for %s", self._owner)
                failing = False

    def close(self) -> None:
        """Stop the heartbeat, mark this worker shut down (what it still owns is orphaned
        at once: nothing here will resolve it) and close the connections; idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._heartbeat.join(timeout=self.heartbeat_interval + 5)
        try:
            with self._pool.connection("marking the worker shut down") as conn:
                conn.execute(
                    f"UPDATE {_WORKERS} SET heartbeat_at = NULL WHERE owner = %s", (self._owner,)
                )
        except StoreError as error:
            _log.warning("otel-compaction: %s", error)
        with contextlib.suppress(StoreError):
            self.replay()
        if self._outbox is not None:
            if len(self._outbox):
                _log.warning(
                    "otel-compaction: %d ledger writes wait in %s; the next worker on this "
                    "host replays them",
                    len(self._outbox),
                    self._outbox.path,
                )
            for outbox in (*self._adopted, self._outbox):
                outbox.close()
        self._pool.close()

    # -- the ledger's API ------------------------------------------------------------------

    def open(
        self,
        conversation_id: str | None,
        kind: ObligationKind,
        obligation_id: str,
        *,
        name: str = "",
    ) -> Obligation:
        """Record a new open obligation owned by this worker and return it; when one of this
        conversation, kind and id is already open (a retried event), return that one and
        change nothing."""
        conversation_id = conversation_id or DEFAULT_CONVERSATION
        opened_at = time.time_ns()
        write = {"op": "open", "kind": kind, "id": obligation_id, "name": name,
                 "owner": self._owner, "at": opened_at}  # fmt: skip
        if self._queued(conversation_id, write):
            record = Obligation(kind, obligation_id, name, conversation_id, -1, opened_at)
        else:
            try:
                with self._pool.connection("opening an obligation") as conn:
                    record, new = _open(conn, conversation_id, write)
            except StoreError as error:
                self._queue(conversation_id, write, error)
                record = Obligation(kind, obligation_id, name, conversation_id, -1, opened_at)
            else:
                if not new:
                    return record
        self._kinds.add(kind)
        if self._change_listeners:
            self._notify(record, None, ())
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
        """Resolve the open obligation with this id, whichever worker owns it; None (and
        nothing changed) when none is open: already resolved, by a retried event or by
        another worker."""
        conversation_id = conversation_id or DEFAULT_CONVERSATION
        at = time.time_ns()
        write = {"op": "resolve", "kind": kind, "id": obligation_id, "status": status,
                 "error_type": error_type, "owner": self._owner, "at": at}  # fmt: skip
        row: Sequence[Any] | None
        # Queued, the resolution is recorded (the outbox replays it) though the record it
        # resolves is out of reach: what is returned is what will be, with no age.
        queued = Obligation(
            kind, obligation_id, "", conversation_id, -1, at, status, at, error_type,
        )  # fmt: skip
        if self._queued(conversation_id, write):
            return queued
        try:
            with self._pool.connection("resolving an obligation") as conn:
                row = _resolve(conn, conversation_id, write)
        except StoreError as error:
            self._queue(conversation_id, write, error)
            return queued
        if row is None:
            return None
        after = _record(row)
        if self._change_listeners or self._resolve_listeners:
            before = Obligation(
                after.kind,
                after.id,
                after.name,
                after.conversation_id,
                after.sequence,
                after.opened_at_ns,
            )
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
        """Give the open obligation `old_id` its real id; None when it is not open, or when
        `new_id` is open already (then `old_id` stays as it is)."""
        conversation_id = conversation_id or DEFAULT_CONVERSATION
        write = {"op": "rekey", "kind": kind, "id": old_id, "new_id": new_id}
        if self._queued(conversation_id, write):
            return None
        try:
            with self._pool.connection("renaming an obligation") as conn:
                row = _rekey(conn, conversation_id, write)
        except StoreError as error:
            self._queue(conversation_id, write, error)
            return None
        return None if row is None else _record(row)

    def snapshot(self, conversation_id: str | None) -> LedgerSnapshot:
        """The conversation's records across the fleet (every open one, and the newest
        resolved ones up to `max_records_per_conversation`), with the orphaned ones."""
        conversation_id = conversation_id or DEFAULT_CONVERSATION
        self.replay()
        with self._pool.connection("reading a conversation") as conn:
            rows = (
                conn.cursor(binary=True)
                .execute(
                    _SNAPSHOT, {"me": self._owner, "c": conversation_id, "n": self._max_records}
                )
                .fetchall()
            )
        records: list[Obligation] = []
        orphans: list[Orphan] = []
        for row in rows:
            record = Obligation(*row[:9])
            records.append(record)
            silent = row[10]
            if silent is not None and silent > self.heartbeat_timeout:
                orphan = Orphan(record, row[9], None if silent == float("inf") else silent)
                orphans.append(orphan)
                self._report(orphan)
        return LedgerSnapshot(
            conversation_id, tuple(records), tuple(orphans), self._unavailable(conversation_id)
        )

    # -- the outbox ------------------------------------------------------------------------

    @property
    def outbox(self) -> Outbox | None:
        """Where writes wait while the store is unreachable (None: switched off)."""
        return self._outbox

    def _queued(self, conversation_id: str, write: dict[str, Any]) -> bool:
        """Queue `write` behind the writes already waiting (their order is the host's), and
        say so; False when nothing waits and the write may go to the store now."""
        if self._outbox is None or not len(self._outbox) or self.replay():
            return False
        self._append(conversation_id, write)
        return True

    def _queue(self, conversation_id: str, write: dict[str, Any], error: StoreError) -> None:
        """Queue `write`, which the store refused with `error`, when that is an outage."""
        if self._outbox is None or not _outage(error):
            raise error
        if not len(self._outbox):
            _log.warning(
                "otel-compaction: %s; ledger writes wait in %s until it is back",
                error,
                self._outbox.path,
            )
        self._append(conversation_id, write)

    def _append(self, conversation_id: str, write: dict[str, Any]) -> None:
        assert self._outbox is not None
        if not self._outbox.append(conversation_id, write):
            raise StoreError(
                f"{self._pool.source}={self.url!r}: a ledger write was not recorded: the store "
                f"is unreachable and the outbox {self._outbox.path} is full "
                f"({self._outbox.limit} writes); conversation {conversation_id!r} is unknown "
                "until forgotten"
            )

    def replay(self) -> bool:
        """Apply the writes waiting in the outbox, oldest first, each exactly once; True
        when none waits any more (False: the store is still unreachable)."""
        if self._outbox is None:
            return True
        with self._replaying:
            for outbox in (*self._adopted, self._outbox):
                for write in outbox.pending():
                    try:
                        with self._pool.connection("replaying the outbox") as conn:
                            _replay(conn, write.write_id, write.conversation_id, write.body)
                    except StoreError as error:
                        if not _outage(error):
                            raise
                        return False
                    outbox.done(write)
                if outbox is not self._outbox:
                    outbox.close()
                    self._adopted.remove(outbox)
                    _log.warning("otel-compaction: replayed the outbox left at %s", outbox.path)
        return True

    def _unavailable(self, conversation_id: str) -> str | None:
        """Why the store's records of the conversation are not the whole truth, or None."""
        if self._outbox is None:
            return None
        lost = self._outbox.unknown(conversation_id)
        if lost is not None:
            return f"ledger writes of this conversation were lost: {lost}"
        waiting = self._outbox.waiting(conversation_id) + sum(
            o.waiting(conversation_id) for o in self._adopted
        )
        if waiting:
            return (
                f"{waiting} ledger writes of this conversation wait in the outbox "
                f"{self._outbox.path} for {self.url} to come back"
            )
        return None

    def _report(self, orphan: Orphan) -> None:
        o = orphan.obligation
        key = (o.conversation_id, o.kind, o.id, o.sequence)
        if key not in self._reported:
            if len(self._reported) > 10 * self._max_open:
                self._reported.clear()
            self._reported.add(key)
            _log.warning("otel-compaction: %s", orphan.describe())

    def open_obligations(self, conversation_id: str | None = None) -> tuple[Obligation, ...]:
        """Open obligations of one conversation, or of every conversation of the store."""
        query = f"SELECT {_RECORD_COLUMNS} FROM {_OBLIGATIONS} WHERE status IS NULL"
        params: tuple[str, ...] = ()
        if conversation_id is not None:
            query += " AND conversation_id = %s"
            params = (conversation_id,)
        with self._pool.connection("listing open obligations") as conn:
            rows = conn.execute(query + " ORDER BY sequence", params).fetchall()
        return tuple(_record(row) for row in rows)

    def oldest_open(self) -> Obligation | None:
        """The open obligation this worker owns that was opened first."""
        with self._pool.connection("reading the oldest open obligation") as conn:
            row = conn.execute(
                f"SELECT {_RECORD_COLUMNS} FROM {_OBLIGATIONS} WHERE owner = %s "
                "AND status IS NULL ORDER BY sequence LIMIT 1",
                (self._owner,),
            ).fetchone()
        return None if row is None else _record(row)

    def open_counts(self) -> dict[ObligationKind, int]:
        """How many obligations of each kind this worker owns still open (every kind it
        ever opened is listed, with 0 once none is open): summed over workers, the fleet's."""
        with self._pool.connection("counting open obligations") as conn:
            rows = conn.execute(
                f"SELECT kind, count(*) FROM {_OBLIGATIONS} WHERE owner = %s "
                "AND status IS NULL GROUP BY kind",
                (self._owner,),
            ).fetchall()
        counts: dict[ObligationKind, int] = dict.fromkeys(self._kinds, 0)
        counts.update({kind: int(count) for kind, count in rows})
        return counts

    def orphaned_counts(self) -> dict[ObligationKind, int]:
        """Orphaned obligations by kind across the store (the same number in every worker)."""
        with self._pool.connection("counting orphaned obligations") as conn:
            rows = conn.execute(
                f"SELECT o.kind, count(*) FROM {_OBLIGATIONS} o LEFT JOIN {_WORKERS} w "
                "ON w.owner = o.owner WHERE o.status IS NULL AND (w.heartbeat_at IS NULL "
                "OR w.heartbeat_at < now() - make_interval(secs => %s)) GROUP BY o.kind",
                (self.heartbeat_timeout,),
            ).fetchall()
        return {kind: int(count) for kind, count in rows}

    def forget(self, conversation_id: str) -> None:
        """Drop a finished conversation's records (for every worker), and its mark of
        writes lost in a full outbox."""
        if self._outbox is not None:
            self._outbox.forget(conversation_id)
        with self._pool.connection("forgetting a conversation") as conn, conn.transaction():
            for table in (_OBLIGATIONS, _COMPACTIONS):
                conn.execute(f"DELETE FROM {table} WHERE conversation_id = %s", (conversation_id,))

    def conversations(self) -> tuple[str, ...]:
        """Ids of the conversations the store holds."""
        with self._pool.connection("listing conversations") as conn:
            rows = conn.execute(
                f"SELECT DISTINCT conversation_id FROM {_OBLIGATIONS} ORDER BY 1"
            ).fetchall()
        return tuple(row[0] for row in rows)

    @contextmanager
    def decision_lock(self, conversation_id: str | None) -> Iterator[DecisionTurn]:
        """Hold the conversation's advisory lock, across every worker of the store, while a
        compaction is decided and applied; re-entrant in one thread. What the turn records
        is committed when the block ends without an error."""
        conversation_id = conversation_id or DEFAULT_CONVERSATION
        held: dict[str, DecisionTurn] = self._local.__dict__.setdefault("held", {})
        if conversation_id in held:
            yield held[conversation_id]
            return
        with self._pool.connection("locking a conversation") as conn:
            # BEGIN and the lock in one round trip (the simple query protocol).
            conn.execute(
                sql.SQL("BEGIN; SELECT pg_advisory_xact_lock({}, hashtext({}))").format(
                    sql.Literal(_LOCK_NAMESPACE), sql.Literal(conversation_id)
                )
            )
            turn = _PostgresTurn(conn, conversation_id, self._owner)
            held[conversation_id] = turn
            try:
                yield turn
            except BaseException:
                if not conn.closed:
                    with contextlib.suppress(psycopg.Error):  # the error in hand tells more
                        conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")
            finally:
                del held[conversation_id]


class PostgresArchive(Archive):
    """The archive of compacted spans in PostgreSQL, shared by every worker that opens the
    same URL; the same handles, bytes and checks as the SQLite `Archive`."""

    def __init__(
        self,
        url: str,
        *,
        readonly: bool = False,
        source: str = "the URL given",
        create: bool = True,
        timeout: float = 30.0,
    ) -> None:
        """Connect and create the table if needed (not when `readonly`).

        Args:
            url: the libpq URL of the database.
            readonly: for inspection: nothing is created, and the writing methods raise.
            source: where the URL came from, for error messages (a variable's name).
            create: accepted for the SQLite archive's signature (the table is always made
                unless `readonly`).
            timeout: accepted for the SQLite archive's signature.

        Raises:
            StoreError: the database cannot be reached or its table created.
            ArchiveError: `readonly`, and the database holds no archive.
        """
        del create, timeout
        self._pool = _Pool(url, source)
        self._readonly = readonly
        self._path = Path(os.devnull)
        self._closed = False
        if readonly:
            with self._pool.connection("opening the archive") as conn:
                row = conn.execute("SELECT to_regclass(%s)", (_SPANS,)).fetchone()
            if row is None or row[0] is None:  # as SQLite's "no archive at PATH"
                self._pool.close()
                raise ArchiveError(
                    f"no archive in {self.location} (no table {_SPANS}: nothing was archived "
                    "there yet)",
                    path=self.location,
                )
        else:
            self._pool.create_schema(_ARCHIVE_SCHEMA)

    @property
    def path(self) -> Path:
        """A PostgreSQL archive has no file: `ArchiveError` (see `location`)."""
        raise ArchiveError(
            f"archive {self.location} is in PostgreSQL and has no file", path=self.location
        )

    @property
    def location(self) -> str:
        """The database's URL, its password masked."""
        return redact(self._pool.url)

    _table = _SPANS
    _side_effects = _SIDE_EFFECTS
    _mark = "%s"
    _order = "stored"

    def _rows(self, doing: str, query: str, params: tuple[Any, ...]) -> list[Sequence[Any]]:
        """The rows of a read-only `query`, for `doing` (named in errors)."""
        with self._query(doing) as conn:
            return list(conn.execute(query, params).fetchall())

    @contextmanager
    def _query(self, doing: str) -> Iterator[Connection]:
        if self._closed:
            raise ArchiveError(f"archive {self.location} is closed", path=self.location)
        try:
            with self._pool.connection(doing) as conn:
                yield conn
        except StoreError as error:
            raise ArchiveError(str(error), path=self.location) from error.__cause__

    def _store(self, row: tuple[Any, ...]) -> Sequence[Any] | None:
        """Insert `row` unless its handle is there, from any worker; the metadata row now
        under its handle."""
        with self._query("storing a span") as conn:
            conn.execute(
                f"INSERT INTO {_SPANS} ({_SPAN_COLUMNS}) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (handle) DO NOTHING",
                row,
            )
            return conn.execute(
                f"SELECT {_META_COLUMNS} FROM {_SPANS} WHERE handle = %s", (row[0],)
            ).fetchone()

    def _write_many(self, doing: str, query: str, rows: Sequence[tuple[Any, ...]]) -> None:
        """Run a writing `query` for each of `rows`, in one transaction, from any worker."""
        with self._query(doing) as conn, conn.transaction(), conn.cursor() as cursor:
            cursor.executemany(query, rows)

    def attach_summary(self, handle: str, summary: str) -> ArchivedSpan:
        """Record (or replace) the summary that replaced an archived span; return the record."""
        self._writable()
        with self._query("attaching a summary") as conn:
            row = conn.execute(
                f"UPDATE {_SPANS} SET summary = %s WHERE handle = %s RETURNING {_META_COLUMNS}",
                (summary, handle),
            ).fetchone()
        if row is None:
            raise self._unknown(handle)
        return self._record(row)

    def close(self) -> None:
        """Close the connections; later calls raise `ArchiveError`. Closing twice is
        harmless."""
        self._closed = True
        self._pool.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"PostgresArchive({self.location!r}, {state})"
