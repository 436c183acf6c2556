"""`otel-compaction audit` on Claude Code session logs: every compaction found, its boundary
judged, what its summary lost against what the session used afterwards, and calls re-issued
after it that repeat one already resolved (the duplicate side effect)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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
