"""Tool calls without an id (``""``, or no id at all, as some OpenAI-compatible servers send
them) are calls like any other: a provider accepted the transcript, so it is never unusable
input. Their results pair by position while that is unambiguous (one call without an id
waiting); where several wait, none is paired and a compaction over them is refused with a
message that says why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_compaction import CompactionGate
from otel_compaction.transcript import Transcript

USER = {"role": "user", "content": "Look the user up."}


def chat_call(name: str, call_id: str | None) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": "{}"}}
    if call_id is not None:
        call["id"] = call_id
    return call


def chat(*calls: dict[str, Any], results: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        USER, {"role": "assistant", "content": None, "tool_calls": list(calls)}
    ]  # fmt: skip
    messages += [{"role": "tool", "tool_call_id": "", "content": f"ok {i}"} for i in range(results)]
    messages.append({"role": "assistant", "content": "Done."})
    return messages


SEQUENTIAL: dict[str, list[dict[str, Any]]] = {
    "chat": chat(chat_call("get_user", ""), results=1),
    "chat, id absent": [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [chat_call("get_user", None)]},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": "Done."},
    ],
    "anthropic": [
        USER,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "", "name": "Bash", "input": {"command": "ls"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "", "content": "a"}]},
        {"role": "assistant", "content": "Done."},
    ],
    "responses": [
        USER,
        {"type": "function_call", "call_id": "", "name": "get_user", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "", "output": "ok"},
        {"type": "message", "role": "assistant", "content": "Done."},
    ],
}


@pytest.mark.parametrize("name", list(SEQUENTIAL))
def test_a_call_without_an_id_pairs_with_the_next_result_by_position(name: str) -> None:
    transcript = Transcript.parse(SEQUENTIAL[name])
    [call] = transcript.calls
    assert (call.id, call.result) == ("", 0)
    assert transcript.closed_cuts() == [0, 1, 3, 4]
    assert CompactionGate().evaluate(SEQUENTIAL[name], 0, 3).action == "compact"


def test_calls_without_ids_answered_one_after_another_pair_in_order() -> None:
    messages: list[dict[str, Any]] = [USER]
    for i in range(3):
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [chat_call(f"step{i}", "")]},
            {"role": "tool", "tool_call_id": "", "content": f"ok {i}"},
        ]
    transcript = Transcript.parse(messages)
    assert [(c.name, transcript.results[c.result or 0].text) for c in transcript.calls] == [
        ("step0", "ok 0"), ("step1", "ok 1"), ("step2", "ok 2"),
    ]  # fmt: skip


def test_parallel_calls_without_ids_are_refused_with_a_message_that_says_why() -> None:
    messages = chat(chat_call("get_user", ""), chat_call("get_order", ""), results=2)
    transcript = Transcript.parse(messages)
    assert [c.result for c in transcript.calls] == [None, None]
    decision = CompactionGate().evaluate(messages, 0, 4, critical=True, raise_on_refuse=False)
    assert decision.action == "refuse"
    assert "get_user (without an id)" in decision.describe()
    detail = next(f.detail for f in decision.findings if f.rule == "open_tool_call")
    assert "paired with it by position" in detail and "give each call an id" in detail


@pytest.mark.parametrize(
    ("messages", "status"),
    [
        (SEQUENTIAL["chat"], 0),
        (chat(chat_call("get_user", ""), chat_call("get_order", ""), results=2), 3),
    ],
    ids=["sequential", "parallel"],
)
def test_check_never_calls_a_transcript_without_ids_unusable(
    tmp_path: Path, messages: list[dict[str, Any]], status: int
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    argv = ["check", str(path), "--span", "0:3", "--critical"]
    done = subprocess.run(
        [sys.executable, "-m", "otel_compaction", *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr
