"""``open_tool_call``: which calls are open, and where each resolves.

A long-running tool (Google ADK's ``LongRunningFunctionTool``) answers at once with an interim
result, ``{"status": "pending", ...}``, and its final result comes later as another response
with the same call id: the interim answer leaves the call open, the final one closes it, and
the final one is never a stray or an orphan.
"""

from __future__ import annotations

import json

from telemetry_harness import make_pipeline
from transcript_builders import ANTHROPIC, FORMATS, Call, Script, fmt_param, policy_with

from otel_compaction import CompactionGate
from otel_compaction.analysis import Analysis
from otel_compaction.ledger import ObligationLedger
from otel_compaction.policy import Policy
from otel_compaction.telemetry import semconv as sc
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


# -- calls of ended runs -------------------------------------------------------------------------
# A call with no result anywhere whose run ended with it, after which the user spoke and a
# later run's tool call was answered, will never be answered (a provider rejects a call
# without its result before later turns): it is discharged as abandoned, reported by
# ``abandoned_call``, carried as abandoned. Anything less is not proof: the call stays open.


def orphaned(fmt: str) -> Script:
    """Google ADK's issue 7236: the process running a tool died; the user went on."""
    s = Script(fmt)
    s.user("Export the report.")
    s.call(Call("x1", "export_report", {"report": "q3"}))  # its worker restarted: no result
    s.user("Hello? Just tell me the Q3 total then.")
    s.call(Call("t1", "get_total", {"quarter": "q3"}))  # the next run went on without it
    s.result("t1", "1.2M EUR")
    s.say("The Q3 total is 1.2M EUR.")
    return s


@fmt_param
def test_a_call_of_an_ended_run_is_discharged_as_abandoned(fmt: str) -> None:
    s = orphaned(fmt)
    assert calls(s) == {"x1": ("abandoned", 1), "t1": ("result", 4)}  # resolved where it arose
    for critical in (False, True):
        decision = CompactionGate("default").evaluate(s.messages, 0, 3, critical=critical)
        assert (decision.action, decision.span) == ("compact", (0, 3)), critical
        [finding] = [f for f in decision.findings if f.rule == "abandoned_call"]
        assert (finding.severity, finding.message_index) == ("carry", 1)
        assert "the user spoke at message 2, and a later call at message 3 was answered at " in (
            finding.detail
        )
        assert [(r.kind, r.id) for r in decision.must_carry.abandoned] == [("tool_call", "x1")]
        assert decision.must_carry.pending == ()


def test_the_discharge_is_an_event_on_the_evaluation_span() -> None:
    pipeline = make_pipeline()
    try:
        pipeline.telemetry.gate("default").evaluate(orphaned(FORMATS[0]).messages, 0, 3)
        span = pipeline.span(sc.EVALUATE_SPAN)
        events = [(e.name, dict(e.attributes or {})) for e in span.events]
        assert (
            "compaction.obligation.abandoned",
            {
                "compaction.obligation.kind": "tool_call",
                "compaction.obligation.id": "x1",
                "compaction.abandon.reason": "run_ended",
            },
        ) in events
    finally:
        pipeline.shutdown()


@fmt_param
def test_a_call_is_not_dead_without_proof(fmt: str) -> None:
    # Last in the transcript: its result may still come.
    s = Script(fmt)
    s.user("Export the report.")
    s.call(Call("x1", "export_report"))
    assert calls(s) == {"x1": ("open", None)}
    # The user spoke, but the model has not answered: nothing went on without it yet.
    s.user("Is it done?")
    assert calls(s) == {"x1": ("open", None)}
    # The model only spoke after the turn: its runtime may hold the call in flight.
    s.say("Still exporting.")
    assert calls(s) == {"x1": ("open", None)}
    # A later tool round, but the model went on before the user's turn: the same run.
    s = Script(fmt)
    s.user("Export the report.")
    s.call(Call("x1", "export_report"))
    s.say("Exporting.")
    s.user("And the total?")
    s.call(Call("t1", "get_total"))
    s.result("t1", "1.2M EUR")
    assert calls(s)["x1"] == ("open", None)


@fmt_param
def test_a_long_running_call_is_not_dead_while_its_final_result_is_due(fmt: str) -> None:
    s = long_running(fmt, final=False)  # a user turn and an answer came after the interim one
    assert calls(s)["lr1"] == ("open", None)


def test_a_call_the_ledger_holds_open_is_not_dead() -> None:
    s = orphaned(FORMATS[0])
    ledger = ObligationLedger()
    ledger.open("c-7236", "tool_call", "x1", name="export_report")
    decision = CompactionGate("default", ledger=ledger).evaluate(
        s.messages, 0, 3, conversation_id="c-7236"
    )
    assert decision.action == "defer"  # the runtime says it is still in flight
    assert [(r.kind, r.id) for r in decision.obligations] == [("tool_call", "x1")]


def test_a_policy_that_turns_abandoned_call_off_keeps_it_open() -> None:
    s = orphaned(FORMATS[0])
    kept = policy_with("default", rules={"abandoned_call": "off"})
    assert CompactionGate(kept).evaluate(s.messages, 0, 3).action == "defer"
