"""The Claude Code and Codex compaction hooks, on session logs written the way the CLIs write
them: PreCompact blocks over open obligations and hands the summarizer the must-carry table,
PostCompact verifies the summary, SessionStart after a compaction injects what it lost; a hook
never blocks by accident. (The same flows through the real CLIs are in
``test_agent_clis_hooks.py``.)"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from otlp_receiver import (
    OtlpReceiver,
)
from session_builders import ClaudeSession

from otel_compaction import Archive
from otel_compaction.hooks import HookResult, run_hook
from otel_compaction.hooks import install as installer
from otel_compaction.hooks.guard import Guard


def environ(tmp_path: Path) -> dict[str, str]:
    return {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude"), "CODEX_HOME": str(tmp_path / "codex")}


def payload(session: Path, event: str, **extra: Any) -> str:
    return json.dumps(
        {
            "session_id": "sess-1",
            "transcript_path": str(session),
            "cwd": "/home/dev/shop",
            "hook_event_name": event,
            **extra,
        }
    )


def building_session(tmp_path: Path) -> ClaudeSession:
    """A release build started in the background, never seen finished."""
    s = ClaudeSession(tmp_path / "busy.jsonl")
    s.user("Build the release in the background, then tell me.")
    s.call("toolu_1", "Bash", command="make release", run_in_background=True)
    s.result("toolu_1", "Command running in background with ID: bash_7")
    s.say("The release build is running in the background (bash_7).")
    return s


def busy_session(tmp_path: Path) -> Path:
    """The background build, and a deploy whose call is still waiting for its result."""
    s = building_session(tmp_path)
    s.call("toolu_2", "Bash", command="make deploy")
    return s.write()


def quiet_session(tmp_path: Path) -> Path:
    """Everything answered: a search that found nothing, an edit, a test run."""
    s = ClaudeSession(tmp_path / "quiet.jsonl")
    s.user("Fix the rounding bug in invoice totals; order 4417730215 shows it.")
    s.call("toolu_1", "Grep", pattern="round_half_even", path="/home/dev/shop/src")
    s.result("toolu_1", "No matches found")
    s.call("toolu_2", "Read", file_path="/home/dev/shop/src/billing/models/invoice.py")
    s.result("toolu_2", "def total(lines): return round(sum(lines), 2)")
    s.call("toolu_3", "Edit", file_path="/home/dev/shop/src/billing/models/invoice.py")
    s.result("toolu_3", "The file was updated.")
    s.say("Fixed the rounding in src/billing/models/invoice.py.")
    s.user("Now re-check order 4417730215 in src/billing/models/invoice.py.")
    return s.write()


def test_precompact_blocks_over_a_call_in_flight(tmp_path: Path) -> None:
    result = run_hook(
        "claude-code", payload(busy_session(tmp_path), "PreCompact", trigger="manual"),
        environ(tmp_path),
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "tool_call Bash (toolu_2)" in result.stderr
    assert "append its result" in result.stderr


def test_precompact_carries_a_background_task_by_its_handle(tmp_path: Path) -> None:
    # The build may run for the rest of the session: it is carried, not a block.
    session = building_session(tmp_path).write()
    result = run_hook(
        "claude-code", payload(session, "PreCompact", trigger="manual"), environ(tmp_path)
    )
    assert result.exit_code == 0
    assert "background_task Bash (bash_7): still pending" in result.stdout


def test_codex_blocks_with_its_own_answer(tmp_path: Path) -> None:
    result = run_hook(
        "codex", payload(busy_session(tmp_path), "PreCompact", trigger="manual"), environ(tmp_path)
    )
    assert result.exit_code == 0
    answer = json.loads(result.stdout)
    assert answer["continue"] is False
    assert "toolu_2" in answer["stopReason"]


def test_an_automatic_compaction_only_warns_by_default(tmp_path: Path) -> None:
    result = run_hook(
        "claude-code", payload(busy_session(tmp_path), "PreCompact", trigger="auto"),
        environ(tmp_path),
    )  # fmt: skip
    assert result.exit_code == 0
    assert "auto compaction allowed" in result.stderr
    assert "tool_call Bash (toolu_2): still pending" in result.stdout


def test_precompact_archives_and_hands_over_the_must_carry(tmp_path: Path) -> None:
    session = quiet_session(tmp_path)
    result = run_hook(
        "claude-code", payload(session, "PreCompact", trigger="manual"), environ(tmp_path)
    )
    assert (result.exit_code, result.stderr) == (0, "")
    text = result.stdout
    assert "/home/dev/shop/src/billing/models/invoice.py" in text
    assert "4417730215" in text
    assert "Grep: No matches found" in text
    handle = text.split("archived as ", 1)[1].split(";", 1)[0]
    archive = Archive(tmp_path / "claude" / "otel-compaction" / "archive.sqlite3")
    assert len(archive.recall(handle)) == 9  # the whole context, verbatim


def test_postcompact_and_sessionstart_repair_what_the_summary_lost(tmp_path: Path) -> None:
    session = quiet_session(tmp_path)
    env = environ(tmp_path)
    run_hook("claude-code", payload(session, "PreCompact", trigger="manual"), env)
    summary = "Fixed the rounding in src/billing/models/invoice.py; the user wants a re-check."
    post = run_hook("claude-code", payload(session, "PostCompact", compact_summary=summary), env)
    assert (post.exit_code, post.stdout) == (0, "")
    assert "left out 2 item(s)" in post.stderr
    start = run_hook("claude-code", payload(session, "SessionStart", source="compact"), env)
    assert start.exit_code == 0
    output = json.loads(start.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "SessionStart"
    context = output["additionalContext"]
    assert "- 4417730215" in context
    assert "- Grep: No matches found" in context
    assert "invoice.py" not in context  # the summary carried it
    assert "otel-compaction archive show arc_" in context


def test_a_complete_summary_needs_no_repair(tmp_path: Path) -> None:
    session = quiet_session(tmp_path)
    env = environ(tmp_path)
    run_hook("claude-code", payload(session, "PreCompact", trigger="manual"), env)
    summary = (
        "Order 4417730215 showed the rounding bug. Grep found no matches for round_half_even. "
        "Fixed src/billing/models/invoice.py."
    )
    assert (
        run_hook(
            "claude-code", payload(session, "PostCompact", compact_summary=summary), env
        ).stderr
        == ""
    )
    start = run_hook("claude-code", payload(session, "SessionStart", source="compact"), env)
    assert (start.exit_code, start.stdout) == (0, "")


@pytest.mark.parametrize(
    "stdin",
    ["", "not json", "[1, 2]", json.dumps({"hook_event_name": "PreCompact"})],
)
def test_unusable_input_never_blocks(stdin: str, tmp_path: Path) -> None:
    result = run_hook("claude-code", stdin, environ(tmp_path))
    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("otel-compaction hook")


def test_a_missing_transcript_never_blocks(tmp_path: Path) -> None:
    result = run_hook(
        "claude-code", payload(tmp_path / "gone.jsonl", "PreCompact"), environ(tmp_path)
    )
    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr.count("\n") == 1 and "gone.jsonl" in result.stderr


def test_a_crash_inside_never_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(Guard, "before_compaction", explode)
    result = run_hook(
        "claude-code", payload(busy_session(tmp_path), "PreCompact"), environ(tmp_path)
    )
    assert (result.exit_code, result.stdout) == (0, "")
    assert (
        result.stderr == "otel-compaction hook claude-code: skipped (RuntimeError: disk on fire)\n"
    )


def test_other_events_do_nothing(tmp_path: Path) -> None:
    session = quiet_session(tmp_path)
    for event, extra in (("SessionStart", {"source": "startup"}), ("Stop", {})):
        result = run_hook("claude-code", payload(session, event, **extra), environ(tmp_path))
        assert result == HookResult()


def test_install_is_idempotent_keeps_other_hooks_and_backs_up(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    theirs = {"matcher": "Bash", "hooks": [{"type": "command", "command": "audit-bash"}]}
    settings.write_text(json.dumps({"model": "x", "hooks": {"PreToolUse": [theirs]}}))
    assert installer.install("claude-code", settings) == [
        "PreCompact",
        "PostCompact",
        "SessionStart",
        "PreToolUse",
    ]
    assert installer.install("claude-code", settings) == []
    data = json.loads(settings.read_text())
    assert data["model"] == "x"
    assert data["hooks"]["PreToolUse"][0] == theirs
    [ours] = data["hooks"]["PreToolUse"][1]["hooks"]
    assert ours["command"].endswith("-m otel_compaction hook claude-code")
    assert [g["matcher"] for g in data["hooks"]["SessionStart"]] == ["compact"]
    [entry] = data["hooks"]["PreCompact"][0]["hooks"]
    assert entry["command"].endswith("-m otel_compaction hook claude-code")
    backup = tmp_path / "settings.json.otel-compaction.bak"
    assert "PreCompact" not in json.loads(backup.read_text())["hooks"]
    removed = installer.uninstall(settings)
    assert removed == ["PreToolUse", "PreCompact", "PostCompact", "SessionStart"]
    assert json.loads(settings.read_text()) == {"model": "x", "hooks": {"PreToolUse": [theirs]}}


def test_install_carries_the_policy_and_endpoint_on_the_command_line(tmp_path: Path) -> None:
    """The CLIs pass a hook only variables of their own, so the settings travel with it."""
    settings = tmp_path / "hooks.json"
    options = installer.Options(
        policy="/etc/agent/policy.yaml", otlp_endpoint="http://127.0.0.1:4318"
    )
    assert installer.install("codex", settings, options) == [
        "PreCompact",
        "PostCompact",
        "SessionStart",
        "PreToolUse",
    ]
    commands = {
        entry["command"]
        for groups in json.loads(settings.read_text())["hooks"].values()
        for group in groups
        for entry in group["hooks"]
    }
    [line] = commands
    assert line.endswith(
        "-m otel_compaction hook codex --policy /etc/agent/policy.yaml "
        "--otlp-endpoint http://127.0.0.1:4318"
    )
    # Installing again with other options updates the entries in place, adding none.
    assert installer.install("codex", settings) == [
        "PreCompact",
        "PostCompact",
        "SessionStart",
        "PreToolUse",
    ]
    data = json.loads(settings.read_text())
    assert [len(groups) for groups in data["hooks"].values()] == [1, 1, 1, 1]
    assert data["hooks"]["PreCompact"][0]["hooks"][0]["command"].endswith("hook codex")


def test_the_hook_command_line_sets_the_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from otel_compaction.cli import main

    policy = tmp_path / "block-auto.yaml"
    policy.write_text("hooks:\n  auto: block\n")
    session = busy_session(tmp_path)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setattr("sys.stdin", io.StringIO(payload(session, "PreCompact", trigger="auto")))
    assert main(["hook", "claude-code", "--policy", str(policy)]) == 2
    assert "toolu_2" in capsys.readouterr().err


def test_a_hook_run_exports_its_decision_over_otlp(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    otlp_http_receiver: OtlpReceiver,
) -> None:
    """Installed with ``--otlp-endpoint``, a hook run sends its decision as the gate does: a
    ``compaction.evaluate`` span with the refusal event naming the running task."""
    from otel_compaction.cli import main

    for name in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    session = busy_session(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO(payload(session, "PreCompact", trigger="manual")))
    # The endpoint is set for the hook process itself (as the SDK reads it from there).
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    code = main(["hook", "claude-code", "--otlp-endpoint", otlp_http_receiver.endpoint_http])
    assert code == 2
    [span] = otlp_http_receiver.wait_for_spans("compaction.evaluate")
    assert span.attributes["compaction.action"] == "refuse"
    [refused] = [e for e in span.events if e.name == "compaction.refused"]
    assert refused.attributes["compaction.obligation.ids"] == ["toolu_2"]
    assert "toolu_2" in capsys.readouterr().err


@pytest.mark.parametrize("enabled", [True, False])
def test_the_hook_process_runs_with_the_collector_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, enabled: bool
) -> None:
    """The collector is paused while the hook runs (it would only walk the session's tree)
    and left afterwards as it was found."""
    import gc

    from otel_compaction.hooks import run

    seen: list[bool] = []
    environ_of = environ(tmp_path)

    def hook(cli: str, stdin: str, environ: object = None) -> HookResult:
        seen.append(gc.isenabled())
        return run_hook(cli, stdin, environ_of)

    monkeypatch.setattr(run, "run_hook", hook)
    monkeypatch.setattr("sys.stdin", io.StringIO(payload(busy_session(tmp_path), "PreCompact")))
    (gc.enable if enabled else gc.disable)()
    try:
        assert run.main("claude-code") == 2
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
    assert seen == [False]


def _pushed_then_compacted(tmp_path: Path, *, committed_since: bool = False) -> Path:
    """A push, the PreCompact hook's run over it, then the compaction and a new turn."""
    s = ClaudeSession(tmp_path / "pushed.jsonl")
    s.user("Publish the fix.")
    s.call("toolu_1", "Bash", command="git push origin main")
    s.result("toolu_1", "   1a..2b  main -> main")
    s.say("Pushed.")
    before = run_hook("claude-code", payload(s.write(), "PreCompact"), environ(tmp_path))
    assert before.exit_code == 0
    s.compact("The user asked to publish a fix.")
    s.user("Is it published?")
    if committed_since:
        s.call("toolu_2", "Bash", command="git commit -am 'one more'")
        s.result("toolu_2", "[main 3c] one more")
    return s.write()


def _pre_tool_use(session: Path, env: dict[str, str], tool: str, **tool_input: Any) -> HookResult:
    event = payload(session, "PreToolUse", tool_name=tool, tool_input=tool_input)
    return run_hook("claude-code", event, env)


def test_pretooluse_asks_before_a_push_the_compaction_removed_then_lets_it_be(
    tmp_path: Path,
) -> None:
    session = _pushed_then_compacted(tmp_path)
    env = environ(tmp_path)
    assert _pre_tool_use(session, env, "Read", file_path="/home/dev/shop/a.py") == HookResult()
    asked = json.loads(_pre_tool_use(session, env, "Bash", command="git push origin main").stdout)
    decision = asked["hookSpecificOutput"]
    assert decision["permissionDecision"] == "ask"
    assert decision["permissionDecisionReason"].startswith(
        "otel-compaction: this repeats Bash `git push origin main` (call toolu_1), which already"
    )
    assert "with outcome success: 1a..2b main -> main" in decision["permissionDecisionReason"]
    # Put to the user once: the next one is theirs to make.
    assert _pre_tool_use(session, env, "Bash", command="git push origin main") == HookResult()


def test_pretooluse_denies_by_policy_and_lets_a_push_of_a_new_commit_run(tmp_path: Path) -> None:
    policy = tmp_path / "deny.yaml"
    policy.write_text("extends: default\nhooks:\n  reissue: deny\n", encoding="utf-8")
    env = {**environ(tmp_path), "OTEL_COMPACTION_POLICY": str(policy)}
    session = _pushed_then_compacted(tmp_path)
    for _ in range(2):  # denied every time
        denied = json.loads(
            _pre_tool_use(session, env, "Bash", command="git push origin main").stdout
        )
        assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    session = _pushed_then_compacted(tmp_path / "again", committed_since=True)
    env = {**environ(tmp_path / "again"), "OTEL_COMPACTION_POLICY": str(policy)}
    assert _pre_tool_use(session, env, "Bash", command="git push origin main") == HookResult()


def test_a_ledger_that_cannot_be_written_never_lets_a_refused_compaction_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(Archive, "record_side_effects", broken)
    session = building_session(tmp_path)
    session.call("toolu_8", "Bash", command="git push origin main")
    session.result("toolu_8", "main -> main")
    session.call("toolu_9", "Bash", command="make deploy")  # still waiting for its result
    event = payload(session.write(), "PreCompact", trigger="manual")
    assert run_hook("claude-code", event, environ(tmp_path)).exit_code == 2
