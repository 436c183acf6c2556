"""``dangling_commitment``: which assistant sentences promise an action the runtime owes, how
they are named, and which call keeps them. Each case states the exact commitments (opened,
resolved, status, name) of a small conversation, with the reason in its name."""

from __future__ import annotations

from transcript_builders import ANTHROPIC, CHAT, Call, Script, fmt_param

from otel_compaction import CompactionGate, Policy
from otel_compaction.analysis import Analysis
from otel_compaction.transcript import Transcript

Promise = tuple[int, int | None, str, str]


def promises(s: Script) -> list[Promise]:
    analysis = Analysis.build(Transcript.parse(s.messages), Policy.load("default"))
    return [
        (o.opened, o.resolved, o.status, o.name)
        for o in analysis.obligations
        if o.kind == "commitment"
    ]


# -- what is no promise -------------------------------------------------------------------------


def test_a_request_for_confirmation_is_no_commitment() -> None:
    s = Script(CHAT)
    s.user("Move my flight to May 3.")
    s.say("Let me confirm the details: flight HAT001 on May 3, economy. Could you please confirm?")
    assert promises(s) == []


def test_a_promise_that_waits_on_the_users_answer_is_not_open() -> None:
    s = Script(CHAT)
    s.user("Find me a nonstop flight to SFO on May 6.")
    s.say(
        "I will search for nonstop flights from your local airport to SFO on May 6th. "
        "Could you please provide the IATA code for your local airport?"
    )
    s.user("EWR")
    s.call(Call("s1", "search_direct_flight", {"origin": "EWR", "destination": "SFO"}))
    s.result("s1", "[]")
    assert promises(s) == []


def test_a_request_to_provide_without_a_question_mark_waits_on_the_user() -> None:
    s = Script(CHAT)
    s.user("Cancel my trip.")
    s.say("I'll check the cancellation rules for you. Please provide your reservation id.")
    assert promises(s) == []


def test_a_question_to_the_user_is_no_commitment() -> None:
    s = Script(CHAT)
    s.user("The deploy failed.")
    s.say("Shall I check the deploy logs?")
    assert promises(s) == []


def test_a_promise_conditional_on_the_user_is_no_commitment() -> None:
    s = Script(CHAT)
    s.user("Change my booking.")
    s.say("I will confirm the details once I have your booking code.")
    assert promises(s) == []


# -- what is one, and how it is named -----------------------------------------------------------


def test_an_open_promise_is_named_by_its_whole_sentence() -> None:
    s = Script(CHAT)
    s.user("Is web-7 up?")
    promise = s.say("The rollout finished. I will verify the deployment of web-7 next.")
    assert promises(s) == [(promise, None, "open", "I will verify the deployment of web-7 next.")]
    refused = CompactionGate("default").evaluate(
        s.messages, 0, len(s.messages), critical=True, raise_on_refuse=False
    )
    described = refused.obligations[0].describe()
    assert described.startswith("commitment I will verify the deployment of web-7 next. (")


def test_a_promise_with_a_typographic_apostrophe_is_one() -> None:
    s = Script(CHAT)
    s.user("Why is the queue slow?")
    promise = s.say("I\u2019ll check the queue depth.")
    assert promises(s) == [(promise, None, "open", "I'll check the queue depth.")]


# -- what keeps it ------------------------------------------------------------------------------


@fmt_param
def test_a_promise_kept_by_the_following_calls_of_the_same_turn_is_closed(fmt: str) -> None:
    s = Script(fmt)
    s.user("Why did the deploy fail?")
    promise = s.say("Let me check the deploy log.")
    kept = s.call(Call("r1", "Read", {"file_path": "/var/log/deploy.log"}))
    s.result("r1", "disk full")
    end = s.say("The disk is full.") + 1
    assert promises(s) == [(promise, kept, "kept", "Let me check the deploy log.")]
    decision = CompactionGate("default").evaluate(s.messages, 0, end)
    assert (decision.action, decision.span, decision.blocking) == ("compact", (0, end), ())


def test_a_promise_the_turn_ends_on_stays_owed_across_the_users_reply() -> None:
    s = Script(ANTHROPIC)
    s.user("Which of my reservations goes to LGA?")
    promise = s.say("None of the first three does. Let me check the last one.")
    s.user("Thank you for checking.")
    kept = s.call(Call("g1", "get_reservation_details", {"reservation_id": "NQNU5R"}))
    s.result("g1", '{"destination": "LGA"}')
    assert promises(s) == [(promise, kept, "kept", "Let me check the last one.")]
