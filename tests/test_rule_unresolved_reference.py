"""``unresolved_reference``: exactly which identifiers a span owes, on small Claude Code-style
conversations (Anthropic Messages: ``tool_use`` and ``tool_result`` blocks).

Owed: a value first seen in the span that the assistant or the user refers to after it before
anything else supplies it. Not owed: what the harness re-supplies (a ``<task-notification>``
naming a background task's output file), the system's own paths, placeholders, and literals
written only into test code.
"""

from __future__ import annotations

from typing import Any

import pytest

from otel_compaction import CompactionGate
from otel_compaction.rules.unresolved_reference import owed, unowed

Messages = list[dict[str, Any]]

OUTPUT = "/tmp/claude-0/-path-to-Demo/5f1c2a/tasks/bk7q2x1.output"
NOTIFICATION = (
    "<system-reminder>\n[SYSTEM NOTIFICATION - NOT USER INPUT]\n<task-notification>\n"
    "<task-id>bk7q2x1</task-id>\n<tool-use-id>b1</tool-use-id>\n"
    f"<output-file>{OUTPUT}</output-file>\n<status>completed</status>\n"
    '<summary>Background command "Compile" completed (exit code 0)</summary>\n'
    "</task-notification>\n</system-reminder>"
)


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
    return {"role": "assistant", "content": [block]}


def result(call_id: str, text: str) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": text}
    return {"role": "user", "content": [block]}


def owed_values(messages: Messages, start: int, end: int) -> list[str]:
    analysis = CompactionGate("default").analyse(messages)
    return [value for value, _, _ in owed(analysis, start, end)[0]]


BACKGROUND: Messages = [
    {"role": "user", "content": "Compile /path/to/Demo in the background."},
    call("b1", "Bash", command="mix compile --force", run_in_background=True),
    result(
        "b1",
        f"Command running in background with ID: bk7q2x1. Output is being written to: {OUTPUT}."
        " You will be notified when it completes.",
    ),
    {"role": "assistant", "content": "Compiling in the background."},
]


def test_a_task_notification_resupplies_the_output_file() -> None:
    # The harness names the output file before the agent reads it: nothing to carry.
    messages = [*BACKGROUND, {"role": "user", "content": NOTIFICATION}]
    messages += [call("r1", "Read", file_path=OUTPUT), result("r1", "Compiled 4 files")]
    assert owed_values(messages, 1, 4) == []


def test_an_output_file_read_before_the_notification_is_owed() -> None:
    # The agent needs the path before the harness names it again.
    messages = [*BACKGROUND, call("r1", "Read", file_path=OUTPUT), result("r1", "Compiling")]
    messages += [{"role": "user", "content": NOTIFICATION}]
    assert owed_values(messages, 1, 4) == [OUTPUT]


SYSTEM_AND_PLACEHOLDERS: Messages = [
    {"role": "user", "content": "Set up the Demo project."},
    call("c1", "Bash", command="ls lib 2>/dev/null; head -1 bin/run"),
    result("c1", "demo.ex\n#!/usr/bin/env elixir"),
    {
        "role": "assistant",
        "content": "The README says: set DATABASE_PATH=../path/to/your.db and run "
        "`mix run path/to/file.exs`; the key is your_api_key_123.",
    },
    {"role": "user", "content": "ok"},
    call("c2", "Bash", command="mix deps.get 2>/dev/null && /usr/bin/env mix compile"),
    result("c2", "ok"),
    {
        "role": "assistant",
        "content": "Use ../path/to/your.db and path/to/file.exs as the README says, with "
        "your_api_key_123.",
    },
]


def test_system_paths_and_placeholders_are_never_owed() -> None:
    assert owed_values(SYSTEM_AND_PLACEHOLDERS, 1, 5) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/dev/null", True),  # a command's redirection
        ("/usr/bin/env", True),  # a script's interpreter line
        ("/bin/bash", True),
        ("/proc/self/status", True),
        ("../path/to/your.db", True),  # an example's placeholder
        ("path/to/file.exs", True),
        ("your_api_key_123", True),
        ("/path/to/Demo/mix.exs", False),  # a real project path (its root redacted upstream)
        ("/tmp/claude-0/work/tasks/bk7q2x1.output", False),  # a file in /tmp, not /tmp itself
        ("mia_li_3668", False),  # a user id
        ("3f9c2ab1", False),  # a commit hash
    ],
)
def test_unowed_values(value: str, expected: bool) -> None:
    assert unowed(value) is expected


TEST_LITERALS: Messages = [
    {"role": "user", "content": "Add a test for the greeting of user mia_li_3668."},
    call(
        "w1",
        "Write",
        file_path="/path/to/Demo/test/greeter_test.exs",
        content='test "greets" do\n  assert Greeter.greet("user_12345") == "Hi user_12345"\nend',
    ),
    result("w1", "File created successfully at: /path/to/Demo/test/greeter_test.exs"),
    call("g1", "Bash", command="git log -1 --format=%h"),
    result("g1", "3f9c2ab1 (mia_li_3668) add greeter"),
    {"role": "assistant", "content": "Test added."},
    {"role": "user", "content": "Use another id in the test, then show commit 3f9c2ab1."},
    call(
        "e1",
        "Edit",
        file_path="/path/to/Demo/test/greeter_test.exs",
        old_string='greet("user_12345") == "Hi user_12345"',
        new_string='greet("user_67890") == "Hi user_67890"',
    ),
    result("e1", "The file /path/to/Demo/test/greeter_test.exs has been updated."),
    call("s1", "Bash", command="git show 3f9c2ab1"),
    result("s1", "commit 3f9c2ab1"),
]


def test_a_literal_written_only_into_test_code_is_not_owed() -> None:
    # user_12345 lives in the test file's body; the test file's path and the commit the
    # user names again stay owed.
    assert owed_values(TEST_LITERALS, 1, 6) == ["/path/to/Demo/test/greeter_test.exs", "3f9c2ab1"]


def test_a_true_identifier_from_a_result_is_owed() -> None:
    # A user id read from a result and used in a call after the span.
    messages: Messages = [
        {"role": "user", "content": "Find my reservation."},
        call("c1", "get_user_details", email="mia.li@example.org"),
        result("c1", '{"user_id": "mia_li_3668", "reservations": ["ZFA04Y"]}'),
        {"role": "assistant", "content": "Found your account."},
        call("c2", "get_reservation_details", reservation_id="ZFA04Y"),
        result("c2", '{"status": "confirmed"}'),
    ]
    assert owed_values(messages, 1, 4) == ["ZFA04Y"]


def _given_in_span_used_after(value: str, *, given_by: str = "result") -> Messages:
    """`value` first seen in the span (a result, or the user's text) and passed to a call
    right after the cut at message 4."""
    first: dict[str, Any] = (
        result("c1", f"found {value}")
        if given_by == "result"
        else {"role": "user", "content": f"It is {value}."}
    )
    return [
        {"role": "user", "content": "Look it up."},
        call("c1", "lookup", query="it"),
        first,
        {"role": "assistant", "content": "Got it."},
        call("c2", "use", value=value),
        result("c2", "ok"),
    ]


@pytest.mark.parametrize(
    ("value", "given_by"),
    [
        ("HXDUBJ", "user"),  # a reservation code of letters only, given once by the user
        ("localhost:3001", "result"),  # the dev server's host and port
        ("bash_1", "result"),  # a background shell's id, killed after the cut
        ("83381b7c81f567945970a7e183b2a7a18211cc801ae38cd153db70026b8a04cc", "result"),  # SHA-256
        ("export-session.sh", "result"),  # a bare file name
        ("CLAUDE.md", "result"),
    ],
)
def test_values_of_more_shapes_are_owed(value: str, given_by: str) -> None:
    messages = _given_in_span_used_after(value, given_by=given_by)
    assert owed_values(messages, 1, 4) == [value]


@pytest.mark.parametrize("word", ["PLEASE", "STRING", "README", "Next.js"])
def test_words_and_product_names_are_not_owed(word: str) -> None:
    assert owed_values(_given_in_span_used_after(word), 1, 4) == []


def test_a_windows_path_is_owed_as_written_outside_json() -> None:
    # In the call's JSON arguments its backslashes are doubled: one value all the same.
    path = "C:\\Users\\dev\\skills\\apply-grant"
    messages = _given_in_span_used_after(path)
    assert owed_values(messages, 1, 4) == [path]
