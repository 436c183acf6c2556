"""``dangling_commitment``: which assistant sentences promise an action the runtime owes, how
they are named, and which call keeps them. Each case states the exact commitments (opened,
resolved, status, name) of a small conversation, with the reason in its name."""

from __future__ import annotations

from transcript_builders import ANTHROPIC, CHAT, RESPONSES, Call, Script, fmt_param

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


# -- which statements of intent are promises --------------------------------------------------


def named(s: Script) -> list[str]:
    return [name for _, _, _, name in promises(s)]


def test_a_promise_of_any_action_of_the_assistant_is_one() -> None:
    s = Script(CHAT)
    s.user("Change my trip.")
    s.say("First, I will cancel your current reservation (K1NW8N). Then, I will book a new one.")
    s.user("Sounds good.")
    s.say("Now, I will proceed to book the new reservation in business class.")
    s.say("I'll export the session transcript into the project root.")
    s.say("Let me run the build in the app directory.")
    s.say("Let's start by reviewing the details of each reservation.")
    assert named(s) == [
        "First, I will cancel your current reservation (K1NW8N).",
        "Then, I will book a new one.",
        "Now, I will proceed to book the new reservation in business class.",
        "I'll export the session transcript into the project root.",
        "Let me run the build in the app directory.",
        "Let's start by reviewing the details of each reservation.",
    ]


def test_a_promised_transfer_to_a_human_is_one() -> None:
    s = Script(CHAT)
    s.user("Cancel I6M8JQ.")
    s.say(
        "I cannot cancel reservation I6M8JQ. I need to transfer you to a human agent for this. "
        "I will transfer you to a human agent who can assist you."
    )
    assert named(s) == [
        "I need to transfer you to a human agent for this.",
        "I will transfer you to a human agent who can assist you.",
    ]


def test_work_in_progress_and_a_wait_the_assistant_owes_are_promises() -> None:
    s = Script(CHAT)
    s.user("Export the transcript.")
    s.say("bash is missing, so I'm doing the export with PowerShell instead.")
    s.say("Removed the unused import; waiting for the test run.")
    s.say("The refund is waiting for your manager's approval; I will tell you when it is decided.")
    assert named(s) == [
        "bash is missing, so I'm doing the export with PowerShell instead.",
        "Removed the unused import; waiting for the test run.",
        "The refund is waiting for your manager's approval; I will tell you when it is decided.",
    ]


def test_what_waits_on_the_user_or_only_describes_is_no_promise() -> None:
    s = Script(CHAT)
    s.user("Can you rebook me?")
    s.say("Once you confirm, I will book the new flight.")  # conditional on the user
    s.say("I will book flight HAT001 for you. Would you like me to proceed?")  # a question
    s.say("I have cancelled your reservation K1NW8N.")  # what was done
    s.say("I can only cancel reservations made within the last 24 hours.")  # a policy
    s.say("I'll be here if you need anything else. Let me know.")  # a closing courtesy
    s.say("The build is waiting for your approval.")  # a wait on someone else
    assert promises(s) == []


def test_a_message_that_goes_on_once_the_user_answers_waits_on_the_user() -> None:
    s = Script(CHAT)
    s.user("Move my flight and upgrade me.")
    s.say(
        "I'll need to gather some information:\n\n1. Your user ID.\n2. Your reservation ID.\n\n"
        "Once I have this information, I can proceed with checking the availability."
    )
    assert promises(s) == []


def test_a_plain_promise_to_check_with_no_call_after_it_is_open() -> None:
    s = Script(CHAT)
    s.user("Is the deploy done?")
    promise = s.say("I will check it.")
    assert promises(s) == [(promise, None, "open", "I will check it.")]


# -- which call keeps it ----------------------------------------------------------------------


def test_a_think_call_does_not_keep_a_promise_to_look_something_up() -> None:
    s = Script(CHAT)
    s.user("Any cheaper flights?")
    thought = s.call(
        Call("t1", "think", {"thought": "compare the fares"}),
        text="I'll check the available flights again for a lower fare.",
    )
    s.result("t1", "")
    kept = s.call(Call("s1", "search_direct_flight", {"origin": "JFK", "destination": "SFO"}))
    assert promises(s) == [
        (thought, kept, "kept", "I'll check the available flights again for a lower fare.")
    ]


def test_a_think_call_keeps_a_promise_to_reason() -> None:
    s = Script(CHAT)
    s.user("Can I still cancel?")
    at = s.call(
        Call("t1", "think", {"thought": "booked 2024-05-14 10:00, now 2024-05-15 09:00"}),
        text="Let me verify the booking time against the 24-hour window.",
    )
    assert promises(s) == [
        (at, at, "kept", "Let me verify the booking time against the 24-hour window.")
    ]


def test_the_failed_call_made_again_does_not_keep_a_promise_to_do_it_differently() -> None:
    s = Script(ANTHROPIC)
    s.user("Build the app.")
    s.call(Call("b1", "Bash", {"command": "npm run build", "description": "Build"}))
    s.result("b1", "npm error Missing script: build", error=True)
    promise = s.call(
        Call("b2", "Bash", {"command": "npm run build", "description": "Build in the app dir"}),
        text="Let me run the build in the correct directory:",
    )
    s.result("b2", "npm error Missing script: build", error=True)
    kept = s.call(Call("b3", "Bash", {"command": "cd app && npm run build"}))
    assert promises(s) == [
        (promise, kept, "kept", "Let me run the build in the correct directory:")
    ]


def test_the_failed_call_made_again_keeps_a_promise_to_retry() -> None:
    s = Script(ANTHROPIC)
    s.user("Build the app.")
    s.call(Call("b1", "Bash", {"command": "npm run build"}))
    s.result("b1", "Error: connection reset", error=True)
    at = s.call(Call("b2", "Bash", {"command": "npm run build"}), text="Let me try again:")
    assert promises(s) == [(at, at, "kept", "Let me try again:")]


def test_a_promise_to_read_is_not_kept_by_an_edit_and_is_by_a_read() -> None:
    s = Script(ANTHROPIC)
    s.user("Update the hook.")
    promise = s.call(
        Call("e1", "MultiEdit", {"file_path": "/app/useTodos.ts", "edits": []}),
        text="Let me read the current content and then replace it:",
    )
    s.result("e1", "File has not been read yet. Read it first.", error=True)
    kept = s.call(Call("r1", "Read", {"file_path": "/app/useTodos.ts"}))
    assert promises(s) == [
        (promise, kept, "kept", "Let me read the current content and then replace it:")
    ]


def test_a_promise_to_edit_is_kept_by_the_read_that_starts_it() -> None:
    s = Script(ANTHROPIC)
    s.user("Add the skill to the lock file.")
    at = s.call(
        Call("r1", "Read", {"file_path": "/repo/skills-lock.json"}),
        text="Let me update skills-lock.json to include the new skill.",
    )
    assert promises(s) == [
        (at, at, "kept", "Let me update skills-lock.json to include the new skill.")
    ]


def test_a_call_of_another_action_keeps_only_its_own_step_of_the_plan() -> None:
    s = Script(CHAT)
    s.user("Move me to business class.")
    plan = s.say("First, I will cancel reservation K1NW8N. Then, I will book a new reservation.")
    s.user("Perfect.")
    kept = s.call(Call("c1", "cancel_reservation", {"reservation_id": "K1NW8N"}))
    assert promises(s) == [
        (plan, kept, "kept", "First, I will cancel reservation K1NW8N."),
        (plan, None, "open", "Then, I will book a new reservation."),
    ]


def test_a_later_step_is_kept_in_its_own_response_only_by_a_call_naming_it() -> None:
    s = Script(RESPONSES)
    s.user("Apply for the grant.")
    text = "Next I'm checking the telemetry state and then I'll export the session transcript."
    s.call(
        Call("c1", "shell_command", {"command": "Test-Path telemetry-prompted"}),
        Call("c2", "shell_command", {"command": "Get-Content SKILL.md"}),
        text=text,
    )
    said = s.at["c1"] - 1
    s.result("c1", "yes")
    s.result("c2", "# Skill")
    kept = s.call(Call("c3", "shell_command", {"command": "Copy-Item latest.jsonl ."}))
    assert promises(s) == [(said, kept, "kept", text)]


def test_a_later_step_named_by_a_call_of_its_own_response_is_kept_there() -> None:
    s = Script(RESPONSES)
    s.user("Apply for the grant.")
    text = "I'm running the export and then I'll read the package metadata."
    s.call(
        Call("c1", "shell_command", {"command": "bash export-session.sh"}),
        Call("c2", "shell_command", {"command": "Get-Content package.json"}),
        text=text,
    )
    assert promises(s) == [(s.at["c1"] - 1, s.at["c2"], "kept", text)]


def test_a_promise_a_call_went_past_is_withdrawn_by_the_next_plan_carried_out() -> None:
    s = Script(ANTHROPIC)
    s.user("Simplify the hook.")
    missed = s.call(
        Call("e1", "MultiEdit", {"file_path": "/app/useTodos.ts", "edits": []}),
        text="Let me read the current content and then replace it:",
    )
    s.result("e1", "String to replace not found in file.", error=True)
    plan = s.call(
        Call("w1", "Write", {"file_path": "/app/useSimpleTodos.ts", "content": "export {}"}),
        text="Let me create a simplified hook in a new file:",
    )
    assert promises(s) == [
        (missed, plan, "withdrawn", "Let me read the current content and then replace it:"),
        (plan, plan, "kept", "Let me create a simplified hook in a new file:"),
    ]
