"""A negative or a pending call is carried only by a clause that names *that* call, told apart
from the other calls of its tool owed the same way (`otel_compaction.binding`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_compaction.binding import names
from otel_compaction.verification import verify_summary


def _call(call_id: str, tool: str, **arguments: Any) -> dict[str, Any]:
    function = {"name": tool, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def _result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _exited(call_id: str, text: str) -> dict[str, Any]:
    """A failed command's output, the way Codex reports it."""
    return _result(call_id, f"Exit code: 1\nWall time: 1.6 seconds\nOutput:\n{text}")


def _searches(routes: list[tuple[str, str, str, str]]) -> list[dict[str, Any]]:
    """A user asking for flights, then one direct-flight search per (id, from, to, date),
    `[]` for the empty ones, a flight otherwise."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find me a direct flight."}]
    for call_id, origin, destination, date in routes:
        messages.append(
            _call(call_id, "search_direct_flight", origin=origin, destination=destination,
                  date=date)
        )  # fmt: skip
        empty = call_id.startswith("none")
        messages.append(_result(call_id, "[]" if empty else '[{"flight_number": "HAT041"}]'))
    messages.append({"role": "assistant", "content": "Here is what I found."})
    messages.append({"role": "user", "content": "Thanks"})
    return messages


ROUTES = _searches(
    [
        ("ok1", "EWR", "LAX", "2024-05-20"),
        ("none1", "EWR", "SFO", "2024-05-20"),
        ("none2", "JFK", "LAX", "2024-05-20"),
        ("ok2", "JFK", "SFO", "2024-05-20"),
    ]
)


def _missing(messages: list[dict[str, Any]], summary: str) -> set[str]:
    check = verify_summary(messages, (1, len(messages) - 2), summary)
    return {n.call_id for n in check.missing_negatives}


@pytest.mark.parametrize(
    ("summary", "missing"),
    [
        # The date every search shares tells neither empty one from the other.
        ("- EWR→SFO on 2024-05-20: no direct flights.", {"none2"}),
        ("- EWR→SFO and JFK→LAX on 2024-05-20: no direct flights.", set()),
        # A route of an empty search written with another's result is no statement of it.
        ("- JFK→SFO on 2024-05-20: HAT023. EWR→SFO: none.", {"none2"}),
        # Naming the route without the outcome states nothing.
        ("- Searched EWR→SFO and JFK→LAX on 2024-05-20.", {"none1", "none2"}),
    ],
)
def test_an_empty_search_is_told_apart_by_its_route(summary: str, missing: set[str]) -> None:
    assert _missing(ROUTES, summary) == missing


DAYS = _searches([(f"none{d}", "JFK", "ORD", f"2024-05-{d:02d}") for d in range(1, 14)])


def test_a_range_of_dates_covers_each_search_in_it() -> None:
    every = "Searched direct JFK→ORD flights for every date from 2024-05-01 through 2024-05-13"
    assert _missing(DAYS, every + ": no flights on any of them.") == set()
    short = "Searched direct JFK→ORD flights for every date from 2024-05-01 through 2024-05-12"
    assert _missing(DAYS, short + ": no flights on any of them.") == {"none13"}


WRITE = [
    {"role": "user", "content": "/init"},
    _call("w1", "Write", file_path="/app/CLAUDE.md", content="# Notes\nnew/empty repository"),
    _result(
        "w1",
        "Claude requested permissions to write to /app/CLAUDE.md, but you haven't granted it yet.",
    ),
    {"role": "assistant", "content": "I need your permission."},
    {"role": "user", "content": "ok"},
]


@pytest.mark.parametrize(
    ("summary", "carried"),
    [
        # A negation in a parenthesis about something else says nothing of the call.
        ('- /app/CLAUDE.md: written with "Commands" (none configured yet).', False),
        # Nor do the words of the content it wrote.
        ("- /app/CLAUDE.md: written; the repository is new/empty.", False),
        ("- The Write of /app/CLAUDE.md was rejected: permission not granted.", True),
        # The only Write of the span is named by its tool's name.
        ("- The Write was rejected: write permission has not been granted.", True),
        # ...and the failure quoted in the tool's own words states it.
        ("- Claude requested permissions to write to the file.", True),
    ],
)
def test_a_write_is_carried_by_a_clause_about_it(summary: str, carried: bool) -> None:
    assert (_missing(WRITE, summary) == set()) is carried


CODEX = [
    {"role": "user", "content": "export the session"},
    _call(
        "c1",
        "shell_command",
        command=[
            "pwsh.exe",
            "-Command",
            r"Get-Content C:\Users\kunal\.codex\history.jsonl -Tail 5",
        ],
    ),
    _exited(
        "c1",
        r"Get-Content : Cannot find path 'C:\Users\kunal\.codex\history.jsonl' "
        "because it does not exist.",
    ),
    _call(
        "c2",
        "shell_command",
        command=["pwsh.exe", "-Command", r"Get-ChildItem .\skills\data\specs"],
    ),
    _exited("c2", r"Get-ChildItem : Cannot find path '.\skills\data\specs'."),
    _call(
        "c3",
        "shell_command",
        command=["pwsh.exe", "-Command", r"Get-ChildItem C:\Users\kunal\.claude\projects"],
    ),
    _exited("c3", r"Get-ChildItem : Cannot find path 'C:\Users\kunal\.claude\projects'."),
    {"role": "assistant", "content": "Neither exists."},
    {"role": "user", "content": "ok"},
]


def test_a_windows_command_is_named_by_its_path() -> None:
    each = (
        r"- Get-Content C:\Users\kunal\.codex\history.jsonl: cannot find path."
        "\n"
        r"- Get-ChildItem .\skills\data\specs: the folder does not exist."
        "\n"
        r"- C:\Users\kunal\.claude\projects does not exist either."
    )
    assert _missing(CODEX, each) == set()
    # The program two calls share tells neither from the other; the third has its own.
    shared = "- Get-ChildItem and Get-Content failed: cannot find path."
    assert _missing(CODEX, shared) == {"c2", "c3"}


PENDING = [
    {"role": "user", "content": "export the session"},
    _call("e1", "shell_command", command="Copy-Item latest.jsonl codex-session.jsonl"),
]


@pytest.mark.parametrize(
    ("summary", "carried"),
    [
        ("## Still pending\n- The copy to codex-session.jsonl has not returned yet.", True),
        # Listed under the heading, but said to be done.
        ("## Still pending\n- None: latest.jsonl was copied to codex-session.jsonl.", False),
    ],
)
def test_a_pending_call_is_carried_only_as_still_to_come(summary: str, carried: bool) -> None:
    check = verify_summary(PENDING, (1, 2), summary)
    assert (not check.missing_pending) is carried


def test_still_to_come_is_no_failure() -> None:
    messages = [*CODEX[:3], *PENDING[1:], {"role": "user", "content": "?"}]
    summary = (
        r"- Get-Content C:\Users\kunal\.codex\history.jsonl has not returned yet."
        "\n- The copy to codex-session.jsonl has not returned yet."
    )
    check = verify_summary(messages, (1, 4), summary)
    assert [n.call_id for n in check.missing_negatives] == ["c1"]


def test_a_call_is_named_by_what_it_is_about() -> None:
    found = names("shell_command", ("git push --set-upstream origin main",))
    assert {(n.kind, n.value) for n in found} >= {
        ("program", "git"),
        ("phrase", "git push set-upstream origin"),
        ("word", "origin"),
        ("word", "main"),
    }
    assert all(n.value != "set-upstream" for n in found)  # an option names nothing


PROMISE = [
    {"role": "user", "content": "help me apply for the grant"},
    {
        "role": "assistant",
        "content": "Then I'll export the current session transcript as proof of the work.",
    },
    {"role": "user", "content": "go on"},
]


@pytest.mark.parametrize(
    ("summary", "carried"),
    [
        ("## What remains\n- I said I would export the session transcript: not done yet.", True),
        # The promise's words in a line that says nothing is pending.
        ("## Progress\n- The session transcript was read.", False),
        # A pending line about something else.
        ("## What remains\n- Draft the 3-step application.", False),
    ],
)
def test_a_promise_is_carried_by_a_pending_clause_sharing_its_words(
    summary: str, carried: bool
) -> None:
    check = verify_summary(PROMISE, (1, 2), summary)
    assert [p.kind for p in check.missing_pending] == ([] if carried else ["commitment"])
