"""``open_background_task``: work that goes on after its call was answered.

A Claude Code ``Bash`` run with ``run_in_background`` (polled by ``BashOutput``, stopped by
``KillBash``) and a Codex ``exec_command`` whose process outlives the call ("Process running
with session ID N", polled by ``write_stdin`` with that ``session_id``) are tasks while they
run. A running task is carried by its handle, never a block, and never discharged as
abandoned while it runs.
"""

from __future__ import annotations

import json

import pytest
from transcript_builders import ANTHROPIC, RESPONSES, Call, Script, policy_with

from otel_compaction import CompactionGate, CompactionRefused, GuardedCompactor
from otel_compaction.analysis import Analysis
from otel_compaction.policy import Policy
from otel_compaction.transcript import Transcript

PADDING = "Please keep a careful record of everything in this conversation. " * 40


def tasks(s: Script) -> list[tuple[str, int, int | None, str]]:
    analysis = Analysis.build(Transcript.parse(s.messages), Policy.load("default").compile())
    return [(o.id, o.opened, o.resolved, o.status) for o in analysis.facts["open_background_task"]]


def exec_output(text: str, *, running: int | None = None, code: int = 0) -> str:
    """What Codex's unified exec answers: the process still running, or its exit."""
    state = (
        f"Process running with session ID {running}"
        if running
        else f"Process exited with code {code}"
    )
    head = "Chunk ID: 3f9592\nWall time: 10.0 seconds"
    return f"{head}\n{state}\nOriginal token count: 9\nOutput:\n{text}\n"


def dev_server(s: Script) -> None:
    """Claude Code, as in the real session: a dev server in the background, polled."""
    s.user("Start the dev server and check it.")
    s.call(Call("b1", "Bash", {"command": "npm run dev", "run_in_background": True}))
    s.result("b1", "Command running in background with ID: bash_2")
    s.call(Call("o1", "BashOutput", {"bash_id": "bash_2"}))
    # Its output says "completed", but its status says it still runs.
    s.result("o1", "<status>running</status>\n\n<stdout>\n✓ Compiled, build completed\n</stdout>")


def test_a_polled_server_still_running_is_open_whatever_its_output_says() -> None:
    s = Script(ANTHROPIC)
    dev_server(s)
    assert tasks(s) == [("bash_2", 2, None, "open")]


def test_kill_bash_stops_the_task() -> None:
    s = Script(ANTHROPIC)
    dev_server(s)
    s.call(Call("k1", "KillBash", {"shell_id": "bash_2"}))
    killed = s.result("k1", json.dumps({"success": True, "shell_id": "bash_2"}))
    assert tasks(s) == [("bash_2", 2, killed, "stopped")]


def codex_session(s: Script) -> None:
    s.user("Run the test watcher.")
    s.call(Call("e1", "exec_command", {"cmd": "npm test -- --watch", "yield_time_ms": 10000}))
    s.result("e1", exec_output("PASS src/a.test.ts", running=7))
    s.call(Call("w1", "write_stdin", {"session_id": 7, "chars": ""}))
    # Still running: the poll's output names the session again, and a test "completed".
    s.result("w1", exec_output("Tests completed: 3 passed", running=7))


def test_a_codex_session_still_alive_is_a_task_named_by_its_session_id() -> None:
    s = Script(RESPONSES)
    codex_session(s)
    assert tasks(s) == [("7", 2, None, "open")]  # one task: a poll is not a second launch


def test_a_codex_session_ends_when_a_poll_says_the_process_exited() -> None:
    s = Script(RESPONSES)
    codex_session(s)
    s.call(Call("w2", "write_stdin", {"session_id": 7, "chars": "q"}))
    exited = s.result("w2", exec_output("bye", code=0))
    assert tasks(s) == [("7", 2, exited, "finished")]


def test_a_command_that_exits_within_its_call_is_no_task() -> None:
    s = Script(RESPONSES)
    s.user("echo")
    s.call(Call("e1", "exec_command", {"cmd": "echo hi"}))
    s.result("e1", exec_output("hi", code=0))
    assert tasks(s) == []


def test_another_sessions_exit_does_not_end_it() -> None:
    s = Script(RESPONSES)
    codex_session(s)
    s.call(Call("w2", "write_stdin", {"session_id": 71, "chars": ""}))  # 71, not 7
    s.result("w2", exec_output("", code=0))
    s.call(Call("e2", "exec_command", {"cmd": "ls 7"}))  # names 7 only in its text
    s.result("e2", exec_output("7: no such file", code=2))
    assert tasks(s) == [("7", 2, None, "open")]


def test_a_running_task_is_carried_by_its_handle_not_blocking() -> None:
    s = Script(ANTHROPIC)
    dev_server(s)
    s.say("The dev server runs in the background (bash_2).")
    s.user("Now the docs.")
    for critical in (False, True):
        decision = CompactionGate("default").evaluate(s.messages, 0, 5, critical=critical)
        assert (decision.action, decision.span) == ("compact", (0, 5)), critical
        assert decision.blocking == ()
        assert [(r.kind, r.id) for r in decision.must_carry.pending] == [
            ("background_task", "bash_2")
        ]


def test_compact_or_force_never_abandons_a_running_task() -> None:
    s = Script(ANTHROPIC)
    s.user(PADDING)
    s.say("Understood.")
    dev_server(s)
    blocking = policy_with("default", rules={"open_background_task": "block"})
    compactor = GuardedCompactor(budget=200, policy=blocking)
    with pytest.raises(CompactionRefused) as refused:  # the refusal stands: the task runs on
        compactor.compact_or_force(
            s.messages, conversation_id="bg-1", critical=True, end=len(s.messages)
        )
    assert [(r.kind, r.id) for r in refused.value.obligations] == [("background_task", "bash_2")]
    assert compactor.ledger.snapshot("bg-1").obligations == ()  # nothing recorded abandoned


NOTIFICATION = (
    "<task-notification>\n<task-id>b7k2m9</task-id>\n<status>completed</status>\n"
    '<summary>Background command "Run the tests" completed (exit code 0)</summary>\n'
    "</task-notification>"
)


def background_tests(s: Script) -> None:
    """Claude Code 2.x: a background run whose end the runtime reports in a notification."""
    s.user("Run the tests in the background.")
    s.call(Call("b1", "Bash", {"command": "pytest -q", "run_in_background": True}))
    s.result("b1", "Command running in background with ID: b7k2m9")


def test_a_task_whose_completion_notification_arrived_is_closed_there() -> None:
    s = Script(ANTHROPIC)
    background_tests(s)
    s.say("Waiting for the test run.")
    notified = s.user(NOTIFICATION)
    assert tasks(s) == [("b7k2m9", 2, notified, "finished")]


def test_a_later_result_naming_it_done_does_not_move_the_close_past_the_notification() -> None:
    s = Script(ANTHROPIC)
    background_tests(s)
    notified = s.user(NOTIFICATION)
    s.call(Call("r1", "Bash", {"command": "cat /tmp/tasks/b7k2m9.output"}))
    s.result("r1", "b7k2m9: 4 passed, run completed")
    assert tasks(s) == [("b7k2m9", 2, notified, "finished")]
