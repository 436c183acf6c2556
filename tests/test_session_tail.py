"""A session log read from its latest compaction on gives the hook what the whole log gives it.

`read_context` decodes only the lines from the latest compaction on. For every session log of
the test data, the shared sessions and logs built here with several compactions, the context,
its lines, the latest compaction, the session id and cwd, and the hook's decision (the gate's
verdict, the open work, the summarizer's instructions) are those of `read_session`; the built
logs also pin when the tail is read alone and when the whole log is read instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
from session_builders import ClaudeSession

from otel_compaction.errors import TranscriptError
from otel_compaction.gate import CompactionGate
from otel_compaction.hooks.guard import Guard, context_of
from otel_compaction.policy import Policy
from otel_compaction.sessions import Session, read_context, read_session

DATA = Path(__file__).resolve().parent / "data" / "sessions"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "sessions"
LOGS = sorted(
    path
    for root in (DATA, SHARED)
    if root.is_dir()
    for path in root.rglob("*.jsonl")
    if "errors" not in path.parts
)


def hook_view(session: Session, home: Path) -> dict[str, Any]:
    """What a PreCompact hook uses of a session, and what it decides over it."""
    latest = session.compactions[-1] if session.compactions else None
    start = latest.message_index if latest else 0
    guard = Guard(CompactionGate(Policy.load("default")), home)
    pre = guard.before_compaction(session, trigger="manual", archive=False, record=False)
    return {
        "context": context_of(session),
        "lines": session.lines[start:],
        "compaction": dataclasses.replace(latest, message_index=0) if latest else None,
        "session": (session.session_id, session.cwd, session.format, session.path),
        "action": pre.decision.action,
        "blocked": pre.blocked,
        "obligations": pre.decision.obligations,
        "reason": pre.reason(),
        "instructions": pre.instructions(),
    }


def assert_same(path: Path, home: Path) -> Session:
    """The tail and the whole log give the hook the same; return the tail's session."""
    tail = read_context(path)
    assert hook_view(tail, home) == hook_view(read_session(path), home)
    return tail


def test_the_logs_to_compare_are_there() -> None:
    assert len([p for p in LOGS if p.is_relative_to(DATA)]) >= 6


@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_every_session_log_gives_the_hook_the_same_context(path: Path, tmp_path: Path) -> None:
    tail = assert_same(path, tmp_path)
    if not tail.whole:
        assert tail.compactions[0].message_index == 0


def several_compactions(path: Path) -> ClaudeSession:
    """Three compactions, work done between them, a call still waiting after the last one."""
    log = ClaudeSession(path)
    log.user("Deploy the billing service and then the web front end.")
    log.call("toolu_1", "Bash", command="make deploy SERVICE=billing").result("toolu_1", "ok")
    log.compact("Deployed billing (toolu_1).", trigger="auto")
    log.user("Now check the reservation ZFA04Y.")
    log.call("toolu_2", "Bash", command="curl /reservations/ZFA04Y")
    log.result("toolu_2", "Error: not found", error=True)
    log.say("ZFA04Y does not exist. I will verify the booking list first.")
    log.compact("Looked up ZFA04Y: not found.")
    log.user("Deploy the web front end.")
    log.compact("The user wants the web front end deployed.", trigger="auto")
    log.user("Go ahead.")
    log.call("toolu_3", "Bash", command="make deploy SERVICE=web")
    return log


def test_a_log_with_several_compactions_is_read_from_the_latest(tmp_path: Path) -> None:
    path = several_compactions(tmp_path / "s.jsonl").write()
    tail = assert_same(path, tmp_path)
    assert not tail.whole
    # The prompt after the summary joins it, as Claude Code sends them.
    assert [m["role"] for m in tail.messages] == ["user", "assistant"]
    assert tail.lines == [14, 16]
    assert tail.compactions[0].line == 13
    assert tail.compactions[0].trigger == "auto"
    assert hook_view(tail, tmp_path)["action"] == "refuse"  # toolu_3 has no result yet


def test_old_damage_does_not_stop_the_hook(tmp_path: Path) -> None:
    path = several_compactions(tmp_path / "s.jsonl").write()
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[2] = lines[2][:40]  # a line cut short, before the latest compaction
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(TranscriptError, match="line 3: not JSON"):
        read_session(path)
    assert read_context(path).lines == [14, 16]


def test_damage_in_the_context_is_named_with_its_line(tmp_path: Path) -> None:
    path = several_compactions(tmp_path / "s.jsonl").write()
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[15] = lines[15][:40]
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(TranscriptError, match="line 16: not JSON"):
        read_context(path)


def test_a_record_still_being_written_is_left_out(tmp_path: Path) -> None:
    path = several_compactions(tmp_path / "s.jsonl").write()
    with path.open("a", encoding="utf-8") as out:
        out.write('{"type": "assistant", "uuid": "u-99", "message": {"ro')
    tail = assert_same(path, tmp_path)
    assert tail.lines == [14, 16]


def test_the_marker_in_a_message_is_not_a_compaction(tmp_path: Path) -> None:
    log = several_compactions(tmp_path / "s.jsonl")
    log.result("toolu_3", 'grep: "compact_boundary" found in 2 files')  # escaped in the log
    # Written unescaped: the arguments of a call are an object in the record.
    log.call("toolu_5", "Write", type="system", subtype="compact_boundary", isCompactSummary=True)
    tail = assert_same(log.write(), tmp_path)
    assert not tail.whole
    assert tail.compactions[0].line == 13


def test_a_uuid_read_before_sends_the_whole_log(tmp_path: Path) -> None:
    log = several_compactions(tmp_path / "s.jsonl")
    repeated = json.loads(json.dumps(log.records[1]))  # the first response, logged again
    log.records.append(repeated)
    tail = assert_same(log.write(), tmp_path)
    assert tail.whole


def test_a_summary_without_a_boundary_is_where_the_context_starts(tmp_path: Path) -> None:
    log = ClaudeSession(tmp_path / "s.jsonl")
    log.user("List the open invoices.").say("There are 3 open invoices.")
    log._record(
        "user", message={"role": "user", "content": "Summary: 3 open."}, isCompactSummary=True
    )
    log.user("Close INV-7.").call("toolu_9", "Bash", command="invoice close INV-7")
    tail = assert_same(log.write(), tmp_path)
    assert not tail.whole
    assert tail.compactions[0].trigger == "unknown"
    assert tail.compactions[0].line == 3


def kept_verbatim(path: Path, metadata: dict[str, Any]) -> ClaudeSession:
    """An automatic compaction, then a manual one that kept its last exchange verbatim."""
    log = several_compactions(path)
    log.call("toolu_4", "Bash", command="make smoke-test").result("toolu_4", "passed")
    chain = log.records[-3:]  # the call of toolu_3 and toolu_4, and toolu_4's result
    for record, parent in zip(chain[1:], chain, strict=False):
        record["parentUuid"] = parent["uuid"]
    head, tail = chain[0]["uuid"], chain[-1]["uuid"]
    kept = {
        "preservedMessages": {"uuids": [r["uuid"] for r in chain]},
        "preservedSegment": {"headUuid": head, "tailUuid": tail},
    }
    log.compact("Deploying web; smoke test passed.")
    log.records[-2]["compactMetadata"] |= {key: kept[key] for key in metadata}
    log.user("Anything left?")
    return log


@pytest.mark.parametrize("metadata", [["preservedMessages"], ["preservedSegment"]])
def test_what_a_compaction_kept_is_read_from_the_compaction_before(
    metadata: list[str], tmp_path: Path
) -> None:
    log = kept_verbatim(tmp_path / "s.jsonl", dict.fromkeys(metadata))
    tail = assert_same(log.write(), tmp_path)
    assert not tail.whole
    # The kept call and exchange follow the latest summary, as Claude Code relinks them.
    assert [m["role"] for m in tail.messages] == ["user", "assistant", "assistant", "user"]
    assert tail.compactions[0].line == len(log.records) - 2


def test_a_log_whose_compactions_all_kept_something_is_read_whole(tmp_path: Path) -> None:
    log = kept_verbatim(tmp_path / "s.jsonl", {"preservedMessages": None})
    for record in log.records:
        if record.get("subtype") == "compact_boundary":
            record["compactMetadata"].setdefault("preservedMessages", {"uuids": []})
    tail = assert_same(log.write(), tmp_path)
    assert tail.whole


def test_a_log_without_a_compaction_is_read_whole(tmp_path: Path) -> None:
    log = ClaudeSession(tmp_path / "s.jsonl").user("hi").say("hello")
    assert assert_same(log.write(), tmp_path).whole


def codex_rollout(path: Path) -> Path:
    """A Codex rollout with two compactions."""
    lines: list[dict[str, Any]] = [
        {"type": "session_meta", "payload": {"id": "r-1", "cwd": "/work/shop"}},
    ]

    def item(payload: dict[str, Any]) -> None:
        lines.append({"type": "response_item", "payload": payload})

    def said(role: str, text: str) -> None:
        kind = "input_text" if role == "user" else "output_text"
        item({"type": "message", "role": role, "content": [{"type": kind, "text": text}]})

    for number in (1, 2):
        said("user", f"Run step {number}.")
        item({"type": "function_call", "call_id": f"c{number}", "name": "shell",
              "arguments": json.dumps({"command": ["make", f"step{number}"]})})  # fmt: skip
        item({"type": "function_call_output", "call_id": f"c{number}", "output": "done"})
        lines.append({"type": "compacted", "payload": {"message": f"Step {number} ran."}})
    said("user", "Run step 3.")
    item({"type": "function_call", "call_id": "c3", "name": "shell", "arguments": "{}"})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_a_codex_rollout_is_read_from_its_latest_compaction(tmp_path: Path) -> None:
    tail = assert_same(codex_rollout(tmp_path / "rollout.jsonl"), tmp_path)
    assert not tail.whole
    assert tail.lines == [9, 10, 11]
    assert tail.session_id == "r-1"
    assert tail.cwd == "/work/shop"


def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "log.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(TranscriptError, match="a FIFO, not a regular file"):
        read_context(fifo)


def test_only_the_context_counts_against_the_limit(tmp_path: Path) -> None:
    path = several_compactions(tmp_path / "s.jsonl").write()
    context = len("\n".join(path.read_text(encoding="utf-8").split("\n")[12:]).encode())
    assert not read_context(path, limit=context + 10).whole
    with pytest.raises(TranscriptError, match="larger than"):
        read_context(path, limit=context - 10)


def test_a_uuid_written_with_an_escape_is_still_recognized(tmp_path: Path) -> None:
    log = several_compactions(tmp_path / "s.jsonl")
    log.records.append(json.loads(json.dumps(log.records[1])))
    path = log.write()
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"uuid": "u-2"', '"uuid": "u\\u002d2"', 1), encoding="utf-8")
    tail = assert_same(path, tmp_path)
    assert tail.whole
