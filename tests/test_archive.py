"""The archive keeps compacted spans verbatim: exact bytes back, atomic, private, thread-safe.

The expected serialization is computed independently of the archive module
(`archive_harness.expected_bytes`): compact JSON (``separators=(",", ":")``), non-ASCII kept,
key order kept, UTF-8.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from archive_harness import (
    FailAfterInsert,
    InjectedCrash,
    expected_bytes,
    row_count,
    run_cli,
)
from conftest import Transcript
from workers import run_in_threads

import otel_compaction
from otel_compaction import Archive, CompactionError
from otel_compaction.archive import (
    ARCHIVE_ENV,
    DEFAULT_ARCHIVE_PATH,
    RECALL_TOOL_NAME,
    ArchivedSpan,
    canonical_bytes,
    default_archive_path,
    handle_for,
    make_recall_tool,
    recall_tool_definition,
)
from otel_compaction.cli import main
from otel_compaction.errors import ArchiveError
from otel_compaction.transcript import Transcript as Parsed

HANDLE_SHAPE = r"arc_[0-9a-f]{24}"

TRICKY: list[dict[str, Any]] = [
    {"role": "system", "content": 'Prüfe die Buchung — 予約を確認 ✈️ 𝄞 \u2028 tab\t nul\x00 "q" \\'},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "quote", "arguments": '{"amount": 0.1}'},
            }
        ],
        "z_last_key_first": 1,
        "a_first_key_last": 2,
    },
    {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "ok",
        "numbers": [0.1, 1e-300, 5e-324, 1.7976931348623157e308, -0.0, 1.0, 3, -7, 10**30, 2**63],
        "flags": [True, False, None],
        "nested": {"deep": {"deeper": [{"empty": {}}, [], "", 0.30000000000000004]}},
    },
]


def assert_identical(got: Any, want: Any, where: str = "messages") -> None:
    """Equal, and the same JSON types throughout: 1 is not 1.0, -0.0 is not 0.0, True is not 1."""
    assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, dict):
        assert list(got) == list(want), f"{where}: keys or their order differ"
        for key in want:
            assert_identical(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, list):
        assert len(got) == len(want), f"{where}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_identical(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert repr(got) == repr(want), f"{where}: float {got!r} != {want!r}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


# -- 1. round trip on every corpus transcript ------------------------------------------------------


def middle_closed_span(messages: list[dict[str, Any]]) -> tuple[int, int]:
    """Messages 1 up to the middle closed cut after 1 (the span a compactor would replace)."""
    cuts = [c for c in Parsed.parse(messages).closed_cuts() if c > 1]
    assert cuts, "a transcript always has the closed cut at its end"
    return 1, cuts[len(cuts) // 2]


def test_round_trip_every_corpus_transcript(corpus: list[Transcript], tmp_path: Path) -> None:
    path = tmp_path / "archive.sqlite3"
    stored: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    with Archive(path) as archive:
        for transcript in corpus:
            start, end = middle_closed_span(transcript.messages)
            span = transcript.messages[start:end]
            want = expected_bytes(span)
            record = archive.put_span(
                transcript.messages, start, end, conversation_id=transcript.label, policy="default"
            )
            assert (record.start, record.end, record.count) == (start, end, end - start)
            assert record.size == len(want)
            assert record.handle == handle_for(want)
            got = archive.recall_bytes(record.handle)
            assert got == want, f"{transcript.label}: stored bytes differ from the original"
            assert_identical(archive.recall(record.handle), span, transcript.label)
            stored[transcript.label] = (record.handle, span)
        assert len(archive) == len({h for h, _ in stored.values()})
    # The data outlives the connection that wrote it.
    with Archive(path, create=False) as reopened:
        for label, (handle, span) in stored.items():
            assert reopened.recall_bytes(handle) == expected_bytes(span), label
            assert_identical(reopened.recall(handle), span, label)
            assert reopened.get(handle).conversation_id in {
                lbl for lbl, (h, _) in stored.items() if h == handle
            }
    assert len(stored) == len(corpus)


def test_tricky_values_come_back_identical(archive: Archive) -> None:
    record = archive.put(TRICKY, start=4)
    want = expected_bytes(TRICKY)
    assert archive.recall_bytes(record.handle) == want
    assert canonical_bytes(TRICKY) == want
    assert "予約".encode() in want and b"\\u" not in want.replace(b"\\u0000", b"")
    assert_identical(archive.recall(record.handle), TRICKY)
    assert (record.start, record.end, record.count) == (4, 7, 3)


def test_tuples_come_back_as_lists(archive: Archive) -> None:
    record = archive.put([{"role": "user", "content": ("a", "b")}])
    assert archive.recall(record.handle) == [{"role": "user", "content": ["a", "b"]}]


def test_raw_bytes_are_stored_exactly(archive: Archive) -> None:
    raw = b'[ {"role" : "user",\n "content": "caf\xc3\xa9", "n": 1.50} ]'
    record = archive.put(raw, start=2)
    assert archive.recall_bytes(record.handle) == raw
    assert archive.recall(record.handle) == [{"role": "user", "content": "café", "n": 1.5}]
    assert (record.start, record.end, record.count, record.size) == (2, 3, 1, len(raw))
    # The canonical bytes of the same messages are given as bytes: the same span.
    assert archive.put(bytearray(canonical_bytes(TRICKY))).handle == archive.put(TRICKY).handle


# -- 2. content addressing -------------------------------------------------------------------------


def test_same_span_twice_is_stored_once(archive: Archive) -> None:
    first = archive.put(TRICKY, conversation_id="c1", policy="default", start=1)
    again = archive.put(list(TRICKY), conversation_id="c2", policy="strict", start=9)
    assert again == first, "the second store returns the first record, metadata unchanged"
    assert len(archive) == 1
    assert row_count(archive.path) == 1


def test_different_spans_get_different_handles(archive: Archive) -> None:
    handles = {
        archive.put(TRICKY).handle,
        archive.put(TRICKY[:2]).handle,
        archive.put(TRICKY[1:]).handle,
        archive.put([{**TRICKY[0], "content": TRICKY[0]["content"] + " "}]).handle,
        # Same keys and values, another order: other bytes, so another span.
        archive.put([dict(reversed(list(TRICKY[1].items())))]).handle,
    }
    assert len(handles) == 5
    assert len(archive) == 5
    for handle in handles:
        assert handle.startswith("arc_") and len(handle) == 28
        int(handle[4:], 16)


def test_record_fields(archive: Archive) -> None:
    record = archive.put_span(TRICKY, 1, 3, conversation_id="conv-7", policy="strict")
    want = expected_bytes(TRICKY[1:3])
    assert isinstance(record, ArchivedSpan)
    assert record.sha256 == hashlib.sha256(want).hexdigest()
    assert record.handle == "arc_" + record.sha256[:24]
    assert (record.start, record.end, record.count, record.size) == (1, 3, 2, len(want))
    assert (record.conversation_id, record.policy, record.summary) == ("conv-7", "strict", None)
    assert record.created_at > 1_600_000_000
    assert archive.get(record.handle) == record
    assert record.handle in archive and "arc_" + "0" * 24 not in archive and 5 not in archive
    assert record.to_dict()["span"] == [1, 3]


def test_attach_summary(archive: Archive) -> None:
    record = archive.put(TRICKY)
    updated = archive.attach_summary(record.handle, "Quoted 0.1; the tool said ok.")
    assert updated.summary == "Quoted 0.1; the tool said ok."
    assert archive.get(record.handle).summary == updated.summary
    assert archive.attach_summary(record.handle, "v2").summary == "v2"
    assert archive.recall_bytes(record.handle) == expected_bytes(TRICKY)
    with pytest.raises(ArchiveError, match=r"arc_0{24}"):
        archive.attach_summary("arc_" + "0" * 24, "x")


def test_spans_lists_oldest_first_and_filters(archive: Archive) -> None:
    a = archive.put(TRICKY[:1], conversation_id="a")
    b = archive.put(TRICKY[1:2], conversation_id="b")
    c = archive.put(TRICKY[2:], conversation_id="a")
    assert [s.handle for s in archive.spans()] == [a.handle, b.handle, c.handle]
    assert [s.handle for s in archive.spans("a")] == [a.handle, c.handle]
    assert archive.spans("nobody") == []


# -- 3. privacy and journal mode -------------------------------------------------------------------


def test_new_file_is_0600_and_in_wal_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "archive.sqlite3"
    # The file must be created 0600, not created wider and restricted afterwards.
    monkeypatch.setattr(Archive, "_restrict_permissions", lambda self: None)
    previous = os.umask(0o022)  # the usual umask would give 0644
    try:
        with Archive(path) as archive:
            archive.put(TRICKY)
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            wal = Path(f"{path}-wal")
            assert wal.exists(), "WAL mode keeps a -wal file while a connection is open"
            assert stat.S_IMODE(wal.stat().st_mode) == 0o600
            with sqlite3.connect(path) as other:
                assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_existing_archive_with_broad_permissions_is_restricted(tmp_path: Path) -> None:
    path = tmp_path / "archive.sqlite3"
    Archive(path).close()
    path.chmod(0o644)
    with Archive(path) as archive:
        assert len(archive) == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_foreign_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("not a database at all\n" * 100)
    junk.chmod(0o644)
    with pytest.raises(ArchiveError) as info:
        Archive(junk)
    assert str(junk) in str(info.value) and info.value.path == str(junk)
    assert stat.S_IMODE(junk.stat().st_mode) == 0o644
    assert junk.read_text() == "not a database at all\n" * 100

    other = tmp_path / "other.sqlite3"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(ArchiveError, match="not an otel-compaction archive") as info:
        Archive(other)
    assert str(other) in str(info.value)


def test_corrupt_archive_raises_archive_error_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "archive.sqlite3"
    with Archive(path) as archive:
        for i in range(100):
            archive.put([{"role": "user", "content": f"{i} " + "x" * 500}])
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    data[page:] = bytes((i * 131 + 7) % 256 for i in range(len(data) - page))
    path.write_bytes(data)
    with pytest.raises(ArchiveError) as info, Archive(path) as archive:
        for record in archive.spans():
            archive.recall(record.handle)
    assert str(path) in str(info.value)


def test_tampered_bytes_are_detected(archive: Archive) -> None:
    record = archive.put(TRICKY)
    with sqlite3.connect(archive.path) as conn:
        conn.execute(
            "UPDATE archived_spans SET data = ? WHERE handle = ?",
            (expected_bytes(TRICKY).replace(b"0.1", b"0.2"), record.handle),
        )
    with pytest.raises(ArchiveError, match="corrupt") as info:
        archive.recall(record.handle)
    assert str(archive.path) in str(info.value) and record.handle in str(info.value)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "archive.sqlite3"
    Archive(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version=99")
    with pytest.raises(ArchiveError, match="schema version 99"):
        Archive(path)


# -- 4. atomicity ----------------------------------------------------------------------------------


def test_failure_inside_a_put_leaves_nothing(
    archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = archive.put(TRICKY[:1])
    real = archive._conn
    assert real is not None
    failing = FailAfterInsert(real)
    monkeypatch.setattr(archive, "_conn", failing)
    with pytest.raises(InjectedCrash, match="injected"):
        archive.put(TRICKY[1:])
    assert failing.inserted, "the failure came after the row was written, inside the transaction"
    monkeypatch.setattr(archive, "_conn", real)
    assert not real.in_transaction
    assert row_count(archive.path) == 1
    assert [s.handle for s in archive.spans()] == [kept.handle]
    # Still usable, and the span can be stored after all.
    record = archive.put(TRICKY[1:])
    assert archive.recall(record.handle) == TRICKY[1:]
    assert row_count(archive.path) == 2


def test_unserializable_span_leaves_nothing(archive: Archive) -> None:
    bad: list[dict[str, Any]] = [
        {"role": "user", "content": "fine"},
        {"role": "tool", "content": {"when": object()}},
    ]
    with pytest.raises(ArchiveError, match=r"messages\[1\]\['content'\]\['when'\]"):
        archive.put(bad)
    assert row_count(archive.path) == 0


_CHILD = """
import os, sys
from otel_compaction.archive import Archive

class CrashAfterInsert:
    def __init__(self, conn):
        self.conn = conn
    def execute(self, sql, *params):
        cursor = self.conn.execute(sql, *params)
        if sql.lstrip().startswith("INSERT"):
            print("inserted", flush=True)
            os._exit(17)  # the process dies with the transaction open
        return cursor
    def __getattr__(self, name):
        return getattr(self.conn, name)

archive = Archive(sys.argv[1])
archive.put([{"role": "user", "content": "kept"}])
archive._conn = CrashAfterInsert(archive._conn)
archive.put([{"role": "user", "content": "lost " * 10000}])
"""


def test_process_killed_inside_a_put_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "archive.sqlite3"
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 17, child.stderr
    assert child.stdout == "inserted\n"
    with Archive(path) as archive:
        assert [archive.recall(s.handle) for s in archive.spans()] == [
            [{"role": "user", "content": "kept"}]
        ]
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        record = archive.put([{"role": "user", "content": "after the crash"}])
        assert archive.recall(record.handle) == [{"role": "user", "content": "after the crash"}]
        assert len(archive) == 2


# -- 5. threads ------------------------------------------------------------------------------------


def test_concurrent_puts_are_all_recallable(archive: Archive) -> None:
    threads, per_thread = 8, 25
    handles: dict[str, list[dict[str, Any]]] = {}
    guard = threading.Lock()

    def work(n: int) -> None:
        for i in range(per_thread):
            span = [{"role": "user", "content": f"thread {n} span {i} ✓", "x": n + i / 7}]
            shared = [{"role": "system", "content": "every thread stores this one"}]
            for messages in (span, shared):
                record = archive.put(messages, conversation_id=f"t{n}")
                assert archive.recall(record.handle) == messages
                with guard:
                    handles[record.handle] = messages

    run_in_threads(work, threads)
    assert len(handles) == threads * per_thread + 1
    assert len(archive) == len(handles) == row_count(archive.path)
    for handle, messages in handles.items():
        assert archive.recall_bytes(handle) == expected_bytes(messages)


# -- errors ----------------------------------------------------------------------------------------


def test_unknown_handle_names_handle_and_path(archive: Archive) -> None:
    unknown = "arc_" + "ab" * 12
    for call in (archive.recall, archive.recall_bytes, archive.get):
        with pytest.raises(ArchiveError) as info:
            call(unknown)
        assert unknown in str(info.value) and str(archive.path) in str(info.value)
        assert (info.value.handle, info.value.path) == (unknown, str(archive.path))
        assert isinstance(info.value, CompactionError)
    with pytest.raises(ArchiveError, match="not an archive handle"):
        archive.recall("span-1")


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([], "no messages"),
        ("text", "expected a list of messages"),
        ({"role": "user"}, "expected a list of messages"),
        (["text"], r"messages\[0\]: expected a message object"),
        ([{"n": float("nan")}], "no JSON representation"),
        ([{"n": float("inf")}], "no JSON representation"),
        ([{"k": {1: "one"}}], "JSON keys are strings"),
        ([{"k": {"a", "b"}}], "set is not JSON data"),
        ([{"k": "\ud800"}], "lone surrogate"),
        (b"not json", "not a JSON list"),
        (b'{"role": "user"}', "bytes are a JSON object, not a list of messages"),
        (b"[1, 2]", "item 0 is a JSON number, not a message object"),
        (b"[]", "no messages"),
        (b'[{"n": NaN}]', "NaN is not JSON"),
        (b'[{"c": "\xff"}]', "not UTF-8"),
    ],
)
def test_unstorable_input_is_refused(archive: Archive, messages: Any, match: str) -> None:
    with pytest.raises(ArchiveError, match=match):
        archive.put(messages)
    assert len(archive) == 0


def test_circular_messages_are_refused(archive: Archive) -> None:
    loop: dict[str, Any] = {"role": "user"}
    loop["self"] = loop
    with pytest.raises(ArchiveError, match="Circular"):
        archive.put([loop])


def test_put_span_checks_bounds(archive: Archive) -> None:
    for start, end in ((0, 0), (2, 1), (0, 4), (-1, 2)):
        with pytest.raises(ArchiveError, match="not a non-empty span"):
            archive.put_span(TRICKY, start, end)
    with pytest.raises(ArchiveError, match="start"):
        archive.put(TRICKY, start=-1)


def test_closed_archive_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "archive.sqlite3"
    archive = Archive(path)
    record = archive.put(TRICKY)
    archive.close()
    archive.close()
    assert "closed" in repr(archive)
    with pytest.raises(ArchiveError, match="closed"):
        archive.recall(record.handle)
    missing = tmp_path / "missing.sqlite3"
    with pytest.raises(ArchiveError, match="no archive at") as info:
        Archive(missing, create=False)
    assert str(missing) in str(info.value)
    assert not missing.exists()
    with pytest.raises(ArchiveError, match="cannot create archive"):
        Archive(tmp_path / "no" / "such" / "dir" / "archive.sqlite3")


def test_default_path_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ARCHIVE_ENV, raising=False)
    assert default_archive_path() == Path(DEFAULT_ARCHIVE_PATH)
    monkeypatch.setenv(ARCHIVE_ENV, "/somewhere/else.sqlite3")
    assert default_archive_path() == Path("/somewhere/else.sqlite3")


def test_public_api() -> None:
    assert "Archive" in otel_compaction.__all__  # the record and its error live in their modules
    assert otel_compaction.Archive is Archive
    assert issubclass(ArchiveError, CompactionError)


# -- 6. the recall tool ----------------------------------------------------------------------------


def test_recall_tool_returns_the_stored_json(archive: Archive) -> None:
    record = archive.put(TRICKY)
    recall = make_recall_tool(archive)
    text = recall(record.handle)
    assert text.encode("utf-8") == expected_bytes(TRICKY)
    assert_identical(json.loads(text), TRICKY)
    assert recall(f"  {record.handle}\n") == text
    assert recall.__name__ == RECALL_TOOL_NAME == "recall_archived_span"
    assert recall.__doc__ and "handle" in recall.__doc__


def test_recall_tool_reports_errors_as_text(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "archive.sqlite3")
    recall = make_recall_tool(archive)
    unknown = "arc_" + "cd" * 12
    for handle in (unknown, "no-such-thing", ""):
        answer = recall(handle)
        assert answer.startswith("error: ") and "\n" not in answer
    assert unknown in recall(unknown) and "no archived span" in recall(unknown)
    archive.close()
    assert recall(unknown).startswith("error: ") and "closed" in recall(unknown)


def test_recall_tool_definitions() -> None:
    plain = recall_tool_definition()
    assert plain["name"] == RECALL_TOOL_NAME
    assert "summary" in plain["description"]
    params = plain["parameters"]
    assert params["type"] == "object" and params["required"] == ["handle"]
    assert params["properties"]["handle"]["type"] == "string"
    assert params["additionalProperties"] is False
    chat = recall_tool_definition("openai_chat")
    assert chat == {"type": "function", "function": plain}
    responses = recall_tool_definition("openai_responses")
    assert responses == {"type": "function", **plain}
    anthropic = recall_tool_definition("anthropic")
    assert anthropic == {
        "name": RECALL_TOOL_NAME,
        "description": plain["description"],
        "input_schema": params,
    }
    json.dumps([plain, chat, responses, anthropic])
    with pytest.raises(ValueError, match="unknown tool style"):
        recall_tool_definition("gemini")  # type: ignore[arg-type]


# -- 6. the command line ---------------------------------------------------------------------------


def test_cli_show_raw_prints_the_exact_bytes(tmp_path: Path) -> None:
    db = tmp_path / "archive.sqlite3"
    with Archive(db) as archive:
        record = archive.put(TRICKY)
        raw = archive.put(b'[{"role":"user",  "content":"\xe2\x9c\x93"}]\n')
    done = run_cli(
        "archive", "show", record.handle, "--db", str(db), "--format", "raw", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected_bytes(TRICKY)
    done = run_cli("archive", "show", raw.handle, "--db", str(db), "--format", "raw", cwd=tmp_path)
    assert done.stdout == b'[{"role":"user",  "content":"\xe2\x9c\x93"}]\n'


def test_cli_unknown_handle_exits_2_with_one_line(tmp_path: Path) -> None:
    db = tmp_path / "archive.sqlite3"
    Archive(db).close()
    unknown = "arc_" + "ef" * 12
    done = run_cli("archive", "show", unknown, "--db", str(db), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == b""
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert unknown in lines[0] and str(db) in lines[0]
    assert b"Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("archive", "list", "--db", "missing.sqlite3"),
        ("archive", "show", "arc_" + "0" * 24, "--db", "missing.sqlite3"),
        ("archive", "list", "--db", "junk.txt"),
        ("archive", "show", "not-a-handle", "--db", "archive.sqlite3"),
        ("archive", "list"),  # the default file, which does not exist here
        ("archive",),
    ],
)
def test_cli_unusable_input_exits_2_with_one_line(tmp_path: Path, args: tuple[str, ...]) -> None:
    Archive(tmp_path / "archive.sqlite3").close()
    (tmp_path / "junk.txt").write_text("junk")
    done = run_cli(*args, cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("otel-compaction: error: "), lines
    assert b"Traceback" not in done.stderr
    assert not (tmp_path / "missing.sqlite3").exists()
    assert not (tmp_path / DEFAULT_ARCHIVE_PATH).exists()


def test_cli_default_database_from_environment_then_cwd(tmp_path: Path) -> None:
    with Archive(tmp_path / "env.sqlite3") as archive:
        from_env = archive.put(TRICKY[:1])
    with Archive(tmp_path / DEFAULT_ARCHIVE_PATH) as archive:
        from_cwd = archive.put(TRICKY[1:])
    done = run_cli("archive", "list", cwd=tmp_path, env={ARCHIVE_ENV: "env.sqlite3"})
    assert done.returncode == 0 and from_env.handle.encode() in done.stdout
    assert from_cwd.handle.encode() not in done.stdout
    done = run_cli("archive", "list", "--format", "json", cwd=tmp_path)
    assert done.returncode == 0
    assert [s["handle"] for s in json.loads(done.stdout)] == [from_cwd.handle]


def test_cli_show_text_and_json(tmp_path: Path) -> None:
    db = tmp_path / "archive.sqlite3"
    with Archive(db) as archive:
        record = archive.put_span(TRICKY, 1, 3, conversation_id="conv-9", policy="strict")
        archive.attach_summary(record.handle, "A quote of 0.1 was ok.")
    out = io.StringIO()
    assert main(["archive", "show", record.handle, "--db", str(db)], stdout=out) == 0
    text = out.getvalue()
    assert record.handle in text and "\nspan:         1:3 (2 messages)\n" in text
    assert "conv-9" in text and "strict" in text and "A quote of 0.1 was ok." in text
    assert "--- message 1 (assistant) ---" in text and "--- message 2 (tool) ---" in text
    assert "1.7976931348623157e+308" in text

    out = io.StringIO()
    assert (
        main(["archive", "show", record.handle, "--db", str(db), "--format", "json"], stdout=out)
        == 0
    )
    shown = json.loads(out.getvalue())
    assert shown["handle"] == record.handle and shown["span"] == [1, 3]
    assert shown["summary"] == "A quote of 0.1 was ok." and shown["conversation_id"] == "conv-9"
    assert_identical(shown["messages"], TRICKY[1:3])

    out = io.StringIO()
    assert (
        main(["archive", "show", record.handle, "--db", str(db), "--format", "raw"], stdout=out)
        == 0
    )
    assert out.getvalue().encode("utf-8") == expected_bytes(TRICKY[1:3])


def test_cli_list(tmp_path: Path) -> None:
    db = tmp_path / "archive.sqlite3"
    Archive(db).close()
    out = io.StringIO()
    assert main(["archive", "list", "--db", str(db)], stdout=out) == 0
    assert "no archived spans" in out.getvalue()
    with Archive(db) as archive:
        first = archive.put(TRICKY[:1], conversation_id="c-1", policy="default")
        second = archive.put_span(TRICKY, 1, 3, summary="short\nsummary " + "y" * 100)
    out = io.StringIO()
    assert main(["archive", "list", "--db", str(db)], stdout=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == f"{db}: 2 archived spans"
    assert lines[2].startswith(first.handle) and "c-1" in lines[2] and "default" in lines[2]
    assert lines[3].startswith(second.handle) and "1:3" in lines[3] and "short summary" in lines[3]
    assert len(lines) == 4
    out = io.StringIO()
    assert main(["archive", "list", "--db", str(db), "--format", "json"], stdout=out) == 0
    listed = json.loads(out.getvalue())
    assert [s["handle"] for s in listed] == [first.handle, second.handle]
    assert listed[0] == first.to_dict()
