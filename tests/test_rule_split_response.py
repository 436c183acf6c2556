"""``split_response``: one model response over several messages is never cut. Each case names
the closed cuts and why: parts sharing one ``id`` are one response even with the tool results
of its first calls between them; different ids, or a message of the user's own between, are
separate responses. A Claude Code log writes a response one record per content block, with
tool results and progress records between them; the reader joins them into one message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_compaction import CompactionGate
from otel_compaction.sessions import read_session
from otel_compaction.transcript import Transcript, TranscriptBuilder


def closed(messages: list[dict[str, Any]]) -> list[int]:
    return CompactionGate().analyse(messages).closed_cuts()


def part(message_id: str | None, *blocks: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": list(blocks)}
    if message_id is not None:
        message["id"] = message_id
    return message


def use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "run", "input": {}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def result(call_id: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id}]}


GO = {"role": "user", "content": "go"}

ACROSS_A_RESULT = [GO, part("msg_1", use("t1")), result("t1"), part("msg_1", text("Done."))]

CASES = [
    # msg_1's text arrives after the result of its first call: 1..3 is one response, so cut 3
    # (pairing-closed: t1 answered) would keep half of it.
    pytest.param(ACROSS_A_RESULT, [0, 1, 3, 4], [0, 1, 4], id="same-id-across-a-tool-result"),
    # Different ids: two responses, cut 3 closed.
    pytest.param(
        [GO, part("msg_1", use("t1")), result("t1"), part("msg_2", text("Done."))],
        [0, 1, 3, 4],
        [0, 1, 3, 4],
        id="different-ids-are-two-responses",
    ),
    # A message of the user's own between them: a response never spans it.
    pytest.param(
        [GO, part("msg_1", text("On it.")), GO, part("msg_1", text("Done."))],
        [0, 1, 2, 3, 4],
        [0, 1, 2, 3, 4],
        id="user-turn-between-same-ids",
    ),
    # Consecutive assistant messages without ids (Chat): one response, cut 2 inside it.
    pytest.param(
        [GO, {"role": "assistant", "content": "On it."}, {"role": "assistant", "content": "."}],
        [0, 1, 2, 3],
        [0, 1, 3],
        id="consecutive-messages-without-ids",
    ),
]


@pytest.mark.parametrize(("messages", "pairing", "gate"), CASES)
def test_closed_cuts(messages: list[dict[str, Any]], pairing: list[int], gate: list[int]) -> None:
    assert Transcript.parse(messages).closed_cuts() == pairing
    assert closed(messages) == gate


def test_a_growing_transcript_finds_the_response_when_its_next_part_arrives() -> None:
    messages = ACROSS_A_RESULT
    builder = TranscriptBuilder()
    for count in range(1, len(messages) + 1):
        builder.feed(messages[:count], count - 1)
        assert (
            builder.transcript(messages[:count]).units == Transcript.parse(messages[:count]).units
        )
    [unit] = Transcript.parse(messages).units
    assert (unit.kind, unit.first, unit.last) == ("split_response", 1, 3)


def record(kind: str, number: int, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "uuid": f"u-{number}", "sessionId": "s", "cwd": "/srv", **fields}


def test_claude_code_records_of_one_response_are_one_message(tmp_path: Path) -> None:
    """Claude Code writes the response's blocks as records sharing ``message.id``; the first
    call's result and a hook's progress record come between them."""
    records = [
        record("user", 1, message={"role": "user", "content": "go"}),
        record(
            "assistant", 2, message={"id": "msg_1", "role": "assistant", "content": [use("t1")]}
        ),
        record("progress", 3, data={"type": "hook_progress"}),
        record("user", 4, message=result("t1")),
        record(
            "assistant", 5, message={"id": "msg_1", "role": "assistant", "content": [use("t2")]}
        ),
        record("user", 6, message=result("t2")),
        record(
            "assistant", 7, message={"id": "msg_2", "role": "assistant", "content": [text(".")]}
        ),
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    session = read_session(path)
    assert [m["role"] for m in session.messages] == ["user", "assistant", "user", "assistant"]
    assert [b["id"] for b in session.messages[1]["content"]] == ["t1", "t2"]
    assert [b["tool_use_id"] for b in session.messages[2]["content"]] == ["t1", "t2"]
    # One response, its results in the next message: the cuts are the pairing cuts.
    assert (
        closed(session.messages) == Transcript.parse(session.messages).closed_cuts() == [0, 1, 3, 4]
    )
