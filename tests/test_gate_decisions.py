"""Every branch of `CompactionGate.evaluate`, in every transcript format, and the check CLI.

The decision branches are: compact a closed span, compact an extended span (the end moved
forward to close a pairing break), defer to an older closed span, and refuse. Each scenario is
written once with `transcript_builders.Script`, which emits the same conversation as OpenAI Chat
Completions messages, Anthropic Messages or OpenAI Responses items and records where every
message landed, so the expected spans and message indices below are exact for each format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_harness import run_cli
from transcript_builders import ANTHROPIC, CHAT, Call, Message, Script, fmt_param, policy_with

from otel_compaction import (
    CompactionGate,
    CompactionRefused,
    Decision,
    LiveSpanCompactionError,
    OpenObligationError,
    Policy,
)
from otel_compaction.gate import SpanError
from otel_compaction.ledger import ObligationLedger
from otel_compaction.policy import builtin_policy_dir
from otel_compaction.transcript import Transcript


def gate(
    policy: str | Policy = "default", ledger: ObligationLedger | None = None
) -> CompactionGate:
    return CompactionGate(policy, ledger=ledger)


def refuse(
    g: CompactionGate, messages: list[Message], start: int, end: int, **kwargs: Any
) -> CompactionRefused:
    with pytest.raises(CompactionRefused) as caught:
        g.evaluate(messages, start, end, **kwargs)
    return caught.value


def rules_at(decision: Decision, severity: str) -> list[tuple[str, int | None]]:
    return [(f.rule, f.message_index) for f in decision.findings if f.severity == severity]


def named(decision: Decision) -> list[tuple[str, str, int | None]]:
    return [(o.kind, o.id, o.message_index) for o in decision.obligations]


# --------------------------------------------------------------------------------------------
# The builders themselves produce the format they claim (so every test below covers it)
# --------------------------------------------------------------------------------------------


@fmt_param
def test_builder_format_is_detected(fmt: str) -> None:
    s = Script(fmt)
    s.user("go")
    s.call("a", "b", text="Two lookups.")
    s.result("a", "ok")
    s.result("b", "ok")
    transcript = Transcript.parse(s.messages)
    assert transcript.format == fmt
    assert [c.id for c in transcript.calls] == ["a", "b"]
    assert [(c.message_index, c.result) for c in transcript.calls] == [
        (s.at["a"], 0),
        (s.at["b"], 1),
    ]


# --------------------------------------------------------------------------------------------
# compact
# --------------------------------------------------------------------------------------------


@fmt_param
def test_closed_span_compacts_as_requested(fmt: str) -> None:
    s = Script(fmt)
    s.user("look up the weather in Lisbon")
    s.call(Call("w1", "weather", {"city": "Lisbon"}))
    end = s.result("w1", "sunny, 24 degrees") + 1
    s.say("It is sunny.")
    s.user("thanks")

    decision = gate().evaluate(s.messages, 0, end)

    assert decision.action == "compact"
    assert decision.span == (0, end)
    assert decision.requested == (0, end)
    assert decision.extended is False
    assert decision.obligations == ()
    assert decision.blocking == ()
    # default carries the "no verbatim archive" condition rather than blocking on it
    assert rules_at(decision, "carry") == [("not_addressable", 0)]
    assert decision.must_carry.identifiers == ()
    assert decision.must_carry.negatives == ()
    assert decision.must_carry.pending == ()


@fmt_param
def test_archived_span_has_no_not_addressable_finding(fmt: str) -> None:
    s = Script(fmt)
    s.user("hello")
    s.say("hi")
    decision = gate().evaluate(s.messages, 0, 2, addressable=True)
    assert (decision.action, decision.span, decision.findings) == ("compact", (0, 2), ())


# --------------------------------------------------------------------------------------------
# extend: parallel calls, a span ending between two results
# --------------------------------------------------------------------------------------------


@fmt_param
def test_span_ending_between_parallel_results_is_extended(fmt: str) -> None:
    s = Script(fmt)
    s.user("compare two flights")
    s.call(Call("a", "search_flights"), Call("b", "search_flights"), text="Searching both.")
    result_a = s.result("a", "flight a: 320 EUR")
    result_b = s.result("b", "flight b: 290 EUR")
    s.say("Flight b is cheaper.")

    transcript = Transcript.parse(s.messages)
    assert result_a + 1 not in transcript.closed_cuts()
    assert result_b + 1 in transcript.closed_cuts()

    for end in range(s.at["a"] + 1, result_b + 1):
        decision = gate().evaluate(s.messages, 0, end)
        assert decision.action == "compact", end
        assert decision.span == (0, result_b + 1), end
        assert decision.requested == (0, end)
        assert decision.extended is True
        assert decision.blocking == ()
        assert decision.obligations == ()


@fmt_param
def test_extension_covers_calls_emitted_inside_the_extension(fmt: str) -> None:
    # Closing `a` brings in `b`, closing `b` brings in `c`: the end moves until a closed cut.
    s = Script(fmt)
    s.user("go")
    s.call("a")
    s.call("b")
    s.result("a", "ok")
    s.call("c")
    s.result("b", "ok")
    result_c = s.result("c", "ok")
    s.say("done")
    assert Transcript.parse(s.messages).closed_cuts() == [0, 1, result_c + 1, result_c + 2]
    decision = gate().evaluate(s.messages, 0, s.at["a"] + 1)
    assert (decision.action, decision.span, decision.extended) == (
        "compact",
        (0, result_c + 1),
        True,
    )


@fmt_param
@pytest.mark.parametrize(("limit", "action"), [(1, "compact"), (0, "defer")])
def test_extension_limit(fmt: str, limit: int, action: str) -> None:
    s = Script(fmt)
    s.user("compare two flights")
    s.call("a", "b")
    result_a = s.result("a", "320 EUR")
    result_b = s.result("b", "290 EUR")
    s.say("b is cheaper")
    # Ending right after a's result leaves b's result exactly one message past the end.
    assert result_b == result_a + 1
    g = gate(policy_with(extension_limit=limit))

    decision = g.evaluate(s.messages, 0, result_a + 1)

    assert decision.action == action
    if action == "compact":
        assert (decision.span, decision.extended) == ((0, result_b + 1), True)
    else:
        # Beyond the limit: hold the parallel turn verbatim, compact the closed span before it.
        assert decision.span == (0, 1)
        assert named(decision) == [("tool_call", "b", s.at["b"])]
        # At a critical budget the only alternative is a refusal: the limit gives way.
        critical = g.evaluate(s.messages, 0, result_a + 1, critical=True)
        assert (critical.action, critical.span, critical.extended) == (
            "compact",
            (0, result_b + 1),
            True,
        )


@fmt_param
def test_unanswered_parallel_call_is_not_extended_past_the_transcript(fmt: str) -> None:
    s = Script(fmt)
    s.user("first question")
    s.say("first answer")
    s.call("a", "b")
    s.result("a", "ok")
    decision = gate().evaluate(s.messages, 0, len(s.messages))
    assert decision.action == "defer"
    # The answer and the calls after it are one model response: the older span ends before it.
    assert decision.span == (0, 1)
    assert decision.requested == (0, len(s.messages))
    assert named(decision) == [("tool_call", "b", s.at["b"])]
    # Nothing is pending at the cut of the older span: the open call lies after it.
    assert decision.must_carry.pending == ()


# --------------------------------------------------------------------------------------------
# reused ids: a result answers the call it follows (the latest unanswered one of that id)
# --------------------------------------------------------------------------------------------


@fmt_param
def test_reused_id_result_answers_the_call_it_follows(fmt: str) -> None:
    s = Script(fmt)
    s.user("search twice")
    first = s.call(Call("c1", "search", {"q": "one"}))
    second = s.call(Call("c1", "search", {"q": "two"}))  # same id, still unanswered
    answer = s.result("c1", "found two")

    transcript = Transcript.parse(s.messages)
    # As the providers pair them: the result answers the call right before it.
    assert [(c.message_index, c.result) for c in transcript.calls] == [(first, None), (second, 0)]
    assert [c.message_index for c in transcript.open_calls()] == [first]
    assert transcript.orphan_results() == []

    refused = refuse(gate(), s.messages, 0, answer + 1, critical=True)
    assert isinstance(refused, OpenObligationError)
    assert named(refused.decision) == [("tool_call", "c1", first)]
    assert rules_at(refused.decision, "block") == [("open_tool_call", first)]


@fmt_param
def test_reused_id_after_resolution_is_a_new_obligation(fmt: str) -> None:
    s = Script(fmt)
    s.user("check stock twice")
    s.call("c1")
    first_answer = s.result("c1", "3 left")
    s.say("Three left; checking again later.")
    second = s.call("c1")
    second_answer = s.result("c1", "2 left")

    g = gate()
    closed = g.evaluate(s.messages, 0, first_answer + 1)
    assert (closed.action, closed.span, closed.extended) == (
        "compact",
        (0, first_answer + 1),
        False,
    )
    extended = g.evaluate(s.messages, 0, second + 1)
    assert (extended.action, extended.span) == ("compact", (0, second_answer + 1))
    # A span starting at the second result is cut from its call: orphan_result, nothing older.
    refused = refuse(g, s.messages, second_answer, second_answer + 1)
    assert rules_at(refused.decision, "block") == [("orphan_result", second_answer)]
    assert named(refused.decision) == [("orphaned_call", "c1", second)]
    assert refused.decision.obligations[0].discharge == (
        "start the span at a closed cut, before the call"
    )


# --------------------------------------------------------------------------------------------
# split responses: one model response over several consecutive assistant messages
# --------------------------------------------------------------------------------------------


@fmt_param
def test_split_response_text_then_tool_call(fmt: str) -> None:
    s = Script(fmt)
    s.user("where is my order?")
    promise = s.say("I'll check the order status first.")
    call = s.call(Call("o1", "get_order"))
    answer = s.result("o1", "shipped yesterday")
    s.say("It shipped yesterday.")

    g = gate()
    # Cutting between the text and its tool call leaves the promise dangling: extend over both.
    decision = g.evaluate(s.messages, 0, promise + 1)
    assert (decision.action, decision.span, decision.extended) == ("compact", (0, answer + 1), True)
    decision = g.evaluate(s.messages, 0, call + 1)
    assert (decision.action, decision.span) == ("compact", (0, answer + 1))


@fmt_param
def test_split_response_two_tool_messages_before_their_results(fmt: str) -> None:
    s = Script(fmt)
    s.user("fetch both files")
    first = s.call(Call("f1", "read_file"))
    second = s.call(Call("f2", "read_file"))
    s.result("f1", "contents one")
    answer = s.result("f2", "contents two")
    s.say("Read both.")

    transcript = Transcript.parse(s.messages)
    assert transcript.closed_cuts() == [0, 1, answer + 1, answer + 2]
    decision = gate().evaluate(s.messages, 0, first + 1)
    assert (decision.action, decision.span) == ("compact", (0, answer + 1))
    # Before either result has arrived, a critical budget can only refuse, naming both calls.
    critical = refuse(gate(), s.messages[: second + 1], 1, second + 1, critical=True)
    assert named(critical.decision) == [("tool_call", "f1", first), ("tool_call", "f2", second)]


# --------------------------------------------------------------------------------------------
# defer, and critical turning a defer into a refuse
# --------------------------------------------------------------------------------------------


@fmt_param
def test_open_call_defers_to_older_closed_span(fmt: str) -> None:
    s = Script(fmt)
    s.user("hello")
    s.say("hi, how can I help?")
    s.user("restart the service")
    s.call(Call("r1", "restart_service", {"service": "payments"}))

    decision = gate().evaluate(s.messages, 0, len(s.messages))

    assert decision.action == "defer"
    assert decision.span == (0, 3)
    assert decision.requested == (0, len(s.messages))
    assert named(decision) == [("tool_call", "r1", s.at["r1"])]
    assert decision.obligations[0].name == "restart_service"
    # The findings are those of the older span that will be compacted: nothing blocks there.
    assert decision.blocking == ()
    # The open call lies after the older span: the summary of that span owes nothing for it.
    assert decision.must_carry.pending == ()
    assert "deferring span 0:" in decision.describe()


@fmt_param
def test_critical_turns_defer_into_refuse(fmt: str) -> None:
    s = Script(fmt)
    s.user("hello")
    s.say("hi")
    s.user("restart the service")
    s.call(Call("r1", "restart_service"))
    end = len(s.messages)

    refused = refuse(gate(), s.messages, 0, end, critical=True)

    assert type(refused) is OpenObligationError
    decision = refused.decision
    assert decision.action == "refuse"
    assert decision.critical is True
    assert decision.span == (0, end)
    assert named(decision) == [("tool_call", "r1", s.at["r1"])]
    assert rules_at(decision, "block") == [("open_tool_call", s.at["r1"])]
    assert refused.obligations == decision.obligations
    assert "r1" in str(refused)


@fmt_param
def test_refuse_when_no_older_closed_span_exists(fmt: str) -> None:
    s = Script(fmt)
    s.user("restart it")
    call = s.call(Call("r1", "restart_service"))
    refused = refuse(gate(), s.messages, call, call + 1)
    assert isinstance(refused, OpenObligationError)
    assert refused.decision.span == (call, call + 1)
    assert named(refused.decision) == [("tool_call", "r1", call)]


@fmt_param
def test_refusal_can_be_returned_instead_of_raised(fmt: str) -> None:
    s = Script(fmt)
    s.user("restart it")
    call = s.call("r1")
    decision = gate().evaluate(s.messages, call, call + 1, raise_on_refuse=False)
    assert decision.action == "refuse"
    with pytest.raises(OpenObligationError):
        decision.raise_if_refused()


@fmt_param
def test_refusal_names_every_open_obligation(fmt: str) -> None:
    s = Script(fmt)
    s.user("do three things")
    s.call(Call("a", "create_user"), Call("b", "send_mail"), Call("c", "audit_log"))
    s.result("b", "sent")
    promise = s.say("I will verify the account before proceeding.")

    refused = refuse(gate(), s.messages, 1, len(s.messages))

    assert isinstance(refused, OpenObligationError)
    commitment = refused.decision.obligations[2].id
    assert commitment.startswith("commitment-")
    expected = [
        ("tool_call", "a", s.at["a"]),
        ("tool_call", "c", s.at["c"]),
        ("commitment", commitment, promise),
    ]
    assert named(refused.decision) == expected
    assert [(o.kind, o.id, o.message_index) for o in refused.obligations] == expected
    assert [o.name for o in refused.decision.obligations][:2] == ["create_user", "audit_log"]
    message = str(refused)
    assert message.startswith(
        f"refusing compaction of span 1:{promise + 1}: open obligations "
        "(and how to discharge them): "
    )
    for fragment in (
        f"tool_call create_user (a) at message {s.at['a']}: append its result, or "
        "force_terminal() records it abandoned",
        f"tool_call audit_log (c) at message {s.at['c']}",
        f"commitment I will verify the account before proceeding. ({commitment}) at message "
        f"{promise}: make the promised "
        "call, or force_terminal() records it withdrawn",
    ):
        assert fragment in message


def test_anthropic_parallel_results_in_one_user_message() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "weather in two cities"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_a", "name": "weather", "input": {"c": "Oslo"}},
                {"type": "tool_use", "id": "toolu_b", "name": "weather", "input": {"c": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "hot"},
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "cold"},
                {"type": "text", "text": "and what should I wear?"},
            ],
        },
        {"role": "assistant", "content": "Layers."},
    ]
    transcript = Transcript.parse(messages)
    assert transcript.closed_cuts() == [0, 1, 3, 4]
    assert [
        (c.id, transcript.results[c.result].text if c.result is not None else None)
        for c in transcript.calls
    ] == [("toolu_a", "cold"), ("toolu_b", "hot")]
    decision = gate().evaluate(messages, 0, 2)
    assert (decision.action, decision.span, decision.extended) == ("compact", (0, 3), True)


# --------------------------------------------------------------------------------------------
# the ledger against the transcript, both ways
# --------------------------------------------------------------------------------------------


@fmt_param
def test_ledger_open_but_transcript_resolved_is_ledger_mismatch(fmt: str) -> None:
    s = Script(fmt)
    s.user("hello")
    call = s.call(Call("c1", "lookup"))
    answer = s.result("c1", "done")
    s.say("Done.")
    ledger = ObligationLedger()
    ledger.open("conv-1", "tool_call", "c1", name="lookup")
    g = gate(ledger=ledger)

    decision = g.evaluate(s.messages, 0, answer + 1, conversation_id="conv-1")

    assert decision.action == "defer"
    assert decision.span == (0, 1)
    assert named(decision) == [("tool_call", "c1", call)]
    refused = refuse(g, s.messages, 0, answer + 1, conversation_id="conv-1", critical=True)
    assert isinstance(refused, OpenObligationError)
    blocking = refused.decision.blocking
    assert [(f.rule, f.message_index) for f in blocking] == [("ledger_mismatch", call)]
    assert f"transcript has its result at message {answer}" in blocking[0].detail
    # Another conversation's ledger says nothing about this transcript.
    other = g.evaluate(s.messages, 0, answer + 1, conversation_id="conv-2")
    assert (other.action, other.span) == ("compact", (0, answer + 1))


@fmt_param
def test_ledger_resolved_but_transcript_has_no_result_is_severed(fmt: str) -> None:
    s = Script(fmt)
    s.user("hello")
    s.say("hi")
    call = s.call(Call("c1", "charge_card"))
    ledger = ObligationLedger()
    ledger.open("conv-1", "tool_call", "c1", name="charge_card")
    ledger.resolve("conv-1", "c1", "result")
    g = gate(ledger=ledger)

    refused = refuse(g, s.messages, 0, call + 1, conversation_id="conv-1", critical=True)

    assert isinstance(refused, OpenObligationError)
    assert rules_at(refused.decision, "block") == [
        ("open_tool_call", call),
        ("severed_obligation", call),
    ]
    severed = [f for f in refused.decision.findings if f.rule == "severed_obligation"]
    assert "ledger recorded its result" in severed[0].detail
    assert named(refused.decision) == [("tool_call", "c1", call)]
    deferred = g.evaluate(s.messages, 0, call + 1, conversation_id="conv-1")
    # "hi" and the call are one response: the older span ends before both.
    assert (deferred.action, deferred.span) == ("defer", (0, 1))


@fmt_param
def test_ledger_abandoned_call_lets_compaction_proceed(fmt: str) -> None:
    s = Script(fmt)
    s.user("hello")
    call = s.call(Call("c1", "slow_report"))
    s.user("never mind, cancel that")
    s.say("Cancelled.")
    end = len(s.messages)
    ledger = ObligationLedger()
    ledger.open("conv-1", "tool_call", "c1", name="slow_report")
    ledger.resolve("conv-1", "c1", "abandoned")

    decision = gate(ledger=ledger).evaluate(s.messages, 0, end, conversation_id="conv-1")

    assert (decision.action, decision.span, decision.obligations) == ("compact", (0, end), ())
    assert decision.blocking == ()
    assert decision.must_carry.pending == ()
    # Without the ledger the same call is an open obligation.
    refused = refuse(gate(), s.messages, call, end)
    assert named(refused.decision) == [("tool_call", "c1", call)]


def test_ledger_open_call_missing_from_transcript_is_reported_not_trusted() -> None:
    s = Script(CHAT)
    s.user("hello")
    s.say("hi")
    ledger = ObligationLedger()
    ledger.open("conv-1", "tool_call", "ghost", name="deploy")
    decision = gate(ledger=ledger).evaluate(s.messages, 0, 2, conversation_id="conv-1")
    assert decision.action == "compact"
    mismatch = [f for f in decision.findings if f.rule == "ledger_mismatch"]
    assert [(f.message_index, f.severity) for f in mismatch] == [(None, "warn")]
    assert "not in the transcript" in mismatch[0].detail


# --------------------------------------------------------------------------------------------
# the protected head
# --------------------------------------------------------------------------------------------


@fmt_param
def test_protected_head_is_never_compacted(fmt: str) -> None:
    s = Script(fmt)
    s.system("You are a careful agent.")
    s.user("hello")
    s.say("hi")
    decision = gate().evaluate(s.messages, 0, 3)
    assert (decision.action, decision.span, decision.requested) == ("compact", (1, 3), (0, 3))
    with pytest.raises(SpanError, match=r"span 0:1 lies inside the protected head"):
        gate().evaluate(s.messages, 0, 1)


def test_protected_head_counts_developer_role_and_extra_messages() -> None:
    messages: list[Message] = [
        {"role": "system", "content": "rules"},
        {"role": "developer", "content": "more rules"},
        {"role": "user", "content": "task description"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "next"},
    ]
    decision = gate().evaluate(messages, 0, 4)
    assert decision.span == (2, 4)
    pinned = gate(policy_with(protected_head={"messages": 1}))
    assert pinned.evaluate(messages, 0, 4).span == (3, 4)
    with pytest.raises(SpanError, match="protected head"):
        pinned.evaluate(messages, 1, 3)


@pytest.mark.parametrize(("start", "end"), [(0, 0), (2, 1), (-1, 2), (0, 9)])
def test_span_out_of_range(start: int, end: int) -> None:
    messages: list[Message] = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]
    with pytest.raises(
        SpanError, match=rf"span {start}:{end} is not a non-empty span of the 2 messages "
    ):
        gate().evaluate(messages, start, end)


# --------------------------------------------------------------------------------------------
# OpenObligationError vs LiveSpanCompactionError
# --------------------------------------------------------------------------------------------


@fmt_param
def test_strict_unarchived_span_is_live(fmt: str) -> None:
    s = Script(fmt)
    s.user("hello")
    s.say("hi")
    s.user("bye")
    refused = refuse(gate("strict"), s.messages, 0, 2)
    assert type(refused) is LiveSpanCompactionError
    assert rules_at(refused.decision, "block") == [("not_addressable", 0)]
    assert named(refused.decision) == [("archive", "0:2", 0)]
    archived = gate("strict").evaluate(s.messages, 0, 2, addressable=True)
    assert (archived.action, archived.span) == ("compact", (0, 2))


@fmt_param
def test_negative_result_is_live_under_strict(fmt: str) -> None:
    s = Script(fmt)
    s.user("find the invoice")
    s.call(Call("s1", "search_invoices", {"q": "march"}))
    miss = s.result("s1", "No results for march")
    s.say("There is no March invoice.")
    end = miss + 1
    refused = refuse(gate("strict"), s.messages, 0, end)
    assert type(refused) is LiveSpanCompactionError
    assert rules_at(refused.decision, "block") == [("not_addressable", 0), ("null_result", miss)]
    assert named(refused.decision) == [
        ("archive", f"0:{end}", 0),
        ("negative_result", "s1", miss),
    ]
    # Archived verbatim, strict relaxes the negative to something the summary must carry.
    archived = gate("strict").evaluate(s.messages, 0, end, addressable=True)
    assert archived.action == "compact"
    assert [
        (n.message_index, n.call_id, n.tool, n.text) for n in archived.must_carry.negatives
    ] == [(miss, "s1", "search_invoices", "No results for march")]
    # A policy that blocks negatives even when archived: defer to the user turn, or refuse
    # as a live span when the budget is critical.
    blocking = gate(policy_with(rules={"null_result": "block"}))
    deferred = blocking.evaluate(s.messages, 0, end, addressable=True)
    assert (deferred.action, deferred.span) == ("defer", (0, 1))
    assert named(deferred) == [("negative_result", "s1", miss)]
    live = refuse(blocking, s.messages, 0, end, addressable=True, critical=True)
    assert type(live) is LiveSpanCompactionError
    assert rules_at(live.decision, "block") == [("null_result", miss)]


@fmt_param
def test_obligation_outranks_liveness_in_the_refusal_type(fmt: str) -> None:
    s = Script(fmt)
    s.user("find it and book it")
    s.call(Call("s1", "search"))
    miss = s.result("s1", "not found")
    book = s.call(Call("b1", "book"))
    refused = refuse(gate("strict"), s.messages, 0, len(s.messages))
    assert type(refused) is OpenObligationError
    assert rules_at(refused.decision, "block") == [
        ("not_addressable", 0),
        ("null_result", miss),
        ("open_tool_call", book),
    ]


# --------------------------------------------------------------------------------------------
# must_carry
# --------------------------------------------------------------------------------------------


@fmt_param
def test_must_carry_identifiers_and_negatives(fmt: str) -> None:
    s = Script(fmt)
    s.user("Book flight HAT156 for mia_li_3668.")
    s.call(Call("s1", "search_flights", {"flight": "HAT156", "date": "05-14"}))
    miss = s.result("s1", "No flights found on 05-14")
    s.call(Call("s2", "search_flights", {"flight": "HAT156", "date": "05-15"}))
    end = s.result("s2", "available") + 1
    s.user("Go ahead for mia_li_3668 on HAT156.")

    decision = gate().evaluate(s.messages, 0, end)

    assert (decision.action, decision.span) == ("compact", (0, end))
    assert decision.must_carry.identifiers == ("HAT156", "mia_li_3668")
    assert [
        (n.message_index, n.call_id, n.tool, n.text) for n in decision.must_carry.negatives
    ] == [(miss, "s1", "search_flights", "No flights found on 05-14")]
    # Findings come in transcript order, and in rule-table order within one message.
    assert rules_at(decision, "carry") == [
        ("unresolved_reference", 0),
        ("unresolved_reference", 0),
        ("not_addressable", 0),
        ("null_result", miss),
    ]
    # An identifier not used after the span is not carried.
    assert "05-14" not in decision.must_carry.identifiers


def test_must_carry_pending_is_what_is_still_open_at_the_cut() -> None:
    s = Script(CHAT)
    s.user("hello")
    promise = s.say("I will check the queue depth.")
    s.user("ok, and restart payments")
    s.call(Call("r1", "restart_service"))
    s.result("r1", "restarted")
    # Under lenient the promise only warns: the span may end with it still open, so the
    # summary must carry it as pending. The call after the cut keeps it (at message 3).
    decision = gate("lenient").evaluate(s.messages, 0, promise + 1)
    assert decision.action == "compact"
    assert [(p.kind, p.message_index, p.name) for p in decision.must_carry.pending] == [
        ("commitment", promise, "I will check the queue depth.")
    ]
    assert decision.must_carry.pending[0].subjects == ("queue", "depth")
    # An obligation after the cut is in the kept part, not the summary's to carry.
    early = gate().evaluate(s.messages, 0, 1)
    assert early.must_carry.pending == ()


# --------------------------------------------------------------------------------------------
# heuristic rules
# --------------------------------------------------------------------------------------------


@fmt_param
def test_pending_retry_blocks_until_a_retry_succeeds(fmt: str) -> None:
    s = Script(fmt)
    s.user("get the exchange rate")
    s.call(Call("x1", "get_rate"))
    failure = s.result("x1", "Error: service unavailable, try again later", error=True)
    retrying = s.say("The service failed; retrying.")
    s.call(Call("x2", "get_rate"))
    success = s.result("x2", "1.08")
    s.say("The rate is 1.08.")

    g = gate()
    decision = g.evaluate(s.messages, 0, failure + 1)
    # The failure's chain closes at the successful retry: the span is extended over it.
    assert (decision.action, decision.span, decision.extended) == (
        "compact",
        (0, success + 1),
        True,
    )
    # Before the retry succeeds the chain is open ("retrying" promises it): at a critical budget
    # that is a refusal.
    refused = refuse(g, s.messages[: retrying + 1], 0, failure + 1, critical=True)
    assert rules_at(refused.decision, "block") == [("pending_retry", failure)]
    assert named(refused.decision) == [("retry", "x1", failure)]


@fmt_param
def test_pending_retry_stays_open_until_the_model_moves_on(fmt: str) -> None:
    s = Script(fmt)
    s.user("send the report")
    sending = s.say("Sending.")
    s.call(Call("m1", "send_mail"))
    failure = s.result("m1", "Error: rate limited, retry in 30 s", error=True)
    # The model has not answered the failure yet: the chain is open.
    refused = refuse(gate(), s.messages, sending, failure + 1)
    assert rules_at(refused.decision, "block") == [("pending_retry", failure)]
    # It answers without retrying or promising to: it gave up, and only the negative remains.
    gave_up = s.say("The mail service is rate limited, so I could not send the report.")
    decision = gate().evaluate(s.messages, 0, gave_up + 1)
    assert decision.action == "compact"
    assert [f.rule for f in decision.findings] == ["not_addressable", "null_result"]


@fmt_param
def test_dangling_commitment_and_its_discharge(fmt: str) -> None:
    s = Script(fmt)
    s.user("cancel booking ZXCV")
    okay = s.say("Okay.")
    promise = s.say("Let me verify the cancellation policy first.")
    s.user("sure")

    refused = refuse(gate(), s.messages, okay, len(s.messages))
    assert rules_at(refused.decision, "block") == [("dangling_commitment", promise)]
    [(kind, commitment, at)] = named(refused.decision)
    assert (kind, commitment.startswith("commitment-"), at) == ("commitment", True, promise)
    # "Okay." and the promise are one response: the older closed span ends before both.
    deferred = gate().evaluate(s.messages, 0, len(s.messages))
    assert (deferred.action, deferred.span) == ("defer", (0, okay))

    # The next tool call discharges the promise.
    s.call(Call("p1", "get_policy"))
    answer = s.result("p1", "free cancellation within 24h")
    decision = gate().evaluate(s.messages, 0, answer + 1)
    assert decision.action == "compact"
    assert [f.rule for f in decision.findings] == ["not_addressable"]
    # Lenient only warns about it.
    lenient = gate("lenient").evaluate(s.messages[: promise + 1], 0, promise + 1)
    assert lenient.action == "compact"
    assert rules_at(lenient, "warn") == [("dangling_commitment", promise)]


@fmt_param
def test_commitment_in_the_same_message_as_its_call_is_discharged(fmt: str) -> None:
    s = Script(fmt)
    s.user("status?")
    s.call(Call("c1", "status"), text="I will check the status now.")
    end = s.result("c1", "green") + 1
    decision = gate().evaluate(s.messages, 0, end)
    assert (decision.action, decision.span) == ("compact", (0, end))
    assert decision.blocking == ()


@fmt_param
def test_open_transaction(fmt: str) -> None:
    s = Script(fmt)
    s.user("move 10 EUR")
    begin = s.call(Call("t1", "begin_transaction"))
    s.result("t1", "ok")
    s.call(Call("t2", "debit", {"amount": 10}))
    debited = s.result("t2", "ok")
    s.call(Call("t3", "commit_transaction"))
    committed = s.result("t3", "ok")
    s.say("Moved.")

    g = gate()
    # Ending inside the transaction: extend to its commit (and the commit's result).
    decision = g.evaluate(s.messages, 0, debited + 1)
    assert (decision.action, decision.span, decision.extended) == (
        "compact",
        (0, committed + 1),
        True,
    )
    # Never committed: the transaction blocks, though every call has its result.
    unfinished = s.messages[: debited + 1]
    assert Transcript.parse(unfinished).open_calls() == []
    refused = refuse(g, unfinished, 0, debited + 1, critical=True)
    assert rules_at(refused.decision, "block") == [("open_transaction", begin)]
    assert named(refused.decision) == [("transaction", "t1", begin)]


@fmt_param
def test_null_result_carried_and_think_tool_ignored(fmt: str) -> None:
    s = Script(fmt)
    s.user("any open tickets?")
    s.call(Call("k1", "think", {"thought": "list tickets"}))
    s.result("k1", "")
    s.call(Call("q1", "list_tickets"))
    empty = s.result("q1", "[]")
    s.call(Call("q2", "close_ticket"))
    blank = s.result("q2", "")
    end = blank + 1

    decision = gate().evaluate(s.messages, 0, end)

    assert decision.action == "compact"
    # An empty list is an empty search result; an empty output is a command that succeeded
    # silently, not a negative.
    assert rules_at(decision, "carry") == [("not_addressable", 0), ("null_result", empty)]
    assert [(n.call_id, n.text) for n in decision.must_carry.negatives] == [("q1", "[]")]
    assert blank not in [n.message_index for n in decision.must_carry.negatives]


@fmt_param
def test_unresolved_reference(fmt: str) -> None:
    s = Script(fmt)
    s.user("book me something")
    s.call(Call("b1", "book"))
    booked = s.result("b1", "booked, code ZFA04Y")
    s.say("Booked.")
    later = s.user("cancel ZFA04Y please")

    strict = refuse(gate("strict"), s.messages, 0, booked + 1)
    assert type(strict) is LiveSpanCompactionError
    assert rules_at(strict.decision, "block") == [
        ("not_addressable", 0),
        ("unresolved_reference", booked),
    ]
    assert named(strict.decision) == [
        ("archive", f"0:{booked + 1}", 0),
        ("reference", "ZFA04Y", booked),
    ]
    reference = next(f for f in strict.decision.findings if f.rule == "unresolved_reference")
    assert reference.detail == (
        f"'ZFA04Y' is first seen at message {booked} and referred to at message {later}"
    )
    # Archived verbatim, strict carries the reference instead.
    archived = gate("strict").evaluate(s.messages, 0, booked + 1, addressable=True)
    assert archived.action == "compact"
    assert archived.must_carry.identifiers == ("ZFA04Y",)
    default = gate().evaluate(s.messages, 0, booked + 1)
    assert default.must_carry.identifiers == ("ZFA04Y",)
    # A span that also contains the later use binds nothing outside itself.
    whole = gate().evaluate(s.messages, 0, later + 1)
    assert whole.must_carry.identifiers == ()


# --------------------------------------------------------------------------------------------
# format details
# --------------------------------------------------------------------------------------------


def test_anthropic_string_and_block_content_with_is_error() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "Read /etc/app/config.yaml"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading it."},
                {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"p": "x"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": "permission denied",
                    "is_error": True,
                }
            ],
        },
        {"role": "assistant", "content": "I cannot read it."},
    ]
    transcript = Transcript.parse(messages)
    assert transcript.format == ANTHROPIC
    assert [(r.call_id, r.status, r.text) for r in transcript.results] == [
        ("toolu_01", "error", "permission denied")
    ]
    decision = gate().evaluate(messages, 0, 3)
    assert (decision.action, decision.span) == ("compact", (0, 3))
    assert [(n.message_index, n.tool, n.text) for n in decision.must_carry.negatives] == [
        (2, "read_file", "permission denied")
    ]


def test_anthropic_server_tool_resolved_in_the_same_message() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "news?"},
        {
            "role": "assistant",
            "content": [
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {"type": "text", "text": "Nothing new today."},
            ],
        },
        {"role": "user", "content": "ok"},
    ]
    transcript = Transcript.parse(messages)
    assert transcript.open_calls() == []
    assert transcript.orphan_results() == []
    assert transcript.closed_cuts() == [0, 1, 2, 3]
    assert gate().evaluate(messages, 0, 2).action == "compact"


def test_mixed_formats_in_one_transcript_pair_by_id() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "fc_1", "name": "lookup", "arguments": "{}"},
        {"role": "tool", "tool_call_id": "fc_1", "content": "ok"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {}}],
        },
        {"type": "function_call_output", "call_id": "tu_1", "output": "ok"},
    ]
    transcript = Transcript.parse(messages)
    assert transcript.format == "mixed"
    assert transcript.closed_cuts() == [0, 1, 3, 5]
    assert gate().evaluate(messages, 0, 2).span == (0, 3)


# --------------------------------------------------------------------------------------------
# the check CLI: --span, --critical, --policy, --archived, exit codes and the JSON contract
# --------------------------------------------------------------------------------------------

BOOKING: list[Message] = [
    {"role": "system", "content": "You are a booking agent."},
    {"role": "user", "content": "Book flight HAT156 for mia_li_3668."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "search_flights", "arguments": '{"flight": "HAT156"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "No flights found for that date"},
    {"role": "assistant", "content": "I will check the next day."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c2",
                "type": "function",
                "function": {
                    "name": "search_flights",
                    "arguments": '{"flight": "HAT156", "day": "next"}',
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c2", "content": "HAT156 available, fare class Y"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c3",
                "type": "function",
                "function": {"name": "book_flight", "arguments": '{"user": "mia_li_3668"}'},
            }
        ],
    },
]


@pytest.fixture
def booking(tmp_path: Path) -> Path:
    path = tmp_path / "booking.json"
    path.write_text(json.dumps(BOOKING), encoding="utf-8")
    return path


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run_cli(capsys, "check", *argv, "--format", "json")
    assert err == ""
    report = json.loads(out)
    assert isinstance(report, dict)
    return code, report


def test_cli_report_without_span(booking: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, str(booking))
    assert code == 1
    assert report["format"] == CHAT
    assert report["messages"] == 8
    assert report["tool_calls"] == 3
    # Not 5: the promise at 4 and the call at 5 are one model response.
    assert report["closed_cuts"] == [0, 1, 2, 4, 7]
    assert report["open_calls"] == [{"id": "c3", "name": "book_flight", "message_index": 7}]
    assert report["orphan_results"] == []
    assert [(f["rule"], f["message_index"], f["severity"]) for f in report["findings"]] == [
        ("null_result", 3, "carry"),
        ("open_tool_call", 7, "block"),
    ]
    assert all(isinstance(f["detail"], str) and f["detail"] for f in report["findings"])
    assert "decision" not in report


def test_cli_compact_with_must_carry(booking: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, str(booking), "--span", "1:4")
    assert code == 0
    decision = report["decision"]
    assert decision["action"] == "compact"
    assert decision["span"] == [1, 4]
    assert decision["obligations"] == []
    assert [(f["rule"], f["message_index"]) for f in decision["findings"]] == [
        ("unresolved_reference", 1),
        ("unresolved_reference", 1),
        ("not_addressable", 1),
        ("null_result", 3),
    ]
    assert decision["must_carry"]["identifiers"] == ["HAT156", "mia_li_3668"]
    assert decision["must_carry"]["negatives"] == [
        {
            "message_index": 3,
            "call_id": "c1",
            "tool": "search_flights",
            "text": "No flights found for that date",
        }
    ]


def test_cli_extended_span(booking: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, str(booking), "--span", "1:5")
    assert code == 0
    decision = report["decision"]
    assert (decision["action"], decision["span"], decision["extended"]) == ("compact", [1, 7], True)
    assert decision["requested"] == [1, 5]


def test_cli_defer_exit_1(booking: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, str(booking), "--span", "1:8")
    assert code == 1
    decision = report["decision"]
    assert decision["action"] == "defer"
    assert decision["span"] == [1, 7]
    assert [
        {k: o[k] for k in ("kind", "id", "message_index", "name")} for o in decision["obligations"]
    ] == [{"kind": "tool_call", "id": "c3", "message_index": 7, "name": "book_flight"}]


def test_cli_critical_refuses_exit_3(booking: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, str(booking), "--span", "1:8", "--critical")
    assert code == 3
    decision = report["decision"]
    assert decision["action"] == "refuse"
    assert decision["span"] == [1, 8]
    assert [(o["kind"], o["id"], o["message_index"]) for o in decision["obligations"]] == [
        ("tool_call", "c3", 7)
    ]
    blocking = [
        (f["rule"], f["message_index"]) for f in decision["findings"] if f["severity"] == "block"
    ]
    assert blocking == [("open_tool_call", 7)]


def test_cli_refuse_reports_the_requested_span(
    booking: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = run_json(capsys, str(booking), "--span", "0:8", "--critical")
    assert code == 3
    assert report["decision"]["action"] == "refuse"
    assert report["decision"]["span"] == [0, 8]


def test_cli_span_without_end_runs_to_the_end(
    booking: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = run_json(capsys, str(booking), "--span", "7:")
    assert code == 3
    assert report["decision"]["span"] == [7, 8]


def test_cli_policy_and_archived(booking: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, str(booking), "--span", "1:4", "--policy", "strict")
    assert code == 3
    decision = report["decision"]
    assert decision["action"] == "refuse"
    assert [(o["kind"], o["id"], o["message_index"]) for o in decision["obligations"]] == [
        ("reference", "HAT156", 1),
        ("reference", "mia_li_3668", 1),
        ("archive", "1:4", 1),
        ("negative_result", "c1", 3),
    ]

    code, report = run_json(
        capsys, str(booking), "--span", "1:4", "--policy", "strict", "--archived"
    )
    assert code == 0
    decision = report["decision"]
    assert (decision["action"], decision["span"]) == ("compact", [1, 4])
    assert decision["must_carry"]["identifiers"] == ["HAT156", "mia_li_3668"]
    assert [n["call_id"] for n in decision["must_carry"]["negatives"]] == ["c1"]

    code, report = run_json(capsys, str(booking), "--span", "1:5", "--policy", "lenient")
    assert code == 0
    decision = report["decision"]
    # Lenient does not block on the commitment, but the promise (message 4) and the call that
    # keeps it (message 5) are one model response, which every policy keeps whole: the span is
    # extended over the call and its result.
    assert (decision["action"], decision["span"], decision["extended"]) == (
        "compact",
        [1, 7],
        True,
    )
    assert [(f["rule"], f["message_index"], f["severity"]) for f in decision["findings"]] == [
        ("unresolved_reference", 1, "warn"),
        ("null_result", 3, "warn"),
    ]
    assert decision["must_carry"] == {
        "identifiers": [],
        "negatives": [],
        "pending": [],
        "abandoned": [],
        "identifiers_left_out": 0,
    }


def test_cli_policy_file(booking: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shipped = (builtin_policy_dir() / "default.yaml").read_text(encoding="utf-8")
    assert "\nextension_limit: 16\n" in shipped
    policy = tmp_path / "no-extension.yaml"
    policy.write_text(
        shipped.replace("name: default", "name: no-extension").replace(
            "\nextension_limit: 16\n", "\nextension_limit: 0\n"
        ),
        encoding="utf-8",
    )
    code, report = run_json(capsys, str(booking), "--span", "1:5", "--policy", str(policy))
    assert code == 1
    assert report["policy"] == "no-extension"
    decision = report["decision"]
    assert (decision["action"], decision["span"]) == ("defer", [1, 4])
    assert [(o["kind"], o["id"][:11]) for o in decision["obligations"]] == [
        ("commitment", "commitment-"),
        ("atomic_unit", "split_respo"),
    ]


def test_cli_clean_transcript_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = Script(ANTHROPIC)
    s.user("hello")
    s.call(Call("t1", "time"))
    s.result("t1", "12:00")
    s.say("It is noon.")
    path = tmp_path / "clean.json"
    path.write_text(json.dumps({"messages": s.messages}), encoding="utf-8")
    code, report = run_json(capsys, str(path))
    assert code == 0
    assert (report["format"], report["messages"], report["tool_calls"]) == (ANTHROPIC, 4, 1)
    assert report["closed_cuts"] == [0, 1, 3, 4]
    assert report["findings"] == []


@fmt_param
def test_cli_decides_the_same_in_every_format(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = Script(fmt)
    s.user("compare")
    s.call("a", "b")
    result_a = s.result("a", "1")
    result_b = s.result("b", "2")
    path = tmp_path / "parallel.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in s.messages) + "\n", encoding="utf-8")
    code, report = run_json(capsys, str(path), "--span", f"0:{result_a + 1}")
    assert code == 0
    assert report["format"] == fmt
    assert report["closed_cuts"] == [0, 1, result_b + 1]
    assert report["decision"]["span"] == [0, result_b + 1]


def test_cli_text_output(booking: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "check", str(booking), "--span", "1:8", "--critical")
    assert code == 3
    assert "closed cuts (5 of 9): 0 to 2, 4, 7" in out
    assert "decision: REFUSE" in out
    assert "tool_call book_flight (c3) at message 7" in out
