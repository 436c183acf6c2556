"""The re-issue logic the audit, the CLI hooks and the ledger share: labelled cases (which calls
after a compaction repeat a side effect it removed from context, and which do not), and the
ledger's store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_compaction.analysis import Analysis
from otel_compaction.archive import Archive
from otel_compaction.policy import Policy
from otel_compaction.reissue import records_of, reissues, repeat_of
from otel_compaction.transcript import ToolCall, Transcript

POLICY = Policy.load("default")


def _call(n: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"c{n}",
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(arguments)},
    }


def _turn(n: int, tool: str, arguments: dict[str, Any], result: str) -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": None, "tool_calls": [_call(n, tool, arguments)]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": result},
    ]


PUSH = (
    "Bash",
    {"command": "git push origin main"},
    "To github.com:o/r.git\n   1a..2b  main -> main",
)
COMMIT = ("Bash", {"command": "git commit -am 'fix totals'"}, "[main 2b] fix totals")
READ = ("Read", {"file_path": "/repo/shop.py"}, "def total(): ...")
EDIT = ("Edit", {"file_path": "/repo/shop.py", "old_string": "a", "new_string": "b"}, "ok")
INSTALL_FAILED = (
    "Bash",
    {"command": "pip install shopkit"},
    "Exit code 1\nERROR: No matching distribution",
)
STATUS = ("Bash", {"command": "git status"}, "nothing to commit")

CASES = {
    # before the cut, after it, expected re-issues (indices into `after`)
    "push re-issued after compaction: a true repeat": ([PUSH], [PUSH], [0]),
    "push with a read-only stage before it: the same push": (
        [PUSH],
        [("Bash", {"command": "git status && git push origin main"}, "ok")],
        [0],
    ),
    "same push, another description: the same push": (
        [PUSH],
        [("Bash", {"command": "git push  origin main", "description": "x"}, "ok")],
        [0],
    ),
    "re-read of a file: a read is no side effect": ([READ, EDIT], [READ], []),
    "read-only command repeated: no side effect": ([STATUS], [STATUS], []),
    "push after a new commit pushes the new commit": ([PUSH], [COMMIT, PUSH], []),
    "install retried after it failed: a retry, not a repeat": (
        [INSTALL_FAILED],
        [INSTALL_FAILED],
        [],
    ),
    "edit with other strings: other work on the file": (
        [EDIT],
        [("Edit", {**EDIT[1], "old_string": "b", "new_string": "c"}, "ok")],
        [],
    ),
    "second re-issue: the first one is in context": ([PUSH], [PUSH, PUSH], [0]),
}


def _transcript(before: list[Any], after: list[Any]) -> tuple[Transcript, int]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "ship it"}]
    for n, (tool, arguments, result) in enumerate(before):
        messages += _turn(n, tool, arguments, result)
    cut = len(messages)
    for n, (tool, arguments, result) in enumerate(after, start=len(before)):
        messages += _turn(n, tool, arguments, result)
    return Transcript.parse(messages), cut


@pytest.mark.parametrize("case", list(CASES))
def test_reissues(case: str) -> None:
    before, after, expected = CASES[case]
    transcript, cut = _transcript(before, after)
    analysis = Analysis.build(transcript, POLICY)
    found = reissues(transcript, analysis.outcomes, POLICY.side_effects, cut)
    assert [int(call.id[1:]) - len(before) for call, _ in found] == expected


def test_a_call_still_in_context_is_no_reissue() -> None:
    transcript, _ = _transcript([PUSH], [])
    analysis = Analysis.build(transcript, POLICY)
    records = records_of(transcript, analysis.outcomes, POLICY.side_effects)
    again = ToolCall("c9", "Bash", 0, json.dumps(PUSH[1]), 0)
    assert records[0].in_context and repeat_of(records, again, POLICY.side_effects) is None


def test_the_ledger_lives_in_the_archive(tmp_path: Path) -> None:
    transcript, _ = _transcript([PUSH, READ], [])
    analysis = Analysis.build(transcript, POLICY)
    records = records_of(
        transcript, analysis.outcomes, POLICY.side_effects, conversation_id="s1",
        context_start=len(transcript), offset=10,
    )  # fmt: skip
    with Archive(tmp_path / "a.sqlite3") as archive:
        archive.record_side_effects(records)
        archive.record_side_effects(records)  # recorded again: one row
        [stored] = archive.side_effects("s1")
        archive.mark_asked(stored)
        [asked] = archive.side_effects("s1")
    assert (stored.tool, stored.target, stored.outcome, stored.sequence) == (
        "Bash", "git push origin main", "success", 11,
    )  # fmt: skip
    assert not stored.in_context and asked.asked and not stored.asked
    again = ToolCall("c9", "Bash", 0, json.dumps(PUSH[1]), 0)
    assert repeat_of([stored], again, POLICY.side_effects) == stored
