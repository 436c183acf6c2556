"""The Claude Code and Codex compaction hooks, on session logs written the way the CLIs write
them: PreCompact blocks over open obligations and hands the summarizer the must-carry table,
PostCompact verifies the summary, SessionStart after a compaction injects what it lost; a hook
never blocks by accident. (The same flows through the real CLIs are in
``test_agent_clis_hooks.py``.)"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
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
    # In the CLI's terms: the tool, its command, when it ran; no message index, no Python.
    lines = result.stderr.splitlines()
    assert lines[:2] == [
        "otel-compaction: compaction blocked, work is still open in this session:",
        "- Bash `make deploy` (toolu_2, 2026-12-01 10:00:00 UTC): no result yet",
    ]
    assert "message" not in result.stderr and "force_terminal" not in result.stderr
    assert (
        lines[-1]
        .strip()
        .endswith(
            f"-m otel_compaction hook resolve claude-code --home {tmp_path / 'claude'} "
            "--session sess-1 toolu_2 --abandoned"
        )
    )


def test_precompact_carries_a_background_task_by_its_handle(tmp_path: Path) -> None:
    # The build may run for the rest of the session: it is carried, not a block.
    session = building_session(tmp_path).write()
    result = run_hook(
        "claude-code", payload(session, "PreCompact", trigger="manual"), environ(tmp_path)
    )
    assert result.exit_code == 0
    text = result.stdout
    assert "- Bash `make release` (bash_7, 2026-12-01 10:00:00 UTC): still running" in text
    assert "Already done" not in text  # started, not done


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
    assert result.stderr.startswith("otel-compaction: auto compaction allowed over open work:")
    assert "(the policy only warns on this trigger)" in result.stderr
    assert "- Bash `make deploy` (toolu_2, 2026-12-01 10:00:00 UTC): no result yet" in result.stdout
    # Archived, as every compaction that proceeds over open work is, and readable as printed.
    assert "archived as arc_" in result.stdout


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
    lost, done = context.split("Done before the compaction, do not repeat", 1)
    assert "- 4417730215" in lost
    assert "- Grep: No matches found" in lost
    assert "invoice.py" not in lost  # the summary carried it
    # The edit ran and succeeded: it is listed as done, never as pending.
    assert (
        "- Edit: /home/dev/shop/src/billing/models/invoice.py (2026-12-01 10:00:00 UTC) -> "
        "The file was updated." in done
    )
    assert "-m otel_compaction archive show arc_" in done


def test_a_complete_summary_is_repaired_only_with_what_was_done(tmp_path: Path) -> None:
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
    context = json.loads(start.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "left out" not in context
    assert context.startswith("Done before the compaction, do not repeat")


def test_a_complete_summary_of_reads_needs_no_repair(tmp_path: Path) -> None:
    s = ClaudeSession(tmp_path / "reads.jsonl")
    s.user("What does invoice.py do?")
    s.call("toolu_1", "Read", file_path="/home/dev/shop/src/billing/models/invoice.py")
    s.result("toolu_1", "def total(lines): return round(sum(lines), 2)")
    s.say("It rounds the total of the lines.")
    session, env = s.write(), environ(tmp_path)
    run_hook("claude-code", payload(session, "PreCompact", trigger="manual"), env)
    summary = "The user asked what src/billing/models/invoice.py does: it rounds totals."
    run_hook("claude-code", payload(session, "PostCompact", compact_summary=summary), env)
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

    policy = tmp_path / "warn-manual.yaml"
    policy.write_text("hooks:\n  manual: warn\n")
    session = busy_session(tmp_path)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setattr("sys.stdin", io.StringIO(payload(session, "PreCompact", trigger="manual")))
    assert main(["hook", "claude-code", "--policy", str(policy)]) == 0
    assert "manual compaction allowed over open work" in capsys.readouterr().err


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

    def hook(cli: str, stdin: str, environ: object = None, **options: Any) -> HookResult:
        seen.append(gc.isenabled())
        return run_hook(cli, stdin, environ_of, **options)

    monkeypatch.setattr(run, "run_hook", hook)
    monkeypatch.setattr("sys.stdin", io.StringIO(payload(busy_session(tmp_path), "PreCompact")))
    (gc.enable if enabled else gc.disable)()
    try:
        assert run.main("claude-code") == 2
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
    assert seen == [False]


# -- a way out of every refusal ------------------------------------------------------------


def _printed_command(stderr: str) -> str:
    [command] = [line.strip() for line in stderr.splitlines() if " hook resolve " in line]
    return command


def test_the_printed_command_resolves_the_block(tmp_path: Path) -> None:
    """Run exactly as printed (in a shell, with nothing of the hook's environment but what
    any shell has), the command lets the next compaction proceed; the repair no longer calls
    the work pending."""
    session, env = busy_session(tmp_path), environ(tmp_path)
    blocked = run_hook("claude-code", payload(session, "PreCompact", trigger="manual"), env)
    assert blocked.exit_code == 2
    shell_env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        _printed_command(blocked.stderr), shell=True, capture_output=True, text=True,
        env=shell_env, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "resolved (abandoned): Bash `make deploy` (toolu_2, 2026-12-01 10:00:00 UTC): "
        "no result yet\nThe next compaction of this session proceeds over it.\n"
    )
    again = run_hook("claude-code", payload(session, "PreCompact", trigger="manual"), env)
    assert (again.exit_code, again.stderr) == (0, "")
    assert "make deploy" not in again.stdout  # no longer pending
    start = run_hook("claude-code", payload(session, "SessionStart", source="compact"), env)
    assert "make deploy" not in start.stdout


def test_codex_blocks_with_the_same_way_out(tmp_path: Path) -> None:
    result = run_hook(
        "codex", payload(busy_session(tmp_path), "PreCompact", trigger="manual"), environ(tmp_path)
    )
    reason = json.loads(result.stdout)["stopReason"]
    assert f"hook resolve codex --home {tmp_path / 'codex'} --session sess-1 toolu_2" in reason


def test_resolving_what_is_not_open_names_what_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from otel_compaction.cli import main

    session, env = busy_session(tmp_path), environ(tmp_path)
    run_hook("claude-code", payload(session, "PreCompact", trigger="manual"), env)
    home = str(tmp_path / "claude")
    argv = ["hook", "resolve", "claude-code", "--home", home, "--session", "sess-1"]
    assert main([*argv, "toolu_9", "--done"]) == 2
    assert capsys.readouterr().err == (
        "otel-compaction: error: session sess-1: no open work toolu_9 (open at its last "
        "compaction: bash_7, toolu_2)\n"
    )


def test_resolving_is_recorded_as_a_span_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, otlp_http_receiver: OtlpReceiver
) -> None:
    from otel_compaction.cli import main

    for name in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    session, env = busy_session(tmp_path), environ(tmp_path)
    run_hook("claude-code", payload(session, "PreCompact", trigger="manual"), env)
    argv = ["hook", "resolve", "claude-code", "--home", str(tmp_path / "claude")]
    argv += ["--session", "sess-1", "--otlp-endpoint", otlp_http_receiver.endpoint_http]
    assert main([*argv, "toolu_2", "--done"]) == 0
    [span] = otlp_http_receiver.wait_for_spans("compaction.force_terminal")
    assert span.attributes["gen_ai.conversation.id"] == "sess-1"
    [event] = span.events
    assert (event.name, dict(event.attributes)) == (
        "compaction.obligation.discharged",
        {
            "compaction.obligation.kind": "tool_call",
            "compaction.obligation.id": "toolu_2",
            "compaction.obligation.status": "abandoned",
            "compaction.obligation.resolution": "done",
        },
    )


@pytest.mark.parametrize("capture", [False, True])
def test_a_resolved_reference_goes_on_the_wire_only_with_capture(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    otlp_http_receiver: OtlpReceiver,
    capture: bool,
) -> None:
    """An identifier is content: its resolution event names it by where it was first seen
    unless content capture is on."""
    from otel_compaction.cli import main
    from otel_compaction.gate import CompactionGate
    from otel_compaction.hooks.guard import Guard

    for name in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv(
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true" if capture else "false"
    )
    session, env = busy_session(tmp_path), environ(tmp_path)
    run_hook("claude-code", payload(session, "PreCompact", trigger="manual"), env)
    state = Guard(CompactionGate("default"), tmp_path / "claude", "claude-code").state("sess-1")
    stored = state.read()
    reference = {"kind": "reference", "id": "ORD-7731", "message_index": 3, "name": ""}
    state.write(stored | {"pending": [*stored["pending"], reference]})
    argv = ["hook", "resolve", "claude-code", "--home", str(tmp_path / "claude")]
    argv += ["--session", "sess-1", "--otlp-endpoint", otlp_http_receiver.endpoint_http]
    assert main([*argv, "ORD-7731", "--done"]) == 0
    [span] = otlp_http_receiver.wait_for_spans("compaction.force_terminal")
    [event] = span.events
    shown = event.attributes["compaction.obligation.id"]
    assert shown == ("ORD-7731" if capture else "reference@3")


def test_an_automatic_compaction_is_never_stranded(tmp_path: Path) -> None:
    """`auto: block` at the context limit would leave the CLI unable to go on: the hook lets
    the compaction proceed, archives it, hands the open work over, and says so."""
    policy = tmp_path / "block-auto.yaml"
    policy.write_text("hooks:\n  auto: block\n")
    env = environ(tmp_path) | {"OTEL_COMPACTION_POLICY": str(policy)}
    for cli in ("claude-code", "codex"):
        result = run_hook(cli, payload(busy_session(tmp_path), "PreCompact", trigger="auto"), env)
        assert result.exit_code == 0
        assert "continue" not in result.stdout
        assert result.stderr.startswith(
            "otel-compaction: auto compaction allowed over open work: blocking it at the "
            "context limit would leave the session unable to go on."
        )
        assert "- Bash `make deploy` (toolu_2, 2026-12-01 10:00:00 UTC): no result yet" in (
            result.stderr
        )
    state = json.loads(
        (tmp_path / "codex" / "otel-compaction" / "hooks" / "sess-1.json").read_text()
    )
    assert state["archive_handle"].startswith("arc_")
    assert state["decisions"][-1]["action"] == "allowed at the context limit"


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_the_recall_command_works_as_printed(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    """In the environment the hooks get: the SQLite file of the CLI's config directory, or
    the fleet's PostgreSQL archive that ``OTEL_COMPACTION_ARCHIVE_URL`` names (the printed
    command reads the URL from that variable, never spelling a password out)."""
    session, env = busy_session(tmp_path), environ(tmp_path)
    if store == "postgresql":
        env["OTEL_COMPACTION_ARCHIVE_URL"] = request.getfixturevalue("postgres_url")
    run_hook("claude-code", payload(session, "PreCompact", trigger="auto"), env)
    start = run_hook("claude-code", payload(session, "SessionStart", source="compact"), env)
    context = json.loads(start.stdout)["hookSpecificOutput"]["additionalContext"]
    command = context.rsplit("`", 2)[1]
    assert ("OTEL_COMPACTION_ARCHIVE_URL" in command) == (store == "postgresql")
    shown = subprocess.run(
        command, shell=True, capture_output=True, text=True, check=False,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **env},
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "make deploy" in shown.stdout and "conversation: sess-1" in shown.stdout


# -- repairs that tell the truth -----------------------------------------------------------


def pushed_session(tmp_path: Path) -> Path:
    """A commit and a push that succeeded, a status check, then a push that was rejected."""
    s = ClaudeSession(tmp_path / "pushed.jsonl")
    s.user("Commit the fix and push it.")
    s.call("toolu_1", "Bash", command="git commit -am 'Fix rounding'")
    s.result("toolu_1", "[main 5d6e7f8] Fix rounding\n 1 file changed, 1 insertion(+)")
    s.call("toolu_2", "Bash", command="git push origin main")
    s.result("toolu_2", "To github.com:acme/shop.git\n   1a2b3c4..5d6e7f8  main -> main")
    s.call("toolu_3", "Bash", command="git status")
    s.result("toolu_3", "On branch main\nnothing to commit, working tree clean")
    s.call("toolu_4", "Bash", command="git push origin v1.2")
    s.result("toolu_4", "Exit code 1\nerror: src refspec v1.2 does not match any", error=True)
    s.say("Committed and pushed the fix; there is no tag v1.2 to push.")
    s.user("Good.")
    return s.write()


def test_the_repair_lists_completed_side_effects_as_done(tmp_path: Path) -> None:
    session, env = pushed_session(tmp_path), environ(tmp_path)
    pre = run_hook("claude-code", payload(session, "PreCompact", trigger="auto"), env)
    assert "Already done (say each is done; it must not be done again):" in pre.stdout
    run_hook("claude-code", payload(session, "PostCompact", compact_summary="Fixed it."), env)
    start = run_hook("claude-code", payload(session, "SessionStart", source="compact"), env)
    context = json.loads(start.stdout)["hookSpecificOutput"]["additionalContext"]
    done = context.split("Done before the compaction, do not repeat", 1)[1].splitlines()
    assert done[1:3] == [
        "- Bash: git commit -am 'Fix rounding' (2026-12-01 10:00:00 UTC) -> "
        "[main 5d6e7f8] Fix rounding",
        "- Bash: git push origin main (2026-12-01 10:00:00 UTC) -> To github.com:acme/shop.git",
    ]
    assert "git status" not in context  # a read
    assert "not done yet" not in context  # nothing is pending
    assert "v1.2" not in done[3]  # the rejected push did not happen


# -- hooks people can see and trust --------------------------------------------------------


def test_state_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    hooks = tmp_path / "claude" / "otel-compaction" / "hooks"
    hooks.mkdir(parents=True, mode=0o755)
    hooks.chmod(0o755)
    previous = os.umask(0o022)
    try:
        run_hook("claude-code", payload(quiet_session(tmp_path), "PreCompact"), environ(tmp_path))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(hooks.stat().st_mode) == 0o700
    [state] = hooks.iterdir()
    assert stat.S_IMODE(state.stat().st_mode) == 0o600


def test_status_and_doctor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from otel_compaction.cli import main

    home = tmp_path / "claude"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home))
    installer.install("claude-code", home / "settings.json")
    run_hook("claude-code", payload(busy_session(tmp_path), "PreCompact", trigger="manual"),
             environ(tmp_path))  # fmt: skip
    assert main(["hook", "status", "claude-code"]) == 0
    text = capsys.readouterr().out
    assert (
        "  hooks:     PostCompact, PreCompact, PreToolUse, SessionStart in "
        f"{home / 'settings.json'} (user)\n" in text
    )
    assert f"  state:     {home / 'otel-compaction' / 'hooks'} (1 session(s))\n" in text
    assert f"  archive:   {home / 'otel-compaction' / 'archive.sqlite3'}\n" in text
    assert "  session:   sess-1\n" in text
    assert "PreCompact manual: blocked\n      - Bash `make deploy` (toolu_2" in text
    assert main(["hook", "doctor", "claude-code"]) == 0
    assert "ok    claude-code: hooks installed in" in capsys.readouterr().out
    state = home / "otel-compaction" / "hooks" / "sess-1.json"
    state.chmod(0o644)
    assert main(["hook", "doctor", "claude-code"]) == 1
    assert "readable by others, run: chmod 600" in capsys.readouterr().out


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
