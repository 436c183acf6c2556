"""`otel-compaction audit` on Claude Code session logs: every compaction found, its boundary
judged, what its summary lost against what the session used afterwards, and calls re-issued
after it that repeat one already resolved (the duplicate side effect)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from provider_rules import anthropic_messages_error
from session_builders import ClaudeSession

from otel_compaction.audit import audit_session
from otel_compaction.cli import main
from otel_compaction.sessions import read_session


def rewritten_after_compaction(tmp_path: Path) -> Path:
    s = ClaudeSession(tmp_path / "projects" / "-home-dev-shop" / "sess-1.jsonl")
    s.user("Set the payments port to 8443 in /home/dev/shop/config/payments.yaml.")
    s.call(
        "toolu_1", "Write", file_path="/home/dev/shop/config/payments.yaml", content="port: 8443"
    )
    s.result("toolu_1", "File created successfully")
    s.call("toolu_2", "Grep", pattern="port: 8080", path="/home/dev/shop/config")
    s.result("toolu_2", "No matches found")
    s.say("Done: payments listens on 8443.")
    s.compact("The user asked for a port change. It is being worked on.")
    s.user("Is /home/dev/shop/config/payments.yaml right? Check for port: 8080 too.")
    # The summary lost that the write happened: the model writes the file again.
    s.call(
        "toolu_3", "Write", file_path="/home/dev/shop/config/payments.yaml", content="port: 8443"
    )
    s.result("toolu_3", "File written")
    s.say("Rewrote the file.")
    return s.write()


def test_audit_reports_the_duplicate_and_what_the_summary_lost(tmp_path: Path) -> None:
    session = read_session(rewritten_after_compaction(tmp_path))
    [item] = audit_session(session).compactions
    assert item.compaction.trigger == "manual"
    assert item.closed is True and item.open_obligations == ()
    [again] = item.reissued_after
    assert (again.tool, again.call_id, again.duplicate_of) == ("Write", "toolu_3", "toolu_1")
    assert again.line == session.line_of(again.message_index)
    missing = item.summary_missing
    assert missing.missing_identifiers == ("/home/dev/shop/config/payments.yaml",)
    assert [n.call_id for n in missing.missing_negatives] == ["toolu_2"]
    assert item.clean is False


def test_a_reread_and_a_read_only_command_after_a_compaction_are_no_reissues(
    tmp_path: Path,
) -> None:
    """Reading a file again (edited since, or not) and re-running ``git status`` repeat no
    side effect; a push of the same branch after the compaction does."""
    s = ClaudeSession(tmp_path / "projects" / "-home-dev-shop" / "sess-2.jsonl")
    s.user("Fix the total and publish.")
    s.call("toolu_1", "Read", file_path="/home/dev/shop/cart.py")
    s.result("toolu_1", "def total(): return 0")
    s.call("toolu_2", "Edit", file_path="/home/dev/shop/cart.py", old_string="0", new_string="1")
    s.result("toolu_2", "The file has been updated.")
    s.call("toolu_3", "Bash", command="git status")
    s.result("toolu_3", "modified: cart.py")
    s.call("toolu_4", "Bash", command="git push origin main")
    s.result("toolu_4", "   1a..2b  main -> main")
    s.say("Published.")
    s.compact("The user asked for a fix.")
    s.user("Is it published?")
    s.call("toolu_5", "Read", file_path="/home/dev/shop/cart.py")
    s.result("toolu_5", "def total(): return 1")
    s.call("toolu_6", "Bash", command="git status")
    s.result("toolu_6", "nothing to commit")
    s.call("toolu_7", "Bash", command="git push origin main")
    s.result("toolu_7", "Everything up-to-date")
    s.say("Yes.")
    [item] = audit_session(read_session(s.write())).compactions
    assert [(r.call_id, r.duplicate_of) for r in item.reissued_after] == [("toolu_7", "toolu_4")]


def test_a_compaction_over_running_work_is_not_closed(tmp_path: Path) -> None:
    s = ClaudeSession(tmp_path / "busy.jsonl")
    s.user("Build the release in the background.")
    s.call("toolu_1", "Bash", command="make release", run_in_background=True)
    s.result("toolu_1", "Command running in background with ID: bash_7")
    s.call("toolu_2", "Read", file_path="/home/dev/shop/Makefile")
    s.compact("Building the release.", trigger="auto")
    s.result("toolu_2", "release: build")  # the answer arrives after the boundary
    s.say("The build is running.")
    [item] = audit_session(read_session(s.write())).compactions
    assert item.compaction.trigger == "auto"
    assert item.closed is False
    assert [(o.kind, o.id) for o in item.open_obligations] == [("tool_call", "toolu_2")]
    # The build still running is carried, not a block: the summary lost it by its handle.
    assert [(o.kind, o.id) for o in item.summary_missing.missing_pending] == [
        ("background_task", "bash_7"),
        ("tool_call", "toolu_2"),
    ]


def test_audit_cli_json_contract_and_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = rewritten_after_compaction(tmp_path)
    code = main(["audit", str(tmp_path / "projects"), "--format", "json"])
    assert code == 1
    report = json.loads(capsys.readouterr().out)
    [file] = report["files"]
    assert (file["path"], file["format"]) == (str(path), "claude_code")
    [compaction] = file["compactions"]
    assert set(compaction) == {
        "message_index",
        "line",
        "trigger",
        "closed",
        "open_obligations",
        "summary_missing",
        "reissued_after",
    }
    assert compaction["line"] == 7
    assert compaction["summary_missing"]["identifiers"] == ["/home/dev/shop/config/payments.yaml"]
    assert [r["duplicate_of"] for r in compaction["reissued_after"]] == ["toolu_1"]

    code = main(["audit", str(path)])
    text = capsys.readouterr().out
    assert code == 1
    assert "compaction 1 at line 7" in text
    assert "re-issued at line" in text and "repeats toolu_1" in text


def test_audit_of_a_clean_session_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = ClaudeSession(tmp_path / "clean.jsonl")
    s.user("What is 2 + 2?")
    s.say("4.")
    s.compact("The user asked what 2 + 2 is; the answer was 4.")
    s.user("Thanks.")
    assert main(["audit", str(s.write())]) == 0
    assert "clean" in capsys.readouterr().out


def test_audit_of_unusable_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert main(["audit", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.jsonl" in err and "line 1" in err
    assert main(["audit", str(tmp_path / "nowhere")]) == 2


REAL_SESSIONS = sorted(
    (Path(__file__).parent / "data" / "sessions").glob("*.jsonl"), key=lambda p: p.name
)


@pytest.mark.parametrize("path", REAL_SESSIONS, ids=[p.name for p in REAL_SESSIONS])
def test_audit_finds_every_compaction_of_a_real_cli_session(path: Path) -> None:
    """On session logs the real Claude Code and Codex wrote: one audited compaction per
    boundary record in the file."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    boundaries = [
        number
        for number, record in enumerate(records, start=1)
        if record.get("subtype") == "compact_boundary" or record.get("type") == "compacted"
    ]
    audited = audit_session(read_session(path))
    assert boundaries and [c.compaction.line for c in audited.compactions] == boundaries
    assert all(isinstance(c.closed, bool) for c in audited.compactions)


# -- compactions inside an extended-thinking tool loop --------------------------------------

DATA = Path(__file__).parent / "data" / "sessions"
THINKING_SESSION = (
    DATA
    / "handmade"
    / "claude"
    / "projects"
    / "-work-shop"
    / "3f2b8c1e-7a4d-4e5b-9c6f-0d1e2f3a4b5c.jsonl"
)


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def compaction_records(session_id: str, parent: str, number: int) -> list[dict[str, Any]]:
    """The boundary and summary records Claude Code writes for an automatic compaction (the
    shapes of the CLI-made log), relinked into another session after record `parent`."""
    real = jsonl(DATA / "claude_code_auto_compacted.jsonl")
    boundary = next(r for r in real if r.get("subtype") == "compact_boundary")
    summary = next(r for r in real if r.get("isCompactSummary") is True)
    boundary = {
        **boundary, "uuid": f"boundary-{number}", "parentUuid": None,
        "logicalParentUuid": parent, "sessionId": session_id,
    }  # fmt: skip
    summary = {
        **summary, "uuid": f"summary-{number}", "parentUuid": boundary["uuid"],
        "sessionId": session_id,
    }  # fmt: skip
    return [boundary, summary]


def pairing_closed_cuts(messages: list[dict[str, Any]]) -> list[int]:
    """An independent pairing check: each tool_result answers the earliest unanswered tool_use
    of its id in an earlier message; cut c is closed when every tool_use before c is answered
    before c."""
    unanswered: dict[str, list[int]] = {}
    answered_at: dict[int, int] = {}  # the message of a call (by its order) -> of its answer
    order = 0
    calls: list[int] = []
    for index, message in enumerate(messages):
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        for block in blocks:
            if block.get("type") == "tool_result":
                waiting = unanswered.get(block.get("tool_use_id"), [])
                if waiting and calls[waiting[0]] < index:
                    answered_at[waiting.pop(0)] = index
        for block in blocks:
            if block.get("type") == "tool_use":
                unanswered.setdefault(block["id"], []).append(order)
                calls.append(index)
                order += 1
    return [
        cut
        for cut in range(len(messages) + 1)
        if all(
            answered_at.get(call, len(messages)) < cut for call, at in enumerate(calls) if at < cut
        )
    ]


def provider_forbids(messages: list[dict[str, Any]], cut: int) -> bool:
    """Anthropic, with extended thinking on, rejects the request a summary at `cut` makes
    (and does not reject the whole history)."""
    thinking = {"type": "enabled", "budget_tokens": 1024}
    kept = [{"role": "user", "content": "[summary]"}, *messages[cut:]]
    whole = anthropic_messages_error({"thinking": thinking, "messages": messages})
    return (
        whole is None
        and anthropic_messages_error({"thinking": thinking, "messages": kept}) is not None
    )


def test_a_compaction_after_a_thinking_tool_loop_is_closed() -> None:
    """The session's own /compact comes after the loop ended; the loop the session carries on
    with after it is a new one."""
    [item] = audit_session(read_session(THINKING_SESSION)).compactions
    assert item.closed is True
    assert not [o for o in item.open_obligations if o.kind == "atomic_unit"]


def test_compactions_inside_a_thinking_tool_loop_are_closed_where_pairing_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Claude Code compacts mid-turn: a boundary and summary written between two rounds of the
    loop (before a new response, after the results of the last one) is a closed cut; `check`
    lists exactly the independently paired cuts the provider accepts."""
    records = jsonl(THINKING_SESSION)
    session_id = records[2]["sessionId"]
    messages_so_far = [r for r in records if r.get("type") in ("user", "assistant")]
    first_records: dict[str, str] = {}  # each response's first record (one per block)
    for record in messages_so_far:
        if record["type"] == "assistant":
            first_records.setdefault(record["message"]["id"], record["uuid"])
    points = [
        records.index(record)
        for previous, record in itertools.pairwise(messages_so_far)
        if record.get("uuid") in first_records.values() and is_results(previous)
    ]
    assert len(points) == 5  # before messages 3, 5, 7 and 9 (the loop 1..9), and 13
    for number, position in enumerate(points):
        parent = records[position - 1].get("uuid", "")
        inserted = compaction_records(session_id, parent, number)
        path = tmp_path / f"compacted-{number}.jsonl"
        lines = [*records[:position], *inserted, *records[position:]]
        path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
        session = read_session(path)
        audited = audit_session(session).compactions
        assert len(audited) == 2
        for item in audited:
            assert item.compaction.message_index in pairing_closed_cuts(session.messages)
            assert item.closed is True, (number, item.compaction.line)
        assert main(["check", str(path), "--format", "json"]) in (0, 1)
        listed = json.loads(capsys.readouterr().out)["closed_cuts"]
        paired = pairing_closed_cuts(session.messages)
        assert listed == [c for c in paired if not provider_forbids(session.messages, c)]


def is_results(record: dict[str, Any]) -> bool:
    content = record["message"]["content"]
    return (
        record["type"] == "user"
        and isinstance(content, list)
        and content[0]["type"] == "tool_result"
    )


def test_directory_audit_goes_past_a_bad_file(tmp_path: Path) -> None:
    """One file with an integer tool id is named with its reason; the others are still audited
    and the exit status says so at the end."""
    import subprocess
    import sys

    good = Path(__file__).parent / "data" / "sessions" / "claude_code_compacted.jsonl"
    (tmp_path / "a.jsonl").write_text(good.read_text())
    (tmp_path / "b.jsonl").write_text(
        re.sub(r'"id":"toolu_\w+"', '"id":12345', good.read_text(), count=1)
    )
    run = subprocess.run(
        [sys.executable, "-m", "otel_compaction", "audit", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 2
    assert "1 session log(s)" in run.stdout and "1 unreadable" in run.stdout
    assert "b.jsonl" in run.stderr and "int" in run.stderr and "Traceback" not in run.stderr
