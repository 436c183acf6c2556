"""Where the ledger and the archive live: chosen by a URL.

* ``OTEL_COMPACTION_LEDGER_URL`` (or `ObligationLedger.from_url`): unset or ``memory:``, this
  process's in-memory `ObligationLedger` (the default); ``postgresql://...``, the shared
  `PostgresLedger`.
* ``OTEL_COMPACTION_ARCHIVE_URL`` (or `Archive.from_url`): unset, the SQLite file
  ``OTEL_COMPACTION_ARCHIVE`` names (the default); ``sqlite:PATH``, the SQLite file PATH;
  ``postgresql://...``, the shared `PostgresArchive`.

``postgres://`` is accepted for ``postgresql://``; the rest of the URL is libpq's (user,
password, host, port, database, ``?sslmode=...``). PostgreSQL needs the ``postgres`` extra
(``psycopg``). A URL that is none of these, or a store that cannot be reached, raises
`StoreError` naming the variable (or the argument) it came from and what is wrong, with any
password in the URL masked.

Each worker of a shared store has an identity, `worker_identity`: ``host:pid:`` and a random
instance id, unless ``OTEL_COMPACTION_WORKER_ID`` (or the ``owner=`` argument) names it.
"""

from __future__ import annotations

import os
import secrets
import socket
import urllib.parse
from typing import TYPE_CHECKING, Any, Final

from otel_compaction.errors import CompactionError

if TYPE_CHECKING:
    from otel_compaction.archive import Archive
    from otel_compaction.ledger import ObligationLedger

__all__ = [
    "ARCHIVE_URL_ENV",
    "LEDGER_URL_ENV",
    "WORKER_ID_ENV",
    "StoreError",
    "open_archive",
    "open_ledger",
    "redact",
    "worker_identity",
]

LEDGER_URL_ENV: Final = "OTEL_COMPACTION_LEDGER_URL"
"""The URL of the obligation ledger's store (unset: this process's memory)."""

ARCHIVE_URL_ENV: Final = "OTEL_COMPACTION_ARCHIVE_URL"
"""The URL of the archive's store (unset: the SQLite file ``OTEL_COMPACTION_ARCHIVE`` names)."""

WORKER_ID_ENV: Final = "OTEL_COMPACTION_WORKER_ID"
"""The worker identity recorded as the owner of what this process opens in a shared ledger."""

_POSTGRES_SCHEMES: Final = ("postgresql", "postgres")


class StoreError(CompactionError, ValueError):
    """A store URL is unusable, or its store cannot be reached: the message names where the
    URL came from (a variable or an argument), the URL with its password masked, and what is
    wrong."""


def redact(url: str) -> str:
    """`url` with its password, if any, replaced by ``***``."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def worker_identity(owner: str | None = None) -> str:
    """This worker's identity: `owner`, else ``OTEL_COMPACTION_WORKER_ID``, else
    ``host:pid:`` and 8 random hex digits (a restarted process, even with the same pid, is
    another worker)."""
    chosen = owner or os.environ.get(WORKER_ID_ENV)
    if chosen:
        return chosen
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _source(url: str | None, variable: str) -> tuple[str, str]:
    """The URL to use and where it came from, for error messages."""
    if url:
        return url, "the URL given"
    return os.environ.get(variable, "").strip(), variable


def _scheme(url: str, where: str, accepted: str) -> str:
    scheme, colon, _ = url.partition(":")
    if not colon or not scheme or not scheme.replace("+", "").isalnum():
        raise StoreError(f"{where}={redact(url)!r} is not a URL (expected {accepted})")
    return scheme.lower()


def _require_psycopg(where: str, url: str) -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise StoreError(
            f"{where}={redact(url)!r} names PostgreSQL, but psycopg is not installed: "
            "pip install 'otel-compaction[postgres]'"
        ) from None


def _postgres_url(url: str, where: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if not parts.path.strip("/") and not parts.hostname and not parts.query:
        raise StoreError(
            f"{where}={redact(url)!r} names no server or database "
            "(expected postgresql://USER@HOST:PORT/DATABASE)"
        )
    try:
        _ = parts.port
    except ValueError as error:
        raise StoreError(f"{where}={redact(url)!r}: {error}") from None
    _require_psycopg(where, url)
    return "postgresql" + url[url.index(":") :]


def open_ledger(url: str | None = None, **options: Any) -> ObligationLedger:
    """The obligation ledger `url` (else ``OTEL_COMPACTION_LEDGER_URL``) names; see the
    module docstring. `options` go to the store's constructor."""
    from otel_compaction.ledger import ObligationLedger

    url, where = _source(url, LEDGER_URL_ENV)
    if not url or url == "memory:":
        return ObligationLedger(**options)
    accepted = "memory: or postgresql://USER@HOST:PORT/DATABASE"
    scheme = _scheme(url, where, accepted)
    if scheme not in _POSTGRES_SCHEMES:
        raise StoreError(
            f"{where}={redact(url)!r}: the ledger has no store {scheme!r} (expected {accepted})"
        )
    target = _postgres_url(url, where)
    from otel_compaction.stores.postgres import PostgresLedger

    return PostgresLedger(target, source=where, **options)


def open_archive(url: str | None = None, **options: Any) -> Archive:
    """The archive `url` (else ``OTEL_COMPACTION_ARCHIVE_URL``, else the SQLite file of
    ``OTEL_COMPACTION_ARCHIVE``) names; see the module docstring. `options` go to the
    store's constructor."""
    from otel_compaction.archive import Archive

    url, where = _source(url, ARCHIVE_URL_ENV)
    if not url:
        return Archive(**options)
    accepted = "sqlite:PATH or postgresql://USER@HOST:PORT/DATABASE"
    scheme = _scheme(url, where, accepted)
    if scheme == "sqlite":
        path = url[len("sqlite:") :]
        if path.startswith("//"):
            path = path[2:]  # sqlite:///abs/path and sqlite://rel/path as SQLAlchemy writes them
        if not path:
            raise StoreError(f"{where}={url!r} names no file (expected sqlite:PATH)")
        return Archive(path, **options)
    if scheme not in _POSTGRES_SCHEMES:
        raise StoreError(
            f"{where}={redact(url)!r}: the archive has no store {scheme!r} (expected {accepted})"
        )
    target = _postgres_url(url, where)
    from otel_compaction.stores.postgres import PostgresArchive

    return PostgresArchive(target, source=where, **options)
