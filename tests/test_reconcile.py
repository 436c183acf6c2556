"""The one pairing rule between the ledger and a transcript, and the four readers of it.

Exact states on reused ids; then property tests over random transcripts and ledgers: the gate's
analysis gives exactly the conflicts of the reference pairing (written here independently, as
the analysis did before the rule had a module of its own), passive detection agrees with it
wherever both read an id alike, and where they do not the rule decides (an older call of a
reused id cut away while owed is severed, and so is an owed call that no stray result answers).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from otel_compaction import Policy
from otel_compaction.analysis import Analysis
from otel_compaction.instrumentation.detection import ConversationState, Severed, check_request
from otel_compaction.ledger import Obligation, ObligationLedger, ResolutionStatus
from otel_compaction.reconcile import (
    AGREE,
    DISAGREE,
    by_id,
    calls_by_id,
    pair_earliest,
    pair_newest,
    reconcile_calls,
    unpaired_calls,
)
from otel_compaction.transcript import ToolCall, Transcript

CONV = "conv-r"


def call(call_id: str, name: str = "search") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
        ],
    }


def result(call_id: str, text: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def record(
    sequence: int, call_id: str = "c1", status: ResolutionStatus | None = None
) -> Obligation:
    return Obligation("tool_call", call_id, "search", CONV, sequence, 0, status)


# -- the rule ------------------------------------------------------------------------------------


def test_newest_records_pair_with_newest_items_and_the_oldest_surplus_pairs_with_none() -> None:
    records = [record(0), record(1), record(2)]
    assert [(r.sequence, i) for r, i in pair_newest(records, ["a", "b", "c", "d"])] == [
        (0, "b"),
        (1, "c"),
        (2, "d"),
    ]
    assert [(r.sequence, i) for r, i in pair_newest(records, ["x"])] == [
        (0, None),
        (1, None),
        (2, "x"),
    ]
    assert pair_newest([], ["x"]) == []


def test_resolutions_pair_with_the_earliest_open_records() -> None:
    records = [record(0), record(1), record(2)]
    assert [(r.sequence, i) for r, i in pair_earliest(records, ["first", "second"])] == [
        (0, "first"),
        (1, "second"),
    ]


def test_by_id_keeps_one_kind_in_record_order() -> None:
    other = Obligation("retry", "c1", "search", CONV, 5, 0)
    grouped = by_id([record(0, "a"), other, record(1, "b"), record(2, "a")])
    assert {k: [r.sequence for r in v] for k, v in grouped.items()} == {"a": [0, 2], "b": [1]}
    assert list(by_id([other], "retry")) == ["c1"]


def test_every_state_on_a_reused_id() -> None:
    # c1 is called three times: answered, answered, still open; c2 once, unanswered; c3 is
    # only in the ledger; c4's call was compacted after it closed.
    transcript = Transcript.parse(
        [
            {"role": "user", "content": "go"},
            call("c1"),
            result("c1"),
            call("c1"),
            result("c1"),
            call("c1"),
            call("c2"),
            call("c5"),
        ]
    )
    records = [
        record(0, "c1", "result"),  # pairs with the first c1: closed
        record(1, "c1"),  # pairs with the second c1, answered: the ledger lags
        record(2, "c1"),  # pairs with the third c1, open: agreement
        record(3, "c2", "result"),  # the transcript has no result: severed
        record(4, "c3"),  # no call at all: missing
        record(5, "c4", "result"),  # no call, closed: gone
        record(6, "c5", "abandoned"),  # abandoned, no result: resolved where it stands
    ]
    pairs = reconcile_calls(transcript, records)
    assert [(p.record.sequence, p.call and p.call.message_index, p.state) for p in pairs] == [
        (0, 1, "closed"),
        (1, 3, "answered"),
        (2, 5, "open"),
        (3, 6, "severed"),
        (4, None, "missing"),
        (5, None, "gone"),
        (6, 7, "abandoned"),
    ]
    assert {p.state for p in pairs if p.state in AGREE} == {"closed", "open", "gone", "abandoned"}


def test_fewer_calls_than_records_leave_the_oldest_records_without_a_call() -> None:
    transcript = Transcript.parse([{"role": "user", "content": "go"}, call("c1"), result("c1")])
    pairs = reconcile_calls(transcript, [record(0), record(1)])
    assert [(p.record.sequence, p.state) for p in pairs] == [(0, "missing"), (1, "answered")]


def test_records_of_other_kinds_are_not_paired_with_calls() -> None:
    transcript = Transcript.parse([call("c1")])
    other = Obligation("transaction", "c1", "tx", CONV, 0, 0)
    assert reconcile_calls(transcript, [other]) == []


def test_kept_ordinals_are_used_as_given() -> None:
    transcript = Transcript.parse([call("c1"), call("c1")])
    assert calls_by_id(transcript.calls) == {"c1": [0, 1]}
    # Ordinals that a caller keeps (an incremental index) decide which calls are seen.
    pairs = reconcile_calls(transcript, [record(0)], {"c1": [0]})
    assert pairs[0].call is transcript.calls[0]


# -- property tests against the reference pairing ------------------------------------------------


def _random_case(rng: random.Random) -> tuple[list[dict[str, Any]], ObligationLedger]:
    """A transcript over a few reused ids, and a ledger whose records follow some of its calls
    (and some calls the transcript no longer shows), resolved in ledger order."""
    ids = [f"c{i}" for i in range(rng.randint(1, 4))]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    ledger = ObligationLedger()
    unanswered: list[str] = []
    for _ in range(rng.randint(0, 14)):
        roll = rng.random()
        if roll < 0.45 or not unanswered:
            call_id = rng.choice(ids)
            if rng.random() < 0.8:
                messages.append(call(call_id))
            unanswered.append(call_id)
            if rng.random() < 0.85:
                ledger.open(CONV, "tool_call", call_id, name="search")
        elif roll < 0.8:
            call_id = unanswered.pop(rng.randrange(len(unanswered)))
            if rng.random() < 0.8:
                messages.append(result(call_id))
            if rng.random() < 0.7:
                status: ResolutionStatus = rng.choice(["result", "error", "abandoned"])
                ledger.resolve(CONV, call_id, status)
        else:
            messages.append(result(rng.choice(ids)))  # a stray result
    return messages, ledger


def _reference_conflicts(
    transcript: Transcript, records: tuple[Obligation, ...]
) -> tuple[list[tuple[str, str, int | None, int]], set[int]]:
    """The analysis's ledger comparison as it was written before `reconcile` existed."""
    grouped: dict[str, list[Obligation]] = {}
    for r in records:
        if r.kind == "tool_call":
            grouped.setdefault(r.id, []).append(r)
    conflicts: list[tuple[str, str, int | None, int]] = []
    abandoned: set[int] = set()
    for call_id, recorded in grouped.items():
        calls: list[ToolCall] = [c for c in transcript.calls if c.id == call_id]
        offset = len(calls) - len(recorded)
        for position, r in enumerate(recorded):
            index = offset + position
            found = calls[index] if index >= 0 else None
            if found is None:
                if r.is_open:
                    conflicts.append(("ledger_mismatch", r.id, None, r.sequence))
                continue
            answered = found.result is not None
            if r.is_open and answered:
                conflicts.append(("ledger_mismatch", r.id, found.message_index, r.sequence))
            elif r.status == "abandoned" and not answered:
                abandoned.add(found.ordinal)
            elif not r.is_open and not answered:
                conflicts.append(("severed_obligation", r.id, found.message_index, r.sequence))
    return conflicts, abandoned


def test_the_analysis_matches_the_reference_pairing_on_random_transcripts() -> None:
    rng = random.Random(1301)
    policy = Policy.load("default")
    for case in range(600):
        messages, ledger = _random_case(rng)
        transcript = Transcript.parse(messages)
        snapshot = ledger.snapshot(CONV)
        analysis = Analysis.build(transcript, policy, snapshot)
        got = [(c.rule, c.id, c.message_index, c.sequence) for c in analysis.ledger_conflicts]
        want, abandoned = _reference_conflicts(transcript, snapshot.obligations)
        assert got == want, f"case {case}: {messages}"
        assert analysis.abandoned == abandoned, f"case {case}"


def _reference_detection(
    transcript: Transcript, owed: tuple[Obligation, ...]
) -> tuple[list[tuple[str, int]], list[int]]:
    """Passive detection's resolutions and severed calls as written before `reconcile`: an
    id with calls answers through its last calls; an id without calls through its stray
    results, else it is severed."""
    by: dict[str, list[Obligation]] = {}
    for r in owed:
        by.setdefault(r.id, []).append(r)
    resolutions: list[tuple[str, int]] = []
    severed: list[int] = []
    for call_id, records in by.items():
        calls = [c for c in transcript.calls if c.id == call_id]
        loose = [r for r in transcript.results if r.call is None and r.call_id == call_id]
        if calls:
            resolutions.extend(
                (call_id, transcript.results[c.result].message_index)
                for c in calls[-len(records) :]
                if c.result is not None
            )
        elif loose:
            resolutions.extend((call_id, r.message_index) for r in loose[: len(records)])
        else:
            severed.extend(r.sequence for r in records)
    return resolutions, severed


def _written_alike(transcript: Transcript, owed: tuple[Obligation, ...], call_id: str) -> bool:
    """Whether the reference and the rule read this id alike: every open record has a call,
    or none has and the stray results answer none or all of them."""
    records = sum(r.id == call_id for r in owed)
    calls = sum(c.id == call_id for c in transcript.calls)
    loose = sum(r.call is None and r.call_id == call_id for r in transcript.results)
    return calls >= records or (calls == 0 and (loose == 0 or loose >= records))


def test_detection_matches_the_reference_wherever_both_read_an_id_alike() -> None:
    rng = random.Random(1302)
    compared = differed = 0
    for case in range(800):
        messages, ledger = _random_case(rng)
        transcript = Transcript.parse(messages)
        owed = ledger.open_obligations(CONV)
        found = check_request(transcript, owed, ConversationState())
        got = (
            [(r.call_id, r.message_index) for r in found.resolutions],
            [s.sequence for s in found.severed],
        )
        pairs = reconcile_calls(transcript, owed)
        if any(not _written_alike(transcript, owed, call_id) for call_id in by_id(owed)):
            differed += 1
            # The rule: a record without a call is severed unless a stray result answers it.
            missing = [p.record.sequence for p in pairs if p.state == "missing"]
            assert set(got[1]) <= set(missing), f"case {case}"
            continue
        compared += 1
        assert got == _reference_detection(transcript, owed), f"case {case}: {messages}"
    assert compared > 400 and differed > 20


def test_detection_reports_an_older_call_of_a_reused_id_cut_away_while_owed() -> None:
    ledger = ObligationLedger()
    old = ledger.open(CONV, "tool_call", "call_0", name="deploy")
    ledger.open(CONV, "tool_call", "call_0", name="deploy")
    # The compactor dropped the first call_0; the request shows only the second, answered.
    messages = [
        {"role": "user", "content": "Summary: deploying."},
        call("call_0"),
        result("call_0"),
    ]
    found = check_request(
        Transcript.parse(messages), ledger.open_obligations(CONV), ConversationState()
    )
    assert [(r.call_id, r.message_index) for r in found.resolutions] == [("call_0", 2)]
    assert found.severed == (Severed("call_0", "deploy", old.sequence),)


def test_a_stray_result_answers_the_record_left_without_a_call() -> None:
    ledger = ObligationLedger()
    ledger.open(CONV, "tool_call", "call_0", name="deploy")
    ledger.open(CONV, "tool_call", "call_0", name="deploy")
    messages = [result("call_0", "late"), call("call_0"), result("call_0", "done")]
    found = check_request(
        Transcript.parse(messages), ledger.open_obligations(CONV), ConversationState()
    )
    assert sorted((r.call_id, r.message_index) for r in found.resolutions) == [
        ("call_0", 0),
        ("call_0", 2),
    ]
    assert found.severed == ()


@pytest.mark.parametrize("seed", range(40))
def test_reconciling_twice_gives_the_same_pairs(seed: int) -> None:
    messages, ledger = _random_case(random.Random(seed))
    transcript = Transcript.parse(messages)
    records = ledger.snapshot(CONV).obligations
    everything = reconcile_calls(transcript, records)
    assert everything == reconcile_calls(transcript, records, calls_by_id(transcript.calls))
    assert reconcile_calls(transcript, records, only=DISAGREE) == [
        pair for pair in everything if pair.state in DISAGREE
    ]
    assert {pair.state for pair in everything} <= AGREE | DISAGREE


def test_langchain_messages_resolve_every_open_call_they_show_answered() -> None:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from otel_compaction import ToolCallRecorder
    from otel_compaction.integrations.langchain.messages import resolve_from_messages

    recorder = ToolCallRecorder(ledger=ObligationLedger())
    for _ in range(3):
        recorder.call("search", "call_0", conversation_id=CONV)
    messages = [
        HumanMessage("go"),
        AIMessage("", tool_calls=[{"id": "call_0", "name": "search", "args": {}}]),
        ToolMessage("first", tool_call_id="call_0"),
        AIMessage("", tool_calls=[{"id": "call_0", "name": "search", "args": {}}]),
        ToolMessage("failed", tool_call_id="call_0", status="error"),
        AIMessage("", tool_calls=[{"id": "call_0", "name": "search", "args": {}}]),
    ]
    # The last call is still running: two of the three records pair with answered calls.
    assert resolve_from_messages(recorder, messages, CONV) == 2
    records = recorder.ledger.snapshot(CONV).obligations
    assert [r.status for r in records] == ["result", "error", None]
    assert resolve_from_messages(recorder, messages, CONV) == 0


def test_calls_no_record_pairs_with_are_the_oldest_of_each_id() -> None:
    transcript = Transcript.parse([call("c1"), call("c2"), call("c1"), call("c1"), call("c3")])
    unpaired = unpaired_calls(transcript, [record(0, "c1"), record(1, "c1"), record(2, "c3")])
    assert [(c.id, c.message_index) for c in unpaired] == [("c1", 0), ("c2", 1)]
    assert unpaired_calls(transcript, []) == transcript.calls
