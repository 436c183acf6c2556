"""``orphan_result`` (a result in the span whose call stands before it) and its twin
``unmatched_result`` (a result with no call at all), with a long-running tool's two answers:
the interim one and the final one both answer the call, so neither is ever a stray."""

from __future__ import annotations

import json

from transcript_builders import Call, Script, fmt_param

from otel_compaction import CompactionGate
from otel_compaction.rules import SpanView, run_rules

PENDING = json.dumps({"status": "pending", "ticket_id": "t-9"})


def long_running(fmt: str) -> Script:
    s = Script(fmt)
    s.user("Start the export.")
    s.call(Call("lr1", "start_export"))  # 1
    s.result("lr1", PENDING)  # 2: the interim answer
    s.user("ok, tell me when done")  # 3
    s.result("lr1", json.dumps({"status": "done", "rows": 812}))  # 4: the final answer
    s.say("The export is done: 812 rows.")  # 5
    return s


def rules_over(s: Script, start: int, end: int) -> list[tuple[str, int | None]]:
    analysis = CompactionGate("default").analyse(s.messages)
    findings = run_rules(SpanView(analysis, start, end))
    return [(f.rule, f.message_index) for f in findings if f.rule.endswith("_result")]


@fmt_param
def test_the_final_result_is_no_stray(fmt: str) -> None:
    s = long_running(fmt)
    assert rules_over(s, 0, 6) == []  # not "a second result for an answered call"


@fmt_param
def test_a_span_after_the_call_holding_its_final_result_would_orphan_it(fmt: str) -> None:
    s = long_running(fmt)
    # Both answers stand after the call: compacting them apart from it splits the pair.
    assert rules_over(s, 2, 5) == [("orphan_result", 2), ("orphan_result", 4)]


@fmt_param
def test_a_result_with_no_call_is_unmatched_not_orphaned(fmt: str) -> None:
    s = Script(fmt)
    s.user("hi")
    s.result("ghost", "late answer for a call nobody made")
    assert rules_over(s, 0, 2) == [("unmatched_result", 1)]
