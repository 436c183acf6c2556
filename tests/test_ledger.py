"""ObligationLedger: pairing, snapshots, bounds, thread safety and change callbacks."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable

import pytest
from workers import run_in_threads

from otel_compaction.ledger import (
    DEFAULT_CONVERSATION,
    LedgerSnapshot,
    Obligation,
    ObligationLedger,
)


def test_open_and_resolve() -> None:
    ledger = ObligationLedger()
    opened = ledger.open("conv", "tool_call", "call_1", name="search")
    assert (opened.kind, opened.id, opened.name, opened.conversation_id) == (
        "tool_call",
        "call_1",
        "search",
        "conv",
    )
    assert opened.is_open and opened.status is None and opened.resolved_at_ns is None
    assert ledger.open_obligations("conv") == (opened,)

    resolved = ledger.resolve("conv", "call_1", "error")
    assert resolved is not None
    assert (resolved.sequence, resolved.status, resolved.is_open) == (
        opened.sequence,
        "error",
        False,
    )
    assert resolved.resolved_at_ns is not None and resolved.resolved_at_ns >= opened.opened_at_ns
    assert resolved.age_seconds >= 0
    assert resolved.error_type is None and opened.error_type is None
    assert ledger.open_obligations("conv") == ()
    # A terminal resolution is terminal: nothing is left to resolve.
    assert ledger.resolve("conv", "call_1") is None


def test_an_error_resolution_keeps_what_failed() -> None:
    ledger = ObligationLedger()
    ledger.open("conv", "tool_call", "call_1", name="book")
    failed = ledger.resolve("conv", "call_1", "error", error_type="TimeoutError")
    assert failed is not None and (failed.status, failed.error_type) == ("error", "TimeoutError")
    assert ledger.snapshot("conv").obligations == (failed,)


def test_reused_id_resolves_earliest_open_first() -> None:
    ledger = ObligationLedger()
    first = ledger.open("conv", "tool_call", "c1", name="search")
    second = ledger.open("conv", "tool_call", "c1", name="search")
    third = ledger.open("conv", "tool_call", "c1", name="fetch")

    one = ledger.resolve("conv", "c1")
    assert one is not None and one.sequence == first.sequence
    assert [o.sequence for o in ledger.open_obligations("conv")] == [
        second.sequence,
        third.sequence,
    ]

    two = ledger.resolve("conv", "c1", "abandoned")
    assert two is not None and (two.sequence, two.status) == (second.sequence, "abandoned")
    three = ledger.resolve("conv", "c1")
    assert three is not None and (three.sequence, three.name) == (third.sequence, "fetch")
    assert ledger.resolve("conv", "c1") is None

    # A new call reusing the id after all were resolved is a new open obligation.
    fourth = ledger.open("conv", "tool_call", "c1")
    assert ledger.open_obligations("conv") == (fourth,)
    statuses = [(o.sequence, o.status) for o in ledger.snapshot("conv").obligations]
    assert statuses == [
        (first.sequence, "result"),
        (second.sequence, "abandoned"),
        (third.sequence, "result"),
        (fourth.sequence, None),
    ]


def test_kinds_and_conversations_are_separate() -> None:
    ledger = ObligationLedger()
    ledger.open("a", "tool_call", "x")
    ledger.open("a", "transaction", "x")
    ledger.open("b", "tool_call", "x")

    resolved = ledger.resolve("a", "x")  # kind defaults to tool_call
    assert resolved is not None and (resolved.kind, resolved.conversation_id) == ("tool_call", "a")
    assert [(o.kind, o.id) for o in ledger.open_obligations("a")] == [("transaction", "x")]
    assert [(o.conversation_id, o.kind) for o in ledger.open_obligations("b")] == [
        ("b", "tool_call")
    ]
    assert ledger.resolve("missing-conversation", "x") is None
    assert ledger.resolve("a", "x", kind="retry") is None
    transaction = ledger.resolve("a", "x", kind="transaction")
    assert transaction is not None and transaction.kind == "transaction"
    # Without a conversation id: every conversation's open obligations.
    assert [(o.conversation_id, o.id) for o in ledger.open_obligations()] == [("b", "x")]


def test_no_conversation_id_uses_the_default_conversation() -> None:
    ledger = ObligationLedger()
    record = ledger.open(None, "tool_call", "c1")
    assert record.conversation_id == DEFAULT_CONVERSATION == ""
    assert ledger.snapshot(None).obligations == (record,)
    assert ledger.resolve("", "c1") is not None


def test_snapshot_is_an_immutable_copy() -> None:
    ledger = ObligationLedger()
    ledger.open("conv", "tool_call", "c1", name="search")
    ledger.open("conv", "retry", "c0", name="fetch")
    snapshot = ledger.snapshot("conv")

    ledger.resolve("conv", "c1")
    ledger.open("conv", "tool_call", "c2")
    ledger.forget("conv")

    assert isinstance(snapshot, LedgerSnapshot)
    assert snapshot.conversation_id == "conv"
    assert [(o.id, o.status) for o in snapshot.obligations] == [("c1", None), ("c0", None)]
    assert [o.id for o in snapshot.open()] == ["c1", "c0"]
    assert [o.id for o in snapshot.tool_calls()] == ["c1"]
    assert isinstance(snapshot.obligations, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.obligations = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.obligations[0].status = "result"  # type: ignore[misc]
    assert ledger.snapshot("conv").obligations == ()


def test_record_bound_drops_resolved_history_first() -> None:
    dropped: list[Obligation] = []
    ledger = ObligationLedger(max_records_per_conversation=3, on_overflow=dropped.append)
    ledger.open("conv", "tool_call", "a")
    ledger.open("conv", "tool_call", "b")
    ledger.open("conv", "tool_call", "c")
    ledger.resolve("conv", "b")

    ledger.open("conv", "tool_call", "d")  # over the bound: resolved "b" goes, silently

    assert [o.id for o in ledger.snapshot("conv").obligations] == ["a", "c", "d"]
    assert dropped == []

    ledger.open("conv", "tool_call", "e")  # all open: the oldest open record goes, reported

    assert [o.id for o in ledger.snapshot("conv").obligations] == ["c", "d", "e"]
    assert [(o.id, o.is_open) for o in dropped] == [("a", True)]
    # The dropped obligation is gone from the open table too.
    assert ledger.resolve("conv", "a") is None


def test_record_bound_with_reused_ids_keeps_fifo_consistent() -> None:
    ledger = ObligationLedger(max_records_per_conversation=2)
    first = ledger.open("conv", "tool_call", "same")
    second = ledger.open("conv", "tool_call", "same")
    third = ledger.open("conv", "tool_call", "same")  # drops `first`
    assert [o.sequence for o in ledger.open_obligations("conv")] == [
        second.sequence,
        third.sequence,
    ]
    resolved = ledger.resolve("conv", "same")
    assert resolved is not None and resolved.sequence == second.sequence
    assert first.sequence not in [o.sequence for o in ledger.snapshot("conv").obligations]


def test_record_bound_drops_the_first_resolved_record_past_open_ones() -> None:
    ledger = ObligationLedger(max_records_per_conversation=4)
    for call_id in ("open_1", "open_2", "late", "early"):
        ledger.open("conv", "tool_call", call_id)
    ledger.resolve("conv", "early")
    ledger.resolve("conv", "late")

    ledger.open("conv", "tool_call", "next")  # "early" was resolved first: it goes

    assert [(o.id, o.status) for o in ledger.snapshot("conv").obligations] == [
        ("open_1", None),
        ("open_2", None),
        ("late", "result"),
        ("next", None),
    ]


def test_open_bound_drops_the_oldest_open_obligation_across_conversations() -> None:
    dropped: list[Obligation] = []
    ledger = ObligationLedger(max_open=3, on_overflow=dropped.append)
    ledger.open("a", "tool_call", "a1")
    ledger.open("b", "transaction", "b1")
    ledger.open("a", "tool_call", "a2")
    ledger.resolve("a", "a2")  # resolved: no longer counts against the bound
    ledger.open("c", "tool_call", "c1")
    assert dropped == []

    ledger.open("c", "tool_call", "c2")  # a fourth open one: "a1", opened first, goes

    assert [(o.conversation_id, o.id) for o in dropped] == [("a", "a1")]
    assert [(o.conversation_id, o.id) for o in ledger.open_obligations()] == [
        ("b", "b1"),
        ("c", "c1"),
        ("c", "c2"),
    ]
    assert [(o.id, o.status) for o in ledger.snapshot("a").obligations] == [("a2", "result")]
    assert ledger.resolve("a", "a1") is None
    assert ledger.open_counts() == {"tool_call": 2, "transaction": 1}
    oldest = ledger.oldest_open()
    assert oldest is not None and oldest.id == "b1"

    ledger.open("d", "tool_call", "d1")  # "b1" goes next, whatever its kind

    assert [(o.conversation_id, o.id, o.kind) for o in dropped[1:]] == [("b", "b1", "transaction")]
    assert ledger.open_counts() == {"tool_call": 3, "transaction": 0}


def test_default_bounds_protect_a_process_and_are_validated() -> None:
    ledger = ObligationLedger()
    assert (ledger.max_conversations, ledger.max_records_per_conversation, ledger.max_open) == (
        1_000,
        1_000,
        10_000,
    )
    refused: list[str] = []
    makes: list[Callable[[], object]] = [
        lambda: ObligationLedger(max_conversations=0),
        lambda: ObligationLedger(max_records_per_conversation=-1),
        lambda: ObligationLedger(max_open=0),
    ]
    for make in makes:
        with pytest.raises(ValueError) as raised:
            make()
        refused.append(str(raised.value))
    assert refused == [
        "max_conversations must be at least 1, got 0",
        "max_records_per_conversation must be at least 1, got -1",
        "max_open must be at least 1, got 0",
    ]


def test_conversation_bound_evicts_least_recently_touched() -> None:
    dropped: list[Obligation] = []
    ledger = ObligationLedger(max_conversations=2, on_overflow=dropped.append)
    ledger.open("one", "tool_call", "1a")
    ledger.open("one", "tool_call", "1b")
    ledger.resolve("one", "1b")
    ledger.open("two", "tool_call", "2a")
    ledger.open("one", "tool_call", "1c")  # touches "one": "two" is now the oldest

    ledger.open("three", "tool_call", "3a")

    assert ledger.conversations() == ("one", "three")
    assert [(o.conversation_id, o.id) for o in dropped] == [("two", "2a")]
    ledger.open("four", "transaction", "4a")
    # "one" held two open records and one resolved: only the open ones are reported.
    assert ledger.conversations() == ("three", "four")
    assert [(o.conversation_id, o.id) for o in dropped] == [
        ("two", "2a"),
        ("one", "1a"),
        ("one", "1c"),
    ]
    assert all(o.is_open for o in dropped)


def test_resolving_touches_a_conversation() -> None:
    dropped: list[Obligation] = []
    ledger = ObligationLedger(max_conversations=2, on_overflow=dropped.append)
    ledger.open("busy", "tool_call", "b1")
    ledger.open("busy", "tool_call", "b2")
    ledger.open("idle", "tool_call", "i1")
    ledger.resolve("busy", "b1")  # "busy" is now the most recently touched

    ledger.open("new", "tool_call", "n1")

    assert ledger.conversations() == ("busy", "new")
    assert [(o.conversation_id, o.id) for o in dropped] == [("idle", "i1")]


def test_forget_and_oldest_open() -> None:
    ledger = ObligationLedger()
    assert ledger.oldest_open() is None
    oldest = ledger.open("a", "tool_call", "a1")
    ledger.open("b", "tool_call", "b1")
    assert ledger.oldest_open() == oldest
    ledger.resolve("a", "a1")
    oldest_now = ledger.oldest_open()
    assert oldest_now is not None and oldest_now.id == "b1"
    ledger.forget("b")
    ledger.forget("never-seen")
    assert ledger.conversations() == ("a",)
    assert ledger.oldest_open() is None


def test_on_change_sees_every_transition_outside_the_lock() -> None:
    seen: list[tuple[Obligation, Obligation | None]] = []
    ledger: ObligationLedger

    def on_change(new: Obligation, old: Obligation | None) -> None:
        # Reading the ledger here would deadlock if callbacks ran under its lock.
        ledger.snapshot(new.conversation_id)
        seen.append((new, old))

    ledger = ObligationLedger(on_change=on_change)

    def scenario() -> None:
        ledger.open("conv", "tool_call", "c1", name="search")
        ledger.resolve("conv", "c1", "error")
        ledger.resolve("conv", "c1")  # nothing to resolve: no callback

    worker = threading.Thread(target=scenario, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "on_change ran while the ledger's lock was held"

    assert len(seen) == 2
    (opened, before_open), (resolved, before_resolve) = seen
    assert before_open is None
    assert (opened.id, opened.status) == ("c1", None)
    assert before_resolve == opened
    assert (resolved.sequence, resolved.status) == (opened.sequence, "error")


def test_on_resolve_sees_each_terminal_resolution_once() -> None:
    resolved: list[tuple[str, str | None, str | None]] = []
    ledger = ObligationLedger()
    ledger.subscribe(on_resolve=lambda r: resolved.append((r.id, r.status, r.error_type)))
    ledger.open("conv", "tool_call", "c1", name="search")
    ledger.open("conv", "transaction", "t1", name="transfer")
    assert resolved == []  # openings are not resolutions
    ledger.resolve("conv", "c1", "error", error_type="ValueError")
    ledger.resolve("conv", "c1")  # nothing left to resolve: no callback
    ledger.resolve("conv", "t1", "rolled_back", kind="transaction")
    assert resolved == [("c1", "error", "ValueError"), ("t1", "rolled_back", None)]


def test_a_failing_listener_does_not_break_the_ledger() -> None:
    calls: list[str] = []

    def broken(new: Obligation, old: Obligation | None) -> None:
        raise RuntimeError("listener bug")

    def broken_resolved(record: Obligation) -> None:
        raise RuntimeError("listener bug")

    ledger = ObligationLedger(on_change=broken)
    ledger.subscribe(on_resolve=broken_resolved)
    ledger.subscribe(on_change=lambda new, old: calls.append(new.id))
    ledger.subscribe(on_resolve=lambda record: calls.append(f"resolved {record.id}"))
    record = ledger.open("conv", "tool_call", "c1")
    assert record.is_open
    assert ledger.resolve("conv", "c1") is not None
    assert calls == ["c1", "c1", "resolved c1"]


THREADS, ROUNDS = 8, 500


def _hammer(ledger: ObligationLedger, worker: int, shared: bool) -> None:
    for round_ in range(ROUNDS):
        call_id = "shared" if shared else f"w{worker}-{round_}"
        ledger.open("conv", "tool_call", call_id, name=f"tool{worker}")
        resolved = ledger.resolve("conv", call_id)
        assert resolved is not None


@pytest.mark.parametrize("shared", [False, True], ids=["distinct-ids", "one-reused-id"])
def test_threads_open_and_resolve_leave_nothing_open(shared: bool) -> None:
    changes = Counter[str]()
    lock = threading.Lock()

    def on_change(new: Obligation, old: Obligation | None) -> None:
        with lock:
            changes["open" if old is None else "resolve"] += 1

    ledger = ObligationLedger(max_records_per_conversation=THREADS * ROUNDS, on_change=on_change)
    run_in_threads(lambda worker: _hammer(ledger, worker, shared), THREADS)

    assert ledger.open_obligations("conv") == ()
    records = ledger.snapshot("conv").obligations
    assert len(records) == THREADS * ROUNDS
    assert all(r.status == "result" for r in records)
    assert len({r.sequence for r in records}) == THREADS * ROUNDS
    assert changes == {"open": THREADS * ROUNDS, "resolve": THREADS * ROUNDS}
