"""Reversible compaction: a SQLite store that keeps compacted spans verbatim.

SQLite is the default store; `Archive.from_url` (or ``OTEL_COMPACTION_ARCHIVE_URL``) selects
another with the same API and guarantees: PostgreSQL for a fleet of workers
(`otel_compaction.stores.postgres.PostgresArchive`), where a span archived by one worker is
recalled byte for byte by any other.

A span that is summarized away stays addressable: `Archive.put` stores its messages and
returns an `ArchivedSpan` whose ``handle`` (``arc_`` and 24 hex digits) the summary can cite;
`Archive.recall` gives the messages back and `make_recall_tool` lets the agent do the same.

Guarantees:

* **Exact.** Messages are serialized once, as compact JSON (``ensure_ascii=False``, key order
  kept) encoded as UTF-8, and those bytes are what is stored: `Archive.recall_bytes` returns
  them byte for byte and `Archive.recall` returns messages equal to the input (floats
  included; tuples come back as lists). Raw bytes may be stored instead, as they are. Input
  that JSON cannot carry exactly (non-string keys, NaN or infinity, other types) is refused.
* **Content-addressed.** The handle is the first 24 hex digits of the SHA-256 of the stored
  bytes, so storing the same span twice returns the same handle and keeps one row (with the
  metadata of the first store). Every read checks the full SHA-256; a mismatch is an error.
* **Atomic and durable.** Each store is one transaction in WAL mode with full sync: a crash
  leaves either the whole row or nothing.
* **Private.** A new database file is created with mode 0600 before SQLite opens it (SQLite
  gives its ``-wal`` and ``-shm`` files the same mode); an existing archive that grants group
  or other users access has that access taken away once it is known to be an archive.
* **Thread-safe.** One connection, serialized by a lock; several processes may share a file,
  and several may create the same new file at once: the schema is created under
  ``BEGIN IMMEDIATE`` (the busy timeout applies) and the switch to WAL, which SQLite does not
  wait for, is retried until the timeout and accepted when another process made it.
* **Inspection never writes.** ``Archive(path, readonly=True)`` opens the file read-only
  (``mode=ro``): it creates no file and no schema, changes no journal mode or permission, and
  reads a write-protected file. A WAL-mode file with no ``-wal`` beside it (no writer has it
  open) is read as immutable, so that reading leaves no ``-wal`` or ``-shm`` behind; should a
  writer change the file during a read, the read is made again through SQLite's locks.

Every failure (unknown handle, corrupt or foreign file, closed archive) raises `ArchiveError`
naming the database path.

Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "archive.sqlite3")
    >>> with Archive(path) as archive:
    ...     span = archive.put([{"role": "user", "content": "héllo"}], start=1)
    ...     archive.recall(span.handle)
    [{'role': 'user', 'content': 'héllo'}]
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

from otel_compaction.errors import ArchiveError

if TYPE_CHECKING:
    from otel_compaction.reissue import SideEffectRecord

__all__ = [
    "ARCHIVE_ENV",
    "DEFAULT_ARCHIVE_PATH",
    "RECALL_TOOL_NAME",
    "Archive",
    "ArchiveError",
    "ArchivedSpan",
    "canonical_bytes",
    "default_archive_path",
    "handle_for",
    "make_recall_tool",
    "recall_tool_definition",
]

_log = logging.getLogger(__name__)

ARCHIVE_ENV: Final = "OTEL_COMPACTION_ARCHIVE"
"""Environment variable naming the archive database used when no path is given."""

DEFAULT_ARCHIVE_PATH: Final = "otel-compaction-archive.sqlite3"
"""Archive database used when no path is given and `ARCHIVE_ENV` is unset (current directory)."""

RECALL_TOOL_NAME: Final = "recall_archived_span"
"""Name of the tool `make_recall_tool` builds and `recall_tool_definition` describes."""

HANDLE_PREFIX: Final = "arc_"
_HANDLE_HEX_DIGITS: Final = 24
_HANDLE_RE: Final = re.compile(rf"{HANDLE_PREFIX}[0-9a-f]{{{_HANDLE_HEX_DIGITS}}}")

# PRAGMA application_id marks a database as an archive ("otca"); user_version is the schema.
_APPLICATION_ID: Final = 0x6F746361
_SCHEMA_VERSION: Final = 1
_TABLE: Final = "archived_spans"
_SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    handle          TEXT PRIMARY KEY,
    sha256          TEXT NOT NULL,
    conversation_id TEXT,
    span_start      INTEGER NOT NULL,
    span_end        INTEGER NOT NULL,
    message_count   INTEGER NOT NULL,
    size            INTEGER NOT NULL,
    created_at      REAL NOT NULL,
    policy          TEXT,
    summary         TEXT,
    data            BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS {_TABLE}_conversation ON {_TABLE} (conversation_id, span_start);
"""
_SIDE_EFFECTS: Final = "side_effects"
_SIDE_EFFECT_SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS {_SIDE_EFFECTS} (
    conversation_id TEXT NOT NULL,
    sequence        INTEGER NOT NULL,
    call_id         TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    scope           TEXT NOT NULL,
    kind            TEXT NOT NULL,
    tool            TEXT NOT NULL,
    target          TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    result          TEXT NOT NULL,
    completed_at    REAL,
    in_context      INTEGER NOT NULL,
    asked           INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (conversation_id, sequence, call_id)
)
"""
"""The side-effect ledger (`otel_compaction.reissue`), beside the spans it outlives."""
_SIDE_EFFECT_COLUMNS: Final = (
    "conversation_id, sequence, call_id, fingerprint, scope, kind, tool, target, outcome, "
    "result, completed_at, in_context, asked"
)
_META_COLUMNS: Final = (
    "handle, sha256, conversation_id, span_start, span_end, message_count, size, "
    "created_at, policy, summary"
)
_SPAN_COLUMNS: Final = _META_COLUMNS + ", data"
_FILE_MODE: Final = 0o600
_COLUMN_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "handle": (str,),
    "sha256": (str,),
    "conversation_id": (str, type(None)),
    "span_start": (int,),
    "span_end": (int,),
    "message_count": (int,),
    "size": (int,),
    "created_at": (float, int),
    "policy": (str, type(None)),
    "summary": (str, type(None)),
}
_TYPE_NAMES: Final[dict[type, str]] = {
    str: "text",
    int: "an integer",
    float: "a number",
    type(None): "NULL",
}
# Bytes 18 and 19 of an SQLite header are 2 in WAL mode (1 in rollback-journal mode).
_WAL_HEADER_OFFSET: Final = 18
_WAL_HEADER_VERSION: Final = 2
_RETRY_FIRST_DELAY: Final = 0.002
_RETRY_MAX_DELAY: Final = 0.05

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ArchivedSpan:
    """One archived span: where it came from and how to address it (the messages stay stored).

    ``start`` and ``end`` are the span's message indices in its transcript, ``end`` exclusive;
    ``size`` is the length in bytes of the stored serialization and ``sha256`` its full digest.
    ``created_at`` is a Unix timestamp in seconds.
    """

    handle: str
    start: int
    end: int
    count: int
    size: int
    sha256: str
    created_at: float
    conversation_id: str | None = None
    policy: str | None = None
    summary: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict (the form ``archive list --format json`` prints)."""
        return {
            "handle": self.handle,
            "span": [self.start, self.end],
            "count": self.count,
            "size": self.size,
            "sha256": self.sha256,
            "created_at": self.created_at,
            "conversation_id": self.conversation_id,
            "policy": self.policy,
            "summary": self.summary,
        }


def default_archive_path() -> Path:
    """The archive path from ``OTEL_COMPACTION_ARCHIVE``, else `DEFAULT_ARCHIVE_PATH`."""
    return Path(os.environ.get(ARCHIVE_ENV) or DEFAULT_ARCHIVE_PATH)


def canonical_bytes(messages: Sequence[Mapping[str, Any]], *, from_json: bool = False) -> bytes:
    """Serialize messages the way the archive stores them: compact JSON, UTF-8, keys in order.

    Raises `ArchiveError` naming the offending position when a value would not come back
    equal from JSON: a non-string dict key, NaN or infinity, or a type JSON does not have.
    `from_json` says the messages were decoded from JSON (a session log), so no key can be
    anything but a string and no container can hold itself: the walk that names a position
    only runs when serializing fails, and the serializer keeps no mark per container to find
    cycles.
    """
    if isinstance(messages, (str, bytes, bytearray, Mapping)) or not isinstance(messages, Sequence):
        raise ArchiveError(f"expected a list of messages, got {type(messages).__name__}")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ArchiveError(
                f"messages[{index}]: expected a message object, got {type(message).__name__}"
            )
    if not from_json:
        _check_json(messages)
    try:
        text = json.dumps(
            list(messages),
            ensure_ascii=False,
            separators=(",", ":"),
            allow_nan=False,
            check_circular=not from_json,
            default=_mapping_as_dict,
        )
    except (TypeError, ValueError, RecursionError) as exc:
        if from_json:
            _check_json(messages)  # names the position
        raise ArchiveError(f"messages cannot be serialized as JSON: {exc}") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ArchiveError(
            f"messages hold a lone surrogate {text[exc.start]!r}, which is not valid Unicode"
        ) from None


def handle_for(data: bytes) -> str:
    """The handle of stored bytes: ``arc_`` and the first 24 hex digits of their SHA-256."""
    return HANDLE_PREFIX + hashlib.sha256(data).hexdigest()[:_HANDLE_HEX_DIGITS]


def _mapping_as_dict(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_Location = tuple[object, "_Location | None"]
"""A position in the messages: the key or index, and the location of its container."""


def _where(location: _Location | None) -> str:
    keys: list[object] = []
    while location is not None:
        key, location = location
        keys.append(key)
    return "messages" + "".join(f"[{key!r}]" for key in reversed(keys))


def _check_json(messages: Sequence[Any]) -> None:
    """Walk the messages (iteratively) and refuse anything JSON would not give back equal.

    Positions are built only for the error message; containers met twice (shared, or a
    cycle, which serialization then reports) are walked once.
    """
    stack: list[tuple[Any, _Location]] = [(m, (i, None)) for i, m in enumerate(messages)]
    seen: set[int] = set()
    while stack:
        value, location = stack.pop()
        if value is None or isinstance(value, (str, bool, int)):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ArchiveError(f"{_where(location)}: {value!r} has no JSON representation")
            continue
        if id(value) in seen:
            continue
        if isinstance(value, Mapping):
            seen.add(id(value))
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ArchiveError(
                        f"{_where(location)}: key {key!r} ({type(key).__name__}) is not a "
                        "string, and JSON keys are strings"
                    )
                stack.append((item, (key, location)))
        elif isinstance(value, (list, tuple)):
            seen.add(id(value))
            stack.extend((item, (i, location)) for i, item in enumerate(value))
        else:
            raise ArchiveError(f"{_where(location)}: a {type(value).__name__} is not JSON data")


def _busy(exc: sqlite3.OperationalError) -> bool:
    """SQLite's "database is locked" (SQLITE_BUSY); Python before 3.11 gives only the text."""
    return str(exc).startswith(("database is locked", "database is busy"))


def _in_wal_mode(path: Path) -> bool:
    """Whether the file's SQLite header says WAL mode (a short or foreign file says no)."""
    try:
        with path.open("rb") as file:
            header = file.read(_WAL_HEADER_OFFSET + 2)
    except OSError:
        return False
    return header.startswith(b"SQLite format 3\x00") and header[_WAL_HEADER_OFFSET:] == bytes(
        (_WAL_HEADER_VERSION, _WAL_HEADER_VERSION)
    )


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _decode(data: bytes) -> list[dict[str, Any]]:
    """Parse stored or given bytes: a non-empty JSON list of objects, in strict JSON."""
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise ArchiveError(f"bytes are not UTF-8 (at byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise ArchiveError(f"bytes are not a JSON list of messages: {exc}") from None
    if not isinstance(value, list):
        raise ArchiveError(f"bytes are {_json_kind(value)}, not a list of messages")
    for index, message in enumerate(value):
        if not isinstance(message, dict):
            raise ArchiveError(f"item {index} is {_json_kind(message)}, not a message object")
    if not value:
        raise ArchiveError("bytes are an empty list: no messages")
    return value


def _json_kind(value: object) -> str:
    if value is None or isinstance(value, bool):
        return f"JSON {json.dumps(value)}"
    kinds = {dict: "object", list: "list", str: "string", int: "number", float: "number"}
    kind = kinds.get(type(value), type(value).__name__)
    return f"a JSON {kind}"


class Archive:
    """The archive of compacted spans in one SQLite database file.

    Args:
        path: the database file; `default_archive_path()` when None.
        create: create the file when it does not exist; when False, a missing file is an
            `ArchiveError`.
        readonly: open for inspection only (``archive list`` and ``archive show``): nothing
            is created or changed, a missing file, an empty file or a foreign database is an
            `ArchiveError`, and the writing methods raise it too. Implies ``create=False``.
        timeout: seconds to wait for another process's write lock.

    Use it as a context manager, or call `close`. Methods may be called from any thread.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        readonly: bool = False,
        timeout: float = 30.0,
    ) -> None:
        self._path = Path(path) if path is not None else default_archive_path()
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._timeout = timeout
        self._readonly = readonly
        self._immutable: tuple[int, int, int] | None = None
        """While the file is read as immutable: its (inode, size, mtime) when opened."""
        self._prepare_file(create and not readonly)
        if readonly:
            self._conn = self._open_readonly()
            return
        conn = self._connect(str(self._path), uri=False)
        try:
            self._initialise(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._restrict_permissions()

    # -- opening ---------------------------------------------------------------------------

    def _prepare_file(self, create: bool) -> None:
        """Create a missing file with mode 0600 before SQLite does it with the umask's mode."""
        path = self._path
        try:
            info = path.stat()
        except FileNotFoundError:
            if not create:
                raise ArchiveError(f"no archive at {path}", path=path) from None
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
            except FileExistsError:  # another process created it meanwhile
                return
            except OSError as exc:
                raise ArchiveError(
                    f"cannot create archive {path}: {exc.strerror}", path=path
                ) from None
            try:
                if hasattr(os, "fchmod"):
                    os.fchmod(fd, _FILE_MODE)  # exactly 0600, whatever the umask
            finally:
                os.close(fd)
            return
        except OSError as exc:
            raise ArchiveError(f"cannot open archive {path}: {exc.strerror}", path=path) from None
        if not stat.S_ISREG(info.st_mode):
            raise ArchiveError(f"archive {path} is not a regular file", path=path)

    def _restrict_permissions(self) -> None:
        """Take group and other access away from an archive (and its WAL files) that has it."""
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{self._path}{suffix}")
            try:
                mode = stat.S_IMODE(path.stat().st_mode)
                if mode & 0o077:
                    path.chmod(mode & 0o700)
                    _log.info(
                        "archive file %s: mode %03o restricted to %03o", path, mode, mode & 0o700
                    )
            except OSError as exc:  # not ours to change, or gone: leave it
                _log.debug("archive file %s: permissions left as they are: %s", path, exc)

    def _connect(self, target: str, *, uri: bool) -> sqlite3.Connection:
        try:
            return sqlite3.connect(
                target,
                timeout=self._timeout,
                isolation_level=None,
                check_same_thread=False,
                uri=uri,
            )
        except sqlite3.Error as exc:
            raise ArchiveError(
                f"cannot open archive {self.location}: {exc}", path=self.location
            ) from None

    def _initialise(self, conn: sqlite3.Connection) -> None:
        """Check the file is an archive (or empty) and create the schema, then switch to WAL.

        The schema comes first, under ``BEGIN IMMEDIATE``, so a foreign database is refused
        before anything is changed and processes creating the same archive wait for each
        other (the busy timeout applies to it). SQLite returns "database is locked" for a
        journal-mode switch at once, without waiting, so the switch is retried (with the
        schema check) until the timeout; a file another process switched already is taken
        as it is.
        """
        deadline = time.monotonic() + self._timeout
        delay = _RETRY_FIRST_DELAY
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                conn.execute(f"PRAGMA busy_timeout={int(remaining * 1000)}")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    self._check_or_create_schema(conn)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
                if mode != "wal":
                    mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
                if mode != "wal":
                    raise ArchiveError(
                        f"archive {self.location}: cannot use WAL journal mode (got {mode})",
                        path=self.location,
                    )
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
                return
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or time.monotonic() >= deadline:
                    raise self._unusable(exc) from None
            except sqlite3.DatabaseError as exc:
                raise self._unusable(exc) from None
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, _RETRY_MAX_DELAY)

    def _unusable(self, exc: sqlite3.Error) -> ArchiveError:
        return ArchiveError(f"{self._path} is not a usable archive: {exc}", path=self.location)

    def _open_readonly(self) -> sqlite3.Connection:
        """A read-only connection to an existing archive, checked before any read."""
        wal = Path(f"{self._path}-wal")
        immutable = _in_wal_mode(self._path) and not wal.exists()
        conn = self._connect(self._uri(immutable=immutable), uri=True)
        try:
            self._immutable = self._signature() if immutable else None
            self._check_readable(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._unusable(exc) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _uri(self, *, immutable: bool) -> str:
        return self._path.absolute().as_uri() + "?mode=ro" + ("&immutable=1" if immutable else "")

    def _signature(self) -> tuple[int, int, int]:
        info = self._path.stat()
        return info.st_ino, info.st_size, info.st_mtime_ns

    def _moved(self) -> bool:
        """Whether a file read as immutable was changed, or a writer opened it, meanwhile."""
        if self._immutable is None:
            return False
        try:
            changed = self._signature() != self._immutable
        except OSError:
            changed = True
        return changed or Path(f"{self._path}-wal").exists()

    def _read(self, query: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run a read; read again through SQLite's locks if the immutable file moved."""
        with self._lock:
            try:
                with self._connection() as conn:
                    result = query(conn)
            except ArchiveError:
                if not self._moved():
                    raise
            else:
                if not self._moved():
                    return result
            # A writer came: read as any reader does, taking part in SQLite's locking.
            if self._conn is not None:
                self._conn.close()
            self._immutable = None
            self._conn = self._connect(self._uri(immutable=False), uri=True)
            with self._connection() as conn:
                return query(conn)

    def _check_readable(self, conn: sqlite3.Connection) -> None:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        table = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (_TABLE,)
        ).fetchone()
        if table is None:
            raise self._foreign(f"no table {_TABLE}")
        if app_id != _APPLICATION_ID:
            raise self._foreign(f"application id {app_id:#x}, not {_APPLICATION_ID:#x}")
        if version > _SCHEMA_VERSION:
            raise self._newer(version)

    def _foreign(self, reason: str) -> ArchiveError:
        return ArchiveError(
            f"{self._path}: not an otel-compaction archive: {reason}", path=self.location
        )

    def _newer(self, version: int) -> ArchiveError:
        return ArchiveError(
            f"archive {self.location} has schema version {version}; this version of "
            f"otel-compaction reads up to {_SCHEMA_VERSION}",
            path=self.location,
        )

    def _check_or_create_schema(self, conn: sqlite3.Connection) -> None:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if app_id == _APPLICATION_ID:
            if version > _SCHEMA_VERSION:
                raise self._newer(version)
            conn.execute(_SIDE_EFFECT_SCHEMA)  # an archive made before the ledger gains it
            return
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app_id != 0 or tables:
            raise self._foreign(
                f"application id {app_id:#x}, not {_APPLICATION_ID:#x}"
                if app_id
                else f"no table {_TABLE}, and {tables} other schema object(s)"
            )
        for statement in [*_SCHEMA.split(";"), _SIDE_EFFECT_SCHEMA]:
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA application_id={_APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")

    # -- plumbing --------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def location(self) -> str:
        """Where the archive is, as errors name it: the database file (a shared store's URL,
        its password masked)."""
        return str(self._path)

    @classmethod
    def from_url(cls, url: str | None = None, **options: Any) -> Archive:
        """The archive a URL names: ``sqlite:PATH`` for this SQLite archive in file PATH,
        ``postgresql://...`` for the shared store on PostgreSQL (needs the ``postgres``
        extra); None or empty: ``OTEL_COMPACTION_ARCHIVE_URL`` when set, else the default
        file (`default_archive_path`). `options` go to the store's constructor.

        Raises:
            StoreError: the URL (named with the variable it came from) is not one of these,
                or its store cannot be reached.
        """
        from otel_compaction.stores import open_archive

        return open_archive(url, **options)

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock; SQLite errors become `ArchiveError` naming the path."""
        with self._lock:
            if self._conn is None:
                raise ArchiveError(f"archive {self.location} is closed", path=self.location)
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise ArchiveError(f"archive {self.location}: {exc}", path=self.location) from None

    def _writable(self) -> None:
        if self._readonly:
            raise ArchiveError(
                f"archive {self.location} was opened read-only; nothing can be stored",
                path=self.location,
            )

    def _unknown(self, handle: str) -> ArchiveError:
        if not isinstance(handle, str) or not _HANDLE_RE.fullmatch(handle):
            return ArchiveError(
                f"{handle!r} is not an archive handle (expected {HANDLE_PREFIX} and "
                f"{_HANDLE_HEX_DIGITS} hex digits); archive {self.location}",
                path=self.location,
                handle=str(handle),
            )
        return ArchiveError(
            f"no archived span with handle {handle} in archive {self.location}",
            path=self.location,
            handle=handle,
        )

    def _record(self, row: Sequence[Any]) -> ArchivedSpan:
        """The record of a row, refusing a column whose value has the wrong type (a row
        written by something else), so that no reader meets a string where a number was."""
        handle, sha256, conversation_id, start, end, count, size, created, policy, summary = row
        columns = zip(_META_COLUMNS.split(", "), row, strict=True)
        for column, value in columns:
            kinds = _COLUMN_TYPES[column]
            if not isinstance(value, kinds) or isinstance(value, bool):
                wanted = " or ".join(_TYPE_NAMES[kind] for kind in kinds)
                raise ArchiveError(
                    f"archived span {handle} in archive {self.location}: column {column} holds "
                    f"{value!r}, not {wanted}",
                    path=self.location,
                    handle=str(handle),
                )
        return ArchivedSpan(
            handle=handle,
            start=start,
            end=end,
            count=count,
            size=size,
            sha256=sha256,
            created_at=float(created),
            conversation_id=conversation_id,
            policy=policy,
            summary=summary,
        )

    # -- writing ---------------------------------------------------------------------------

    def put(
        self,
        messages: Sequence[Mapping[str, Any]] | bytes | bytearray | memoryview,
        *,
        start: int = 0,
        conversation_id: str | None = None,
        policy: str | None = None,
        summary: str | None = None,
        from_json: bool = False,
    ) -> ArchivedSpan:
        """Store a span's messages verbatim and return its record; one transaction.

        Args:
            messages: the span's messages, or their serialization as raw bytes (a UTF-8 JSON
                list of objects, stored exactly as given and addressed by those bytes).
            start: index in the transcript of the span's first message; ``end`` is
                ``start + count``.
            conversation_id: the conversation (``gen_ai.conversation.id``) it came from.
            policy: name of the policy that allowed the compaction.
            summary: the summary that replaced the span (see also `attach_summary`).
            from_json: the messages were decoded from JSON (see `canonical_bytes`).

        Storing bytes already stored returns the existing record, metadata unchanged.
        Raises `ArchiveError` for an empty span, data JSON cannot carry exactly, or bytes
        that are not a JSON list of message objects.
        """
        row = self._span_row(messages, start, conversation_id, policy, summary, from_json)
        handle, digest = row[0], row[1]
        stored = self._store(row)
        if stored is None or stored[1] != digest:
            raise ArchiveError(
                f"handle {handle} in archive {self.location} already holds a different "
                "span (SHA-256 prefix collision); refusing to overwrite it",
                path=self.location,
                handle=handle,
            )
        return self._record(stored)

    def _span_row(
        self,
        messages: Sequence[Mapping[str, Any]] | bytes | bytearray | memoryview,
        start: int,
        conversation_id: str | None,
        policy: str | None,
        summary: str | None,
        from_json: bool,
    ) -> tuple[Any, ...]:
        """The row `put` stores (the columns of `_SPAN_COLUMNS`), the input checked."""
        if isinstance(messages, (bytes, bytearray, memoryview)):
            data = bytes(messages)
            count = len(_decode(data))
        else:
            data = canonical_bytes(messages, from_json=from_json)
            count = len(messages)
        if count == 0:
            raise ArchiveError("nothing to archive: the span has no messages", path=self.location)
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ArchiveError(f"start must be a non-negative integer, got {start!r}")
        self._writable()
        digest = hashlib.sha256(data).hexdigest()
        handle = HANDLE_PREFIX + digest[:_HANDLE_HEX_DIGITS]
        return (
            handle,
            digest,
            conversation_id,
            start,
            start + count,
            count,
            len(data),
            time.time(),
            policy,
            summary,
            data,
        )

    def _store(self, row: tuple[Any, ...]) -> Sequence[Any] | None:
        """Insert `row` unless its handle is there; the metadata row now under its handle."""
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    f"INSERT INTO {_TABLE} ({_SPAN_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (handle) DO NOTHING",
                    row,
                )
                stored: Sequence[Any] | None = conn.execute(
                    f"SELECT {_META_COLUMNS} FROM {_TABLE} WHERE handle = ?", (row[0],)
                ).fetchone()
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return stored

    def put_span(
        self,
        messages: Sequence[Mapping[str, Any]],
        start: int,
        end: int,
        *,
        conversation_id: str | None = None,
        policy: str | None = None,
        summary: str | None = None,
    ) -> ArchivedSpan:
        """Archive ``messages[start:end]`` of a whole transcript, recording where it came from."""
        if not 0 <= start < end <= len(messages):
            raise ArchiveError(
                f"span {start}:{end} is not a non-empty span of {len(messages)} messages"
            )
        return self.put(
            messages[start:end],
            start=start,
            conversation_id=conversation_id,
            policy=policy,
            summary=summary,
        )

    def attach_summary(self, handle: str, summary: str) -> ArchivedSpan:
        """Record (or replace) the summary that replaced an archived span; return the record."""
        self._writable()
        with self._connection() as conn:
            cursor = conn.execute(
                f"UPDATE {_TABLE} SET summary = ? WHERE handle = ?", (summary, handle)
            )
            if cursor.rowcount == 0:
                raise self._unknown(handle)
        return self.get(handle)

    # -- the side-effect ledger ----------------------------------------------------------

    def record_side_effects(self, records: Sequence[SideEffectRecord]) -> None:
        """Record completed side effects (`otel_compaction.reissue`); a record already there
        (same conversation, position and call id) takes the new outcome and context state and
        keeps whether a re-issue of it was asked about. One transaction."""
        self._writable()
        if not records:
            return
        mark = self._mark
        marks = ", ".join([mark] * 13)
        query = (
            f"INSERT INTO {self._side_effects} ({_SIDE_EFFECT_COLUMNS}) VALUES ({marks}) "
            "ON CONFLICT (conversation_id, sequence, call_id) DO UPDATE SET "
            "outcome = excluded.outcome, result = excluded.result, "
            "completed_at = COALESCE(excluded.completed_at, "
            f"{self._side_effects}.completed_at), in_context = excluded.in_context"
        )
        rows = [
            (
                r.conversation_id, r.sequence, r.call_id, r.fingerprint, r.scope, r.kind,
                r.tool, r.target, r.outcome, r.result, r.completed_at, int(r.in_context),
                int(r.asked),
            )
            for r in records
        ]  # fmt: skip
        self._write_many("recording side effects", query, rows)

    def side_effects(self, conversation_id: str) -> list[SideEffectRecord]:
        """The side effects recorded for a conversation, in the order of their calls."""
        from otel_compaction.reissue import SideEffectRecord

        query = (
            f"SELECT {_SIDE_EFFECT_COLUMNS} FROM {self._side_effects} "
            f"WHERE conversation_id = {self._mark} ORDER BY sequence"
        )
        try:
            rows = self._rows("reading side effects", query, (conversation_id,))
        except ArchiveError:
            if self._readonly:  # an archive made before the ledger, inspected
                return []
            raise
        return [
            SideEffectRecord(
                str(row[0]), int(row[1]), str(row[2]), str(row[3]), str(row[4]), str(row[5]),
                str(row[6]), str(row[7]), str(row[8]), str(row[9]),
                None if row[10] is None else float(row[10]), bool(row[11]), bool(row[12]),
            )
            for row in rows
        ]  # fmt: skip

    def mark_asked(self, record: SideEffectRecord) -> None:
        """Note that a re-issue of `record` was put to the user (or refused once where the
        CLI cannot ask): a further one goes ahead."""
        self._writable()
        mark = self._mark
        query = (
            f"UPDATE {self._side_effects} SET asked = 1 WHERE conversation_id = {mark} "
            f"AND sequence = {mark} AND call_id = {mark}"
        )
        params = (record.conversation_id, record.sequence, record.call_id)
        self._write_many("noting a re-issue", query, [params])

    def _write_many(self, doing: str, query: str, rows: Sequence[tuple[Any, ...]]) -> None:
        """Run a writing `query` for each of `rows`, in one transaction."""
        del doing  # SQLite's errors name the file
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(query, rows)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    # -- reading ---------------------------------------------------------------------------

    def get(self, handle: str) -> ArchivedSpan:
        """The record of an archived span (metadata only); `ArchiveError` if unknown."""
        rows = self._rows(
            "reading a span's record",
            f"SELECT {_META_COLUMNS} FROM {self._table} WHERE handle = {self._mark}",
            (handle,),
        )
        if not rows:
            raise self._unknown(handle)
        return self._record(rows[0])

    def recall_bytes(self, handle: str) -> bytes:
        """The stored bytes of a span, byte for byte, after checking their SHA-256."""
        row = self._stored(handle)
        if row is None:
            raise self._unknown(handle)
        digest, data = row
        if hashlib.sha256(data).hexdigest() != digest or not digest.startswith(
            handle[len(HANDLE_PREFIX) :]
        ):
            raise ArchiveError(
                f"archived span {handle} in archive {self.location} is corrupt: "
                "its bytes no longer match their SHA-256",
                path=self.location,
                handle=handle,
            )
        return data

    def _stored(self, handle: str) -> tuple[str, bytes] | None:
        """The SHA-256 recorded for `handle` and its stored bytes, unchecked; None if unknown."""
        rows = self._rows(
            "recalling a span",
            f"SELECT sha256, data FROM {self._table} WHERE handle = {self._mark}",
            (handle,),
        )
        return (rows[0][0], bytes(rows[0][1])) if rows else None

    def recall(self, handle: str) -> list[dict[str, Any]]:
        """The messages of an archived span, equal to the messages that were stored."""
        data = self.recall_bytes(handle)
        try:
            return _decode(data)
        except ArchiveError as exc:
            raise ArchiveError(
                f"archived span {handle} in archive {self.location}: {exc}",
                path=self.location,
                handle=handle,
            ) from None

    def spans(self, conversation_id: str | None = None) -> list[ArchivedSpan]:
        """Records of every archived span (of one conversation when given), oldest first."""
        query = f"SELECT {_META_COLUMNS} FROM {self._table}"
        params: tuple[str, ...] = ()
        if conversation_id is not None:
            query += f" WHERE conversation_id = {self._mark}"
            params = (conversation_id,)
        rows = self._rows("listing spans", f"{query} ORDER BY {self._order}", params)
        return [self._record(row) for row in rows]

    def __contains__(self, handle: object) -> bool:
        if not isinstance(handle, str):
            return False
        query = f"SELECT 1 FROM {self._table} WHERE handle = {self._mark}"
        return bool(self._rows("looking a handle up", query, (handle,)))

    def __len__(self) -> int:
        return int(self._rows("counting spans", f"SELECT count(*) FROM {self._table}", ())[0][0])

    # What the reading methods' SQL names: the table, the parameter mark, the storing order.
    _table = _TABLE
    _side_effects = _SIDE_EFFECTS
    _mark = "?"
    _order = "rowid"

    def _rows(self, doing: str, query: str, params: tuple[Any, ...]) -> list[Sequence[Any]]:
        """The rows of a read-only `query` (`doing` names it in errors of other stores)."""
        del doing  # SQLite's errors name the file
        rows: list[Sequence[Any]] = self._read(lambda conn: conn.execute(query, params).fetchall())
        return rows

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Close the database; later calls raise `ArchiveError`. Closing twice is harmless."""
        with self._lock:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                conn.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else "open"
        return f"Archive({str(self._path)!r}, {state})"


# -- the recall tool -------------------------------------------------------------------------

_TOOL_DESCRIPTION: Final = (
    "Return the exact original messages of a transcript span that was compacted into a "
    "summary, as a JSON list. Use it when a summary cites an archived span (a handle such as "
    f"{HANDLE_PREFIX}0123456789abcdef01234567) and you need what was actually said or "
    "returned there: exact values, tool results, errors or empty results."
)
_HANDLE_DESCRIPTION: Final = (
    f"The archived span's handle: {HANDLE_PREFIX} followed by {_HANDLE_HEX_DIGITS} hex digits, "
    "as cited in the summary."
)

ToolStyle = Literal["plain", "openai_chat", "openai_responses", "anthropic"]


def recall_tool_definition(style: ToolStyle = "plain") -> dict[str, Any]:
    """The recall tool's definition, for a model's tool list.

    ``plain`` is ``{"name", "description", "parameters"}`` (a JSON Schema object with one
    string property, ``handle``); ``openai_chat`` wraps it as a Chat Completions function
    tool, ``openai_responses`` as a Responses function tool, and ``anthropic`` uses
    ``input_schema`` as the Messages API expects.
    """
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"handle": {"type": "string", "description": _HANDLE_DESCRIPTION}},
        "required": ["handle"],
        "additionalProperties": False,
    }
    plain: dict[str, Any] = {
        "name": RECALL_TOOL_NAME,
        "description": _TOOL_DESCRIPTION,
        "parameters": parameters,
    }
    if style == "plain":
        return plain
    if style == "openai_chat":
        return {"type": "function", "function": plain}
    if style == "openai_responses":
        return {"type": "function", **plain}
    if style == "anthropic":
        return {
            "name": RECALL_TOOL_NAME,
            "description": _TOOL_DESCRIPTION,
            "input_schema": parameters,
        }
    raise ValueError(f"unknown tool style {style!r}; expected plain, openai_chat, "
                     "openai_responses or anthropic")  # fmt: skip


def make_recall_tool(archive: Archive) -> Callable[[str], str]:
    """A tool function for the agent: handle in, the archived messages as JSON text out.

    The text is the stored serialization itself (compact JSON, UTF-8), so the agent reads the
    span exactly as it was. It never raises: an unknown or malformed handle, or an unreadable
    archive, gives one line starting with ``error:``. The function is named
    ``recall_archived_span`` and documented, so frameworks that build tools from functions
    can take it as it is; `recall_tool_definition` gives the definition for raw tool lists.
    """

    def recall_archived_span(handle: str) -> str:
        """Return the exact original messages of a compacted transcript span, as JSON.

        Args:
            handle: the archived span's handle (arc_ and 24 hex digits) cited in the summary.
        """
        key = handle.strip() if isinstance(handle, str) else handle
        try:
            return archive.recall_bytes(key).decode("utf-8")
        except ArchiveError as exc:
            return f"error: {exc}"
        except UnicodeDecodeError:
            return f"error: archived span {key} in archive {archive.location} is not UTF-8 text"

    return recall_archived_span
