"""The recorder holds no more than the ledger does: a call a ledger bound drops (records per
conversation, open obligations, conversations) ends its live span as abandoned, ``evicted``,
and the recorder lets it go; the overflow is counted. The span processor holds no more than
the ledger either."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import StatusCode
from telemetry_harness import key, ledger_rows, make_pipeline, names, number_points

from otel_compaction.ledger import Obligation, ObligationLedger
from otel_compaction.telemetry.processor import LedgerSpanProcessor

EVICTED = [("compaction.obligation.abandoned", {"compaction.abandon.reason": "evicted"})]


def _events(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    return [(event.name, dict(event.attributes or {})) for event in span.events]


def test_a_call_the_record_bound_drops_ends_as_evicted_and_is_let_go() -> None:
    pipeline = make_pipeline(ledger=ObligationLedger(max_records_per_conversation=2))
    recorder = pipeline.recorder
    first = recorder.call("search", "c1", conversation_id="conv", arguments={"q": "Oslo"})
    second = recorder.call("fetch", "c2", conversation_id="conv")
    first_span, second_span = weakref.ref(first.span), weakref.ref(second.span)
    del first, second
    gc.collect()
    # The recorder holds the live spans of its open calls, and ends none of them.
    assert first_span() is not None and second_span() is not None
    assert pipeline.spans() == []

    third = recorder.call("read", "c3", conversation_id="conv")  # the bound drops "c1"

    [evicted] = pipeline.spans()
    assert evicted.name == "execute_tool search"
    assert dict(evicted.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": "conv",
        "compaction.obligation.status": "abandoned",
    }
    assert _events(evicted) == EVICTED
    assert evicted.status.status_code is StatusCode.UNSET  # abandoned, not failed
    gc.collect()
    assert first_span() is None  # nothing holds the dropped call any more
    assert second_span() is not None
    assert not recorder.resolve("c1", "late", conversation_id="conv")
    assert recorder.resolve("c2", "ok", conversation_id="conv")
    third.result("ok")
    assert ledger_rows(pipeline.ledger, "conv") == [
        ("tool_call", "c2", "fetch", "conv", 1, "result"),
        ("tool_call", "c3", "read", "conv", 2, "result"),
    ]
    assert names(pipeline.spans()) == [
        "execute_tool search",
        "tool_result fetch",
        "execute_tool fetch",
        "tool_result read",
        "execute_tool read",
    ]
    assert number_points(pipeline.metrics()["compaction.ledger.overflow"]) == {
        key({"compaction.obligation.kind": "tool_call"}): 1
    }
    pipeline.shutdown()


def test_the_open_bound_drops_the_oldest_open_call_of_any_conversation() -> None:
    pipeline = make_pipeline(ledger=ObligationLedger(max_open=3))
    recorder = pipeline.recorder
    oldest = recorder.call("search", "a1", conversation_id="a")
    recorder.call("search", "b1", conversation_id="b").result("ok")  # resolved: not counted
    older = recorder.call("search", "b2", conversation_id="b")
    recorder.call("search", "c1", conversation_id="c")
    assert not oldest.resolved  # three open: within the bound

    recorder.call("search", "c2", conversation_id="c")  # a fourth: "a1" goes
    assert (oldest.resolved, older.resolved) == (True, False)
    recorder.call("search", "c3", conversation_id="c")  # then "b2"

    assert older.resolved
    evicted = [s for s in pipeline.spans("execute_tool search") if _events(s) == EVICTED]
    assert [(s.attributes or {})["gen_ai.tool.call.id"] for s in evicted] == ["a1", "b2"]
    assert [o.id for o in pipeline.ledger.open_obligations()] == ["c1", "c2", "c3"]
    oldest.result("late")  # ignored: the call is over
    assert names(pipeline.spans(prefix="tool_result")) == ["tool_result search"]
    assert number_points(pipeline.metrics()["compaction.ledger.overflow"]) == {
        key({"compaction.obligation.kind": "tool_call"}): 2
    }
    pipeline.shutdown()


def test_an_evicted_conversation_ends_every_open_call_in_it() -> None:
    pipeline = make_pipeline(ledger=ObligationLedger(max_conversations=2))
    recorder = pipeline.recorder
    in_a = [recorder.call("search", f"a{n}", conversation_id="a") for n in range(3)]
    in_a[1].result("ok")
    with recorder.transaction("transfer", "txn_a", conversation_id="a") as transaction:
        recorder.call("search", "b1", conversation_id="b")
        recorder.call("search", "c1", conversation_id="c")  # "a" is the least recently used
    assert [h.resolved for h in in_a] == [True, True, True]
    assert transaction.resolved
    evicted = [s for s in pipeline.spans("execute_tool search") if _events(s) == EVICTED]
    assert [(s.attributes or {})["gen_ai.tool.call.id"] for s in evicted] == ["a0", "a2"]
    # The transaction is its caller's to end: it ends as it would, its record gone.
    [transaction_span] = pipeline.spans("compaction.transaction transfer")
    assert (transaction_span.attributes or {})["compaction.obligation.status"] == "result"
    assert pipeline.ledger.conversations() == ("b", "c")
    assert number_points(pipeline.metrics()["compaction.ledger.overflow"]) == {
        key({"compaction.obligation.kind": "tool_call"}): 2,
        key({"compaction.obligation.kind": "transaction"}): 1,
    }
    pipeline.shutdown()


def test_an_evicted_layered_call_is_neither_joined_nor_held() -> None:
    pipeline = make_pipeline(ledger=ObligationLedger(max_open=1))
    recorder = pipeline.recorder
    from_sdk = recorder.call("search", "c1", conversation_id="conv", layer="sdk")
    recorder.call("other", "c0", conversation_id="conv")  # drops "c1"

    from_framework = recorder.call("search", "c1", conversation_id="conv", layer="langchain")

    assert from_framework is not from_sdk and not from_framework.resolved
    assert recorder.join_open("search", "agents", conversation_id="conv") is from_framework
    assert not recorder.join(from_sdk, "mcp")
    # Nor held in the index of layered calls.
    dropped_span = weakref.ref(from_sdk.span)
    del from_sdk
    gc.collect()
    assert dropped_span() is None
    pipeline.shutdown()


def test_a_call_dropped_before_the_recorder_indexed_it_still_ends_as_evicted() -> None:
    # Another writer of the ledger opens records while `call` opens its own, enough of them to
    # drop it before the recorder has indexed its handle: as another thread can.
    ledger: ObligationLedger = ObligationLedger(max_records_per_conversation=1)

    def crowd(new: Obligation, old: Obligation | None) -> None:
        if old is None and new.id == "victim":
            ledger.open("conv", "tool_call", "crowd")

    ledger.subscribe(on_change=crowd)
    pipeline = make_pipeline(ledger=ledger)
    recorder = pipeline.recorder

    victim = recorder.call("search", "victim", conversation_id="conv")

    assert victim.resolved
    [span] = pipeline.spans()
    assert (span.name, _events(span)) == ("execute_tool search", EVICTED)
    assert not recorder.resolve("victim", conversation_id="conv")
    assert [o.id for o in ledger.open_obligations("conv")] == ["crowd"]
    pipeline.shutdown()


def test_the_span_processor_holds_no_more_spans_than_the_ledger_holds_open() -> None:
    ledger = ObligationLedger(max_open=2)
    processor = LedgerSpanProcessor(ledger)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("another-instrumentation")
    spans = [
        tracer.start_span(
            "execute_tool lookup",
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": f"t{n}"},
        )
        for n in range(3)
    ]

    assert [o.id for o in ledger.open_obligations()] == ["t1", "t2"]
    assert list(processor._open) == [s.get_span_context().span_id for s in spans[1:]]
    for span in spans:
        span.end()  # the first one's record is gone: nothing to resolve
    assert [(o.id, o.status) for o in ledger.snapshot(None).obligations] == [
        ("t1", "result"),
        ("t2", "result"),
    ]
    provider.shutdown()
