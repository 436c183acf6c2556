"""Reading the archive never writes, a row that is not a message list is reported, and many
processes can create one archive at once.

``archive list`` and ``archive show`` run as real processes against real SQLite files. That
inspection wrote nothing is checked on the file itself: its bytes, its mtime and mode, and no
``-wal``, ``-shm`` or ``-journal`` file beside it. Tests run as root in CI, where a mode of 0444
refuses nothing, so the read-only cases also make the file and its directory immutable
(``chattr +i``, which the kernel enforces for root too) when the file system allows it.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from archive_harness import run_cli

from otel_compaction.archive import Archive
from otel_compaction.errors import ArchiveError

PREFIX = "otel-compaction: error: "
SIDE_FILES = ("-wal", "-shm", "-journal")
MESSAGES = [
    {"role": "user", "content": "restart svc-payments"},
    {"role": "assistant", "content": "ok"},
]
STORED = b'[{"role":"user","content":"restart svc-payments"},{"role":"assistant","content":"ok"}]'


def error_line(done: subprocess.CompletedProcess[bytes]) -> str:
    """The one line on stderr, without its prefix; stdout must be empty."""
    assert done.returncode == 2, done
    assert done.stdout == b""
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(PREFIX), lines[0]
    return lines[0][len(PREFIX) :]


def state(path: Path) -> tuple[bytes, int, int, list[str]]:
    """What inspection must leave as it was: bytes, mtime, mode, the directory's names."""
    info = path.stat()
    return (
        path.read_bytes(),
        info.st_mtime_ns,
        stat.S_IMODE(info.st_mode),
        sorted(p.name for p in path.parent.iterdir()),
    )


def foreign_database(path: Path, *statements: str) -> Path:
    """An SQLite database of someone else's, in rollback-journal mode."""
    conn = sqlite3.connect(path)
    with conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()
    return path


def journal_bytes(path: Path) -> bytes:
    """Header bytes 18 and 19: 1 1 in rollback-journal mode, 2 2 in WAL mode."""
    return path.read_bytes()[18:20]


def archive_with_one_span(directory: Path) -> tuple[Path, str]:
    db = directory / "archive.sqlite3"
    with Archive(db) as archive:
        handle = archive.put(MESSAGES, start=3, conversation_id="conv-1").handle
    assert not any(Path(f"{db}{suffix}").exists() for suffix in SIDE_FILES)
    return db, handle


@contextmanager
def write_protected(db: Path) -> Iterator[None]:
    """The file 0444 and its directory 0555, and both immutable where ``chattr`` can."""
    directory = db.parent
    db.chmod(0o444)
    directory.chmod(0o555)
    chattr = shutil.which("chattr")
    immutable = []
    try:
        for path in (db, directory):
            if (
                chattr
                and subprocess.run(
                    [chattr, "+i", str(path)], check=False, capture_output=True
                ).returncode
                == 0
            ):
                immutable.append(path)
        if immutable:
            with pytest.raises(PermissionError):
                (directory / "probe").write_bytes(b"")
        yield
    finally:
        for path in reversed(immutable):
            subprocess.run([str(chattr), "-i", str(path)], check=True)
        directory.chmod(0o755)
        db.chmod(0o600)


# -- inspection never writes ---------------------------------------------------------------------


def test_list_on_an_empty_file_reports_it_and_leaves_it_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite3"
    empty.write_bytes(b"")
    before = state(empty)
    for args in (("list",), ("show", "arc_" + "0" * 24)):
        done = run_cli("archive", *args, "--db", str(empty), cwd=tmp_path)
        assert (
            error_line(done) == f"{empty}: not an otel-compaction archive: no table archived_spans"
        )
    assert state(empty) == before
    assert empty.read_bytes() == b""


def test_list_on_a_foreign_database_keeps_its_journal_mode(tmp_path: Path) -> None:
    foreign = foreign_database(
        tmp_path / "notes.sqlite3", "CREATE TABLE notes (text)", "INSERT INTO notes VALUES ('a')"
    )
    foreign.chmod(0o644)
    assert journal_bytes(foreign) == b"\x01\x01"
    before = state(foreign)
    for args in (("list",), ("list", "--format", "json"), ("show", "arc_" + "0" * 24)):
        done = run_cli("archive", *args, "--db", str(foreign), cwd=tmp_path)
        assert (
            error_line(done)
            == f"{foreign}: not an otel-compaction archive: no table archived_spans"
        )
    assert state(foreign) == before
    assert journal_bytes(foreign) == b"\x01\x01"


def test_a_foreign_database_with_a_table_of_that_name(tmp_path: Path) -> None:
    foreign = foreign_database(tmp_path / "other.sqlite3", "CREATE TABLE archived_spans (x)")
    before = state(foreign)
    done = run_cli("archive", "list", "--db", str(foreign), cwd=tmp_path)
    assert error_line(done) == (
        f"{foreign}: not an otel-compaction archive: application id 0x0, not 0x6f746361"
    )
    assert state(foreign) == before


def test_the_writer_refuses_a_foreign_database_without_changing_it(tmp_path: Path) -> None:
    foreign = foreign_database(tmp_path / "notes.sqlite3", "CREATE TABLE notes (text)")
    before = state(foreign)
    with pytest.raises(ArchiveError) as info:
        Archive(foreign)
    assert str(info.value) == (
        f"{foreign}: not an otel-compaction archive: no table archived_spans, and 1 other "
        "schema object(s)"
    )
    assert state(foreign) == before
    assert journal_bytes(foreign) == b"\x01\x01"


def test_a_write_protected_archive_is_readable_and_left_as_it_was(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    db, handle = archive_with_one_span(directory)
    with write_protected(db):
        before = state(db)
        listed = run_cli("archive", "list", "--db", str(db), cwd=tmp_path)
        raw = run_cli("archive", "show", handle, "--db", str(db), "--format", "raw", cwd=tmp_path)
        shown = run_cli("archive", "show", handle, "--db", str(db), cwd=tmp_path)
        with Archive(db, readonly=True) as archive:
            assert archive.recall(handle) == MESSAGES
            assert len(archive) == 1 and handle in archive
        assert state(db) == before
    assert (listed.returncode, listed.stderr) == (0, b""), listed.stderr
    lines = listed.stdout.decode().splitlines()
    assert lines[0] == f"{db}: 1 archived span"
    assert lines[2].startswith(f"{handle}        3:5     2") and "conv-1" in lines[2]
    assert (raw.returncode, raw.stdout, raw.stderr) == (0, STORED, b"")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.decode().splitlines()[1] == "span:         3:5 (2 messages)"


def test_reading_opens_nothing_creates_nothing_and_refuses_to_store(tmp_path: Path) -> None:
    db, handle = archive_with_one_span(tmp_path)
    before = state(db)
    missing = tmp_path / "missing.sqlite3"
    with pytest.raises(ArchiveError, match="no archive at"):
        Archive(missing, readonly=True)
    with Archive(db, readonly=True) as archive:
        assert [span.handle for span in archive.spans()] == [handle]
        with pytest.raises(ArchiveError) as info:
            archive.put([{"role": "user", "content": "new"}])
        assert str(info.value) == f"archive {db} was opened read-only; nothing can be stored"
        with pytest.raises(ArchiveError, match="read-only"):
            archive.attach_summary(handle, "a summary")
    assert state(db) == before
    assert not missing.exists()


def test_a_reader_sees_what_a_writer_stores_while_it_is_open(tmp_path: Path) -> None:
    db, first = archive_with_one_span(tmp_path)
    with Archive(db, readonly=True) as reader:
        assert [s.handle for s in reader.spans()] == [first]
        with Archive(db) as writer:
            second = writer.put([{"role": "user", "content": "second"}]).handle
            assert [s.handle for s in reader.spans()] == [first, second]
            third = writer.put([{"role": "user", "content": "third"}]).handle
            assert reader.recall(third) == [{"role": "user", "content": "third"}]
        assert len(reader) == 3


# -- rows that hash right but hold no message list -----------------------------------------------


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'{"role":"user"}', "bytes are a JSON object, not a list of messages"),
        (b'"just text"', "bytes are a JSON string, not a list of messages"),
        (b"null", "bytes are JSON null, not a list of messages"),
        (b'[{"role":"user"},7]', "item 1 is a JSON number, not a message object"),
        (b"[]", "bytes are an empty list: no messages"),
        (
            b"not json",
            "bytes are not a JSON list of messages: Expecting value: line 1 column 1 (char 0)",
        ),
        (b'[{"c":"\xff"}]', "bytes are not UTF-8 (at byte 7)"),
    ],
)
def test_show_a_row_that_is_not_a_message_list(tmp_path: Path, data: bytes, problem: str) -> None:
    db, _ = archive_with_one_span(tmp_path)
    digest = hashlib.sha256(data).hexdigest()
    handle = "arc_" + digest[:24]
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO archived_spans (handle, sha256, conversation_id, span_start, span_end, "
            "message_count, size, created_at, policy, summary, data) "
            "VALUES (?, ?, NULL, 0, 1, 1, ?, 0, NULL, NULL, ?)",
            (handle, digest, len(data), data),
        )
    conn.close()
    for form in ("text", "json"):
        done = run_cli("archive", "show", handle, "--db", str(db), "--format", form, cwd=tmp_path)
        assert error_line(done) == f"archived span {handle} in archive {db}: {problem}"
    raw = run_cli("archive", "show", handle, "--db", str(db), "--format", "raw", cwd=tmp_path)
    assert (raw.returncode, raw.stdout, raw.stderr) == (0, data, b"")
    listed = run_cli("archive", "list", "--db", str(db), cwd=tmp_path)
    assert listed.returncode == 0 and handle in listed.stdout.decode()


# -- many processes creating one archive ---------------------------------------------------------

WORKER = """
import sys, time
from pathlib import Path
from otel_compaction.archive import Archive

db, barrier, ready, number = sys.argv[1:]
Path(ready).touch()
while not Path(barrier).exists():
    time.sleep(0.0005)
with Archive(db) as archive:
    print(archive.put([{"role": "user", "content": "message " + number}]).handle)
"""

PROCESSES = 8
ROUNDS = 6  # the collision is a race: each round gives it eight processes' worth of chances


def test_many_processes_create_one_new_archive_at_once(tmp_path: Path) -> None:
    for round_ in range(ROUNDS):
        directory = tmp_path / f"round-{round_}"
        directory.mkdir()
        db, barrier = directory / "archive.sqlite3", directory / "go"
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    WORKER,
                    str(db),
                    str(barrier),
                    str(directory / f"ready-{i}"),
                    str(i),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for i in range(PROCESSES)
        ]
        try:
            # Start them together: every process is up and polling before the barrier opens.
            while not all((directory / f"ready-{i}").exists() for i in range(PROCESSES)):
                assert all(w.poll() is None for w in workers), [w.communicate() for w in workers]
                time.sleep(0.001)
            barrier.touch()
            results = [w.communicate(timeout=120) for w in workers]
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
        failures = [
            err.decode() for (_, err), w in zip(results, workers, strict=True) if w.returncode
        ]
        assert failures == [], failures
        handles = [out.decode().strip() for out, _ in results]
        with Archive(db, readonly=True) as archive:
            assert sorted(s.handle for s in archive.spans()) == sorted(handles)
            for i, handle in enumerate(handles):
                assert archive.recall(handle) == [{"role": "user", "content": f"message {i}"}]
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.close()
        assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_list_and_show_a_row_whose_metadata_has_the_wrong_type(tmp_path: Path) -> None:
    db, handle = archive_with_one_span(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE archived_spans SET created_at = 'soon'")
    conn.close()
    problem = (
        f"archived span {handle} in archive {db}: column created_at holds 'soon', "
        "not a number or an integer"
    )
    assert error_line(run_cli("archive", "list", "--db", str(db), cwd=tmp_path)) == problem
    assert error_line(run_cli("archive", "show", handle, "--db", str(db), cwd=tmp_path)) == problem
