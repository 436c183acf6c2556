"""Every obligation kind can be discharged: a refusal names it and how, `force_terminal` records
its terminal state through the ledger and as a span event, and the compaction then proceeds.

A call is abandoned, a retry chain given up, a commitment withdrawn, a transaction rolled back,
a background task abandoned, a result with no call absorbed (it blocks only under `strict`).
An obligation older than the policy's ``stale_after`` is a ``stale_obligation`` finding and
event, so nothing starves silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from telemetry_harness import Pipeline, make_pipeline
from transcript_builders import ANTHROPIC, CHAT, Call, Script, policy_with

from otel_compaction import Archive, CompactionGate, CompactionRefused, GuardedCompactor
from otel_compaction.policy import Policy
from otel_compaction.telemetry import semconv as sc

PADDING = "Please keep a careful record of everything in this conversation. " * 40
CONVERSATION = "discharge-1"


def open_call(s: Script) -> None:
    s.call(Call("c1", "deploy", {"build": "b-17"}))


def open_retry(s: Script) -> None:
    s.call(Call("r1", "fetch_rates", {"currency": "EUR"}))
    s.result("r1", "Error: rates service timed out", error=True)


def open_commitment(s: Script) -> None:
    s.say("I will verify the exchange rate with the treasury desk.")


def open_transaction(s: Script) -> None:
    s.call(Call("t1", "begin_transaction"))
    s.result("t1", "transaction 81 open")
    s.user("go on")
    s.call(Call("t2", "debit", {"amount": 10}))
    s.result("t2", "debited 10")


def background_task(s: Script) -> None:
    s.call(Call("b1", "Bash", {"command": "make release", "run_in_background": True}))
    s.result("b1", "Command running in background with ID: bash_1")


def stray_result(s: Script) -> None:
    s.result("ghost", "late answer for a call nobody made")


CASES: dict[str, tuple[Callable[[Script], None], str, str, str]] = {
    # kind: (how the transcript ends, policy, discharge status, what the refusal says to do)
    "tool_call": (
        open_call,
        "default",
        "abandoned",
        "append its result, or force_terminal() records it abandoned",
    ),
    "retry": (
        open_retry,
        "default",
        "given_up",
        "retry until it succeeds, or force_terminal() records the chain given up",
    ),
    "commitment": (
        open_commitment,
        "default",
        "withdrawn",
        "make the promised call, or force_terminal() records it withdrawn",
    ),
    "transaction": (
        open_transaction,
        "default",
        "rolled_back",
        "commit or roll it back, or force_terminal() records it rolled back",
    ),
    "background_task": (
        background_task,
        "blocking_background",  # carried under the shipped policies; this one blocks on it
        "abandoned",
        "wait for it to finish or stop it, or force_terminal() records it abandoned",
    ),
    "tool_result": (
        stray_result,
        "strict",
        "absorbed",
        "force_terminal() records the result absorbed",
    ),
}


@pytest.fixture(name="pipeline")
def pipeline_fixture() -> Iterator[Pipeline]:
    made = make_pipeline()
    yield made
    made.shutdown()


def conversation(end: Callable[[Script], None], fmt: str) -> list[dict[str, Any]]:
    s = Script(fmt)
    s.system()
    s.user(PADDING)
    s.say("Understood.")
    s.user("Now the task.")
    end(s)
    return s.messages


@pytest.mark.parametrize("fmt", [CHAT, ANTHROPIC])
@pytest.mark.parametrize("kind", list(CASES))
def test_refuse_then_force_terminal_then_compact(
    kind: str, fmt: str, pipeline: Pipeline, tmp_path: Path
) -> None:
    end, policy, status, how = CASES[kind]
    messages = conversation(end, fmt)
    chosen: str | Policy = (
        policy_with("default", rules={"open_background_task": "block"})
        if policy == "blocking_background"
        else policy
    )
    compactor = GuardedCompactor(budget=200, policy=chosen, telemetry=pipeline.telemetry)
    addressable = policy == "strict"  # strict would also block the unarchived span itself
    if addressable:
        compactor.archive = Archive(tmp_path / "archive.sqlite3")
    whole = len(messages)

    with pytest.raises(CompactionRefused) as caught:
        compactor.compact(messages, conversation_id=CONVERSATION, critical=True, end=whole)

    refused = caught.value
    [ref] = [o for o in refused.obligations if o.kind == kind]
    assert ref.discharge == how
    assert f"{ref.describe()}: {how}" in str(refused)

    assert compactor.force_terminal(refused) == len(refused.obligations)
    # The ledger holds the terminal state...
    records = pipeline.ledger.snapshot(CONVERSATION).obligations
    assert [(r.kind, r.id, r.status) for r in records if r.kind == kind] == [(kind, ref.id, status)]
    # ...and the telemetry shows the discharge.
    span = pipeline.span(sc.FORCE_TERMINAL_SPAN)
    events = [dict(e.attributes or {}) for e in span.events if e.name == sc.EVENT_DISCHARGED]
    assert {
        sc.OBLIGATION_KIND: kind,
        sc.OBLIGATION_ID: ref.id,
        sc.OBLIGATION_STATUS: status,
    } in events

    result = compactor.compact(messages, conversation_id=CONVERSATION, critical=True, end=whole)
    assert result.compacted is True, result.reason
    assert result.decision is not None and result.decision.action == "compact"


def test_compact_or_force_discharges_every_kind_at_once(pipeline: Pipeline) -> None:
    s = Script(CHAT)
    s.system()
    s.user(PADDING)
    open_transaction(s)
    s.user("and deploy")
    open_call(s)
    s.user("and the rate?")
    open_retry(s)
    # A promise to retry keeps the chain open, and is a commitment of its own.
    s.say("I will retry fetching the rates shortly.")
    compactor = GuardedCompactor(budget=200, telemetry=pipeline.telemetry)
    result = compactor.compact_or_force(
        s.messages, conversation_id=CONVERSATION, critical=True, end=len(s.messages)
    )
    assert result.compacted is True
    statuses = {
        r.kind: r.status
        for r in pipeline.ledger.snapshot(CONVERSATION).obligations
        if r.kind != "tool_call" or r.id == "c1"
    }
    # The deploy call's run ended without its result (the user asked on, the model answered):
    # the transcript discharges it as abandoned, so it is carried, not forced in the ledger.
    assert statuses == {
        "transaction": "rolled_back",
        "retry": "given_up",
        "commitment": "withdrawn",
    }
    assert result.decision is not None
    assert [r.id for r in result.decision.must_carry.abandoned] == ["c1"]


def test_an_old_promise_goes_stale_and_is_reported(pipeline: Pipeline) -> None:
    s = Script(CHAT)
    s.user("check the rate")
    promise = s.say("I will verify the exchange rate with the treasury desk.")
    for turn in range(3):  # three user turns pass and nothing keeps the promise
        s.user(f"anything else {turn}?")
        s.say("Nothing else yet.")
    gate = pipeline.telemetry.gate("default")
    decision = gate.evaluate(s.messages, 0, promise + 1)
    assert decision.action == "compact"  # stale: it no longer holds the span
    stale = [f for f in decision.findings if f.rule == "stale_obligation"]
    assert [(f.message_index, f.severity) for f in stale] == [(promise, "carry")]
    assert "3 user turns have passed" in stale[0].detail
    # The summary must still say it was never done.
    assert [(p.kind, p.message_index) for p in decision.must_carry.pending] == [
        ("commitment", promise)
    ]
    span = pipeline.span(sc.EVALUATE_SPAN)
    [event] = [e for e in span.events if e.name == sc.EVENT_STALE]
    assert dict(event.attributes or {})[sc.OBLIGATION_KIND] == "commitment"


def test_a_stale_tool_call_keeps_blocking_but_is_reported() -> None:
    s = Script(CHAT)
    s.user("deploy")
    call = s.call(Call("c1", "deploy"))
    for turn in range(3):
        s.user(f"done yet {turn}?")
        s.say("Still waiting.")
    decision = CompactionGate("default").evaluate(
        s.messages, 0, call + 1, raise_on_refuse=False, critical=True
    )
    assert decision.action == "refuse"
    assert [(f.rule, f.severity) for f in decision.findings if f.message_index == call] == [
        ("open_tool_call", "block"),
        ("stale_obligation", "carry"),
    ]
