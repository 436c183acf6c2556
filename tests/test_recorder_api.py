"""The recorder's ways in: the tool decorator (sync and async), the ``tool_call`` context
manager, resolution by id with reused ids, content capture, and the ledger's bound."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from opentelemetry.trace import StatusCode
from telemetry_harness import (
    FORBIDDEN_METRIC_KEYS,
    Pipeline,
    key,
    ledger_rows,
    make_pipeline,
    metric_attribute_keys,
    metric_attribute_values,
    names,
    number_points,
)

from otel_compaction import conversation
from otel_compaction.ledger import ObligationLedger
from otel_compaction.telemetry import semconv as sc

ARGS = "gen_ai.tool.call.arguments"
RESULT = "gen_ai.tool.call.result"


def _attrs(pipeline: Pipeline, name: str) -> dict[str, Any]:
    return dict(pipeline.span(name).attributes or {})


# -- the decorator and the context manager ------------------------------------------------------


def test_the_tool_decorator_records_sync_calls_results_and_errors(pipeline: Pipeline) -> None:
    recorder = pipeline.recorder

    @recorder.tool()
    def lookup(city: str, *, days: int = 1) -> str:
        return f"{city}: sunny for {days} days"

    @recorder.tool("web_search")
    def search(query: str) -> list[str]:
        raise LookupError(query)

    assert lookup.__name__ == "lookup"  # functools.wraps
    assert lookup("Oslo", days=2) == "Oslo: sunny for 2 days"
    with pytest.raises(LookupError, match="flights") as raised:
        search("flights")
    assert isinstance(raised.value, LookupError)  # the tool's own exception, unchanged

    assert names(pipeline.spans()) == [
        "tool_result lookup",
        "execute_tool lookup",
        "tool_result web_search",
        "execute_tool web_search",
    ]
    lookup_call = _attrs(pipeline, "execute_tool lookup")
    assert lookup_call["gen_ai.tool.call.id"] == "call_1"  # generated ids are unique per recorder
    assert lookup_call["compaction.obligation.status"] == "result"
    assert ARGS not in lookup_call  # content capture is off by default
    search_call = pipeline.span("execute_tool web_search")
    assert search_call.attributes is not None
    assert search_call.attributes["gen_ai.tool.call.id"] == "call_2"
    assert search_call.attributes["error.type"] == "LookupError"
    assert search_call.status.status_code is StatusCode.ERROR
    assert [row[1:3] + row[5:] for row in ledger_rows(pipeline.ledger, None)] == [
        ("call_1", "lookup", "result"),
        ("call_2", "web_search", "error"),
    ]


def test_the_tool_decorator_records_async_calls_and_cancellation(pipeline: Pipeline) -> None:
    recorder = pipeline.recorder
    started = asyncio.Event()

    @recorder.tool()
    async def fetch(url: str) -> int:
        await asyncio.sleep(0)
        return len(url)

    @recorder.tool()
    async def crawl(url: str) -> int:
        started.set()
        await asyncio.sleep(3600)
        return 0

    @recorder.tool()
    async def parse(text: str) -> int:
        raise ValueError(text)

    async def main() -> None:
        assert await fetch("https://example.org") == 19
        with pytest.raises(ValueError, match="bad"):
            await parse("bad")
        task = asyncio.create_task(crawl("https://example.org"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [row[2] + ":" + str(row[5]) for row in ledger_rows(pipeline.ledger, None)] == [
        "fetch:result",
        "parse:error",
        "crawl:abandoned",  # a cancelled call will never get a result: abandoned, not an error
    ]
    crawl_span = pipeline.span("execute_tool crawl")
    assert crawl_span.status.status_code is StatusCode.UNSET
    assert [(e.name, dict(e.attributes or {})) for e in crawl_span.events] == [
        ("compaction.obligation.abandoned", {"compaction.abandon.reason": "cancelled"})
    ]
    assert _attrs(pipeline, "tool_result parse")["error.type"] == "ValueError"
    assert pipeline.ledger.open_obligations() == ()


def test_the_tool_call_context_manager(pipeline: Pipeline) -> None:
    recorder = pipeline.recorder
    with recorder.tool_call("ls", "call_ls", conversation_id="conv-cm") as handle:
        assert [o.id for o in pipeline.ledger.open_obligations("conv-cm")] == ["call_ls"]
    assert handle.resolved
    with recorder.tool_call("cat", "call_cat", conversation_id="conv-cm") as handle:
        handle.error("file_not_found")  # an explicit resolution wins over the normal exit
    with (
        pytest.raises(PermissionError),
        recorder.tool_call("rm", "call_rm", conversation_id="conv-cm"),
    ):
        raise PermissionError("read-only")

    assert ledger_rows(pipeline.ledger, "conv-cm") == [
        ("tool_call", "call_ls", "ls", "conv-cm", 0, "result"),
        ("tool_call", "call_cat", "cat", "conv-cm", 1, "error"),
        ("tool_call", "call_rm", "rm", "conv-cm", 2, "error"),
    ]
    assert len(pipeline.spans()) == 6
    assert _attrs(pipeline, "execute_tool cat")["error.type"] == "file_not_found"
    assert _attrs(pipeline, "execute_tool rm")["error.type"] == "PermissionError"


# -- resolution by id -------------------------------------------------------------------------


def test_resolve_by_id_pairs_reused_ids_earliest_first(pipeline: Pipeline) -> None:
    recorder = pipeline.recorder
    with conversation("conv-reuse"):
        first = recorder.call("search", "dup")
        second = recorder.call("search", "dup")
        third = recorder.call("search", "dup")
        assert recorder.resolve("dup", "first answer")
        assert (first.resolved, second.resolved, third.resolved) == (True, False, False)
        assert recorder.resolve("dup", error=TimeoutError())
        assert recorder.resolve("dup", "gave up", status="abandoned")
        assert not recorder.resolve("dup")  # nothing left open under that id
        assert not recorder.resolve("never-emitted")
    assert not recorder.resolve("dup", conversation_id="another-conversation")
    assert (second.resolved, third.resolved) == (True, True)

    assert ledger_rows(pipeline.ledger, "conv-reuse") == [
        ("tool_call", "dup", "search", "conv-reuse", 0, "result"),
        ("tool_call", "dup", "search", "conv-reuse", 1, "error"),
        ("tool_call", "dup", "search", "conv-reuse", 2, "abandoned"),
    ]
    spans = pipeline.spans()
    calls = [s for s in spans if s.name == "execute_tool search"]
    results = [s for s in spans if s.name == "tool_result search"]
    assert [s.context for s in calls] == [
        first.span.get_span_context(),
        second.span.get_span_context(),
        third.span.get_span_context(),
    ]
    # Each result links to its own call span, earliest call first.
    assert [r.links[0].context for r in results] == [c.context for c in calls]
    assert [(r.attributes or {}).get("compaction.obligation.status") for r in results] == [
        "result",
        "error",
        "abandoned",
    ]
    assert (results[2].attributes or {}).get("compaction.abandon.reason") == "gave up"


# -- content capture ---------------------------------------------------------------------------


def test_content_capture_is_off_by_default(pipeline: Pipeline) -> None:
    assert not pipeline.recorder.capture_content
    pipeline.recorder.call("search", "c1", arguments={"q": "Oslo"}).result({"flights": 2})
    pipeline.recorder.call("search", "c2", arguments={"q": "Bergen"}).error("x", "trace")
    for span in pipeline.spans():
        assert span.attributes is not None
        assert ARGS not in span.attributes and RESULT not in span.attributes


@pytest.mark.parametrize("value", ["true", "True", " TRUE "])
def test_content_capture_is_switched_on_by_the_genai_variable(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
    recorder = pipeline.recorder
    assert recorder.capture_content
    recorder.call("search", "c1", arguments={"q": "Oslo", "when": "Fri"}).result({"flights": 2})
    recorder.call("book", "c2", arguments="seat 3A").error(ValueError("taken"), "seat 3A taken")
    recorder.call("ping", "c3").result()  # no arguments and no result: nothing to capture

    assert _attrs(pipeline, "execute_tool search")[ARGS] == '{"q": "Oslo", "when": "Fri"}'
    assert _attrs(pipeline, "tool_result search")[RESULT] == '{"flights": 2}'
    assert _attrs(pipeline, "execute_tool book")[ARGS] == "seat 3A"
    assert _attrs(pipeline, "tool_result book")[RESULT] == "seat 3A taken"
    assert ARGS not in _attrs(pipeline, "execute_tool ping")
    assert RESULT not in _attrs(pipeline, "tool_result ping")
    # The result is on the result span only, the arguments on the call span only.
    assert RESULT not in _attrs(pipeline, "execute_tool search")
    assert ARGS not in _attrs(pipeline, "tool_result search")

    @recorder.tool()
    def weather(city: str, days: int = 1) -> dict[str, Any]:
        return {"city": city, "days": days}

    weather("Oslo", days=3)
    assert json.loads(_attrs(pipeline, "execute_tool weather")[ARGS]) == {
        "city": "Oslo",
        "days": 3,
    }
    assert json.loads(_attrs(pipeline, "tool_result weather")[RESULT]) == {
        "city": "Oslo",
        "days": 3,
    }


def test_content_capture_switch_off_values_and_explicit_override(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(sc.CAPTURE_CONTENT_ENV, "false")
    off = make_pipeline()
    assert not off.recorder.capture_content
    monkeypatch.setenv(sc.CAPTURE_CONTENT_ENV, "true")
    forced_off = make_pipeline(capture_content=False)
    forced_off.recorder.call("search", "c1", arguments={"q": "x"}).result("y")
    assert ARGS not in _attrs(forced_off, "execute_tool search")
    monkeypatch.delenv(sc.CAPTURE_CONTENT_ENV)
    forced_on = make_pipeline(capture_content=True)
    forced_on.recorder.call("search", "c1", arguments={"q": "x"}).result("y" * 10_000)
    captured = _attrs(forced_on, "tool_result search")[RESULT]
    assert captured == "y" * 8192 + "…"  # long content is truncated, visibly
    for made in (off, forced_off, forced_on):
        made.shutdown()


# -- the ledger's bound ------------------------------------------------------------------------


def test_ledger_overflow_is_counted_and_leaves_the_open_metric_exact() -> None:
    ledger = ObligationLedger(max_conversations=2, max_records_per_conversation=3)
    pipeline = make_pipeline(ledger=ledger)
    recorder = pipeline.recorder
    resolved = [recorder.call("search", f"old_{i}", conversation_id="a") for i in range(2)]
    for handle in resolved:
        handle.result()
    # Resolved history goes first: no open obligation is lost.
    handles = [recorder.call("search", f"a_{i}", conversation_id="a") for i in range(3)]
    assert number_points(pipeline.metrics()[sc.METRIC_OPEN_OBLIGATIONS]) == {
        key({sc.OBLIGATION_KIND: "tool_call"}): 3
    }
    assert sc.METRIC_LEDGER_OVERFLOW not in pipeline.metrics()
    # Two more open calls: the two oldest open ones are dropped.
    handles += [recorder.call("search", f"a_{i}", conversation_id="a") for i in (3, 4)]
    assert [o.id for o in ledger.open_obligations("a")] == ["a_2", "a_3", "a_4"]
    # Two more conversations: the least recently used one ("a", 3 open) is dropped.
    with recorder.transaction("t", "txn_b", conversation_id="b"):
        recorder.call("search", "c_0", conversation_id="c").result()
        assert ledger.conversations() == ("b", "c")

    metrics = pipeline.metrics()
    assert number_points(metrics[sc.METRIC_LEDGER_OVERFLOW]) == {
        key({sc.OBLIGATION_KIND: "tool_call"}): 5
    }
    assert metrics[sc.METRIC_LEDGER_OVERFLOW].unit == "{obligation}"
    assert number_points(metrics[sc.METRIC_OPEN_OBLIGATIONS]) == {
        key({sc.OBLIGATION_KIND: "tool_call"}): 0,
        key({sc.OBLIGATION_KIND: "transaction"}): 0,
    }
    # The five dropped calls ended as abandoned, evicted; the others have their results.
    assert [h.resolved for h in handles] == [True] * 5
    evicted = [
        (s.name, (s.attributes or {})["gen_ai.tool.call.id"], [e.name for e in s.events])
        for s in pipeline.spans("execute_tool search")
        if (s.attributes or {}).get("compaction.obligation.status") == "abandoned"
    ]
    assert evicted == [
        ("execute_tool search", f"a_{i}", ["compaction.obligation.abandoned"]) for i in range(5)
    ]
    # A late result of a dropped call is ignored (its call ended) and never raises.
    for handle in handles:
        handle.result("late")
    assert len(pipeline.spans("tool_result search")) == 3
    assert ledger.open_obligations() == ()
    pipeline.shutdown()


def test_metric_attributes_never_carry_call_or_conversation_ids(pipeline: Pipeline) -> None:
    recorder = pipeline.recorder
    with conversation("conv-secret"):
        recorder.call("search", "call_secret_1").result("x")
        recorder.call("search", "call_secret_2").error(ValueError("x"))
        recorder.call("search", "call_secret_3").abandon("stop")
        recorder.call("search", "call_secret_4")
        with recorder.transaction("t", "txn_secret"):
            pass
        chain = recorder.retry_chain("r", "retry_secret")
        chain.attempt_failed()
        chain.succeeded()
    metrics = pipeline.metrics()
    assert not metric_attribute_keys(metrics) & FORBIDDEN_METRIC_KEYS
    values = {str(v) for v in metric_attribute_values(metrics)}
    assert not {v for v in values if "secret" in v}
    assert metric_attribute_keys(metrics) == {
        "compaction.obligation.kind",
        "compaction.obligation.status",
        "gen_ai.tool.name",
        "error.type",
    }
