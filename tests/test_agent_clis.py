"""The real Claude Code and Codex CLIs, offline against the fake model server: tool calls,
compaction (manual and automatic), the hooks around it, and background tasks.

Each test scripts what the fake model answers, runs the CLI (``agent_clis``) and checks what
the CLI sent the model, what its hooks received and what it wrote to its session log. The
tests skip (fail under ``CI=true``) when a CLI is not installed; ``agent_clis.INSTALL_COMMAND``
installs both. ``OTEL_COMPACTION_RECORD_SESSIONS=1`` copies the session files of the
compaction tests to ``tests/data/sessions`` (see ``NOTES.md`` there).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from agent_clis import (
    CLAUDE_CODE_VERSION,
    CODEX_COMPACTION_MARKER,
    CODEX_SUMMARY_PREFIX,
    CODEX_VERSION,
    SESSIONS_DIR,
    ClaudeCode,
    Codex,
    claude_compaction_request,
    cli_version,
    codex_request_kind,
    last_user_text,
    read_jsonl,
    record_session,
    require_cli,
)
from fake_llm_server import (
    Dynamic,
    FakeLLMServer,
    RecordedRequest,
    Reply,
    ToolCall,
)
from loopback import http_request

# A smaller session log for tests/data/sessions: two tools instead of a dozen, and no copy of
# the system prompt recorded in the log (`prompt_snapshot` records).
SMALL_CLAUDE_SESSION = ("--tools", "Bash,Read", "--system-prompt-snapshot", "off")

BACKGROUND_RESULT = re.compile(
    r"Command running in background with ID: (?P<id>\w+)\. Output is being written to: "
    r"(?P<path>\S+/tasks/(?P=id)\.output)\. You will be notified when it completes\. "
    r"To check interim output, use Read on that file path\."
)
"""The whole tool_result Claude Code 2.1.332 answers a ``run_in_background`` Bash call with."""


def session_context(source: str) -> dict[str, Any]:
    """A SessionStart hook answer adding context that names the session's ``source``."""
    return {
        "hookSpecificOutput": {
            "hookEventName": "SessionStart",
            "additionalContext": f"CONTEXT-AFTER-{source.upper()}",
        }
    }


def text_of(request: RecordedRequest) -> str:
    """The whole body of a request as JSON text, for "is this anywhere in it" checks."""
    return json.dumps(request.body)


def first_user_text(request: RecordedRequest) -> str:
    """The text of the first message of a Messages request (a user message)."""
    return last_user_text({"messages": request.json["messages"][:1]})


def tool_names(request: RecordedRequest) -> list[str]:
    """The names of the tools a request offers."""
    return [str(tool.get("name") or tool.get("type")) for tool in request.json.get("tools", [])]


# --------------------------------------------------------------------------
# The fake server's additions for the CLIs (no CLI needed)
# --------------------------------------------------------------------------


def post(server: FakeLLMServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, _, raw = http_request(
        server.port,
        "POST",
        path,
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
        timeout=10,
    )
    assert status == 200, raw
    answer = json.loads(raw)
    assert isinstance(answer, dict)
    return answer


def test_fake_server_reports_the_scripted_input_tokens(fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.enqueue("messages", "full", input_tokens=990_000)
    fake_llm_server.enqueue("responses", "full", input_tokens=5_000)
    fake_llm_server.enqueue("chat", "full", input_tokens=7)
    fake_llm_server.enqueue("messages", "estimated")

    messages = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    assert post(fake_llm_server, "/v1/messages", messages)["usage"]["input_tokens"] == 990_000
    response = post(fake_llm_server, "/v1/responses", {"model": "m", "input": "hi"})
    assert response["usage"]["input_tokens"] == 5_000
    assert response["usage"]["total_tokens"] == 5_000 + response["usage"]["output_tokens"]
    chat = post(fake_llm_server, "/v1/chat/completions", {"model": "m", "messages": []})
    assert chat["usage"]["prompt_tokens"] == 7
    assert post(fake_llm_server, "/v1/messages", messages)["usage"]["input_tokens"] < 100


def test_fake_server_dynamic_answer_reads_its_request(fake_llm_server: FakeLLMServer) -> None:
    def echo(request: RecordedRequest) -> Reply:
        return Reply(f"you said {request.json['messages'][-1]['content']}")

    fake_llm_server.enqueue_reply("messages", Dynamic(echo))
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "ping"}]}
    answer = post(fake_llm_server, "/v1/messages", body)
    assert answer["content"][0]["text"] == "you said ping"
    assert fake_llm_server.pending() == 0


# --------------------------------------------------------------------------
# The installed CLIs
# --------------------------------------------------------------------------


def test_installed_clis_are_the_pinned_versions() -> None:
    # NOTES.md, the recorded sessions and the texts these tests expect belong to these versions.
    assert cli_version(require_cli("claude")) == f"{CLAUDE_CODE_VERSION} (Claude Code)"
    assert cli_version(require_cli("codex")) == f"codex-cli {CODEX_VERSION}"


# --------------------------------------------------------------------------
# Claude Code
# --------------------------------------------------------------------------


@pytest.fixture
def claude(fake_llm_server: FakeLLMServer, tmp_path: Path) -> ClaudeCode:
    return ClaudeCode(fake_llm_server, tmp_path)


def test_claude_code_runs_a_tool_call(claude: ClaudeCode, fake_llm_server: FakeLLMServer) -> None:
    hooks = claude.hook("PreToolUse", "PostToolUse")
    echo = ToolCall("Bash", {"command": "echo hi", "description": "Print hi"}, id="toolu_echo")
    fake_llm_server.enqueue("messages", tool_calls=[echo])
    fake_llm_server.enqueue("messages", "It printed hi.")

    run = claude.run("Run echo hi")

    assert run.result == "It printed hi."
    assert run.output["is_error"] is False
    first, second = fake_llm_server.requests_to("messages")
    assert (first.path, first.query, first.stream) == ("/v1/messages", "beta=true", True)
    assert first.headers["x-api-key"] == "sk-fake-otel-compaction-tests"
    assert first.headers["x-claude-code-session-id"] == run.session_id
    assert "Run echo hi" in text_of(first)
    # The tool's result answers the call, in the next request.
    [result] = [
        part for part in second.json["messages"][-1]["content"] if part.get("type") == "tool_result"
    ]
    assert (result["tool_use_id"], result["content"], result["is_error"]) == (
        "toolu_echo",
        "hi",
        False,
    )
    # The hooks see the call by its Claude Code name, and its structured result.
    [before] = hooks.payloads("PreToolUse")
    [after] = hooks.payloads("PostToolUse")
    assert before["tool_name"] == after["tool_name"] == "Bash"
    assert before["tool_input"] == {"command": "echo hi", "description": "Print hi"}
    assert after["tool_response"]["stdout"] == "hi"
    assert after["tool_use_id"] == "toolu_echo"
    # The session log: one record per content block, carrying the API message.
    records = claude.session_records(run.session_id)
    uses = [
        block
        for record in records
        if record["type"] == "assistant"
        for block in record["message"]["content"]
        if block["type"] == "tool_use"
    ]
    assert [use["id"] for use in uses] == ["toolu_echo"]
    results = [
        record
        for record in records
        if record["type"] == "user" and isinstance(record["message"]["content"], list)
    ]
    assert results[0]["message"]["content"][0]["tool_use_id"] == "toolu_echo"
    assert results[0]["toolUseResult"]["stdout"] == "hi"


def test_claude_code_compact_runs_hooks_and_asks_for_a_summary(
    claude: ClaudeCode, fake_llm_server: FakeLLMServer
) -> None:
    hooks = claude.hook("PreCompact", "PostCompact", "SessionStart")
    hooks.respond("PreCompact", stdout="Keep every open tool call.")
    for source in ("startup", "resume", "compact"):
        hooks.respond("SessionStart", stdout=session_context(source), when={"source": source})
    echo = ToolCall("Bash", {"command": "echo hi", "description": "Print hi"}, id="toolu_echo")
    summary = (
        "<analysis>The user ran echo.</analysis>\n<summary>THE-SUMMARY: echo hi ran.</summary>"
    )
    fake_llm_server.enqueue("messages", tool_calls=[echo])
    fake_llm_server.enqueue("messages", "It printed hi.")
    fake_llm_server.enqueue("messages", summary)
    fake_llm_server.enqueue("messages", "Nothing is left to do.")

    first = claude.run("Run echo hi", extra_args=SMALL_CLAUDE_SESSION)
    session = first.session_id
    before = len(fake_llm_server.requests)
    compacted = claude.compact(session, "Mind the echo.", extra_args=SMALL_CLAUDE_SESSION)
    assert compacted.session_id == session
    assert compacted.output["is_error"] is False
    assert (compacted.output["num_turns"], compacted.result) == (0, "")
    after = claude.run("What next?", resume=session, extra_args=SMALL_CLAUDE_SESSION)
    assert after.result == "Nothing is left to do."

    # PreCompact: what it gets on stdin.
    [pre] = hooks.payloads("PreCompact")
    assert set(pre) == {
        "session_id",
        "transcript_path",
        "cwd",
        "prompt_id",
        "hook_event_name",
        "trigger",
        "custom_instructions",
    }
    assert pre["session_id"] == session
    assert (pre["trigger"], pre["custom_instructions"]) == ("manual", "Mind the echo.")
    assert pre["transcript_path"] == str(claude.session_file(session))
    assert pre["cwd"] == str(claude.cwd)
    # The compaction request: an ordinary, streamed Messages call whose last user message
    # (the tool result's, here) ends with the summary instructions, the /compact arguments and
    # the PreCompact hook's stdout.
    [compaction] = fake_llm_server.requests[before : before + 1]
    assert claude_compaction_request(compaction.json)
    assert compaction.stream and tool_names(compaction)  # still offers the tools
    instructions = last_user_text(compaction.json)
    assert instructions.startswith("CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.")
    assert "<analysis>" in instructions and "<summary>" in instructions
    assert "Additional Instructions:\nMind the echo.\n\nKeep every open tool call." in instructions
    assert compaction.json["messages"][-1]["content"][0]["tool_use_id"] == "toolu_echo"
    assert sum(claude_compaction_request(r.json) for r in fake_llm_server.requests) == 1
    # PostCompact gets the model's answer verbatim; SessionStart fires again, source compact.
    [post_compact] = hooks.payloads("PostCompact")
    assert (post_compact["trigger"], post_compact["compact_summary"]) == ("manual", summary)
    sources = [payload["source"] for payload in hooks.payloads("SessionStart")]
    assert sources == ["startup", "resume", "compact", "resume"]
    # The next request starts from the summary (without the <analysis>), and carries the
    # context the SessionStart(compact) hook added, in a system-role message.
    following = fake_llm_server.requests[-1]
    opening = first_user_text(following)
    assert "This session is being continued from a previous conversation" in opening
    assert "Summary:\nTHE-SUMMARY: echo hi ran." in opening
    assert "The user ran echo." not in text_of(following)
    # The tail of the history is kept verbatim after the summary (compactMetadata's
    # preservedMessages): here the last answer, but not the tool call before it.
    assert "It printed hi." in text_of(following)
    assert "toolu_echo" not in text_of(following)
    system_texts = [
        text
        for message in following.json["messages"]
        if message["role"] == "system"
        for text in [json.dumps(message["content"])]
    ]
    assert any(
        "SessionStart hook additional context: CONTEXT-AFTER-COMPACT" in t for t in system_texts
    )
    # The session log: a compact_boundary, then the summary as a user record.
    records = claude.session_records(session)
    kinds = [(r["type"], r.get("subtype"), r.get("isCompactSummary")) for r in records]
    boundary = kinds.index(("system", "compact_boundary", None))
    assert kinds[boundary + 1] == ("user", None, True)
    assert records[boundary]["compactMetadata"]["trigger"] == "manual"
    assert "THE-SUMMARY" in records[boundary + 1]["message"]["content"]
    record_session(claude.session_file(session), "claude_code_compacted.jsonl")


@pytest.mark.parametrize(
    ("how", "answer"),
    [
        ("exit code 2", {"stderr": "NOT NOW: a tool call is open", "exit_code": 2}),
        (
            "decision block",
            {"stdout": {"decision": "block", "reason": "NOT NOW: a tool call is open"}},
        ),
    ],
)
def test_claude_code_pre_compact_hook_blocks_compaction(
    claude: ClaudeCode, fake_llm_server: FakeLLMServer, how: str, answer: dict[str, Any]
) -> None:
    hooks = claude.hook("PreCompact", "PostCompact")
    hooks.respond("PreCompact", **answer)
    fake_llm_server.enqueue("messages", "Hello.")
    first = claude.run("Hi")

    blocked = claude.compact(first.session_id)

    # A blocked /compact is no error to the CLI: exit code 0, the reason as the result.
    assert blocked.process.returncode == 0, how
    assert blocked.output["is_error"] is False
    reason = (
        f"Compaction blocked by PreCompact hook: [{hooks.command}]: NOT NOW: a tool call is open"
    )
    assert blocked.result == reason
    assert len(fake_llm_server.requests) == 1  # no compaction request was sent
    assert hooks.events == ["PreCompact"]
    records = claude.session_records(first.session_id)
    assert not [r for r in records if r.get("subtype") == "compact_boundary"]
    [outcome] = [r for r in records if r.get("subtype") == "local_command"]
    assert outcome["commandOutcome"] == {"kind": "failed"}
    assert outcome["content"] == f"<local-command-stderr>{reason}</local-command-stderr>"


def test_claude_code_auto_compacts_mid_turn_and_drops_the_tool_call(
    claude: ClaudeCode, fake_llm_server: FakeLLMServer
) -> None:
    hooks = claude.hook("PreCompact", "PostCompact", "SessionStart")
    echo = ToolCall("Bash", {"command": "echo hi", "description": "Print hi"}, id="toolu_echo")
    # The model's context window is 1,000,000 tokens: reporting 990,000 fills it.
    fake_llm_server.enqueue("messages", tool_calls=[echo], input_tokens=990_000)
    fake_llm_server.enqueue("messages", "<summary>AUTO-SUMMARY</summary>")
    fake_llm_server.enqueue("messages", "Done.")

    run = claude.run("Run echo hi", extra_args=SMALL_CLAUDE_SESSION)

    assert run.result == "Done."
    _, compaction, following = fake_llm_server.requests
    assert claude_compaction_request(compaction.json)
    # The compaction runs after the tool, before its result goes back to the model: the
    # summary request still holds the call and its result; the next one holds neither.
    assert "toolu_echo" in text_of(compaction)
    assert "toolu_echo" not in text_of(following)
    assert "Summary:\nAUTO-SUMMARY" in first_user_text(following)
    [pre] = hooks.payloads("PreCompact")
    assert (pre["trigger"], pre["custom_instructions"]) == ("auto", None)
    assert [p["trigger"] for p in hooks.payloads("PostCompact")] == ["auto"]
    assert [p["source"] for p in hooks.payloads("SessionStart")] == ["startup", "compact"]
    records = claude.session_records(run.session_id)
    [boundary] = [r for r in records if r.get("subtype") == "compact_boundary"]
    assert boundary["compactMetadata"]["trigger"] == "auto"
    record_session(claude.session_file(run.session_id), "claude_code_auto_compacted.jsonl")


def test_claude_code_background_bash_result_and_notification(
    claude: ClaudeCode, fake_llm_server: FakeLLMServer
) -> None:
    hooks = claude.hook("PostToolUse", "Stop")
    background = ToolCall(
        "Bash",
        {"command": "sleep 1; echo late", "description": "Wait", "run_in_background": True},
        id="toolu_bg",
    )
    fake_llm_server.enqueue("messages", tool_calls=[background])
    fake_llm_server.enqueue("messages", "Started it.")
    fake_llm_server.enqueue("messages", "It finished.")

    run = claude.run("Start a background job")

    # Headless Claude Code waits for the background task, then tells the model it ended,
    # in a user message of its own, and the model answers once more.
    assert run.result == "It finished."
    first, second, notified = fake_llm_server.requests
    [result] = second.json["messages"][-1]["content"]
    assert result["tool_use_id"] == "toolu_bg"
    match = BACKGROUND_RESULT.fullmatch(result["content"])
    assert match, result["content"]
    task = match["id"]
    assert match["path"].startswith(str(claude.root / "tmp"))
    assert Path(match["path"]).read_text() == "late\n\n[exited with code 0]\n"
    notice = last_user_text(notified.json)
    assert f"<task-id>{task}</task-id>" in notice
    assert "<tool-use-id>toolu_bg</tool-use-id>" in notice
    assert f"<output-file>{match['path']}</output-file>" in notice
    assert "<status>completed</status>" in notice
    assert '<summary>Background command "Wait" completed (exit code 0)</summary>' in notice
    # Tools: Bash starts the task, Read reads its output file; TaskStop (kill) and Monitor are
    # deferred tools, only named in a system message until ToolSearch loads them. There is no
    # BashOutput or KillShell in this version.
    names = tool_names(first)
    assert {"Bash", "Read", "ToolSearch"} <= set(names)
    assert not {"BashOutput", "KillShell", "TaskStop", "Monitor", "TaskOutput"} & set(names)
    deferred = text_of(first)
    assert "The following deferred tools are now available via ToolSearch" in deferred
    assert "\\nMonitor\\n" in deferred and "\\nTaskStop\\n" in deferred
    # The hooks see the task id; Stop lists the task while it runs.
    [posted] = hooks.payloads("PostToolUse")
    assert posted["tool_response"]["backgroundTaskId"] == task
    running, finished = hooks.payloads("Stop")
    assert running["background_tasks"] == [
        {
            "id": task,
            "type": "shell",
            "status": "running",
            "description": "Wait",
            "command": "sleep 1; echo late",
        }
    ]
    assert finished["background_tasks"] == []


def test_claude_code_task_stop_kills_a_background_task(
    claude: ClaudeCode, fake_llm_server: FakeLLMServer
) -> None:
    background = ToolCall(
        "Bash",
        {"command": "sleep 60; echo late", "description": "Wait", "run_in_background": True},
        id="toolu_bg",
    )

    def stop_the_task(request: RecordedRequest) -> Reply:
        match = BACKGROUND_RESULT.search(text_of(request))
        assert match, "no background task in the history"
        return Reply(tool_calls=(ToolCall("TaskStop", {"task_id": match["id"]}, id="toolu_stop"),))

    fake_llm_server.enqueue("messages", tool_calls=[background])
    search = ToolCall("ToolSearch", {"query": "select:TaskStop,Monitor"}, id="toolu_search")
    fake_llm_server.enqueue("messages", tool_calls=[search])
    fake_llm_server.enqueue_reply("messages", Dynamic(stop_the_task))
    fake_llm_server.enqueue("messages", "Stopped it.")

    run = claude.run("Start a job, then stop it", timeout=30)

    assert run.result == "Stopped it."
    assert run.process.seconds < 30
    _, started, loaded, stopped = fake_llm_server.requests
    match = BACKGROUND_RESULT.fullmatch(started.json["messages"][-1]["content"][0]["content"])
    assert match
    # ToolSearch answers with tool references; the next request offers the tools themselves.
    [references] = [
        part for part in loaded.json["messages"][-1]["content"] if part["type"] == "tool_result"
    ]
    assert references["content"] == [
        {"type": "tool_reference", "tool_name": "TaskStop"},
        {"type": "tool_reference", "tool_name": "Monitor"},
    ]
    assert {"TaskStop", "Monitor"} <= set(tool_names(loaded))
    [task_stop] = [t for t in loaded.json["tools"] if t["name"] == "TaskStop"]
    assert set(task_stop["input_schema"]["properties"]) == {"task_id", "shell_id"}
    [result] = stopped.json["messages"][-1]["content"]
    assert result["tool_use_id"] == "toolu_stop"
    assert json.loads(result["content"]) == {
        "message": f"Successfully stopped task: {match['id']} (sleep 60; echo late)",
        "task_id": match["id"],
        "task_type": "local_bash",
        "command": "sleep 60; echo late",
    }


# --------------------------------------------------------------------------
# OpenAI Codex
# --------------------------------------------------------------------------


@pytest.fixture
def codex(fake_llm_server: FakeLLMServer, tmp_path: Path) -> Codex:
    return Codex(fake_llm_server, tmp_path)


def test_codex_exec_runs_a_tool_call(codex: Codex, fake_llm_server: FakeLLMServer) -> None:
    hooks = codex.hook("PreToolUse", "PostToolUse")
    echo = ToolCall("exec_command", {"cmd": "echo hi"}, id="call_echo")
    fake_llm_server.enqueue("responses", tool_calls=[echo])
    fake_llm_server.enqueue("responses", "It printed hi.")

    run = codex.exec("Run echo hi")

    assert run.messages == ["It printed hi."]
    first, second = fake_llm_server.requests_to("responses")
    assert (first.path, first.stream) == ("/v1/responses", True)
    assert first.headers["authorization"] == "Bearer sk-fake-otel-compaction-tests"
    assert codex_request_kind(first.headers) == codex_request_kind(second.headers) == "turn"
    assert {"exec_command", "write_stdin"} <= set(tool_names(first))
    assert last_user_text(first.json) == "Run echo hi"
    output = second.json["input"][-1]
    assert (output["type"], output["call_id"]) == ("function_call_output", "call_echo")
    assert output["output"].startswith("Chunk ID: ")
    assert "Process exited with code 0\n" in output["output"]
    assert output["output"].endswith("Output:\nhi\n")
    # The hooks call the tool Bash, whatever the model called it.
    [before] = hooks.payloads("PreToolUse")
    [after] = hooks.payloads("PostToolUse")
    assert before["tool_name"] == after["tool_name"] == "Bash"
    assert before["tool_input"] == {"command": "echo hi"}
    assert (after["tool_response"], after["tool_use_id"]) == ("hi\n", "call_echo")
    [command] = run.items("command_execution")
    assert command["aggregated_output"] == "hi\n"
    # The rollout holds the Responses items as they were sent.
    items = [
        r["payload"] for r in codex.rollout_records(run.thread_id) if r["type"] == "response_item"
    ]
    calls = [item for item in items if item["type"] in ("function_call", "function_call_output")]
    assert [(item["type"], item["call_id"]) for item in calls] == [
        ("function_call", "call_echo"),
        ("function_call_output", "call_echo"),
    ]


def test_codex_app_server_compacts_with_hooks(codex: Codex, fake_llm_server: FakeLLMServer) -> None:
    hooks = codex.hook("PreCompact", "PostCompact", "SessionStart")
    hooks.respond("PreCompact", stdout="Keep every open tool call.")
    for source in ("startup", "compact"):
        hooks.respond("SessionStart", stdout=session_context(source), when={"source": source})
    echo = ToolCall("exec_command", {"cmd": "echo hi"}, id="call_echo")
    fake_llm_server.enqueue("responses", tool_calls=[echo])
    fake_llm_server.enqueue("responses", "It printed hi.")
    fake_llm_server.enqueue("responses", "THE-SUMMARY: echo hi ran.")
    fake_llm_server.enqueue("responses", "Nothing is left to do.")

    with codex.app_server() as server:
        thread = server.start_thread()
        assert server.run_turn(thread, "Run echo hi")["status"] == "completed"
        compaction_turn = server.compact(thread)
        assert compaction_turn["status"] == "completed"
        assert server.run_turn(thread, "What next?")["status"] == "completed"
        compaction_items = [
            n["params"]["item"]
            for n in server.notifications
            if n["method"] == "item/completed" and n["params"]["turnId"] == compaction_turn["id"]
        ]
        assert [item["type"] for item in compaction_items] == ["contextCompaction"]

    turn, after_tool, compaction, following = fake_llm_server.requests
    # The compaction request: header request_kind "compaction", no tools, the history as it
    # was, then a user message asking for a handoff summary (the PreCompact hook's stdout is
    # not passed on).
    assert [codex_request_kind(r.headers) for r in fake_llm_server.requests] == [
        "turn",
        "turn",
        "compaction",
        "turn",
    ]
    assert tool_names(compaction) == []
    assert compaction.json["parallel_tool_calls"] is False
    assert last_user_text(compaction.json).startswith(CODEX_COMPACTION_MARKER)
    assert "Keep every open tool call." not in text_of(compaction)
    assert "call_echo" in text_of(compaction)
    # PreCompact and PostCompact payloads: no instructions, no summary.
    [pre] = hooks.payloads("PreCompact")
    assert set(pre) == {
        "session_id",
        "turn_id",
        "transcript_path",
        "cwd",
        "hook_event_name",
        "model",
        "trigger",
    }
    assert (pre["session_id"], pre["trigger"], pre["turn_id"]) == (
        thread,
        "manual",
        compaction_turn["id"],
    )
    assert pre["transcript_path"] == str(codex.rollout_file(thread))
    [post_compact] = hooks.payloads("PostCompact")
    assert set(post_compact) == set(pre)  # the same keys: no compact_summary
    # After it: the user's messages and the summary, in user messages; no tool call; the
    # SessionStart(compact) hook's context as a developer message.
    assert [p["source"] for p in hooks.payloads("SessionStart")] == ["startup", "compact"]
    assert "call_echo" not in text_of(following)
    user_texts = [
        text
        for item in following.json["input"]
        if item.get("role") == "user"
        for text in [json.dumps(item["content"])]
    ]
    assert any('"Run echo hi"' in text for text in user_texts)
    assert any(CODEX_SUMMARY_PREFIX in t and "THE-SUMMARY: echo hi ran." in t for t in user_texts)
    developer = [
        item["content"] for item in following.json["input"] if item.get("role") == "developer"
    ]
    assert [{"type": "input_text", "text": "CONTEXT-AFTER-COMPACT"}] in developer
    assert "CONTEXT-AFTER-STARTUP" in text_of(turn) and "CONTEXT-AFTER-STARTUP" in text_of(
        after_tool
    )
    # The rollout: a compacted record with the summary message and the replacement history.
    records = codex.rollout_records(thread)
    [compacted] = [r["payload"] for r in records if r["type"] == "compacted"]
    assert compacted["message"].startswith(CODEX_SUMMARY_PREFIX)
    assert compacted["message"].endswith("THE-SUMMARY: echo hi ran.")
    replacement = json.dumps(compacted["replacement_history"])
    assert "Run echo hi" in replacement and "call_echo" not in replacement
    record_session(codex.rollout_file(thread), "codex_compacted.jsonl")


@pytest.mark.parametrize(
    ("how", "answer", "blocks"),
    [
        ("continue false", {"stdout": {"continue": False, "stopReason": "NOT NOW"}}, True),
        ("exit code 2", {"stderr": "NOT NOW", "exit_code": 2}, False),
        ("decision block", {"stdout": {"decision": "block", "reason": "NOT NOW"}}, False),
    ],
)
def test_codex_pre_compact_hook_blocks_only_with_continue_false(
    codex: Codex,
    fake_llm_server: FakeLLMServer,
    how: str,
    answer: dict[str, Any],
    blocks: bool,
) -> None:
    hooks = codex.hook("PreCompact", "PostCompact")
    hooks.respond("PreCompact", **answer)
    fake_llm_server.enqueue("responses", "Hello.")
    fake_llm_server.enqueue("responses", "THE-SUMMARY")

    with codex.app_server() as server:
        thread = server.start_thread()
        server.run_turn(thread, "Hi")
        turn = server.compact(thread)
        [hook_run] = [
            n["params"]["run"]
            for n in server.notifications
            if n["method"] == "hook/completed" and n["params"]["run"]["eventName"] == "preCompact"
        ]

    kinds = [codex_request_kind(r.headers) for r in fake_llm_server.requests]
    if blocks:
        assert (turn["status"], kinds, hooks.events) == ("interrupted", ["turn"], ["PreCompact"])
        assert hook_run["status"] == "stopped"
        assert hook_run["entries"] == [{"kind": "stop", "text": "NOT NOW"}]
    else:
        assert (turn["status"], kinds) == ("completed", ["turn", "compaction"]), how
        assert hooks.events == ["PreCompact", "PostCompact"]
        assert hook_run["status"] == "failed"
        expected = (
            "NOT NOW"
            if how == "exit code 2"
            else "hook returned invalid PreCompact hook JSON output"
        )
        assert hook_run["entries"] == [{"kind": "error", "text": expected}]


def test_codex_exec_auto_compacts_mid_turn_and_drops_the_tool_call(
    fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    codex = Codex(
        fake_llm_server,
        tmp_path,
        config={"model_auto_compact_token_limit": 1000, "model_context_window": 100_000},
    )
    hooks = codex.hook("PreCompact", "PostCompact", "SessionStart")
    echo = ToolCall("exec_command", {"cmd": "echo hi"}, id="call_echo")
    fake_llm_server.enqueue("responses", tool_calls=[echo], input_tokens=5_000)
    fake_llm_server.enqueue("responses", "AUTO-SUMMARY")
    fake_llm_server.enqueue("responses", "Done.", input_tokens=500)

    run = codex.exec("Run echo hi")

    assert run.messages == ["Done."]
    _, compaction, following = fake_llm_server.requests
    assert codex_request_kind(compaction.headers) == "compaction"
    assert codex_request_kind(following.headers) == "turn"
    # Compacted after the tool ran and before its output went back: the summary request
    # holds the call and its output, the next one neither.
    assert '"function_call_output"' in text_of(compaction) and "call_echo" in text_of(compaction)
    assert "call_echo" not in text_of(following)
    assert "AUTO-SUMMARY" in text_of(following)
    assert [p["trigger"] for p in hooks.payloads("PreCompact")] == ["auto"]
    assert [p["trigger"] for p in hooks.payloads("PostCompact")] == ["auto"]
    assert [p["source"] for p in hooks.payloads("SessionStart")] == ["startup", "compact"]
    records = codex.rollout_records(run.thread_id)
    assert [r["type"] for r in records].count("compacted") == 1
    record_session(codex.rollout_file(run.thread_id), "codex_auto_compacted.jsonl")


# --------------------------------------------------------------------------
# The recorded sessions in tests/data/sessions
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["claude_code_compacted.jsonl", "claude_code_auto_compacted.jsonl"]
)
def test_recorded_claude_code_session_has_a_compaction(name: str) -> None:
    records = read_jsonl(SESSIONS_DIR / name)
    kinds = [(r["type"], r.get("subtype"), r.get("isCompactSummary")) for r in records]
    boundary = kinds.index(("system", "compact_boundary", None))
    assert kinds[boundary + 1] == ("user", None, True)
    assert {r["version"] for r in records if "version" in r} == {"2.1.332"}
    messages = [r["message"] for r in records if r["type"] in ("user", "assistant")]
    assert any(
        block.get("type") == "tool_use"
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
    )


@pytest.mark.parametrize("name", ["codex_compacted.jsonl", "codex_auto_compacted.jsonl"])
def test_recorded_codex_rollout_has_a_compaction(name: str) -> None:
    records = read_jsonl(SESSIONS_DIR / name)
    assert all({"timestamp", "type", "payload", "ordinal"} <= set(r) for r in records)
    assert [r["ordinal"] for r in records] == sorted(r["ordinal"] for r in records)
    assert records[0]["type"] == "session_meta"
    assert records[0]["payload"]["cli_version"] == "0.171.0"
    [compacted] = [r["payload"] for r in records if r["type"] == "compacted"]
    assert compacted["message"].startswith(CODEX_SUMMARY_PREFIX)
    assert isinstance(compacted["replacement_history"], list)
    items = [r["payload"]["type"] for r in records if r["type"] == "response_item"]
    assert "function_call" in items and "function_call_output" in items
