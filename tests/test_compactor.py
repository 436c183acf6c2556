"""`GuardedCompactor` end to end: every decision applied, and no data lost on any failure.

Tokens are counted by a fixed counter, `ten_per_message` (ten tokens a message, whatever it
says), against a budget of 100, so with the default policy (trigger 0.7, critical 0.9, target
0.5, keep_recent 2) the numbers are exact: eight messages are 80 tokens, above the trigger and
below critical, and the span picked after the system prompt is messages 1..3 (30 tokens brings
80 down to the target of 50). The summary replacing a span is one message, so ten tokens.

Transcripts are written with `transcript_builders.Script`, which emits the same conversation
as OpenAI Chat Completions messages, Anthropic Messages or OpenAI Responses items; calls carry
no text, so a conversation has the same message indices in every format.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from archive_harness import (
    FailAfterInsert,
    InjectedCrash,
    expected_bytes,
    row_count,
)
from opentelemetry.trace import StatusCode
from telemetry_harness import (
    Pipeline,
    key,
    number_points,
)
from transcript_builders import CHAT, Call, Message, Script, fmt_param, policy_with

import otel_compaction.compactor as compactor_module
from otel_compaction import (
    Archive,
    CompactionError,
    CompactionRefused,
    LiveSpanCompactionError,
    OpenObligationError,
    Policy,
    Telemetry,
    conversation,
)
from otel_compaction.compactor import CompactionResult, GuardedCompactor, SummaryRejected
from otel_compaction.ledger import ObligationLedger
from otel_compaction.rules import ObligationRef
from otel_compaction.summarizers import ExtractiveSummarizer, SummaryRequest
from otel_compaction.telemetry import semconv as sc
from otel_compaction.transcript import Transcript

BUDGET = 100
PER_MESSAGE = 10


def ten_per_message(text: str) -> int:
    """Ten tokens a message, whatever it says."""
    return PER_MESSAGE


# --------------------------------------------------------------------------------------------
# Conversations
# --------------------------------------------------------------------------------------------


def closed_conversation(fmt: str = CHAT) -> list[Message]:
    """Eight messages; messages 1..3 form a closed span (w1 is answered inside it)."""
    s = Script(fmt)
    s.system()
    s.user("What is the weather in Lisbon?")
    s.call(Call("w1", "weather", {"city": "Lisbon"}))
    s.result("w1", "sunny, 24 degrees")
    s.user("And in Porto?")
    s.call(Call("w2", "weather", {"city": "Porto"}))
    s.result("w2", "rain, 17 degrees")
    s.say("It is raining in Porto.")
    return s.messages


def pairing_break_conversation(fmt: str = CHAT) -> list[Message]:
    """Eight messages; the picked span 1..3 ends on call w1, answered at message 4."""
    s = Script(fmt)
    s.system()
    s.user("hello")
    s.say("Hi, how can I help?")
    s.call(Call("w1", "weather", {"city": "Lisbon"}))
    s.result("w1", "sunny, 24 degrees")
    s.user("thanks")
    s.say("You are welcome.")
    s.user("bye")
    return s.messages


def open_call_conversation(fmt: str = CHAT, *, length: int = 8) -> list[Message]:
    """`length` messages; the migration call m1 at message 3 is never answered."""
    s = Script(fmt)
    s.system()
    s.user("hello")
    # A user message, not an assistant one, before the call: an assistant message right
    # before it would be one model response with it (a unit the gate keeps whole).
    s.user("Please migrate the orders database.")
    s.call(Call("m1", "run_migration", {"database": "orders"}))
    chatter = ["Is it done?", "It is still running.", "ok", "Waiting for it.", "fine", "Noted."]
    for i, text in enumerate(chatter[: length - 4]):
        (s.user if i % 2 == 0 else s.say)(text)
    assert len(s.messages) == length
    return s.messages


def open_call_at_head_conversation(fmt: str = CHAT) -> list[Message]:
    """Eight messages; the first message after the system prompt is the unanswered call m1."""
    s = Script(fmt)
    s.system()
    s.call(Call("m1", "run_migration", {"database": "orders"}))
    for i, text in enumerate(["status?", "Still running.", "ok", "Waiting.", "fine", "Noted."]):
        (s.user if i % 2 == 0 else s.say)(text)
    return s.messages


def booking_conversation() -> list[Message]:
    """Messages 1..3 bind the booking code ZFA04Y, which messages 5 and 7 still use."""
    s = Script()
    s.system()
    s.user("Book the cheapest flight to Lisbon.")
    s.call(Call("b1", "book_flight", {"to": "LIS"}))
    s.result("b1", "booked, confirmation ZFA04Y")
    s.user("Email me the confirmation.")
    s.call(Call("e1", "send_email", {"code": "ZFA04Y"}))
    s.result("e1", "sent")
    s.say("Sent ZFA04Y.")
    return s.messages


def log_search_conversation() -> list[Message]:
    """Messages 1..3 hold a negative result: search_logs found nothing."""
    s = Script()
    s.system()
    s.user("Any TLS errors for svc-payments?")
    s.call(Call("call_logs_1", "search_logs", {"query": "TLS handshake error"}))
    s.result("call_logs_1", "no matches in the last 24h")
    s.user("ok, restart it")
    s.call(Call("r1", "restart_service", {"service": "svc-payments"}))
    s.result("r1", "restarted")
    s.say("Restarted.")
    return s.messages


# --------------------------------------------------------------------------------------------
# Summarizers and helpers
# --------------------------------------------------------------------------------------------


@dataclass
class Recording:
    """Answers with `replies` in turn (the last one repeats) and records every request."""

    replies: Sequence[str] = ("summary of the span",)
    requests: list[SummaryRequest] = field(default_factory=list)

    def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        return self.replies[min(len(self.requests), len(self.replies)) - 1]


class SummarizerDown(Exception):
    """The summarizer's own failure, which must reach the caller unchanged."""


@dataclass
class Failing:
    """Raises; with `scribble`, first overwrites the content of the messages it was given."""

    scribble: bool = False
    calls: int = 0

    def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        if self.scribble:
            for message in request.messages:
                if isinstance(message, dict):
                    message["content"] = "overwritten by the summarizer"
        raise SummarizerDown("model endpoint returned 503")


def compactor(
    summarizer: Any = None,
    *,
    budget: int = BUDGET,
    policy: Policy | str = "default",
    archive: Archive | None = None,
    ledger: ObligationLedger | None = None,
    telemetry: Telemetry | None = None,
) -> GuardedCompactor:
    return GuardedCompactor(
        summarizer,
        budget=budget,
        policy=policy,
        archive=archive,
        ledger=ledger,
        token_counter=ten_per_message,
        telemetry=telemetry,
    )


def dumped(messages: Sequence[Message]) -> list[str]:
    """Each message as JSON text: equal lists mean byte-equal messages."""
    return [json.dumps(m, ensure_ascii=False) for m in messages]


def summary_message(fmt: str, text: str) -> Message:
    """The message a summary is written as, in `fmt`: a user turn."""
    s = Script(fmt)
    return s.messages[s.user(text)]


def tool_pairs(messages: Sequence[Message]) -> list[tuple[str, bool]]:
    """Each remaining call's id and whether it has its result; parsing must succeed."""
    transcript = Transcript.parse(messages)
    assert transcript.orphan_results() == [], "a result lost its call"
    return [(c.id, c.result is not None) for c in transcript.calls]


def assert_archive_whole(archive: Archive, messages: Sequence[Message]) -> None:
    """Every row is a whole span of `messages`, content-addressed, read back byte for byte."""
    for row in archive.spans():
        want = expected_bytes(messages[row.start : row.end])
        assert archive.recall_bytes(row.handle) == want
        assert row.handle == "arc_" + hashlib.sha256(want).hexdigest()[:24]
        assert row.count == row.end - row.start
    assert row_count(archive.path) == len(archive.spans())


# --------------------------------------------------------------------------------------------
# 1. Every decision path, applied
# --------------------------------------------------------------------------------------------


@fmt_param
def test_closed_span_is_replaced_by_one_summary(fmt: str) -> None:
    messages = closed_conversation(fmt)
    before = copy.deepcopy(messages)
    summarizer = Recording(("The user asked for the Lisbon weather: sunny (w1).",))

    result = compactor(summarizer).compact(messages)

    assert (result.compacted, result.outcome) == (True, "compacted")
    assert result.decision is not None
    assert (result.decision.action, result.decision.extended) == ("compact", False)
    assert result.span == (1, 4)
    assert result.decision.requested == (1, 4)
    assert (result.tokens_before, result.tokens_after) == (80, 60)
    assert result.attempts == 1
    assert result.verification is not None and result.verification.ok
    summary = "The user asked for the Lisbon weather: sunny (w1)."
    assert result.summary == summary
    assert result.messages == [messages[0], summary_message(fmt, summary), *messages[4:]]
    # Head and tail are the caller's own messages, untouched.
    assert result.messages[0] is messages[0]
    assert all(a is b for a, b in zip(result.messages[2:], messages[4:], strict=True))
    assert tool_pairs(result.messages) == [("w2", True)]
    assert Transcript.parse(result.messages).format == fmt
    # The summarizer saw exactly the span.
    assert [r.span for r in summarizer.requests] == [(1, 4)]
    assert summarizer.requests[0].messages == messages[1:4]
    assert messages == before


@fmt_param
def test_span_ending_on_a_call_is_extended_over_its_result(fmt: str) -> None:
    messages = pairing_break_conversation(fmt)
    before = copy.deepcopy(messages)

    result = compactor(Recording(("Greetings; weather w1 was sunny.",))).compact(messages)

    assert result.compacted is True
    assert result.decision is not None
    assert result.decision.action == "compact"
    assert result.decision.extended is True
    assert result.decision.requested == (1, 4)
    assert result.span == (1, 5)
    assert (result.tokens_before, result.tokens_after) == (80, 50)
    assert result.messages[2:] == messages[5:]
    assert len(result.messages) == 5
    assert tool_pairs(result.messages) == []  # w1 and its result went into the summary together
    assert messages == before


@fmt_param
def test_live_span_is_held_and_the_older_closed_span_compacted(fmt: str) -> None:
    messages = open_call_conversation(fmt)
    before = copy.deepcopy(messages)
    summarizer = Recording(("Greetings. run_migration (m1) is still pending.",))

    result = compactor(summarizer).compact(messages)

    assert (result.compacted, result.outcome) == (True, "deferred")
    assert result.decision is not None
    assert result.decision.action == "defer"
    assert result.decision.requested == (1, 4)
    assert result.span == (1, 3)
    assert [(o.kind, o.id, o.message_index) for o in result.decision.obligations] == [
        ("tool_call", "m1", 3)
    ]
    assert (result.tokens_before, result.tokens_after) == (80, 70)
    # The live span 3..7 is held verbatim: the same objects, byte for byte.
    held = result.messages[2:]
    assert dumped(held) == dumped(before[3:])
    assert all(a is b for a, b in zip(held, messages[3:], strict=True))
    assert tool_pairs(result.messages) == [("m1", False)]
    # The call is held verbatim after the summary: the summary owes nothing for it.
    assert summarizer.requests[0].pending == ()
    assert messages == before


@fmt_param
def test_open_call_with_nothing_older_is_refused(fmt: str, archive: Archive) -> None:
    messages = open_call_at_head_conversation(fmt)
    before = copy.deepcopy(messages)
    summarizer = Recording()

    with pytest.raises(OpenObligationError) as caught:
        compactor(summarizer, archive=archive).compact(messages)

    refused = caught.value
    assert refused.decision.action == "refuse"
    assert refused.decision.span == (1, 4)
    assert [(o.kind, o.id, o.message_index) for o in refused.obligations] == [
        ("tool_call", "m1", 1)
    ]
    assert "m1" in str(refused)
    assert "run_migration" in str(refused)
    assert messages == before
    assert summarizer.requests == []
    assert len(archive) == 0


@fmt_param
def test_usage_above_critical_turns_the_deferral_into_a_refusal(fmt: str) -> None:
    messages = open_call_conversation(fmt, length=10)  # 100 tokens: above 0.9 of the budget
    before = copy.deepcopy(messages)

    with pytest.raises(OpenObligationError) as caught:
        compactor(Recording()).compact(messages)

    decision = caught.value.decision
    assert decision.critical is True
    assert decision.span == (1, 6)  # 50 tokens must go; the call at 3 is inside
    assert [o.id for o in decision.obligations] == ["m1"]
    assert messages == before

    # The same transcript, told it is not critical, defers instead.
    deferred = compactor(Recording()).compact(messages, critical=False)
    assert deferred.decision is not None
    assert (deferred.decision.action, deferred.span) == ("defer", (1, 3))
    # And a transcript below critical defers on its own (the test above).
    assert messages == before


@pytest.mark.parametrize(("length", "compacted"), [(7, False), (8, True)])
def test_nothing_happens_at_or_below_the_trigger(length: int, compacted: bool) -> None:
    s = Script()
    s.system()
    for i in range(length - 1):
        (s.user if i % 2 == 0 else s.say)(f"message {i}")
    summarizer = Recording()

    result = compactor(summarizer).compact(s.messages)

    assert result.compacted is compacted
    assert result.outcome == ("compacted" if compacted else "not needed")
    assert result.tokens_before == length * PER_MESSAGE
    if not compacted:  # 70 tokens is not above 0.7 of 100
        assert result.messages == s.messages
        assert result.tokens_after == result.tokens_before
        assert (result.decision, result.span, result.summary) == (None, None, None)
        assert summarizer.requests == []
    else:
        assert result.span == (1, 4)


def test_token_counts_and_trigger() -> None:
    messages = closed_conversation()
    c = compactor()
    assert c.message_tokens(messages) == [PER_MESSAGE] * 8
    assert c.tokens(messages) == 80
    assert c.should_compact(messages) is True
    assert c.should_compact(messages[:7]) is False  # 70 is not above 0.7 of 100
    with pytest.raises(ValueError, match="budget"):
        GuardedCompactor(budget=0)


def test_force_compacts_below_the_trigger() -> None:
    s = Script()
    s.system()
    for i in range(6):
        (s.user if i % 2 == 0 else s.say)(f"message {i}")
    assert compactor(Recording()).compact(s.messages).compacted is False  # 70 tokens

    result = compactor(Recording()).compact(s.messages, force=True)

    assert result.compacted is True
    assert result.span == (1, 3)  # 20 tokens brings 70 down to the target of 50
    assert (result.tokens_before, result.tokens_after) == (70, 60)
    assert result.messages[2:] == s.messages[3:]


def test_tokens_after_is_the_new_transcript_counted_again() -> None:
    s = Script()
    s.system()
    for i in range(7):
        (s.user if i % 2 == 0 else s.say)(f"message {i}: " + "lorem ipsum dolor " * 20)
    messages = s.messages
    sizes = [len(json.dumps(m, ensure_ascii=False)) for m in messages]
    total = sum(sizes)
    budget = total  # above critical; the target is half of it
    c = GuardedCompactor(Recording(("short",)), budget=budget, token_counter=len)

    result = c.compact(messages)

    assert result.tokens_before == total
    start, end = 1, 1
    while sum(sizes[1:end]) < total - budget / 2:
        end += 1
    assert result.span == (start, end)
    summary_size = len(json.dumps({"role": "user", "content": "short"}))
    assert result.tokens_after == total - sum(sizes[start:end]) + summary_size
    assert result.tokens_after == c.tokens(result.messages)


# Budget 79: seven messages (70 tokens) are above the trigger (55.3) and below critical (71.1);
# 30.5 tokens must go, so the picked span is messages 1..4.


@pytest.mark.parametrize("critical", [False, True])
def test_extension_into_the_kept_recent_messages_only_when_critical(critical: bool) -> None:
    # The picked span ends on call w1, whose result is message 5: one of the two kept messages.
    s = Script()
    s.system()
    s.user("hello")
    s.say("Hi.")
    s.user("What is the weather?")
    s.call(Call("w1", "weather", {"city": "Lisbon"}))
    s.result("w1", "sunny")
    s.say("Sunny.")
    messages = s.messages
    summarizer = Recording(("Greetings; the user asked for the weather.",))

    result = compactor(summarizer, budget=79).compact(messages, critical=critical or None)

    assert result.compacted is True
    assert result.decision is not None
    assert result.decision.critical is critical
    if critical:  # the gate's extension stands: the alternative is no room at all
        assert (result.span, result.decision.extended) == ((1, 6), True)
        assert result.messages[2:] == messages[6:]
        assert tool_pairs(result.messages) == []
    else:  # the span stops at the last closed cut before the kept messages
        assert (result.span, result.decision.extended) == ((1, 4), False)
        assert result.messages[2:] == messages[4:]
        assert tool_pairs(result.messages) == [("w1", True)]


def test_no_closed_cut_before_the_kept_recent_messages_compacts_nothing() -> None:
    s = Script()
    s.system()
    s.call(Call("w1", "weather", {"city": "Lisbon"}))
    for i in range(3):
        (s.user if i % 2 == 0 else s.say)(f"message {i}")
    s.result("w1", "sunny")
    s.say("Sunny.")
    summarizer = Recording()

    nothing = compactor(summarizer, budget=79).compact(s.messages)

    assert nothing.compacted is False
    assert nothing.messages == s.messages
    assert summarizer.requests == []


# --------------------------------------------------------------------------------------------
# 2. A summarizer that fails
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scribble", [False, True], ids=["raises", "edits-then-raises"])
def test_failing_summarizer_propagates_and_loses_nothing(archive: Archive, scribble: bool) -> None:
    messages = closed_conversation()
    before = copy.deepcopy(messages)
    summarizer = Failing(scribble=scribble)

    with pytest.raises(SummarizerDown, match="503"):
        compactor(summarizer, archive=archive).compact(messages)

    assert summarizer.calls == 1
    assert messages == before
    assert dumped(messages) == dumped(before)
    # Nothing, or only the whole span, content-addressed, with no summary attached.
    assert len(archive) <= 1
    assert all(row.summary is None for row in archive.spans())
    assert_archive_whole(archive, before)
    # A later compaction with a working summarizer succeeds.
    result = compactor(Recording(("Lisbon weather: sunny (w1).",)), archive=archive).compact(
        messages
    )
    assert result.compacted is True
    assert result.archive_handle is not None
    assert [row.handle for row in archive.spans()] == [result.archive_handle]
    assert archive.recall(result.archive_handle) == before[1:4]
    assert archive.get(result.archive_handle).summary == "Lisbon weather: sunny (w1)."


def test_summarizer_returning_a_non_string_is_an_error() -> None:
    class Wrong:
        def summarize(self, request: SummaryRequest) -> Any:
            return ["not", "text"]

    messages = closed_conversation()
    before = copy.deepcopy(messages)
    with pytest.raises(CompactionError, match="returned list, expected str"):
        compactor(Wrong()).compact(messages)
    assert messages == before


# --------------------------------------------------------------------------------------------
# 3. A summary that drops an identifier
# --------------------------------------------------------------------------------------------

DROPPED = "identifier 'ZFA04Y' must appear verbatim"


def test_dropped_identifier_is_named_in_the_retry_and_a_fix_is_accepted() -> None:
    messages = booking_conversation()
    summarizer = Recording(("Booked a flight to Lisbon.", "Booked a flight to Lisbon: ZFA04Y."))

    result = compactor(summarizer).compact(messages)

    first, retry = summarizer.requests
    assert first.identifiers == ("ZFA04Y",)
    assert first.missing == ()
    assert retry.missing == (DROPPED,)
    assert (retry.identifiers, retry.span, retry.messages) == (
        first.identifiers,
        first.span,
        first.messages,
    )
    assert result.compacted is True
    assert result.attempts == 2
    assert result.summary == "Booked a flight to Lisbon: ZFA04Y."
    assert result.messages[1] == {"role": "user", "content": "Booked a flight to Lisbon: ZFA04Y."}


def test_identifier_never_carried_holds_the_span_by_default() -> None:
    messages = booking_conversation()
    before = copy.deepcopy(messages)
    summarizer = Recording(("Booked a flight to Lisbon.",))

    result = compactor(summarizer).compact(messages)

    assert len(summarizer.requests) == 2  # the default policy retries once
    assert result.compacted is False
    assert result.attempts == 2
    assert result.messages == before
    assert result.span == (1, 4)
    assert result.summary is None
    assert result.verification is not None
    assert result.verification.missing_identifiers == ("ZFA04Y",)
    assert result.verification.describe() == (DROPPED,)
    assert (result.tokens_before, result.tokens_after) == (80, 80)
    assert messages == before


def test_identifier_never_carried_raises_when_the_policy_says_refuse(archive: Archive) -> None:
    messages = booking_conversation()
    before = copy.deepcopy(messages)
    policy = policy_with(summaries={"on_unverified": "refuse"})

    with pytest.raises(SummaryRejected) as caught:
        compactor(Recording(("Booked a flight.",)), policy=policy, archive=archive).compact(
            messages
        )

    rejected = caught.value
    assert isinstance(rejected, LiveSpanCompactionError)
    assert isinstance(rejected, CompactionRefused)
    assert "ZFA04Y" in str(rejected)
    assert rejected.verification.missing_identifiers == ("ZFA04Y",)
    assert messages == before
    assert all(row.summary is None for row in archive.spans())
    assert_archive_whole(archive, before)


def test_retries_follow_the_policy() -> None:
    summarizer = Recording(("Booked a flight.",))
    policy = policy_with(summaries={"retries": 0})
    result = compactor(summarizer, policy=policy).compact(booking_conversation())
    assert (result.compacted, result.attempts, len(summarizer.requests)) == (False, 1, 1)

    summarizer = Recording(("Booked.", "Booked.", "Booked.", "Booked ZFA04Y."))
    policy = policy_with(summaries={"retries": 3})
    result = compactor(summarizer, policy=policy).compact(booking_conversation())
    assert (result.compacted, result.attempts) == (True, 4)
    assert [r.missing for r in summarizer.requests] == [(), (DROPPED,), (DROPPED,), (DROPPED,)]


# --------------------------------------------------------------------------------------------
# 4. A summary that omits a negative result (the contradiction probe)
# --------------------------------------------------------------------------------------------


def test_summary_omitting_a_negative_result_is_caught() -> None:
    messages = log_search_conversation()
    before = copy.deepcopy(messages)
    summarizer = Recording(("The agent looked through the TLS logs of svc-payments.",))

    result = compactor(summarizer).compact(messages)

    assert result.compacted is False
    assert result.messages == before
    assert result.verification is not None
    [negative] = result.verification.missing_negatives
    assert (negative.call_id, negative.tool, negative.text) == (
        "call_logs_1",
        "search_logs",
        "no matches in the last 24h",
    )
    assert summarizer.requests[0].negatives == (negative,)
    assert summarizer.requests[1].missing == (
        "negative result of search_logs (call_logs_1) must be stated: no matches in the last 24h",
    )


@pytest.mark.parametrize(
    "summary",
    [
        "Checked svc-payments for TLS errors: search_logs found no matches.",
        "Checked svc-payments for TLS errors (call_logs_1).",
    ],
    ids=["states-the-negative", "names-the-call"],
)
def test_summary_stating_the_negative_passes(summary: str) -> None:
    result = compactor(Recording((summary,))).compact(log_search_conversation())
    assert result.compacted is True
    assert result.attempts == 1
    assert result.summary == summary


# --------------------------------------------------------------------------------------------
# 5. A crash in the middle of compaction
# --------------------------------------------------------------------------------------------


def _raise(*args: Any, **kwargs: Any) -> Any:
    raise InjectedCrash("injected crash")


@pytest.mark.parametrize("where", ["attach_summary", "summary_message"])
def test_crash_after_the_archive_put_loses_nothing(
    archive: Archive, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    messages = closed_conversation()
    before = copy.deepcopy(messages)
    with monkeypatch.context() as patch:
        if where == "attach_summary":
            patch.setattr(archive, "attach_summary", _raise)
        else:
            patch.setattr(compactor_module, "_summary_message", _raise)
        with pytest.raises(InjectedCrash):
            compactor(ExtractiveSummarizer(), archive=archive).compact(messages)

    assert messages == before
    assert [(row.start, row.end, row.summary) for row in archive.spans()] == [(1, 4, None)]
    assert_archive_whole(archive, before)

    result = compactor(ExtractiveSummarizer(), archive=archive).compact(messages)
    assert result.compacted is True
    assert [row.handle for row in archive.spans()] == [result.archive_handle]
    assert archive.get(result.archive_handle or "").summary == result.summary
    assert_archive_whole(archive, before)


def test_crash_inside_the_archive_put_loses_nothing(
    archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = closed_conversation()
    before = copy.deepcopy(messages)
    summarizer = Recording()
    real = archive._conn
    assert real is not None
    failing = FailAfterInsert(real)
    with monkeypatch.context() as patch:
        patch.setattr(archive, "_conn", failing)
        with pytest.raises(InjectedCrash):
            compactor(summarizer, archive=archive).compact(messages)
    assert failing.inserted
    assert messages == before
    assert summarizer.requests == []
    assert len(archive) == 0
    assert compactor(Recording(), archive=archive).compact(messages).compacted is True
    assert_archive_whole(archive, before)


# --------------------------------------------------------------------------------------------
# 6. force_terminal and compact_or_force
# --------------------------------------------------------------------------------------------


def test_compact_or_force_abandons_the_open_call_then_compacts() -> None:
    messages = open_call_at_head_conversation()
    before = copy.deepcopy(messages)
    c = compactor(Recording(("Started run_migration (m1), abandoned; then small talk.",)))
    with pytest.raises(OpenObligationError):
        c.compact(messages)

    result = c.compact_or_force(messages)

    assert result.compacted is True
    assert result.span == (1, 4)
    assert [(o.id, o.status) for o in c.ledger.snapshot(None).obligations] == [("m1", "abandoned")]
    assert messages == before


@pytest.mark.parametrize("named", ["refusal", "refs"])
def test_force_terminal_resolves_in_the_current_conversation(named: str) -> None:
    messages = open_call_at_head_conversation()
    ledger = ObligationLedger()
    ledger.open("conv-7", "tool_call", "m1", name="run_migration")
    c = compactor(Recording(("Started run_migration (m1), abandoned.",)), ledger=ledger)

    with conversation("conv-7"):
        with pytest.raises(OpenObligationError) as caught:
            c.compact(messages)
        assert caught.value.decision.conversation_id == "conv-7"
        refs = [
            ObligationRef("reference", "ZFA04Y", None),  # not an obligation: left alone
            ObligationRef("tool_call", "m1", 1, "run_migration"),
        ]
        forced = c.force_terminal(caught.value if named == "refusal" else refs)
        assert forced == 1
        result = c.compact(messages)

    assert result.compacted is True
    [record] = ledger.snapshot("conv-7").obligations
    assert (record.id, record.status) == ("m1", "abandoned")
    assert ledger.snapshot(None).obligations == ()


def test_force_terminal_outside_the_scope_uses_the_refusals_conversation() -> None:
    messages = open_call_at_head_conversation()
    ledger = ObligationLedger()
    ledger.open("conv-7", "tool_call", "m1", name="run_migration")
    c = compactor(Recording(("Started run_migration (m1), abandoned.",)), ledger=ledger)
    with conversation("conv-7"), pytest.raises(OpenObligationError) as caught:
        c.compact(messages)

    assert c.force_terminal(caught.value) == 1

    [record] = ledger.snapshot("conv-7").obligations
    assert (record.id, record.status) == ("m1", "abandoned")
    assert ledger.snapshot(None).obligations == ()
    assert c.compact(messages, conversation_id="conv-7").compacted is True


def test_compact_or_force_in_a_conversation_scope_with_a_transcript_only_call(
    archive: Archive,
) -> None:
    messages = open_call_at_head_conversation()
    c = compactor(Recording(("Started run_migration (m1), abandoned.",)), archive=archive)
    with conversation("conv-8"):
        result = c.compact_or_force(messages)
    assert result.compacted is True
    assert [(o.id, o.status) for o in c.ledger.snapshot("conv-8").obligations] == [
        ("m1", "abandoned")
    ]
    assert archive.get(result.archive_handle or "").conversation_id == "conv-8"


def test_compact_or_force_withdraws_a_commitment_and_compacts() -> None:
    s = Script()
    s.system()
    s.say("I will verify the certificate.")
    for i in range(4):  # two user turns: the promise is not stale yet
        (s.user if i % 2 == 0 else s.say)(f"message {i}")
    c = compactor(Recording(("Nothing was done yet.",)), budget=40)  # critical: no deferral
    actions: list[str] = []
    c.gate.add_observer(lambda decision, analysis, started: actions.append(decision.action))
    result = c.compact_or_force(s.messages)
    assert result.compacted is True
    assert actions == ["refuse", "compact"]
    [record] = c.ledger.snapshot(None).obligations
    assert (record.kind, record.status) == ("commitment", "withdrawn")
    assert record.id.startswith("commitment-")


def test_refusal_over_a_quiescence_rule_is_not_forced() -> None:
    s = Script()
    s.system()
    s.call(Call("q1", "search", {"q": "cert"}))
    s.result("q1", "no matches")
    for i in range(5):
        (s.user if i % 2 == 0 else s.say)(f"message {i}")
    # Strict blocks the negative result: nothing to discharge, the refusal stands.
    c = compactor(Recording(), policy="strict")
    actions: list[str] = []
    c.gate.add_observer(lambda decision, analysis, started: actions.append(decision.action))
    with pytest.raises(LiveSpanCompactionError) as caught:
        c.compact_or_force(s.messages)
    assert {o.kind for o in caught.value.obligations} >= {"negative_result"}
    assert actions == ["refuse"]  # raised as it was, not retried
    assert c.ledger.snapshot(None).obligations == ()


def test_a_severed_call_is_not_abandoned_a_second_time() -> None:
    # The ledger recorded m1's result; the transcript lost it. Forcing m1 to abandoned would
    # give one call two terminal resolutions and hide the severance: the refusal stands.
    messages = open_call_at_head_conversation()
    ledger = ObligationLedger()
    ledger.open(None, "tool_call", "m1", name="run_migration")
    ledger.resolve(None, "m1", "result")
    c = compactor(Recording(), ledger=ledger)

    with pytest.raises(OpenObligationError) as caught:
        c.compact_or_force(messages)

    assert [f.rule for f in caught.value.decision.blocking] == [
        "open_tool_call",
        "severed_obligation",
    ]
    assert c.force_terminal(caught.value) == 0
    assert [(o.id, o.status) for o in ledger.snapshot(None).obligations] == [("m1", "result")]


def test_forced_abandonment_and_compaction_are_recorded(
    pipeline: Pipeline, archive: Archive
) -> None:
    messages = open_call_at_head_conversation()
    recorder = pipeline.telemetry.recorder
    recorder.call("run_migration", "m1", conversation_id="conv-1")
    c = compactor(
        Recording(("Started run_migration (m1), abandoned.",)),
        archive=archive,
        telemetry=pipeline.telemetry,
    )

    result = c.compact_or_force(messages, conversation_id="conv-1")

    assert result.compacted is True
    assert result.span == (1, 4)
    [record] = pipeline.telemetry.ledger.snapshot("conv-1").obligations
    assert (record.id, record.status) == ("m1", "abandoned")

    [abandoned] = pipeline.spans(prefix=sc.TOOL_RESULT_SPAN)
    assert abandoned.name == "tool_result run_migration"
    attrs = abandoned.attributes or {}
    assert attrs[sc.OBLIGATION_STATUS] == "abandoned"
    assert attrs[sc.GEN_AI_TOOL_CALL_ID] == "m1"
    assert attrs[sc.ABANDON_REASON] == "forced terminal before compaction"
    [call_span] = pipeline.spans(prefix="execute_tool")
    assert [link.context.span_id for link in abandoned.links] == [call_span.context.span_id]
    assert (call_span.attributes or {})[sc.OBLIGATION_STATUS] == "abandoned"

    [apply] = pipeline.spans(prefix=sc.APPLY_SPAN)
    attrs = apply.attributes or {}
    assert attrs[sc.TOKENS_BEFORE] == 80
    assert attrs[sc.TOKENS_AFTER] == 60
    assert (attrs[sc.SPAN_START], attrs[sc.SPAN_END]) == (1, 4)
    assert attrs[sc.ARCHIVE_HANDLE] == result.archive_handle
    assert attrs[sc.COMPACTED] is True
    assert attrs[sc.ACTION] == "compact"
    assert attrs[sc.GEN_AI_CONVERSATION_ID] == "conv-1"
    # The span says it was applied; gen_ai.conversation.compacted is the next request's.
    assert apply.events == ()

    evaluations = pipeline.spans(prefix=sc.EVALUATE_SPAN)
    assert [(s.attributes or {})[sc.ACTION] for s in evaluations] == ["refuse", "compact"]
    assert number_points(pipeline.metrics()[sc.METRIC_DECISIONS]) == {
        key({sc.ACTION: "refuse", sc.RULE: "open_tool_call"}): 1,
        key({sc.ACTION: "compact", sc.RULE: "none"}): 1,
    }


def test_abandoning_a_call_the_recorder_never_held_goes_through_the_ledger(
    pipeline: Pipeline,
) -> None:
    c = compactor(
        Recording(("Started run_migration (m1), abandoned.",)), telemetry=pipeline.telemetry
    )
    result = c.compact_or_force(open_call_at_head_conversation(), conversation_id="conv-2")
    assert result.compacted is True
    assert [(o.id, o.status) for o in pipeline.telemetry.ledger.snapshot("conv-2").obligations] == [
        ("m1", "abandoned")
    ]
    assert pipeline.spans(prefix=sc.TOOL_RESULT_SPAN) == []


def test_failed_compaction_marks_its_span_as_an_error(pipeline: Pipeline) -> None:
    c = compactor(Failing(), telemetry=pipeline.telemetry)
    with pytest.raises(SummarizerDown):
        c.compact(closed_conversation())
    [apply] = pipeline.spans(prefix=sc.APPLY_SPAN)
    assert apply.status.status_code is StatusCode.ERROR
    assert (apply.attributes or {})[sc.ERROR_TYPE] == "SummarizerDown"


def test_unverified_summary_is_recorded_as_rejected(pipeline: Pipeline) -> None:
    c = compactor(Recording(("Booked a flight.",)), telemetry=pipeline.telemetry)
    result = c.compact(booking_conversation())
    assert result.compacted is False
    [apply] = pipeline.spans(prefix=sc.APPLY_SPAN)
    attrs = apply.attributes or {}
    assert (attrs[sc.COMPACTED], attrs[sc.VERIFIED], attrs[sc.SUMMARY_ATTEMPTS]) == (
        False,
        False,
        2,
    )
    assert attrs["compaction.hold.reason"] == "the summary failed verification; span held verbatim"
    [event] = apply.events
    assert event.name == sc.EVENT_SUMMARY_REJECTED
    missing = (event.attributes or {})[sc.MISSING]
    assert isinstance(missing, Sequence)
    assert list(missing) == ["identifiers: 1"]  # by count: the value is content, capture is off


@pytest.mark.parametrize(("smaller_by", "compacted"), [(1, True), (0, False), (-1, False)])
def test_summary_not_smaller_than_its_span_holds_the_span(
    pipeline: Pipeline, smaller_by: int, compacted: bool
) -> None:
    messages = closed_conversation()
    before = copy.deepcopy(messages)
    # Tokens are characters of the JSON form: the summary message is `smaller_by` tokens
    # smaller than message 1, the span it would replace.
    span_tokens = len(json.dumps(messages[1], ensure_ascii=False))
    empty_summary = len(json.dumps({"role": "user", "content": ""}))
    summary = "x" * (span_tokens - empty_summary - smaller_by)
    total = sum(len(json.dumps(m, ensure_ascii=False)) for m in messages)
    c = GuardedCompactor(
        Recording((summary,)), budget=100_000, token_counter=len, telemetry=pipeline.telemetry
    )

    result = c.compact(messages, end=2, force=True)

    assert (result.compacted, result.span, result.summary) == (compacted, (1, 2), summary)
    assert messages == before
    [apply] = pipeline.spans(prefix="compaction.apply")
    attrs = dict(apply.attributes or {})
    if compacted:
        assert (result.tokens_before, result.tokens_after) == (total, total - 1)
        assert result.messages == [before[0], {"role": "user", "content": summary}, *before[2:]]
        assert result.reason == ""
        assert "compaction.hold.reason" not in attrs
        assert apply.events == ()
    else:
        assert (result.tokens_before, result.tokens_after) == (total, total)
        assert result.messages == before
        assert result.reason == "the summary is no smaller than the span"
        assert result.outcome == "held"  # the gate said compact; the span stayed as it was
        assert attrs["compaction.hold.reason"] == "the summary is no smaller than the span"
        assert apply.events == ()
    assert (attrs["compaction.compacted"], attrs["compaction.tokens.after"]) == (
        compacted,
        result.tokens_after,
    )


def test_a_span_held_as_no_smaller_is_not_summarized_again_while_unchanged() -> None:
    messages = closed_conversation()
    span_tokens = len(json.dumps(messages[1], ensure_ascii=False))
    summarizer = Recording(("x" * span_tokens,))  # never smaller than message 1
    c = GuardedCompactor(summarizer, budget=100_000, token_counter=len)

    first = c.compact(messages, end=2, force=True)
    again = c.compact(messages, end=2, force=True)
    assert (first.compacted, again.compacted) == (False, False)
    assert len(summarizer.requests) == 1
    assert again.reason == "the summary is no smaller than the span"
    assert (again.span, again.messages, again.summary, again.attempts) == (
        (1, 2),
        messages,
        None,
        0,
    )

    changed = [messages[0], {**messages[1]}, *messages[2:]]  # another message object: asked again
    c.compact(changed, end=2, force=True)
    assert len(summarizer.requests) == 2


# --------------------------------------------------------------------------------------------
# 7. Every transcript format
# --------------------------------------------------------------------------------------------


def flights(fmt: str) -> list[Message]:
    """Eight messages with no system prompt; TP1234, first seen in message 2, is used later."""
    s = Script(fmt)
    s.user("Find a flight to Lisbon.")
    s.call(Call("f1", "search_flights", {"to": "LIS"}))
    s.result("f1", "TP1234 departs at 09:05")
    s.say("TP1234 departs at 09:05.")
    s.user("Book it.")
    s.call(Call("k1", "book_flight", {"flight": "TP1234"}))
    s.result("k1", "booked")
    s.say("Booked.")
    return s.messages


@fmt_param
@pytest.mark.parametrize(("force", "budget", "span"), [(False, 100, (0, 3)), (True, 120, (0, 3))])
def test_summary_message_has_the_shape_of_the_transcript_format(
    fmt: str, force: bool, budget: int, span: tuple[int, int]
) -> None:
    # Budget 100 picks messages 0..2 (closed); budget 120 with force picks 0..1, which ends
    # on call f1 and is extended over its result: the same span either way.
    messages = flights(fmt)
    before = copy.deepcopy(messages)

    result = compactor(ExtractiveSummarizer(), budget=budget).compact(messages, force=force)

    assert result.compacted is True
    assert result.span == span
    assert result.decision is not None
    assert result.decision.extended is force
    assert result.summary is not None
    assert "TP1234" in result.summary
    assert result.messages == [summary_message(fmt, result.summary), *messages[3:]]
    parsed = Transcript.parse(result.messages)
    assert parsed.format == fmt
    assert tool_pairs(result.messages) == [("k1", True)]
    assert parsed.entries[0].role == "user"
    assert parsed.entries[0].text == result.summary
    assert messages == before


# --------------------------------------------------------------------------------------------
# 8. The bundled example, end to end with the extractive summarizer
# --------------------------------------------------------------------------------------------


def test_bundled_example_compacts_with_everything_carried(archive: Archive) -> None:
    example = Path(compactor_module.__file__).parent / "examples" / "deploy_agent.json"
    messages: list[Message] = json.loads(example.read_text(encoding="utf-8"))["messages"]
    assert len(messages) == 12
    before = copy.deepcopy(messages)
    c = compactor(ExtractiveSummarizer(), archive=archive)

    result = c.compact(messages)  # 120 tokens: critical; 70 must go: messages 1..7

    assert result.compacted is True
    assert result.span == (1, 8)
    assert result.decision is not None
    must = result.decision.must_carry
    assert must.identifiers == ("/etc/ssl/payments.pem",)
    assert [(n.call_id, n.tool) for n in must.negatives] == [("call_logs_1", "search_logs")]
    # The restart call is after the span, kept verbatim: not the summary's to carry.
    assert must.pending == ()
    summary = result.summary
    assert summary is not None
    lines = summary.splitlines()
    assert "/etc/ssl/payments.pem" in summary
    assert (
        "- search_logs (call_logs_1) returned no positive result: no matches in the last 24h"
        in lines
    )
    assert "call_restart_1" not in summary
    assert result.archive_handle is not None
    assert result.archive_handle in summary
    assert archive.recall(result.archive_handle) == before[1:8]
    assert result.messages[2:] == messages[8:]
    assert tool_pairs(result.messages) == [
        ("call_cert_1", True),
        ("call_restart_1", False),
    ]
    assert messages == before
    # Deterministic: the same input gives the same summary.
    again = compactor(ExtractiveSummarizer(), archive=archive).compact(messages)
    assert again.summary == summary
    assert again.messages == result.messages


def test_result_is_a_frozen_record() -> None:
    result = compactor(Recording()).compact(closed_conversation())
    assert isinstance(result, CompactionResult)
    with pytest.raises(AttributeError):
        result.compacted = False  # type: ignore[misc]
