"""A call forced to a terminal state is summarized as abandoned, never as merely unanswered."""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_compaction import CompactionRefused, ExtractiveSummarizer, GuardedCompactor


def _call(call_id: str, name: str) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps({"service": "svc-a"})}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def test_forced_call_is_summarized_as_abandoned() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "deploy"},
        {"role": "user", "content": "restart svc-a " + "please " * 40},
        _call("call_r1", "restart_service"),
        {"role": "user", "content": "any news? " + "waiting " * 40},
        {"role": "assistant", "content": "Still waiting."},
        {"role": "user", "content": "ok"},
    ]
    compactor = GuardedCompactor(
        ExtractiveSummarizer(), budget=200, token_counter=lambda text: len(text) // 4
    )
    with pytest.raises(CompactionRefused) as refused:
        compactor.compact(messages, critical=True)
    assert [r.id for r in refused.value.obligations] == ["call_r1"]

    assert compactor.force_terminal(refused.value) == 1
    result = compactor.compact(messages, critical=True)

    assert result.compacted
    assert result.decision is not None
    assert [a.id for a in result.decision.must_carry.abandoned] == ["call_r1"]
    assert result.summary is not None
    assert "[call_r1] -> abandoned: no result will come" in result.summary
    assert "no result in this span" not in result.summary
