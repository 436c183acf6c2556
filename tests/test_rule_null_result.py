"""``null_result``: which tool results are negatives to carry, judged as the tool's outcome
(its error flag, its exit code, its family), never by the words of the data it returned."""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_compaction import Policy
from otel_compaction.analysis import Analysis
from otel_compaction.transcript import Transcript

POLICY = Policy.load("default")


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": call_id, "name": name, "input": arguments}],
    }


def _result(call_id: str, text: str, error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": text}
    if error:
        block["is_error"] = True
    return {"role": "user", "content": [block]}


def _analysis(*steps: tuple[str, dict[str, Any], str, bool]) -> Analysis:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for number, (name, arguments, text, error) in enumerate(steps):
        messages += [_call(f"c{number}", name, arguments), _result(f"c{number}", text, error)]
    return Analysis.build(Transcript.parse(messages), POLICY)


def _verdict(name: str, arguments: dict[str, Any], text: str, error: bool = False) -> str:
    """The outcome of one result, and whether it is carried as a negative."""
    analysis = _analysis((name, arguments, text, error))
    return f"{analysis.outcomes[0]}{' negative' if analysis.negatives else ''}"


READ = {"file_path": "/srv/app/errors.py"}
LONG_LISTING = (
    "total 0\ndrwxr-xr-x  2 u s   64 Sep  3 09:47 .\ndrwxr-xr-x 39 u s 1248 Sep  3 09:47 .."
)
# An installer's prompt as a prompt library draws it with no terminal to answer it, and one
# redrawn as answered.
PROMPT = "\x1b[36m?\x1b[39m \x1b[1mUse a src/ directory?\x1b[22m \x1b[90m\u203a\x1b[39m No / Yes"
ANSWERED = (
    "\x1b[36m?\x1b[39m Use Turbopack? \u203a No / Yes\x1b[2K\x1b[1G"
    "\x1b[32m\u2714\x1b[39m Use Turbopack? \u2026 No / Yes"
)
CODE = "     1\tclass NotFoundError(Exception):\n     2\t    raise KeyError(':not_found')\n"
CASES = [
    # Not negatives: the data a call returned may mention anything.
    ("Read", READ, CODE, False, "success"),  # a file's content with error words
    ("Bash", {"command": "cat src/errors.py"}, "raise ValueError('not found')", False, "success"),
    ("Bash", {"command": "sed -n 1,5p a.py"}, "    raise KeyError('not found')", False, "success"),
    ("shell_command", {"command": "Get-Content SKILL.md"}, "Exit code: 0\nWall time: 1 seconds"
     "\nOutput:\n---\nIf the file is not found, stop.\n", False, "success"),  # exit 0: the file
    ("Glob", {"pattern": "**/*.ts"}, "error.ts", False, "success"),  # a file named error.ts
    ("Bash", {"command": "ls src"}, "errors\nerror.ts\nnot_found.py", False, "success"),
    ("Grep", {"pattern": "raise"}, "src/a.py:3: raise KeyError('not found')", False, "success"),
    ("Bash", {"command": "git status --short"}, "", False, "silent"),  # ran, said nothing
    ("Bash", {"command": "ls -la src"}, LONG_LISTING + "\n-rw-r--r-- 1 u s 9 Sep 3 09:47 a.ts",
     False, "success"),  # one entry beside . and ..
    ("Bash", {"command": "npx create-app web"}, ANSWERED + "\nCreating a new app in /srv/web."
     "\nInstalling dependencies:\n- react\n- next\nDone.", False, "success"),  # answered
    ("Bash", {"command": "go test ./..."}, "?   \texample.com/x\t[no test files]\n"
     "ok  \texample.com/y\t0.01s", False, "success"),  # a "?" line that is no prompt
    # Cancelled: it never ran, so it says nothing about its subject (and is no success).
    ("Bash", {"command": "npm test"}, "<tool_use_error>Sibling tool call errored</tool_use_error>",
     True, "cancelled"),
    ("Read", READ, "<tool_use_error>Cancelled: parallel tool call Bash(npm test) errored"
     "</tool_use_error>", True, "cancelled"),
    ("Bash", {"command": "make"}, "[Request interrupted by user for tool use]", True, "cancelled"),
    ("shell_command", {"command": "make"}, "aborted", False, "cancelled"),  # Codex interrupt
    # True negatives.
    ("Bash", {"command": "pytest -q"}, "Exit code 1\n.F.\nFAILED test_total", True,
     "failure negative"),  # a test failure
    ("Bash", {"command": "foo"}, "Exit code 127\n/bin/bash: foo: command not found", True,
     "absence negative"),  # command not found
    ("shell_command", {"command": "bash --version"}, "Exit code: 1\nWall time: 9 seconds\n"
     "Output:\nbash : The term 'bash' is not recognized", False, "failure negative"),
    ("exec_command", {"cmd": "make"}, "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with "
     "code 2\nOriginal token count: 3\nOutput:\nmake: *** No rule", False, "failure negative"),
    ("shell", {"command": ["bash", "-lc", "make"]}, json.dumps(
        {"output": "make: *** No targets", "metadata": {"exit_code": 2}}), False,
     "failure negative"),  # Codex's JSON envelope
    ("shell_command", {"command": "Get-Content a.md"},
     "execution error: Io(windows sandbox: runner error)", False, "failure negative"),
    ("Glob", {"pattern": "README.md"}, "No files found", False, "absence negative"),
    ("Grep", {"pattern": "legacy"}, "No matches found", False, "absence negative"),
    ("Bash", {"command": "find . -name '*.md' | head"}, "", False, "absence negative"),  # empty
    ("Bash", {"command": "ls -la src/hooks"}, LONG_LISTING, False,
     "absence negative"),  # only the directory itself and its parent: empty
    ("Bash", {"command": "ls -a src/hooks"}, ".\n..", False, "absence negative"),
    ("Bash", {"command": "npx create-app web"}, PROMPT + "\nnpm warn exec The following "
     "package was not found and will be installed: create-app@1", False,
     "failure negative"),  # stopped at a prompt nobody answered: nothing was created
    ("Bash", {"command": "echo | npx create-app web"}, ANSWERED + "\n" + PROMPT, False,
     "failure negative"),  # the first answered, the next one not
    ("Bash", {"command": "grep -rn legacy src"}, "Exit code 1", True, "absence negative"),
    ("Bash", {"command": "tree t || find t | sort"}, "find: 't': No such file or directory",
     False, "absence negative"),
    ("get_reservation_details", {"reservation_id": "IFOYWZ"}, "Error: Reservation IFOYWZ not "
     "found", False, "absence negative"),  # a domain API's own statement
    ("search_direct_flight", {"origin": "JFK"}, "[]", False, "absence negative"),
    ("lookup", {"id": "x"}, '{"error": "user not found"}', False, "absence negative"),
    ("Edit", {"file_path": "a.py"}, "The user doesn't want to proceed with this tool use. The "
     "tool use was rejected.", True, "rejection negative"),
    ("Write", {"file_path": "a.md"}, "Claude requested permissions to write to a.md, but you "
     "haven't granted it yet.", True, "rejection negative"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "arguments", "text", "error", "verdict"), CASES)
def test_verdict(
    name: str, arguments: dict[str, Any], text: str, error: bool, verdict: str
) -> None:
    assert _verdict(name, arguments, text, error) == verdict


def test_a_transient_failure_a_retry_got_past_is_no_negative() -> None:
    # A 503, then the same call (only its description changed) succeeds.
    analysis = _analysis(
        ("WebFetch", {"url": "https://x.test/a", "description": "fetch"},
         "Error: 503 Service Unavailable", True),
        ("WebFetch", {"url": "https://x.test/a", "description": "retry"}, "<html>a</html>", False),
    )  # fmt: skip
    assert analysis.outcomes == ["failure", "success"]
    assert analysis.negatives == []


def test_a_sandbox_failure_retried_the_same_way_is_no_negative() -> None:
    command = {"command": "Get-Content a.md", "workdir": "C:\\r"}
    analysis = _analysis(
        ("shell_command", command, "execution error: Io(sandbox: runner error)", False),
        ("shell_command", {**command, "justification": "again"},
         "Exit code: 0\nWall time: 1 seconds\nOutput:\nhi", False),
    )  # fmt: skip
    assert analysis.negatives == []


def test_a_sandbox_failure_retried_with_escalation_stands() -> None:
    # The escalated retry is another way to run it: the failure is why later commands escalate.
    command = {"command": "Get-Content a.md", "workdir": "C:\\r"}
    analysis = _analysis(
        ("shell_command", command, "execution error: Io(sandbox: runner error)", False),
        ("shell_command", {**command, "sandbox_permissions": "require_escalated",
         "justification": "read it"}, "Exit code: 0\nWall time: 1 seconds\nOutput:\nhi", False),
    )  # fmt: skip
    assert [(n.message_index, n.outcome) for n in analysis.negatives] == [(2, "failure")]


def test_a_timeout_retried_with_a_longer_timeout_stands() -> None:
    analysis = _analysis(
        ("Bash", {"command": "npm ci", "timeout": 60000}, "Command timed out after 1m", True),
        ("Bash", {"command": "npm ci", "timeout": 600000}, "added 312 packages", False),
    )
    assert [n.message_index for n in analysis.negatives] == [2]


def test_a_test_failure_fixed_later_is_still_a_negative() -> None:
    # Not transient: the failure was a fact of the code before the fix.
    analysis = _analysis(
        ("Bash", {"command": "pytest -q"}, "Exit code 1\nFAILED test_total", True),
        ("Bash", {"command": "pytest -q"}, "3 passed", False),
    )
    assert [n.message_index for n in analysis.negatives] == [2]


def test_the_same_negative_again_keeps_only_the_latest() -> None:
    analysis = _analysis(
        ("Glob", {"pattern": "a.md"}, "No files found", False),
        ("Glob", {"pattern": "a.md"}, "No files found", False),
    )
    assert [n.message_index for n in analysis.negatives] == [4]


def test_a_cancelled_sibling_supersedes_nothing_and_is_no_negative() -> None:
    analysis = _analysis(
        ("Bash", {"command": "npm test"}, "Exit code 1\nFAIL", True),
        ("Bash", {"command": "npm test"}, "<tool_use_error>Sibling tool call errored", True),
    )
    assert [(n.message_index, n.outcome) for n in analysis.negatives] == [(2, "failure")]


def test_an_empty_failure_is_named_by_its_exit_code() -> None:
    analysis = _analysis(("Bash", {"command": "make"}, "Exit code 2", True))
    assert [n.text for n in analysis.negatives] == ["exit code 2"]


def test_a_prompt_nobody_answered_is_named_in_the_excerpt() -> None:
    analysis = _analysis(("Bash", {"command": "npx create-app web"}, PROMPT, False))
    assert [n.text for n in analysis.negatives] == [
        "stopped at a prompt nobody answered: ? Use a src/ directory? \u203a No / Yes"
    ]
