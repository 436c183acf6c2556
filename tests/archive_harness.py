"""Archive helpers shared by the archive and compactor tests.

Every test module has the ``archive`` fixture (``conftest.py`` loads this module as a plugin):
an `Archive` in the test's temporary directory, closed after the test. The stored form is
written out here independently of the archive module (`expected_bytes`), and `FailAfterInsert`
injects a crash inside the archive's transaction. `run_cli` runs the command line as a real process.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from otel_compaction import Archive
from otel_compaction.archive import ARCHIVE_ENV


@pytest.fixture(name="archive")
def archive_fixture(tmp_path: Path) -> Iterator[Archive]:
    """An open archive in the test's temporary directory."""
    with Archive(tmp_path / "archive.sqlite3") as opened:
        yield opened


def expected_bytes(messages: Sequence[Mapping[str, Any]]) -> bytes:
    """The serialization the archive promises: compact JSON, non-ASCII and key order kept,
    UTF-8."""
    return json.dumps(list(messages), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def row_count(path: Path) -> int:
    """Rows in the archive table, read through a connection of its own."""
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM archived_spans").fetchone()[0])


class InjectedCrash(Exception):
    """An injected crash."""


class FailAfterInsert:
    """A connection stand-in that raises `InjectedCrash` on the first statement after the
    INSERT."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.inserted = False

    def execute(self, sql: str, *params: Any) -> sqlite3.Cursor:
        if self.inserted and not sql.startswith(("ROLLBACK", "COMMIT")):
            raise InjectedCrash("injected crash inside the archive transaction")
        cursor = self.conn.execute(sql, *params)
        self.inserted = self.inserted or sql.lstrip().startswith("INSERT")
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m otel_compaction`` as a real process; stdout and stderr as bytes."""
    environment = {k: v for k, v in os.environ.items() if k != ARCHIVE_ENV}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "otel_compaction", *args],
        capture_output=True,
        cwd=cwd,
        env=environment,
        timeout=60,
        check=False,
    )
