"""`read_session` reads a log in one pass, each record let go once read: the session it gives,
and the error it raises, are the ones reading the whole file's records first gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_sessions import BASE, assistant, text, user

from otel_compaction.errors import TranscriptError
from otel_compaction.sessions import _parse, _records, find_session_files, read_session

SESSIONS = Path(__file__).resolve().parent / "data" / "sessions"


def partial_compaction(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """A compaction that kept its last two records (a2, a3) verbatim."""
    chain = [
        user("first", "u1"),
        assistant("m1", text("one"), "a1", parentUuid="u1"),
        user("again", "u2", parentUuid="a1"),
        assistant("m2", text("two"), "a2", parentUuid="u2"),
        user("kept", "a3", parentUuid="a2"),
    ]
    boundary = {
        **BASE,
        "type": "system",
        "subtype": "compact_boundary",
        "uuid": "b1",
        "compactMetadata": {"trigger": "manual", **metadata},
    }
    return [*chain, boundary, user("Summary.", "s1", isCompactSummary=True, parentUuid="b1")]


def write_log(path: Path, records: list[Any], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail, encoding="utf-8")
    return path


def read_whole(path: Path) -> Any:
    """The session of reading every record first, or the error it raises."""
    content = path.read_text(encoding="utf-8")
    try:
        return _parse(_records(content, str(path)), str(path))
    except TranscriptError as error:
        return str(error)


def read_one_pass(path: Path) -> Any:
    try:
        return read_session(path)
    except TranscriptError as error:
        return str(error)


@pytest.mark.parametrize("path", sorted(find_session_files([SESSIONS])), ids=lambda p: p.name)
def test_the_logs_read_as_a_whole_reads_them(path: Path) -> None:
    assert read_one_pass(path) == read_whole(path)


def test_sidechain_records_before_the_first_main_message_are_left_out(tmp_path: Path) -> None:
    log = write_log(
        tmp_path / "s.jsonl",
        [
            user("subagent task", "x1", isSidechain=True),
            assistant("mx", text("subagent answer"), "x2", isSidechain=True),
            user("hello", "u1"),
            assistant("m1", text("hi"), "a1"),
        ],
    )
    session = read_session(log)
    assert session == read_whole(log)
    assert session.lines == [3, 4]


def test_a_subagent_file_is_read_whole(tmp_path: Path) -> None:
    log = write_log(
        tmp_path / "agent-1.jsonl",
        [
            user("task", "x1", isSidechain=True),
            assistant("mx", text("done"), "x2", isSidechain=True),
        ],
    )
    assert read_session(log) == read_whole(log)
    assert read_session(log).lines == [1, 2]


def test_a_preserved_segment_is_followed_over_the_whole_file(tmp_path: Path) -> None:
    metadata = {"preservedSegment": {"headUuid": "a2", "tailUuid": "a3"}}
    log = write_log(tmp_path / "p.jsonl", partial_compaction(metadata))
    assert read_session(log) == read_whole(log)
    assert read_session(log).lines == [1, 2, 3, 7, 4, 5]


def test_a_damaged_line_is_named_before_what_the_reader_rejects_earlier(tmp_path: Path) -> None:
    log = write_log(
        tmp_path / "d.jsonl",
        [user("hello", "u1"), {"type": "assistant", "uuid": "a1", "message": "not an object"}],
        '{"type": "user", "uuid"\n{"type": "user"}\n',
    )
    assert read_one_pass(log) == read_whole(log)
    assert "line 3: not JSON" in read_one_pass(log)


def test_a_record_that_is_not_an_object_is_named_before_the_reader_errors(tmp_path: Path) -> None:
    log = write_log(
        tmp_path / "o.jsonl",
        [user("hello", "u1"), {"type": "assistant", "uuid": "a1", "message": 3}, [1, 2]],
    )
    assert read_one_pass(log) == read_whole(log)
    assert "line 3: expected a JSON object" in read_one_pass(log)
