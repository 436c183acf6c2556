"""Obligations that are not real must never hold a span, under `default` or at a critical
budget: a give-up after an error, a question to the user, a negative answer, a result with no
call or a second result for an answered call. (LangChain's human-in-the-loop rejection, written
by the real middleware, is in ``test_hitl_rejection.py``.)"""

from __future__ import annotations

import pytest
from transcript_builders import FORMATS, Call, Script

from otel_compaction import CompactionGate, Decision


def decide(messages: list[dict[str, object]], *, critical: bool) -> Decision:
    return CompactionGate("default").evaluate(messages, 0, len(messages), critical=critical)


def assert_compacts_whole(messages: list[dict[str, object]]) -> None:
    for critical in (False, True):
        decision = decide(messages, critical=critical)
        assert (decision.action, decision.span) == ("compact", (0, len(messages))), critical
        assert decision.blocking == ()
        assert decision.must_carry.pending == ()


critical_and_not = pytest.mark.parametrize("fmt", FORMATS)


@critical_and_not
def test_an_unknown_city_with_a_try_again_hint_is_a_negative_not_a_retry(fmt: str) -> None:
    s = Script(fmt)
    s.user("What is the weather in Atlantis?")
    s.call(Call("w1", "get_weather", {"city": "Atlantis"}))
    failure = s.result("w1", "Unknown city, try again.", error=True)
    s.say("I could not find that city. It may not exist.")
    s.user("never mind")
    assert_compacts_whole(s.messages)
    # The failure is still a negative the summary must state, by what was looked up.
    decision = decide(s.messages, critical=False)
    assert [n.message_index for n in decision.must_carry.negatives] == [failure]
    assert decision.must_carry.negatives[0].subjects == ("Atlantis",)


@critical_and_not
def test_a_give_up_after_a_transient_error_closes_the_retry(fmt: str) -> None:
    s = Script(fmt)
    s.user("What is the weather in Oslo?")
    s.call(Call("w1", "get_weather", {"city": "Oslo"}))
    failure = s.result("w1", "Error: weather service timed out, try again.", error=True)
    gave_up = s.say("The weather service is not responding, so I cannot get the forecast.")
    s.user("ok, thanks")
    assert_compacts_whole(s.messages)
    # Before the model answered, the chain was open: the span is held.
    held = CompactionGate("default").evaluate(
        s.messages[:gave_up], 0, gave_up, critical=True, raise_on_refuse=False
    )
    assert held.action == "refuse"
    assert [(o.kind, o.id) for o in held.obligations] == [("retry", "w1")]
    assert held.obligations[0].message_index == failure


@critical_and_not
def test_a_retry_of_another_target_is_no_retry_of_this_one(fmt: str) -> None:
    s = Script(fmt)
    s.user("Weather in Pariss and in Rome?")
    s.call(Call("w1", "get_weather", {"city": "Pariss"}))
    s.result("w1", "Error: unknown city", error=True)
    s.call(Call("w2", "get_weather", {"city": "Rome"}))
    s.result("w2", "sunny")
    s.say("Rome is sunny; I could not find Pariss.")
    assert_compacts_whole(s.messages)


@critical_and_not
def test_a_question_with_i_will_confirm_is_no_commitment(fmt: str) -> None:
    s = Script(fmt)
    s.user("Change my flight.")
    s.say(
        "Could you confirm your booking code and the new date? I will confirm the details "
        "once I have this information."
    )
    s.user("ZFA04Y, next Friday.")
    s.say("Shall I check the fares for next Friday?")
    assert_compacts_whole(s.messages)


@critical_and_not
def test_a_negative_answer_is_no_transient_failure(fmt: str) -> None:
    s = Script(fmt)
    s.user("Look up user mia_li_3668.")
    s.call(Call("u1", "get_user_details", {"user_id": "mia_li_3668"}))
    s.result("u1", "Error: user not found", error=True)
    # The transcript ends right after it: a "not found" asks for no retry.
    assert_compacts_whole(s.messages)


@critical_and_not
def test_a_result_whose_call_is_nowhere_is_reported_not_blocking(fmt: str) -> None:
    s = Script(fmt)
    s.user("status?")
    ghost = s.result("ghost", "all green")
    s.say("All green.")
    assert_compacts_whole(s.messages)
    findings = decide(s.messages, critical=False).findings
    assert [(f.rule, f.message_index, f.severity) for f in findings] == [
        ("not_addressable", 0, "carry"),
        ("unmatched_result", ghost, "warn"),
    ]


@critical_and_not
def test_a_second_result_for_an_answered_call_is_reported_not_blocking(fmt: str) -> None:
    s = Script(fmt)
    s.user("deploy")
    s.call(Call("d1", "deploy", {"build": "b-17"}))
    s.result("d1", "deployed b-17")
    duplicate = s.result("d1", "deployed b-17")
    s.say("Deployed.")
    assert_compacts_whole(s.messages)
    [finding] = [f for f in decide(s.messages, critical=True).findings if f.severity == "warn"]
    assert (finding.rule, finding.message_index) == ("unmatched_result", duplicate)
    assert finding.detail == "d1: a second result for an already answered call"


@critical_and_not
def test_a_silent_success_is_no_negative(fmt: str) -> None:
    s = Script(fmt)
    s.user("make the build directory")
    s.call(Call("b1", "bash", {"command": "mkdir -p build"}))
    s.result("b1", "")
    s.say("Created build/.")
    decision = decide(s.messages, critical=False)
    assert decision.must_carry.negatives == ()
    assert [f.rule for f in decision.findings] == ["not_addressable"]
