"""``pending_retry``: which failures open a retry chain, which later call retries it, and where
it is given up. Each case states the exact chains (opened, resolved, status) of a small
conversation, with the reason in its name or id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import run_cli, write_file
from transcript_builders import ANTHROPIC, CHAT, Call, Script

from otel_compaction import Policy
from otel_compaction.analysis import Analysis
from otel_compaction.rules.pending_retry import failure_kind, same_intent, target_of
from otel_compaction.transcript import Transcript

Chain = tuple[int, int | None, str]


def chains(s: Script) -> list[Chain]:
    analysis = Analysis.build(Transcript.parse(s.messages), Policy.load("default"))
    return [(o.opened, o.resolved, o.status) for o in analysis.obligations if o.kind == "retry"]


def negatives(s: Script) -> list[int]:
    analysis = Analysis.build(Transcript.parse(s.messages), Policy.load("default"))
    return [n.message_index for n in analysis.negatives]


# -- which failures open a chain ----------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        "Error: non-delivered order cannot be returned",
        "Error: reservation cannot be cancelled, the flight has already departed",
        "Error: not enough seats on flight HAT290",
        "Error: gift card balance is not enough",
        "Error: certificate cannot be used to update reservation",
        "Error: cancellation is not allowed by the fare policy",
    ],
)
def test_a_business_rule_refusal_is_an_answer_and_opens_no_chain(answer: str) -> None:
    s = Script(CHAT)
    s.user("please handle my order")
    s.call(Call("c1", "return_delivered_order_items", {"order_id": "#W2378156"}))
    refused = s.result("c1", answer)
    # The model has not answered yet, and still nothing is owed: the tool has decided.
    assert chains(s) == []
    assert negatives(s) == [refused]  # it stays a negative result the summary must state


def test_a_permission_not_granted_waits_on_the_user_and_opens_no_chain() -> None:
    s = Script(ANTHROPIC)
    s.user("write CLAUDE.md")
    s.call(Call("w1", "Write", {"file_path": "/repo/CLAUDE.md", "content": "# Notes"}))
    s.result(
        "w1",
        "Claude requested permissions to write to /repo/CLAUDE.md, but you haven't granted it yet.",
        error=True,
    )
    assert chains(s) == []


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Error: service unavailable, try again later", "transient"),  # retried as it was
        ("Exit code: 124\ncommand timed out after 10937 milliseconds", "transient"),
        ("Error: 1 validation error for Payment\npayment_id\n  Field required", "input"),
        ("InputValidationError: The required parameter `prompt` is missing", "input"),
        ("Error: payment amount does not add up, total price is 305, but paid 255", "input"),
        ("Error: non-delivered order cannot be returned", "refusal"),
        # The update named a flight that does not fly that day (a flown segment kept): the
        # model's own argument, which a corrected call gets past.
        ("Error: flight HAT030 not available on date 2024-05-13", "input"),
        ("fatal: The current branch main has no upstream branch.", "other"),  # a chain
    ],
)
def test_how_a_failure_reads(text: str, kind: str) -> None:
    assert failure_kind(text) == kind


# -- which call retries it ----------------------------------------------------------------------


def test_git_push_fixed_by_set_upstream_is_the_same_intent_and_succeeds() -> None:
    s = Script(ANTHROPIC)
    s.user("push my branch")
    s.call(Call("b1", "Bash", {"command": "git push", "description": "Push"}))
    failed = s.result("b1", "fatal: The current branch main has no upstream branch.", error=True)
    s.call(Call("b2", "Bash", {"command": "git push --set-upstream origin main"}))
    pushed = s.result("b2", "branch 'main' set up to track 'origin/main'.")
    assert chains(s) == [(failed, pushed, "succeeded")]


def test_a_bash_call_differing_only_in_description_timeout_background_is_the_same() -> None:
    s = Script(ANTHROPIC)
    s.user("run the tests")
    s.call(Call("b1", "Bash", {"command": "npm test", "description": "Run tests"}))
    failed = s.result("b1", "Error: command timed out after 120000ms", error=True)
    retry = {
        "command": "npm test",
        "description": "Run the tests again with a longer timeout",
        "timeout": 600000,
        "run_in_background": False,
    }
    s.call(Call("b2", "Bash", retry))
    passed = s.result("b2", "12 passing")
    assert chains(s) == [(failed, passed, "succeeded")]


def test_a_read_with_a_limit_and_offset_is_the_same_read() -> None:
    s = Script(ANTHROPIC)
    s.user("look at the log")
    s.call(Call("r1", "Read", {"file_path": "/srv/app.log"}))
    too_long = "Error: File content (41000 tokens) exceeds maximum allowed tokens (25000)."
    failed = s.result("r1", too_long, error=True)
    s.call(Call("r2", "Read", {"file_path": "/srv/app.log", "offset": 1, "limit": 400}))
    read = s.result("r2", "1\tstarting\n2\tready")
    assert chains(s) == [(failed, read, "succeeded")]


def test_an_edit_of_an_unread_file_is_retried_by_the_next_change_of_that_file() -> None:
    s = Script(ANTHROPIC)
    s.user("update CLAUDE.md")
    edit = {"file_path": "/repo/CLAUDE.md", "old_string": "v14", "new_string": "v15"}
    s.call(Call("e1", "Edit", edit))
    failed = s.result(
        "e1",
        "<tool_use_error>File has not been read yet. Read it first before writing to it."
        "</tool_use_error>",
        error=True,
    )
    s.call(Call("r1", "Read", {"file_path": "/repo/CLAUDE.md"}))  # a read changes nothing
    s.result("r1", "1\t# Project (v14)")
    multi = {"file_path": "/repo/CLAUDE.md", "edits": [{"old_string": "v14", "new_string": "v15"}]}
    s.call(Call("e2", "MultiEdit", multi))
    edited = s.result("e2", "Applied 1 edit to /repo/CLAUDE.md")
    assert chains(s) == [(failed, edited, "succeeded")]


def test_after_an_input_error_the_next_call_of_the_tool_is_the_retry() -> None:
    s = Script(ANTHROPIC)
    s.user("analyse the project")
    s.call(Call("t1", "Task", {"description": "Analyze", "subagent_type": "general-purpose"}))
    failed = s.result(
        "t1",
        "<tool_use_error>InputValidationError: Task failed due to the following issue: "
        "The required parameter `prompt` is missing</tool_use_error>",
        error=True,
    )
    fixed = {"description": "Analyze structure", "prompt": "List the modules", "subagent_type": "x"}
    s.call(Call("t2", "Task", fixed))
    done = s.result("t2", "The project has three modules.")
    assert chains(s) == [(failed, done, "succeeded")]


def test_another_target_of_the_same_tool_is_no_retry() -> None:
    s = Script(ANTHROPIC)
    s.user("push")
    s.call(Call("b1", "Bash", {"command": "git push"}))
    failed = s.result("b1", "fatal: The current branch main has no upstream branch.", error=True)
    s.call(Call("b2", "Bash", {"command": "git status"}))  # git status is not git push
    s.result("b2", "On branch main")
    assert chains(s) == [(failed, None, "open")]


@pytest.mark.parametrize(
    ("failed", "other", "same"),
    [
        ({"command": "git push"}, {"command": "cd /repo && git push origin main"}, True),
        ({"command": "npm test 2>&1 | tail -5"}, {"command": "npm test"}, True),
        ({"command": ["bash", "-lc", "make build"]}, {"command": "make build -j4"}, True),
        ({"command": "rm a.txt"}, {"command": "rm b.txt"}, False),  # another operand
        ({"command": "git push"}, {"command": "git pull"}, False),  # another subcommand
        ({"city": "Oslo", "timeout": 5}, {"city": "Oslo"}, True),  # a cosmetic key
        ({"city": "Oslo"}, {"city": "Rome"}, False),
    ],
)
def test_same_target_per_tool_family(
    failed: dict[str, object], other: dict[str, object], same: bool
) -> None:
    assert same_intent("tool", target_of(failed), "tool", target_of(other)) is same


def test_a_failed_retry_extends_the_chain_to_the_retry_that_succeeds() -> None:
    s = Script(CHAT)
    s.user("rate?")
    s.call(Call("x1", "get_rate", {"pair": "EURUSD"}))
    failed = s.result("x1", "Error: rate limited")
    s.call(Call("x2", "get_rate", {"pair": "EURUSD"}))
    again = s.result("x2", "Error: rate limited")
    s.call(Call("x3", "get_rate", {"pair": "EURUSD"}))
    rate = s.result("x3", "1.08")
    # The failed retry is held with its chain: a cut after it still owes the call.
    assert chains(s) == [(failed, rate, "succeeded"), (again, rate, "succeeded")]


def test_a_failed_retry_with_corrected_arguments_is_held_with_the_chain() -> None:
    s = Script(CHAT)
    s.user("book it")
    s.call(Call("b1", "book_reservation", {"flight": "HAT1", "amount": 255}))
    failed = s.result("b1", "Error: payment amount does not add up, total is 305, but paid 255")
    s.call(Call("b2", "book_reservation", {"flight": "HAT1", "amount": 300}))
    again = s.result("b2", "Error: payment amount does not add up, total is 305, but paid 300")
    assert chains(s) == [(failed, None, "open"), (again, None, "open")]


# -- where it is given up -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "moving_on", ["I'll move on to the next order.", "Let's try a different approach."]
)
def test_abandoning_the_approach_gives_the_chain_up(moving_on: str) -> None:
    s = Script(CHAT)
    s.user("cancel orders #W1 and #W2")
    s.call(Call("c1", "cancel_pending_order", {"order_id": "#W1"}))
    failed = s.result("c1", "Error: connection reset by peer")
    moved = s.call(Call("c2", "cancel_pending_order", {"order_id": "#W2"}), text=moving_on)
    s.result("c2", "cancelled")
    assert chains(s) == [(failed, moved, "given_up")]


def test_a_chain_the_users_next_message_closes_ends_before_that_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = Script(ANTHROPIC)
    s.user("run the tests")
    s.call(Call("b1", "Bash", {"command": "pytest -q"}))
    failed = s.result("b1", "Error: command timed out after 120s", error=True)
    s.user("Stop that. Deploy to staging instead.")
    s.say("Deploying to staging.")
    assert chains(s) == [(failed, failed, "given_up")]
    path = write_file(tmp_path, "t.json", json.dumps(s.messages))
    _, out, _ = run_cli(capsys, "check", str(path), "--span", "0:3", "--format", "json")
    # The user's newest instruction (message 3) is never summarized to close the chain.
    assert json.loads(out)["decision"]["span"] == [0, 3]


def test_a_promise_to_retry_keeps_the_chain_open_past_the_users_reply() -> None:
    s = Script(CHAT)
    s.user("send the report")
    s.call(Call("m1", "send_mail", {"to": "ops@example.com"}))
    failed = s.result("m1", "Error: service unavailable")
    s.say("The mail service is down; I will retry in a minute.")
    s.user("ok")
    assert chains(s) == [(failed, None, "open")]


def test_handing_the_request_to_a_human_gives_the_chain_up() -> None:
    s = Script(CHAT)
    s.user("book the flight")
    s.call(Call("b1", "book_reservation", {"user_id": "mia_li_3668"}))
    failed = s.result("b1", "Error: service unavailable")
    handed = s.say("I will transfer you to a human agent who can complete your booking.")
    s.user("###TRANSFER###")
    assert chains(s) == [(failed, handed, "given_up")]


# -- a not-found of the model's own identifier --------------------------------------------------


def test_a_not_found_of_an_id_nobody_supplied_is_a_typo_the_next_lookup_retries() -> None:
    s = Script(CHAT)
    s.user("my reservation is IFOYYZ")
    s.call(Call("g1", "get_reservation_details", {"reservation_id": "IFOYWZ"}))
    failed = s.result("g1", "Error: Reservation IFOYWZ not found")
    s.call(Call("g2", "get_reservation_details", {"reservation_id": "IFOYYZ"}))
    found = s.result("g2", '{"reservation_id": "IFOYYZ", "origin": "JFK"}')
    assert chains(s) == [(failed, found, "succeeded")]


def test_a_not_found_of_the_id_the_user_gave_is_an_answer_and_opens_no_chain() -> None:
    s = Script(CHAT)
    s.user("my reservation is IFOYYZ")
    s.call(Call("g1", "get_reservation_details", {"reservation_id": "IFOYYZ"}))
    s.result("g1", "Error: Reservation IFOYYZ not found")
    assert chains(s) == []


def test_a_payment_not_found_in_an_update_with_an_invented_payment_id_opens_a_chain() -> None:
    s = Script(CHAT)
    s.user("upgrade M20IZO to business with my card")
    update = {"reservation_id": "M20IZO", "cabin": "business", "payment_id": "credit_card_1"}
    s.call(Call("u1", "update_reservation_flights", update))
    failed = s.result("u1", "Error: payment method not found")
    assert chains(s) == [(failed, None, "open")]  # the corrected update is still owed


# -- a command that found nothing ---------------------------------------------------------------


def test_a_missing_path_the_model_works_at_again_opens_a_chain() -> None:
    s = Script(ANTHROPIC)
    s.user("list the types")
    s.call(Call("b1", "Bash", {"command": "ls -la types/"}))
    failed = s.result("b1", "ls: cannot access 'types/': No such file or directory", error=True)
    s.call(Call("b2", "Bash", {"command": "cd /repo && ls -la types/"}))
    listed = s.result("b2", "index.ts\ntodo.ts")
    assert chains(s) == [(failed, listed, "succeeded")]


def test_a_probe_whose_absence_the_model_accepts_opens_no_chain() -> None:
    s = Script(ANTHROPIC)
    s.user("look for the optional specs")
    s.call(Call("b1", "Bash", {"command": "ls specs/"}))
    s.result("b1", "ls: cannot access 'specs/': No such file or directory", error=True)
    s.call(Call("r1", "Read", {"file_path": "/repo/README.md"}))  # it goes on without them
    s.result("r1", "1\t# Repo")
    s.say("There is no specs folder; the README describes the layout.")
    assert chains(s) == []


def test_a_probe_retried_only_later_is_found_by_a_growing_conversation_as_by_a_fresh_one() -> None:
    from test_incremental import grow_and_compare

    s = Script(ANTHROPIC)
    s.user("list the types")
    s.call(Call("b1", "Bash", {"command": "ls -la types/"}))
    s.result("b1", "ls: cannot access 'types/': No such file or directory", error=True)
    s.call(Call("r1", "Read", {"file_path": "/repo/README.md"}))
    s.result("r1", "1\t# Repo")
    s.call(Call("b2", "Bash", {"command": "cd /repo && ls -la types/"}))
    s.result("b2", "index.ts")
    assert grow_and_compare(s.messages, Policy.load("default")) == len(s.messages)


def test_an_installer_stopped_at_a_prompt_nobody_answered_is_retried_by_the_rerun() -> None:
    # No error flag: the output ends at the prompt (no terminal answered it), nothing created.
    s = Script(ANTHROPIC)
    s.user("Create the Next.js app.")
    create = "npx create-next-app@latest web --ts"
    s.call(Call("b1", "Bash", {"command": create}))
    stuck = s.result("b1", "\x1b[36m?\x1b[39m Use a src/ directory? \u203a No / Yes")
    s.call(Call("b2", "Bash", {"command": create, "description": "accept defaults"}))
    done = s.result("b2", "\u2714 Use Turbopack? \u2026 No\nCreating a new Next.js app in /w/web.")
    assert chains(s) == [(stuck, done, "succeeded")]
