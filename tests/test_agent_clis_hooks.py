"""The project's own hooks, installed with ``otel-compaction hook install``, in the real Claude
Code and Codex CLIs (offline, against the fake model server): a compaction over an open
obligation is blocked naming it; a quiescent one proceeds, the summarizer is handed what it
must carry (Claude Code), the fake summary drops an identifier and a negative, and the next
model request carries exactly those as repair context. The CLIs are pinned and installed by
``.ci/run`` (see ``agent_clis``)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from agent_clis import ClaudeCode, Codex, claude_compaction_request, codex_request_kind
from fake_llm_server import (
    FakeLLMServer,
    ToolCall,
)

from otel_compaction.audit import audit_session
from otel_compaction.hooks import install as installer
from otel_compaction.sessions import read_session

SMALL = ("--tools", "Bash,Read", "--system-prompt-snapshot", "off")
ORDER = "4417730215"
# The hooks run the package under test: a checkout on PYTHONPATH reaches them too (the CLIs
# hand a hook their own environment).
HOOK_ENV = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}


@pytest.fixture
def claude(fake_llm_server: FakeLLMServer, tmp_path: Path) -> ClaudeCode:
    cli = ClaudeCode(fake_llm_server, tmp_path, env=HOOK_ENV)
    settings = cli.config_dir / "settings.json"
    assert installer.install("claude-code", settings) == [
        "PreCompact",
        "PostCompact",
        "SessionStart",
        "PreToolUse",
    ]
    return cli


@pytest.fixture
def codex(fake_llm_server: FakeLLMServer, tmp_path: Path) -> Codex:
    cli = Codex(fake_llm_server, tmp_path, env=HOOK_ENV)
    cli.write_config()
    installer.install("codex", cli.home / "hooks.json")
    cli.trust_hooks()
    return cli


def _resolve_command(text: str) -> str:
    """The command a block message prints to resolve what blocks."""
    [line] = [line for line in text.splitlines() if " hook resolve " in line]
    return line.strip()


def _strings(value: object) -> list[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _run_as_printed(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`command` run in a shell, exactly as printed, with the environment the hooks get."""
    return subprocess.run(
        command, shell=True, capture_output=True, text=True, env=env, check=False, timeout=120
    )


def test_claude_code_blocks_compacting_over_an_unkept_promise(
    claude: ClaudeCode, fake_llm_server: FakeLLMServer
) -> None:
    """The block names the promise and prints a command; run as printed, it unblocks the
    next /compact."""
    fake_llm_server.enqueue("messages", "I will verify the deployment of web-7 next.")
    first = claude.run("Deploy web-7.", extra_args=SMALL)

    blocked = claude.compact(first.session_id, extra_args=SMALL)

    assert blocked.result.startswith("Compaction blocked by PreCompact hook:")
    assert "otel-compaction: compaction blocked, work is still open in this session:" in (
        blocked.result
    )
    assert 'promise "I will verify the deployment of web-7 next."' in blocked.result
    assert "force_terminal" not in blocked.result and "at message" not in blocked.result
    assert not any(claude_compaction_request(r.json) for r in fake_llm_server.requests)

    done = _run_as_printed(_resolve_command(blocked.result), claude.env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('resolved (abandoned): promise "I will verify')
    fake_llm_server.enqueue("messages", "<summary>The user asked to deploy web-7.</summary>")
    compacted = claude.compact(first.session_id, extra_args=SMALL)
    assert compacted.output["is_error"] is False
    assert [r for r in fake_llm_server.requests if claude_compaction_request(r.json)]


def test_claude_code_compaction_carries_and_repairs(
    claude: ClaudeCode, fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    missing = tmp_path / "work" / "orders" / f"{ORDER}.json"
    cat = ToolCall("Bash", {"command": f"cat {missing}", "description": "Read"}, id="toolu_cat")
    fake_llm_server.enqueue("messages", tool_calls=[cat])
    fake_llm_server.enqueue("messages", f"There is no file for order {ORDER}.")
    fake_llm_server.enqueue("messages", "Looking again.")
    summary = "<analysis>x</analysis>\n<summary>The user asked about an order.</summary>"
    fake_llm_server.enqueue("messages", summary)
    fake_llm_server.enqueue("messages", "Done.")

    first = claude.run(f"Show order {ORDER}.", extra_args=SMALL)
    session = first.session_id
    claude.run(f"Try order {ORDER} once more.", resume=session, extra_args=SMALL)
    compacted = claude.compact(session, extra_args=SMALL)
    assert compacted.output["is_error"] is False
    claude.run("Go on.", resume=session, extra_args=SMALL)

    # The summarizer was told what to keep: the order id and the failed read.
    [request] = [r for r in fake_llm_server.requests if claude_compaction_request(r.json)]
    prompt = json.dumps(request.json["messages"][-1])
    assert "When you write the summary, keep the following exactly" in prompt
    assert f"- {ORDER}" in prompt
    assert "Negative results" in prompt and "No such file" in prompt
    assert "archived as arc_" in prompt
    # The summary dropped both: the next request carries them, and only them, as repair.
    following = json.dumps(fake_llm_server.requests[-1].json["messages"])
    assert "The compaction summary left out the following (otel-compaction)" in following
    assert f"- {ORDER}" in following
    assert "No such file or directory" in following
    assert "-m otel_compaction archive show arc_" in following
    # The archived span reads back from the CLI's config directory.
    log = read_session(claude.session_file(session))
    assert len(log.compactions) == 1


def test_codex_blocks_compacting_over_an_unkept_promise(
    codex: Codex, fake_llm_server: FakeLLMServer
) -> None:
    fake_llm_server.enqueue("responses", "I will verify the deployment of web-7 next.")
    with codex.app_server() as server:
        thread = server.start_thread()
        assert server.run_turn(thread, "Deploy web-7.")["status"] == "completed"
        turn = server.compact(thread)
        stopped = [
            n["params"]
            for n in server.notifications
            if n["method"] == "hook/completed" and n["params"]["run"]["status"] == "stopped"
        ]
        assert turn["status"] == "interrupted"
        assert [codex_request_kind(r.headers) for r in fake_llm_server.requests] == ["turn"]
        [run] = stopped
        [reason] = [t for t in _strings(run) if " hook resolve " in t]
        assert 'promise "I will verify the deployment of web-7 next."' in reason
        # Run as printed, the command in the stop reason lets the next compaction proceed.
        done = _run_as_printed(_resolve_command(reason), codex.env)
        assert done.returncode == 0, done.stderr
        fake_llm_server.enqueue("responses", "The user asked to deploy web-7.")  # the summary
        assert server.compact(thread)["status"] == "completed"
    assert [codex_request_kind(r.headers) for r in fake_llm_server.requests] == [
        "turn",
        "compaction",
    ]


def test_codex_compaction_is_verified_and_repaired(
    codex: Codex, fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    missing = tmp_path / "work" / "orders" / f"{ORDER}.json"
    cat = ToolCall("exec_command", {"cmd": f"cat {missing}"}, id="call_cat")
    fake_llm_server.enqueue("responses", tool_calls=[cat])
    fake_llm_server.enqueue("responses", f"There is no file for order {ORDER}.")
    fake_llm_server.enqueue("responses", "Looking again.")
    fake_llm_server.enqueue("responses", "The user asked about an order.")  # the summary
    fake_llm_server.enqueue("responses", "Done.")
    with codex.app_server() as server:
        thread = server.start_thread()
        assert server.run_turn(thread, f"Show order {ORDER}.")["status"] == "completed"
        assert server.run_turn(thread, f"Try order {ORDER} once more.")["status"] == "completed"
        assert server.compact(thread)["status"] == "completed"
        assert server.run_turn(thread, "Go on.")["status"] == "completed"
    kinds = [codex_request_kind(r.headers) for r in fake_llm_server.requests]
    assert kinds.count("compaction") == 1
    following = json.dumps(fake_llm_server.requests[-1].json["input"])
    assert "The compaction summary left out the following (otel-compaction)" in following
    assert f"- {ORDER}" in following
    assert "No such file or directory" in following


def test_audit_finds_the_write_reissued_after_a_real_compaction(
    claude: ClaudeCode, fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    target = tmp_path / "work" / "config.yaml"
    write = {"command": f"echo 'port: 8443' > {target}", "description": "Write the config"}
    fake_llm_server.enqueue("messages", tool_calls=[ToolCall("Bash", write, id="toolu_w1")])
    fake_llm_server.enqueue("messages", "Wrote the config.")
    fake_llm_server.enqueue("messages", "<summary>The user asked for a config change.</summary>")
    # After the compaction the model no longer sees that the write happened: it writes again.
    fake_llm_server.enqueue("messages", tool_calls=[ToolCall("Bash", write, id="toolu_w2")])
    fake_llm_server.enqueue("messages", "Wrote it again.")
    first = claude.run("Set the port to 8443 in config.yaml.", extra_args=SMALL)
    claude.compact(first.session_id, extra_args=SMALL)
    claude.run("Is the port set?", resume=first.session_id, extra_args=SMALL)

    [audited] = audit_session(read_session(claude.session_file(first.session_id))).compactions
    assert [(r.tool, r.call_id, r.duplicate_of) for r in audited.reissued_after] == [
        ("Bash", "toolu_w2", "toolu_w1")
    ]


def test_claude_code_auto_compaction_over_a_running_background_task(
    fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    """Mid-turn, right after a background command started, the context fills: the automatic
    compaction's PreCompact finds the task running. A running task is carried by its handle,
    never blocked on: whether the policy blocks automatic compactions or only warns, the
    compaction proceeds and the summarizer is told the task is still pending."""
    policy = tmp_path / "block-auto.yaml"
    policy.write_text("hooks:\n  auto: block\n", encoding="utf-8")
    for blocking in (False, True):
        root = tmp_path / ("block" if blocking else "warn")
        claude = ClaudeCode(fake_llm_server, root, env=HOOK_ENV)
        # Claude Code passes a hook only variables of its own: the policy is on the command.
        options = installer.Options(policy=str(policy) if blocking else None)
        installer.install("claude-code", claude.config_dir / "settings.json", options)
        fake_llm_server.reset()
        start = {"command": "sleep 2", "description": "Wait", "run_in_background": True}
        fake_llm_server.enqueue(
            "messages", tool_calls=[ToolCall("Bash", start, id="toolu_bg")], input_tokens=990_000
        )
        for _ in range(4):
            fake_llm_server.enqueue("messages", "<summary>Waiting on the task.</summary>")
        claude.run("Wait in the background.", extra_args=SMALL, check=False)
        compactions = [r for r in fake_llm_server.requests if claude_compaction_request(r.json)]
        [request] = compactions
        prompt = json.dumps(request.json["messages"][-1])
        assert "Still pending, NOT done" in prompt
        assert "- Bash `sleep 2` (" in prompt and "): still running" in prompt


def test_claude_code_does_not_block_on_a_superseded_failure_or_a_question(
    claude: ClaudeCode, fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    """A command that failed and then succeeded with other arguments is not pending, nor is a
    question put to the user: /compact proceeds."""
    notes = tmp_path / "work" / "notes.txt"
    notes.write_text("deploy at 10:00\n", encoding="utf-8")
    failed = {"command": f"grep -q deploy {notes}.bak", "description": "Search"}
    succeeded = {"command": f"grep -c deploy {notes}", "description": "Search"}
    fake_llm_server.enqueue("messages", tool_calls=[ToolCall("Bash", failed, id="toolu_f")])
    fake_llm_server.enqueue("messages", tool_calls=[ToolCall("Bash", succeeded, id="toolu_s")])
    fake_llm_server.enqueue("messages", "The notes mention one deploy. Shall I schedule it?")
    fake_llm_server.enqueue("messages", "<summary>The notes mention one deploy.</summary>")
    first = claude.run("Do the notes mention a deploy?", extra_args=SMALL)
    records = claude.session_records(first.session_id)
    assert "Exit code" in json.dumps(records)  # the first grep really failed

    compacted = claude.compact(first.session_id, extra_args=SMALL)

    assert compacted.output["is_error"] is False, compacted.result
    assert "blocked" not in compacted.result
    assert len([r for r in fake_llm_server.requests if claude_compaction_request(r.json)]) == 1


def _repository(root: Path) -> Path:
    """A repository in the CLI's working directory with a commit to push, and its remote."""
    remote = root / "remote.git"
    work = root / "work"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    for argv in (
        ["init", "-q", "-b", "main"], ["remote", "add", "origin", str(remote)],
        ["-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit", "-q",
         "--allow-empty", "-m", "Fix rounding"],
    ):  # fmt: skip
        subprocess.run(["git", "-C", str(work), *argv], check=True, capture_output=True)
    return remote


def test_claude_code_repair_lists_the_completed_push_as_done(
    claude: ClaudeCode, fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    _repository(tmp_path)
    push = {"command": "git push origin main", "description": "Push"}
    fake_llm_server.enqueue("messages", tool_calls=[ToolCall("Bash", push, id="toolu_push")])
    fake_llm_server.enqueue("messages", "Pushed main.")
    fake_llm_server.enqueue("messages", "<summary>The user asked to push the fix.</summary>")
    fake_llm_server.enqueue("messages", "All done.")
    first = claude.run("Push the fix.", extra_args=SMALL)
    assert claude.compact(first.session_id, extra_args=SMALL).output["is_error"] is False
    claude.run("Anything left?", resume=first.session_id, extra_args=SMALL)

    [request] = [r for r in fake_llm_server.requests if claude_compaction_request(r.json)]
    assert "- Bash: git push origin main (" in json.dumps(request.json["messages"][-1])
    following = "\n".join(_strings(fake_llm_server.requests[-1].json["messages"]))
    done = following.split("Done before the compaction, do not repeat", 1)[1]
    [line] = [line for line in done.splitlines() if "git push" in line]
    assert line.startswith("- Bash: git push origin main (")
    assert line.endswith(f"-> To {tmp_path / 'remote.git'}")
    assert "not done yet" not in following


def test_claude_code_warned_auto_compaction_is_archived_and_recalled(
    claude: ClaudeCode, fake_llm_server: FakeLLMServer
) -> None:
    """An automatic compaction over an unkept promise only warns (the default policy), is
    archived, and the repair names a recall command that, run as printed, prints it."""
    fake_llm_server.enqueue(
        "messages", "I will verify the deployment of web-7 next.", input_tokens=990_000
    )
    fake_llm_server.enqueue("messages", "<summary>The user asked to deploy web-7.</summary>")
    fake_llm_server.enqueue("messages", "Verifying.")
    first = claude.run("Deploy web-7.", extra_args=SMALL)
    claude.run("Go on.", resume=first.session_id, extra_args=SMALL)

    log = read_session(claude.session_file(first.session_id))
    assert [c.trigger for c in log.compactions] == ["auto"]
    following = "\n".join(_strings(fake_llm_server.requests[-1].json["messages"]))
    assert 'promise "I will verify the deployment of web-7 next."' in following
    [recall] = [
        part for part in following.split("`") if " archive show arc_" in part and "--db" in part
    ]
    shown = _run_as_printed(recall, claude.env)
    assert shown.returncode == 0, shown.stderr
    assert f"conversation: {first.session_id}" in shown.stdout
    assert "I will verify the deployment of web-7 next." in shown.stdout
    assert shlex.split(recall)[1:4] == ["-m", "otel_compaction", "archive"]


def _repository_at(work: Path, remote: Path) -> None:
    """A git repository in `work` with one commit, and a bare `remote` as its origin."""
    git = ("git", "-c", "user.name=t", "-c", "user.email=t@example.com")
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    (work / "README.md").write_text("# shop\n", encoding="utf-8")
    subprocess.run([*git, "-C", str(work), "add", "README.md"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-q", "-m", "first"], check=True)
    subprocess.run(["git", "-C", str(work), "remote", "add", "origin", str(remote)], check=True)


def test_claude_code_stops_a_push_reissued_after_a_compaction_not_a_reread(
    claude: ClaudeCode, fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    """The push ran before the compaction; after it the model, no longer seeing it, reads the
    README again (a read: it runs) and pushes again: the PreToolUse hook stops the push,
    naming the earlier one and its outcome."""
    work = tmp_path / "work"
    _repository_at(work, tmp_path / "remote.git")
    readme = str(work / "README.md")
    push = {"command": "git push origin main", "description": "Push"}
    fake_llm_server.enqueue(
        "messages", tool_calls=[ToolCall("Read", {"file_path": readme}, id="toolu_r1")]
    )
    fake_llm_server.enqueue("messages", tool_calls=[ToolCall("Bash", push, id="toolu_p1")])
    fake_llm_server.enqueue("messages", "Pushed main.")
    fake_llm_server.enqueue("messages", "<summary>The user asked to publish the shop.</summary>")
    fake_llm_server.enqueue(
        "messages", tool_calls=[ToolCall("Read", {"file_path": readme}, id="toolu_r2")]
    )
    fake_llm_server.enqueue("messages", tool_calls=[ToolCall("Bash", push, id="toolu_p2")])
    fake_llm_server.enqueue("messages", "Stopped.")

    first = claude.run("Publish the shop.", extra_args=SMALL)
    assert claude.compact(first.session_id, extra_args=SMALL).output["is_error"] is False
    claude.run("Is it published?", resume=first.session_id, extra_args=SMALL)

    results = {
        block["tool_use_id"]: json.dumps(block.get("content"))
        for message in fake_llm_server.requests[-1].json["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    }
    assert "# shop" in results["toolu_r2"]  # the re-read ran
    stopped = results["toolu_p2"]
    assert "otel-compaction: this repeats Bash `git push origin main` (call toolu_p1)" in stopped
    assert "before the last compaction, with outcome success" in stopped


def test_codex_refuses_a_push_reissued_after_a_compaction_not_a_reread(
    codex: Codex, fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    """Codex 0.171.0 runs PreToolUse hooks but accepts only ``deny`` from them: under the
    default ``ask`` the first re-issue is refused with the reason naming the earlier push."""
    work = tmp_path / "work"
    _repository_at(work, tmp_path / "remote.git")
    read = {"cmd": f"cat {work / 'README.md'}"}
    push = {"cmd": "git push origin main"}
    fake_llm_server.enqueue("responses", tool_calls=[ToolCall("exec_command", read, id="call_r1")])
    fake_llm_server.enqueue("responses", tool_calls=[ToolCall("exec_command", push, id="call_p1")])
    fake_llm_server.enqueue("responses", "Pushed main.")
    fake_llm_server.enqueue("responses", "The user asked to publish the shop.")  # the summary
    fake_llm_server.enqueue("responses", tool_calls=[ToolCall("exec_command", read, id="call_r2")])
    fake_llm_server.enqueue("responses", tool_calls=[ToolCall("exec_command", push, id="call_p2")])
    fake_llm_server.enqueue("responses", "Stopped.")
    with codex.app_server() as server:
        thread = server.start_thread()
        assert server.run_turn(thread, "Publish the shop.")["status"] == "completed"
        assert server.compact(thread)["status"] == "completed"
        assert server.run_turn(thread, "Is it published?")["status"] == "completed"
    outputs = {
        item["call_id"]: json.dumps(item.get("output"))
        for item in fake_llm_server.requests[-1].json["input"]
        if item.get("type") == "function_call_output"
    }
    assert "# shop" in outputs["call_r2"]  # the re-read ran
    stopped = outputs["call_p2"]
    assert (
        "otel-compaction: this repeats exec_command `git push origin main` (call call_p1)"
        in stopped
    )
    assert "before the last compaction, with outcome success" in stopped
