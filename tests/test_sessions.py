"""The session-log readers: Claude Code and Codex logs read into the messages the CLIs send.

The hand-made logs under ``tests/data/sessions/handmade`` are laid out as the CLIs lay them out
(``claude/projects/<project>/<session>.jsonl`` with its subagent, and
``codex/sessions/YYYY/MM/DD/rollout-*.jsonl``); the expected messages are written in terms of
their lines, so each assertion says which records make which message. Logs written by the real
CLIs (``tests/data/sessions/claude_code_*.jsonl`` / ``codex_*.jsonl``) get the invariants.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from otel_compaction.errors import TranscriptError
from otel_compaction.sessions import (
    Compaction,
    Session,
    default_locations,
    detect_format,
    find_session_files,
    parse_session,
    read_session,
)

SESSIONS = Path(__file__).resolve().parent / "data" / "sessions"
HANDMADE = SESSIONS / "handmade"
CLAUDE_HOME = HANDMADE / "claude"
CODEX_HOME = HANDMADE / "codex"
SESSION_ID = "3f2b8c1e-7a4d-4e5b-9c6f-0d1e2f3a4b5c"
MAIN = CLAUDE_HOME / "projects" / "-work-shop" / f"{SESSION_ID}.jsonl"
SUBAGENT = MAIN.parent / SESSION_ID / "subagents" / "agent-a3f9c2e1.jsonl"
ROLLOUT = (
    CODEX_HOME
    / "sessions/2025/10/02/rollout-2025-10-02T11-02-00-0199a3c4-5b6d-7e8f-9a0b-1c2d3e4f5a6b.jsonl"
)
ERRORS = HANDMADE / "errors"


def records_of(path: Path) -> dict[int, dict[str, Any]]:
    """The records of a log by their 1-based line."""
    lines = path.read_text(encoding="utf-8").split("\n")
    return {n: json.loads(line) for n, line in enumerate(lines, start=1) if line.strip()}


def blocks(records: dict[int, dict[str, Any]], *lines: int) -> list[Any]:
    """The content blocks of the records on `lines`, in order."""
    out: list[Any] = []
    for line in lines:
        out.extend(records[line]["message"]["content"])
    return out


def all_paired(session: Session) -> None:
    transcript = session.transcript()
    assert transcript.calls, "expected tool calls"
    assert not transcript.open_calls(), [c.id for c in transcript.open_calls()]
    assert not transcript.orphan_results(), [r.call_id for r in transcript.orphan_results()]


# -- Claude Code ----------------------------------------------------------------------------------


def test_claude_code_rebuilds_the_api_messages() -> None:
    records = records_of(MAIN)
    session = read_session(MAIN)
    assert (session.path, session.format) == (str(MAIN), "claude_code")
    assert (session.session_id, session.cwd) == (SESSION_ID, "/work/shop")
    summary = records[24]["message"]["content"][0]["text"]
    command_output = records[25]["content"]
    assert session.messages == [
        # A plain-string prompt stays a string.
        {"role": "user", "content": records[3]["message"]["content"]},
        # One response over lines 4-6 and 8 (thinking, text, Read, Grep); its first tool result
        # (line 7) was written between the two tool_use records.
        {"role": "assistant", "id": "msg_01HkqW3bVqT7", "content": blocks(records, 4, 5, 6, 8)},
        # Both results in the one user message after it (progress, attachment skipped).
        {"role": "user", "content": blocks(records, 7, 10)},
        {"role": "assistant", "id": "msg_01J2pLx9RtWc", "content": blocks(records, 12, 13)},
        {"role": "user", "content": blocks(records, 14)},
        # Line 15, the synthetic API error, is not sent.
        {"role": "assistant", "id": "msg_01KcVb8ZsQe4", "content": blocks(records, 16)},
        {"role": "user", "content": blocks(records, 17)},
        {"role": "assistant", "id": "msg_01LmNo3PqRs5", "content": blocks(records, 18)},
        {"role": "user", "content": blocks(records, 19)},
        {"role": "assistant", "id": "msg_01MnOp4QrSt6", "content": blocks(records, 20)},
        # The boundary (line 23) is not a message; the summary (24) starts one, and what
        # follows it as user content (the /compact output, line 25, and the next prompt, 26)
        # joins it, as Claude Code merges consecutive user messages.
        {
            "role": "user",
            "content": [
                {"type": "text", "text": summary + "\n"},
                {"type": "text", "text": command_output + "\n"},
                {"type": "text", "text": records[26]["message"]["content"]},
            ],
        },
        {"role": "assistant", "id": "msg_01NoPq5RsTu7", "content": blocks(records, 27)},
        {"role": "user", "content": blocks(records, 28)},
        {"role": "assistant", "id": "msg_01OpQr6StUv8", "content": blocks(records, 29)},
    ]
    assert session.lines == [3, 4, 7, 12, 14, 16, 17, 18, 19, 20, 24, 27, 28, 29]
    assert session.compactions == [Compaction(10, 23, "manual", summary, 18734)]
    assert session.line_of(2) == 7
    assert session.line_of(10) == 24


def test_claude_code_transcript_pairs_every_call_with_its_result() -> None:
    session = read_session(MAIN)
    all_paired(session)
    transcript = session.transcript()
    where = {
        call.id: (call.message_index, transcript.results[call.result].message_index)
        for call in transcript.calls
        if call.result is not None
    }
    assert where == {
        "toolu_01Read7Qx": (1, 2),
        "toolu_01Grep2Mn": (1, 2),
        "toolu_01Edit5Kp": (3, 4),
        "toolu_01Read9Zt": (5, 6),
        "toolu_01Edit6Lq": (7, 8),
        "toolu_01Task3Wv": (11, 12),
    }
    assert transcript.results[transcript.calls[2].result or 0].status == "error"


def test_claude_code_subagent_file_is_read_whole() -> None:
    records = records_of(SUBAGENT)
    assert all(r["isSidechain"] for r in records.values())
    session = read_session(SUBAGENT)
    assert session.session_id == SESSION_ID
    assert session.messages == [
        {"role": "user", "content": records[1]["message"]["content"]},
        {"role": "assistant", "id": "msg_01SbAg1Xy2", "content": blocks(records, 2)},
        {"role": "user", "content": blocks(records, 3)},
        {"role": "assistant", "id": "msg_01SbAg2Zw3", "content": blocks(records, 4)},
        {"role": "user", "content": blocks(records, 5)},
        {"role": "assistant", "id": "msg_01SbAg3Vu4", "content": blocks(records, 6)},
    ]
    assert session.lines == [1, 2, 3, 4, 5, 6]
    assert session.compactions == []
    all_paired(session)


def test_reading_leaves_the_records_unchanged() -> None:
    records = list(records_of(MAIN).values())
    before = json.dumps(records)
    parse_session(records)
    assert json.dumps(records) == before


BASE: dict[str, Any] = {"sessionId": "s-1", "cwd": "/w", "timestamp": "2025-10-02T09:00:00Z"}


def user(content: Any, uuid: str, **extra: Any) -> dict[str, Any]:
    message = {"role": "user", "content": content}
    return {**BASE, "type": "user", "uuid": uuid, "message": message, **extra}


def assistant(message_id: str, block: dict[str, Any], uuid: str, **extra: Any) -> dict[str, Any]:
    message = {"id": message_id, "role": "assistant", "content": [block]}
    return {**BASE, "type": "assistant", "uuid": uuid, "message": message, **extra}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": "ls"}}


def tool_result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "ok"}


def boundary(uuid: str, metadata: Any = None) -> dict[str, Any]:
    record = {**BASE, "type": "system", "subtype": "compact_boundary", "uuid": uuid}
    if metadata is not None:
        record["compactMetadata"] = metadata
    return record


def test_claude_code_interleaved_parallel_results_gather_after_their_response() -> None:
    session = parse_session(
        [
            user("run both", "u1"),
            assistant("m1", text("Running both."), "a1"),
            assistant("m1", tool_use("t1"), "a2"),
            user([tool_result("t1")], "r1"),
            assistant("m1", tool_use("t2"), "a3"),
            user([tool_result("t2")], "r2"),
            assistant("m2", text("Both ran."), "a4"),
        ]
    )
    assert session.messages == [
        {"role": "user", "content": "run both"},
        {"role": "assistant", "id": "m1", "content": [text("Running both."), *_uses("t1", "t2")]},
        {"role": "user", "content": [tool_result("t1"), tool_result("t2")]},
        {"role": "assistant", "id": "m2", "content": [text("Both ran.")]},
    ]
    assert session.lines == [1, 2, 4, 7]
    all_paired(session)


def _uses(*ids: str) -> list[dict[str, Any]]:
    return [tool_use(i) for i in ids]


def test_claude_code_user_messages_merge_with_tool_results_first() -> None:
    session = parse_session(
        [
            assistant("m1", tool_use("t1"), "a1"),
            user("[Request interrupted by user]", "u1"),
            user([tool_result("t1")], "r1"),
            user("and then?", "u2"),
        ]
    )
    assert session.messages[1] == {
        "role": "user",
        "content": [tool_result("t1"), text("[Request interrupted by user]\n"), text("and then?")],
    }
    assert session.lines == [1, 2]


def test_claude_code_a_response_does_not_merge_across_a_prompt() -> None:
    session = parse_session(
        [
            assistant("m1", text("one"), "a1"),
            user("a new prompt", "u1"),
            assistant("m1", text("two"), "a2"),
        ]
    )
    assert [m["role"] for m in session.messages] == ["assistant", "user", "assistant"]


def test_claude_code_assistant_records_without_an_id_stay_apart() -> None:
    no_id = {**BASE, "type": "assistant", "uuid": "a1", "message": {"content": [text("x")]}}
    session = parse_session([no_id, {**no_id, "uuid": "a2"}])
    assert session.messages == [
        {"role": "assistant", "content": [text("x")]},
        {"role": "assistant", "content": [text("x")]},
    ]


def test_claude_code_skips_what_is_not_sent() -> None:
    session = parse_session(
        [
            {"type": "summary", "summary": "s", "leafUuid": "x"},
            user("hi", "u1"),
            user("hi", "u1"),  # the same record again
            {**BASE, "type": "progress", "uuid": "p1", "data": {"type": "bash_progress"}},
            {**BASE, "type": "attachment", "uuid": "at1", "attachment": {"type": "todo_reminder"}},
            {**BASE, "type": "system", "subtype": "api_error", "uuid": "e1", "error": {}},
            {
                **BASE,
                "type": "system",
                "subtype": "local_command",
                "uuid": "l1",
                "content": "shown only",
                "isDisplayOnly": True,
            },
            {**BASE, "type": "api-request", "id": "r1"},
            {**BASE, "type": "some-future-record", "uuid": "f1", "message": {"content": 7}},
            {**assistant("m1", text("virtual"), "v1"), "isVirtual": True},
            {**assistant("m2", text("sidechain"), "sc1"), "isSidechain": True},
            {
                **assistant("synthetic-1", text("API Error: 529"), "e2"),
                "isApiErrorMessage": True,
                "message": {
                    "model": "<synthetic>",
                    "role": "assistant",
                    "content": [text("API Error: 529")],
                },
            },
            assistant("m3", text("hello"), "a1"),
        ]
    )
    assert session.messages == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "id": "m3", "content": [text("hello")]},
    ]
    assert session.lines == [2, 13]


def test_claude_code_compactions() -> None:
    session = parse_session(
        [
            user("first", "u1"),
            assistant("m1", text("done"), "a1"),
            user("/compact", "u2"),
            boundary("b1", {"trigger": "automatic", "preTokens": 155000}),
            {**BASE, "type": "attachment", "uuid": "at1", "attachment": {"type": "x"}},
            # Older versions do not flag the summary; the first user message is it.
            user("Summary one.", "s1"),
            assistant("m2", text("continuing"), "a2"),
            boundary("b2", {"trigger": "manual"}),
            user([text("Summary two.")], "s2", isCompactSummary=True),
            assistant("m3", text("again"), "a3"),
            user("Summary three.", "s3", isCompactSummary=True),  # no boundary before it
        ]
    )
    assert session.compactions == [
        Compaction(3, 4, "auto", "Summary one.", 155000),
        Compaction(5, 8, "manual", "Summary two.", None),
        Compaction(7, 11, "unknown", "Summary three.", None),
    ]
    # The summary never merges into the user message before the boundary.
    assert session.messages[2] == {"role": "user", "content": "/compact"}
    assert session.messages[3] == {"role": "user", "content": "Summary one."}
    assert session.messages[7] == {"role": "user", "content": "Summary three."}
    assert session.lines == [1, 2, 3, 6, 7, 9, 10, 11]


def test_claude_code_compaction_without_metadata_is_unknown() -> None:
    session = parse_session([boundary("b1", "junk"), user("S", "s1")])
    assert session.compactions == [Compaction(0, 1, "unknown", "S", None)]


def test_claude_code_a_response_never_merges_across_a_boundary() -> None:
    session = parse_session(
        [
            assistant("m1", tool_use("t1"), "a1"),
            user([tool_result("t1")], "r1"),
            boundary("b1"),
            user("S", "s1"),
            assistant("m1", text("late"), "a2"),
        ]
    )
    assert [m["role"] for m in session.messages] == ["assistant", "user", "user", "assistant"]


def partial_compaction(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """A compaction that kept the last exchange (records a2, r2, a3) verbatim."""
    chain = [
        user("first", "u1"),
        assistant("m1", tool_use("t1"), "a1"),
        user([tool_result("t1")], "r1"),
        assistant("m2", tool_use("t2"), "a2"),
        user([tool_result("t2")], "r2"),
        assistant("m3", text("kept"), "a3"),
    ]
    for parent, record in itertools.pairwise(chain):
        record["parentUuid"] = parent["uuid"]
    return [
        *chain,
        {**boundary("b1", {"trigger": "manual", **metadata}), "parentUuid": None},
        user("Summary.", "s1", isCompactSummary=True, parentUuid="b1"),
        user("/compact output", "c1", parentUuid="a3"),
        assistant("m4", text("after"), "a4", parentUuid="c1"),
    ]


KEPT = {"headUuid": "a2", "anchorUuid": "s1", "tailUuid": "a3"}


@pytest.mark.parametrize(
    "metadata",
    [
        {"preservedMessages": {"anchorUuid": "s1", "uuids": ["a2", "r2", "a3"]}},
        {"preservedSegment": KEPT},  # the chain from the tail back to the head
    ],
)
def test_claude_code_what_a_partial_compaction_kept_follows_the_summary(
    metadata: dict[str, Any],
) -> None:
    session = parse_session(partial_compaction(metadata))
    assert session.messages == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "id": "m1", "content": [tool_use("t1")]},
        {"role": "user", "content": [tool_result("t1")]},
        {"role": "user", "content": "Summary."},
        {"role": "assistant", "id": "m2", "content": [tool_use("t2")]},
        {"role": "user", "content": [tool_result("t2")]},
        {"role": "assistant", "id": "m3", "content": [text("kept")]},
        {"role": "user", "content": "/compact output"},
        {"role": "assistant", "id": "m4", "content": [text("after")]},
    ]
    assert session.lines == [1, 2, 3, 8, 4, 5, 6, 9, 10]
    assert session.compactions == [Compaction(3, 7, "manual", "Summary.")]
    all_paired(session)


def test_claude_code_a_preserved_segment_that_does_not_chain_moves_nothing() -> None:
    session = parse_session(partial_compaction({"preservedSegment": {**KEPT, "headUuid": "zz"}}))
    assert session.lines == [1, 2, 3, 4, 5, 6, 8, 10]
    assert session.compactions[0].message_index == 6


@pytest.mark.parametrize(
    ("records", "problem"),
    [
        ([boundary("b1"), assistant("m1", text("x"), "a1")], "line 1: compact boundary followed"),
        ([user("x", "u1"), boundary("b1")], "line 2: compact boundary with no summary"),
        ([boundary("b1"), boundary("b2"), user("S", "s1")], "line 1: compact boundary with no"),
        ([user("x", "u1"), {**BASE, "type": "user", "uuid": "u2"}], "line 2: user record has no"),
        ([{**user("x", "u1"), "message": {"content": {"a": 1}}}], "line 1: user message 'content'"),
    ],
)
def test_claude_code_unusable_records_name_their_line(
    records: list[dict[str, Any]], problem: str
) -> None:
    with pytest.raises(TranscriptError, match=f"^log.jsonl: {problem}"):
        parse_session(records, "log.jsonl")


# -- Codex ----------------------------------------------------------------------------------------


def test_codex_reads_the_response_items() -> None:
    records = records_of(ROLLOUT)
    session = read_session(ROLLOUT)
    assert (session.format, session.session_id, session.cwd) == (
        "codex",
        "0199a3c4-5b6d-7e8f-9a0b-1c2d3e4f5a6b",
        "/work/shop",
    )
    summary = records[20]["payload"]["message"]
    item_lines = [2, 3, 5, 7, 9, 11, 12, 13, 14, 15, 16]  # 18 is a ghost_snapshot: not sent
    after = [22, 23, 24, 25, 26, 27]
    summary_item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": summary}],
    }
    assert session.messages == [
        *(records[n]["payload"] for n in item_lines),
        summary_item,
        *(records[n]["payload"] for n in after),
    ]
    assert session.lines == [*item_lines, 20, *after]
    assert session.compactions == [Compaction(11, 20, "unknown", summary)]
    all_paired(session)


def codex_line(kind: str, payload: Any) -> dict[str, Any]:
    return {"timestamp": "2025-10-02T11:00:00Z", "type": kind, "payload": payload}


def item(**fields: Any) -> dict[str, Any]:
    return codex_line("response_item", fields)


def test_codex_edge_cases() -> None:
    call = {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c1"}
    session = parse_session(
        [
            codex_line("session_meta", {"id": "first", "cwd": "/a"}),
            codex_line("session_meta", {"id": "second", "cwd": "/b"}),
            codex_line("world_state", {"anything": True}),  # unknown line type
            item(type="message", role="system", content=[]),
            item(type="message", role="developer", content=[]),
            item(**call),
            item(type="ghost_snapshot", ghost_commit={"id": "g"}),
            item(type="function_call_output", call_id="c1", output="ok"),
            codex_line("compacted", {"replacement_history": [{"type": "compaction"}]}),
            codex_line("compacted", {"message": "S", "trigger": "manual"}),
        ]
    )
    assert (session.session_id, session.cwd) == ("first", "/a")
    assert [m["type"] for m in session.messages] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]
    assert session.lines == [5, 6, 8, 9, 10]
    # A remote compaction's summary is encrypted: no text.
    assert session.compactions == [
        Compaction(3, 9, "unknown", ""),
        Compaction(4, 10, "manual", "S"),
    ]
    all_paired(session)


def test_codex_skips_the_summarizers_own_answer() -> None:
    answer = {**item(type="message", role="assistant", content=[]), "metadata": {}}
    answer["metadata"]["compaction_output"] = True
    session = parse_session(
        [
            item(type="message", role="user", content=[]),
            answer,
            codex_line("compacted", {"message": "S"}),
        ]
    )
    assert session.lines == [1, 3]


@pytest.mark.parametrize(
    ("records", "problem"),
    [
        ([codex_line("response_item", "text")], "line 1: response_item payload must be an object"),
        ([codex_line("response_item", {"role": "user"})], "line 1: response_item has no 'type'"),
        ([codex_line("session_meta", {}), codex_line("compacted", [])], "line 2: compacted"),
    ],
)
def test_codex_unusable_lines_name_their_line(records: list[dict[str, Any]], problem: str) -> None:
    with pytest.raises(TranscriptError, match=f"^rollout.jsonl: {problem}"):
        parse_session(records, "rollout.jsonl")


def test_codex_local_shell_call_is_kept() -> None:
    shell = {
        "type": "local_shell_call",
        "call_id": "c1",
        "status": "completed",
        "action": {"type": "exec", "command": ["ls"]},
    }
    session = parse_session(
        [
            codex_line("session_meta", {"id": "x"}),
            item(**shell),
            item(type="function_call_output", call_id="c1", output="a\nb"),
        ]
    )
    assert session.messages[0] == shell


def test_codex_local_shell_call_pairs_with_its_output() -> None:
    session = parse_session(
        [
            item(type="local_shell_call", call_id="c1", status="completed", action={}),
            item(type="function_call_output", call_id="c1", output="ok"),
        ]
    )
    all_paired(session)


# -- Formats, files, errors ---------------------------------------------------------------------


def test_detect_format() -> None:
    assert detect_format(list(records_of(MAIN).values())) == "claude_code"
    assert detect_format(list(records_of(ROLLOUT).values())) == "codex"
    assert detect_format([{"type": "summary", "summary": "s", "leafUuid": "x"}]) == "claude_code"
    assert detect_format([{"role": "user", "content": "hi"}]) is None
    assert detect_format([{"type": "message", "role": "user", "content": []}]) is None
    assert detect_format([{"type": "function_call", "call_id": "c", "name": "f"}]) is None
    assert detect_format([]) is None


def test_a_log_of_records_that_are_no_messages_is_an_empty_session() -> None:
    session = parse_session([{"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}])
    assert (session.format, session.messages, session.compactions) == ("claude_code", [], [])


def test_transcript_errors_name_the_file_and_line() -> None:
    session = parse_session(
        [codex_line("session_meta", {}), item(type="teleport_call", call_id="c1")], "r.jsonl"
    )
    with pytest.raises(TranscriptError, match=r"^r\.jsonl: line 2: message 0: unknown") as info:
        session.transcript()
    assert info.value.message_index == 0


def test_line_of_out_of_range() -> None:
    session = read_session(SUBAGENT)
    with pytest.raises(IndexError):
        session.line_of(6)
    with pytest.raises(IndexError):
        session.line_of(-1)


def test_not_json_names_the_file_and_line() -> None:
    path = ERRORS / "not_json.jsonl"
    with pytest.raises(TranscriptError, match=rf"^{re.escape(str(path))}: line 3: not JSON"):
        read_session(path)


def test_an_empty_file_is_an_error() -> None:
    path = ERRORS / "empty.jsonl"
    with pytest.raises(TranscriptError, match=rf"^{re.escape(str(path))}: empty file"):
        read_session(path)


def test_a_file_in_neither_format_is_an_error() -> None:
    path = ERRORS / "neither.jsonl"
    where = re.escape(str(path))
    with pytest.raises(TranscriptError, match=rf"^{where}: not a Claude Code or Codex session log"):
        read_session(path)


def test_unreadable_paths(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="no such file"):
        read_session(tmp_path / "missing.jsonl")
    with pytest.raises(TranscriptError, match="is a directory"):
        read_session(tmp_path)
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(TranscriptError, match="cannot read"):
        read_session(tmp_path / "binary.jsonl")


def test_a_line_that_is_no_object_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(user("x", "u1")) + "\n[1, 2]\n", encoding="utf-8")
    with pytest.raises(TranscriptError, match=r"line 2: expected a JSON object, got list"):
        read_session(path)


def test_blank_lines_and_line_separators_keep_the_numbering(tmp_path: Path) -> None:
    prompt = "one\u2028two\u2029three\x85four"  # characters str.splitlines would split on
    lines = [
        json.dumps(user(prompt, "u1"), ensure_ascii=False),
        "",
        "   ",
        json.dumps(assistant("m1", text("ok"), "a1")),
    ]
    path = tmp_path / "log.jsonl"
    path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
    session = read_session(path)
    assert session.messages[0]["content"] == prompt
    assert session.lines == [1, 4]


def test_every_line_decodes_as_json_loads_decodes_it(tmp_path: Path) -> None:
    """Padded lines, escapes, numbers beyond 64 bits or a float's range: each record is what
    ``json.loads`` makes of its line."""
    numbers = '{"big": 123456789012345678901234567890, "huge": 1e400, "zero": -0.0}'
    lines = [
        json.dumps(user("tab\tand \u00e9 \ud83d\ude00", "u1")),
        "  \t" + json.dumps(assistant("m1", text("padded on the left"), "a1")),
        json.dumps(user("padded on the right", "u2")) + " \t ",
        json.dumps(assistant("m2", text("x"), "a2")).replace('"text": "x"', f'"n": {numbers}'),
    ]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    session = read_session(path)
    expected = [json.loads(line)["message"]["content"] for line in lines]
    assert [m["content"] for m in session.messages] == expected
    assert session.messages[0]["content"] == "tab\tand \u00e9 \U0001f600"
    n = session.messages[3]["content"][0]["n"]
    assert (n["big"], n["huge"], str(n["zero"])) == (
        123456789012345678901234567890,
        math.inf,
        "-0.0",
    )
    assert session.lines == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{} {}", "column 4: Extra data"),
        ('{"type": "user"', "column 16: Expecting ',' delimiter"),
        ("\ufeff{}", "column 1: Unexpected UTF-8 BOM (decode using utf-8-sig)"),
    ],
)
def test_a_damaged_line_says_what_json_loads_says(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(user("x", "u1")) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(
        TranscriptError, match=rf"^{re.escape(f'{path}: line 2: not JSON ({problem})')}$"
    ):
        read_session(path)


def test_find_session_files(tmp_path: Path) -> None:
    found = list(find_session_files([CLAUDE_HOME / "projects", ROLLOUT, tmp_path / "as-given"]))
    assert found == [*sorted([MAIN, SUBAGENT]), ROLLOUT, tmp_path / "as-given"]
    assert list(find_session_files([CODEX_HOME / "sessions"])) == [ROLLOUT]
    (tmp_path / "notes.txt").write_text("x")
    assert list(find_session_files([tmp_path])) == []


def test_default_locations(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(CLAUDE_HOME))
    monkeypatch.setenv("CODEX_HOME", str(CODEX_HOME))
    assert default_locations() == [CLAUDE_HOME / "projects", CODEX_HOME / "sessions"]
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "nowhere"))
    assert default_locations() == [CLAUDE_HOME / "projects"]
    monkeypatch.delenv("CLAUDE_CONFIG_DIR")
    monkeypatch.delenv("CODEX_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_locations() == []
    (tmp_path / ".codex" / "sessions").mkdir(parents=True)
    (tmp_path / ".claude" / "projects").mkdir(parents=True)
    assert default_locations() == [tmp_path / ".claude/projects", tmp_path / ".codex/sessions"]


# -- Logs written by the real CLIs ----------------------------------------------------------------

REAL_LOGS = sorted(
    path
    for pattern in ("claude_code_*.jsonl", "codex_*.jsonl")
    for path in SESSIONS.rglob(pattern)
    if HANDMADE not in path.parents
)


@pytest.mark.skipif(not REAL_LOGS, reason="no logs of the real CLIs in tests/data/sessions yet")
@pytest.mark.parametrize("path", REAL_LOGS, ids=[p.name for p in REAL_LOGS])
def test_real_cli_logs(path: Path) -> None:
    session = read_session(path)
    expected = "claude_code" if path.name.startswith("claude_code_") else "codex"
    assert session.format == expected
    assert session.messages, "no messages"
    assert len(session.lines) == len(session.messages)
    assert len(set(session.lines)) == len(session.lines), "a line starts one message at most"
    records = records_of(path)
    sent = {"user", "assistant", "system", "response_item", "compacted"}
    assert all(records[n]["type"] in sent for n in session.lines)
    if expected == "claude_code":
        boundaries = [
            n
            for n, r in records.items()
            if r.get("type") == "system"
            and r.get("subtype") == "compact_boundary"
            and r.get("isSidechain") is not True
        ]
    else:
        boundaries = [n for n, r in records.items() if r.get("type") == "compacted"]
    assert [c.line for c in session.compactions] == boundaries
    for compaction in session.compactions:
        message = session.messages[compaction.message_index]
        assert message["role"] == "user"
        assert text_of(message["content"]).startswith(compaction.summary)
    session.transcript()


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
