"""``open_tool_call``: which calls are open, and where each resolves.

A long-running tool (Google ADK's ``LongRunningFunctionTool``) answers at once with an interim
result, ``{"status": "pending", ...}``, and its final result comes later as another response
with the same call id: the interim answer leaves the call open, the final one closes it, and
the final one is never a stray or an orphan.
"""

from __future__ import annotations

import json

from transcript_builders import ANTHROPIC, FORMATS, Call, Script, fmt_param

from otel_compaction import CompactionGate
from otel_compaction.analysis import Analysis
from otel_compaction.policy import Policy
from otel_compaction.transcript import Transcript

PENDING = json.dumps({"status": "pending", "ticket_id": "approval-0042"})
FINAL = json.dumps({"status": "approved", "ticket_id": "approval-0042", "amount": 250})


def long_running(fmt: str, *, final: bool) -> Script:
    s = Script(fmt)
    s.user("Ask my manager to approve the 250 EUR reimbursement.")
    s.call(Call("lr1", "ask_for_approval", {"amount": 250}))
    s.result("lr1", PENDING)  # the interim answer: a ticket, the work goes on
    s.say("I have asked for approval (ticket approval-0042); I will tell you when it comes.")
    s.user("Thanks, meanwhile what is my balance?")
    s.call(Call("b1", "get_balance"))
    s.result("b1", "1200 EUR")
    s.say("Your balance is 1200 EUR.")
    if final:
        s.result("lr1", FINAL)  # the final answer, sent back later with the same id
        s.say("Your reimbursement was approved.")
    return s


def calls(s: Script) -> dict[str, tuple[str, int | None]]:
    analysis = Analysis.build(Transcript.parse(s.messages), Policy.load("default").compile())
    return {o.id: (o.status, o.resolved) for o in analysis.facts["open_tool_call"]}


@fmt_param
def test_an_interim_pending_result_leaves_the_call_open(fmt: str) -> None:
    s = long_running(fmt, final=False)
    t = Transcript.parse(s.messages)
    assert [c.id for c in t.open_calls()] == ["lr1"]  # the pending answer did not close it
    assert t.orphan_results() == []  # and it is no stray either: it answers lr1
    assert calls(s) == {"lr1": ("open", None), "b1": ("result", 6)}
    # No cut after the call is closed: the final result would be severed from it.
    assert t.closed_cuts() == [0, 1]


@fmt_param
def test_the_final_result_closes_the_call_and_is_no_orphan(fmt: str) -> None:
    s = long_running(fmt, final=True)
    t = Transcript.parse(s.messages)
    assert t.open_calls() == []
    assert t.orphan_results() == []  # not "a second result for an answered call"
    assert calls(s) == {"lr1": ("result", 8), "b1": ("result", 6)}
    decision = CompactionGate("default").evaluate(s.messages, 0, len(s.messages))
    assert decision.action == "compact"
    assert [f.rule for f in decision.findings if f.rule.endswith("result")] == []


def test_a_span_over_the_pending_call_is_deferred_to_before_it() -> None:
    s = long_running(FORMATS[0], final=False)
    decision = CompactionGate("default").evaluate(s.messages, 0, len(s.messages))
    assert (decision.action, decision.span) == ("defer", (0, 1))
    assert [(r.kind, r.id) for r in decision.obligations] == [("tool_call", "lr1")]


@fmt_param
def test_results_that_are_not_interim_close_their_call(fmt: str) -> None:
    # Each is a final answer: a status word in prose, a finished status, an error, no status.
    for text, error in (
        ("status: pending review", False),  # prose, not a JSON object
        (json.dumps({"status": "completed"}), False),  # the work is done
        (json.dumps({"status": "pending"}), fmt == ANTHROPIC),  # an is_error result is final
        (json.dumps({"state": "pending"}), False),  # no `status` key
        ("[1, 2]", False),  # not an object
    ):
        if text == json.dumps({"status": "pending"}) and fmt != ANTHROPIC:
            continue  # only Anthropic marks a failed result apart from its text
        s = Script(fmt)
        s.user("go")
        s.call(Call("c1", "submit"))
        s.result("c1", text, error=error)
        assert Transcript.parse(s.messages).open_calls() == [], text
