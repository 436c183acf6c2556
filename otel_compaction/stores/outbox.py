"""A local, bounded, crash-safe queue of the ledger writes a shared store could not take.

When PostgreSQL is unreachable or restarting, a `PostgresLedger` does not drop what the host
tells it (a call opened, a result recorded): it appends the write to its outbox, a SQLite file
on local disk (``synchronous=FULL``: a write is on disk before the host's call returns), and
replays the outbox in order once the store answers again. Every write carries an id of its
own, and the store remembers which ids it applied in the same transaction as the write, so a
replay interrupted by a crash (of the worker or of the database) applies each write exactly
once.

Bounds and what the host is told:

* While a conversation has writes waiting here, its obligations in the store are not the
  whole truth: the ledger's snapshot of it says so (`LedgerSnapshot.unavailable`), and the
  gate refuses to compact it with that reason instead of compacting blind.
* When the outbox is full (`limit` writes), a further write is not recorded anywhere: the
  call that made it raises `StoreError` saying so, and its conversation is marked *unknown*
  (in this file, so a restart keeps it) until `PostgresLedger.forget` clears it.
* A worker that died with writes waiting leaves its outbox file behind; the next ledger on
  the same host and URL adopts it (an exclusive lock tells a live worker's file from a dead
  one's) and replays it under the dead worker's identity, so its calls are orphaned, not lost.

Files are mode 0600 in a 0700 directory: a write holds call ids and tool names.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = ["DEFAULT_OUTBOX_LIMIT", "OUTBOX_DIR_ENV", "Outbox", "OutboxWrite", "default_outbox_dir"]

OUTBOX_DIR_ENV: Final = "OTEL_COMPACTION_OUTBOX_DIR"
"""The directory of the outbox files (default: ``$XDG_STATE_HOME/otel-compaction/outbox``)."""

DEFAULT_OUTBOX_LIMIT: Final = 100_000

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS writes (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    write_id TEXT NOT NULL UNIQUE,
    conversation_id TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS unknown (conversation_id TEXT PRIMARY KEY, reason TEXT NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class OutboxWrite:
    """One write waiting for the store: its id, its conversation and what to apply."""

    position: int
    write_id: str
    conversation_id: str
    body: dict[str, Any]


def default_outbox_dir() -> Path:
    """``$OTEL_COMPACTION_OUTBOX_DIR``, else ``$XDG_STATE_HOME/otel-compaction/outbox`` (with
    ``~/.local/state`` for an unset ``XDG_STATE_HOME``)."""
    configured = os.environ.get(OUTBOX_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "otel-compaction" / "outbox"


def _store_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]


class Outbox:
    """The outbox of one worker (`owner`) for one store (`url`), in `directory`.

    Example:
        >>> import tempfile
        >>> box = Outbox(tempfile.mkdtemp(), "postgresql://db/agents", "worker-1")
        >>> box.append("conv-1", {"op": "open", "id": "call_1"})
        True
        >>> [w.body["id"] for w in box.pending()], box.waiting("conv-1")
        (['call_1'], 1)
        >>> box.close()
    """

    def __init__(
        self,
        directory: str | Path,
        url: str,
        owner: str,
        *,
        limit: int = DEFAULT_OUTBOX_LIMIT,
        path: Path | None = None,
    ) -> None:
        """Open (or create) the file of `owner`'s writes to `url` and hold its lock.

        Raises:
            OSError: the directory cannot be made, or the file is another live worker's.
        """
        if limit < 1:
            raise ValueError(f"the outbox limit must be at least 1, got {limit}")
        self.directory = Path(directory)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._prefix = _store_key(url)
        self.path = path or self.directory / f"{self._prefix}-{_safe(owner)}.sqlite"
        self.owner = owner
        self.limit = limit
        self._lock_file = _lock(self.path)
        self._mutex = threading.Lock()
        existed = self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        if not existed:
            os.chmod(self.path, 0o600)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._count = int(self._db.execute("SELECT count(*) FROM writes").fetchone()[0])

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return f"Outbox({str(self.path)!r}, waiting={self._count})"

    def append(self, conversation_id: str, body: dict[str, Any]) -> bool:
        """Queue one write (durably, before returning); False when the outbox is full, and
        then the conversation is marked unknown."""
        with self._mutex:
            if self._count >= self.limit:
                self._db.execute(
                    "INSERT OR IGNORE INTO unknown VALUES (?, ?)",
                    (conversation_id, f"the outbox {self.path} was full ({self.limit} writes)"),
                )
                return False
            self._db.execute(
                "INSERT INTO writes (write_id, conversation_id, body) VALUES (?, ?, ?)",
                (uuid.uuid4().hex, conversation_id, json.dumps(body, separators=(",", ":"))),
            )
            self._count += 1
            return True

    def pending(self) -> list[OutboxWrite]:
        """Every waiting write, oldest first."""
        with self._mutex:
            rows = self._db.execute(
                "SELECT position, write_id, conversation_id, body FROM writes ORDER BY position"
            ).fetchall()
        return [OutboxWrite(p, w, c, json.loads(b)) for p, w, c, b in rows]

    def done(self, write: OutboxWrite) -> None:
        """Remove a write the store has applied."""
        with self._mutex:
            deleted = self._db.execute(
                "DELETE FROM writes WHERE position = ?", (write.position,)
            ).rowcount
            self._count -= deleted

    def waiting(self, conversation_id: str) -> int:
        """How many writes of `conversation_id` wait here."""
        with self._mutex:
            row = self._db.execute(
                "SELECT count(*) FROM writes WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()
        return int(row[0])

    def unknown(self, conversation_id: str) -> str | None:
        """Why `conversation_id`'s obligations are unknown (a write was lost), or None."""
        with self._mutex:
            row = self._db.execute(
                "SELECT reason FROM unknown WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def forget(self, conversation_id: str) -> None:
        """Clear the conversation's unknown mark (its waiting writes stay)."""
        with self._mutex:
            self._db.execute("DELETE FROM unknown WHERE conversation_id = ?", (conversation_id,))

    def orphaned_files(self) -> Iterator[Path]:
        """The outbox files of the same store left by workers that are no longer running."""
        for path in sorted(self.directory.glob(f"{self._prefix}-*.sqlite")):
            if path == self.path:
                continue
            try:
                held = _lock(path)
            except OSError:
                continue  # a live worker's
            held.close()
            yield path

    def close(self) -> None:
        """Close the file and release its lock; an empty outbox's file is removed."""
        with self._mutex:
            empty = (
                self._count == 0
                and not self._db.execute("SELECT 1 FROM unknown LIMIT 1").fetchone()
            )
            self._db.close()
            if empty:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            self._lock_file.close()


class _Held:
    """An exclusive lock of an outbox file, held until `close`."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = -1


def _lock(path: Path) -> _Held:
    """Take the exclusive lock of `path`'s lock file without waiting; OSError when another
    process holds it."""
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return _Held(fd)
