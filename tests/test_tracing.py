"""Tool calls, results, transactions and retry chains as spans, ledger records and metrics.

Every test reads what the in-memory exporter and metric reader received and compares names,
kinds, attributes, links, events, statuses and metric points exactly.
"""

from __future__ import annotations

import time

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from telemetry_harness import (
    AGE_BUCKETS,
    Pipeline,
    histogram_counts,
    histogram_points,
    key,
    ledger_rows,
    names,
    number_points,
)

from otel_compaction import conversation
from otel_compaction.telemetry import semconv as sc

OPEN = sc.METRIC_OPEN_OBLIGATIONS
AGE = "compaction.obligation.age"
TOOL_CALL = key({sc.OBLIGATION_KIND: "tool_call"})


def _age_key(
    kind: str, status: str, tool: str | None = None, error_type: str | None = None
) -> frozenset[tuple[str, object]]:
    """The attributes of an age point: a tool call's carry its tool, an error's its type."""
    attributes = {"compaction.obligation.kind": kind, "compaction.obligation.status": status}
    if tool is not None:
        attributes["gen_ai.tool.name"] = tool
    if error_type is not None:
        attributes["error.type"] = error_type
    return key(attributes)


def test_a_resolved_call_is_a_call_span_and_a_result_span_linked_to_it(pipeline: Pipeline) -> None:
    with conversation("conv-1"):
        started = time.monotonic()
        call = pipeline.recorder.call("search", "call_1", arguments={"q": "flights"})
        # Open: the ledger knows, the metric counts it, and the call span is still running.
        assert pipeline.spans() == []
        assert ledger_rows(pipeline.ledger, "conv-1") == [
            ("tool_call", "call_1", "search", "conv-1", 0, None)
        ]
        assert number_points(pipeline.metrics()[OPEN]) == {TOOL_CALL: 1}
        call.result("2 flights")
        elapsed = time.monotonic() - started

    result_span, call_span = pipeline.spans()
    assert names([result_span, call_span]) == ["tool_result search", "execute_tool search"]
    assert call_span.kind is SpanKind.INTERNAL
    assert result_span.kind is SpanKind.INTERNAL
    assert call_span.instrumentation_scope is not None
    assert call_span.instrumentation_scope.name == "otel_compaction"
    assert dict(call_span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.id": "call_1",
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": "conv-1",
        "gen_ai.agent.name": "planner",
        "compaction.obligation.status": "result",
    }
    # The result is not a second tool execution: no gen_ai.operation.name.
    assert dict(result_span.attributes or {}) == {
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.id": "call_1",
        "gen_ai.conversation.id": "conv-1",
        "compaction.obligation.status": "result",
    }
    [link] = result_span.links
    assert link.context == call_span.context
    assert dict(link.attributes or {}) == {"gen_ai.tool.call.id": "call_1"}
    assert tuple(call_span.links) == ()
    assert call_span.events == () and result_span.events == ()
    assert call_span.status.status_code is StatusCode.UNSET
    assert result_span.status.status_code is StatusCode.UNSET
    assert call_span.parent is None and result_span.parent is None
    # The call span lives from the emission until the resolution.
    assert call_span.start_time is not None and result_span.start_time is not None
    assert call_span.start_time <= result_span.start_time
    assert call_span.end_time is not None and result_span.end_time is not None
    assert call_span.end_time >= result_span.end_time

    assert ledger_rows(pipeline.ledger, "conv-1") == [
        ("tool_call", "call_1", "search", "conv-1", 0, "result")
    ]
    metrics = pipeline.metrics()
    # One histogram per call: the call's age at resolution is its duration.
    assert set(metrics) == {OPEN, AGE, "compaction.obligation.oldest_age"}
    assert number_points(metrics[OPEN]) == {TOOL_CALL: 0}
    assert number_points(metrics["compaction.obligation.oldest_age"]) == {key(): 0.0}
    [age] = histogram_points(metrics[AGE]).items()
    assert age[0] == _age_key("tool_call", "result", "search")
    assert age[1].count == 1 and 0 <= age[1].sum <= elapsed + 1.0  # wall clock: some slack
    assert tuple(age[1].explicit_bounds) == AGE_BUCKETS
    assert metrics[AGE].unit == "s" and metrics[OPEN].unit == "{obligation}"


def test_an_error_marks_both_spans_and_is_counted_by_error_type(pipeline: Pipeline) -> None:
    call = pipeline.recorder.call("book", "call_2", conversation_id="conv-2")
    call.error(ValueError("seat 3A is taken"))
    timeout = pipeline.recorder.call("book", "call_3", conversation_id="conv-2")
    timeout.error("timeout")

    assert names(pipeline.spans()) == ["tool_result book", "execute_tool book"] * 2
    result_span, call_span, timeout_result, timeout_call = pipeline.spans()
    assert dict(call_span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "book",
        "gen_ai.tool.call.id": "call_2",
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": "conv-2",
        "gen_ai.agent.name": "planner",
        "compaction.obligation.status": "error",
        "error.type": "ValueError",
    }
    assert dict(result_span.attributes or {}) == {
        "gen_ai.tool.name": "book",
        "gen_ai.tool.call.id": "call_2",
        "gen_ai.conversation.id": "conv-2",
        "compaction.obligation.status": "error",
        "error.type": "ValueError",
    }
    for span in (call_span, result_span):
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description is None  # the message is content; capture is off
    assert [link.context for link in result_span.links] == [call_span.context]
    # A string names the error type; there is no exception text to describe it.
    assert timeout_call.attributes is not None and timeout_result.attributes is not None
    assert timeout_call.attributes["error.type"] == "timeout"
    assert timeout_result.attributes["error.type"] == "timeout"
    assert timeout_call.status.status_code is StatusCode.ERROR
    assert timeout_call.status.description is None

    assert [row[-1] for row in ledger_rows(pipeline.ledger, "conv-2")] == ["error", "error"]
    metrics = pipeline.metrics()
    assert number_points(metrics[OPEN]) == {TOOL_CALL: 0}
    assert histogram_counts(metrics[AGE]) == {
        _age_key("tool_call", "error", "book", "ValueError"): 1,
        _age_key("tool_call", "error", "book", "timeout"): 1,
    }


def test_an_abandonment_is_a_resolution_not_a_crash(pipeline: Pipeline) -> None:
    call = pipeline.recorder.call("deploy", "call_4", conversation_id="conv-3")
    call.abandon("user cancelled")
    # The first terminal resolution wins; later ones are ignored.
    call.result("too late")
    call.error(RuntimeError("too late"))
    assert call.resolved

    result_span, call_span = pipeline.spans()
    assert names([result_span, call_span]) == ["tool_result deploy", "execute_tool deploy"]
    assert call_span.attributes is not None
    assert call_span.attributes["compaction.obligation.status"] == "abandoned"
    assert "error.type" not in call_span.attributes
    assert [(e.name, dict(e.attributes or {})) for e in call_span.events] == [
        ("compaction.obligation.abandoned", {"compaction.abandon.reason": "user cancelled"})
    ]
    assert dict(result_span.attributes or {}) == {
        "gen_ai.tool.name": "deploy",
        "gen_ai.tool.call.id": "call_4",
        "gen_ai.conversation.id": "conv-3",
        "compaction.obligation.status": "abandoned",
        "compaction.abandon.reason": "user cancelled",
    }
    assert call_span.status.status_code is StatusCode.UNSET
    assert result_span.status.status_code is StatusCode.UNSET
    assert [link.context for link in result_span.links] == [call_span.context]

    assert ledger_rows(pipeline.ledger, "conv-3") == [
        ("tool_call", "call_4", "deploy", "conv-3", 0, "abandoned")
    ]
    metrics = pipeline.metrics()
    assert number_points(metrics[OPEN]) == {TOOL_CALL: 0}
    assert histogram_counts(metrics[AGE]) == {_age_key("tool_call", "abandoned", "deploy"): 1}


def test_parallel_calls_each_link_their_own_result_in_any_order(pipeline: Pipeline) -> None:
    tracer = pipeline.tracer_provider.get_tracer("agent-runtime")
    with tracer.start_as_current_span("invoke_agent planner") as turn:
        a = pipeline.recorder.call("weather", "call_a", conversation_id="conv-4")
        b = pipeline.recorder.call("flights", "call_b", conversation_id="conv-4")
        c = pipeline.recorder.call("hotels", "call_c", conversation_id="conv-4")
        assert number_points(pipeline.metrics()[OPEN]) == {TOOL_CALL: 3}
        assert [o.id for o in pipeline.ledger.open_obligations("conv-4")] == [
            "call_a",
            "call_b",
            "call_c",
        ]
        c.result("2 hotels")
        a.error(TimeoutError())
        assert [o.id for o in pipeline.ledger.open_obligations("conv-4")] == ["call_b"]
        b.result("3 flights")

    spans = pipeline.spans()
    assert names(spans) == [
        "tool_result hotels",
        "execute_tool hotels",
        "tool_result weather",
        "execute_tool weather",
        "tool_result flights",
        "execute_tool flights",
        "invoke_agent planner",
    ]
    call_spans = {
        s.attributes["gen_ai.tool.call.id"]: s
        for s in spans
        if s.name.startswith("execute_tool") and s.attributes is not None
    }
    for result_span in (s for s in spans if s.name.startswith("tool_result")):
        assert result_span.attributes is not None
        call_id = result_span.attributes["gen_ai.tool.call.id"]
        [link] = result_span.links
        assert link.context == call_spans[call_id].context
        assert dict(link.attributes or {}) == {"gen_ai.tool.call.id": call_id}
    # All of one turn: children of the agent span that was current.
    for span in spans[:-1]:
        assert span.parent == turn.get_span_context()
    assert len({s.context.span_id for s in spans if s.context is not None}) == 7
    assert ledger_rows(pipeline.ledger, "conv-4") == [
        ("tool_call", "call_a", "weather", "conv-4", 0, "error"),
        ("tool_call", "call_b", "flights", "conv-4", 1, "result"),
        ("tool_call", "call_c", "hotels", "conv-4", 2, "result"),
    ]
    metrics = pipeline.metrics()
    assert number_points(metrics[OPEN]) == {TOOL_CALL: 0}
    assert histogram_counts(metrics[AGE]) == {
        _age_key("tool_call", "result", "hotels"): 1,
        _age_key("tool_call", "error", "weather", "TimeoutError"): 1,
        _age_key("tool_call", "result", "flights"): 1,
    }


def test_a_transaction_is_an_obligation_from_begin_to_commit(pipeline: Pipeline) -> None:
    with pipeline.recorder.transaction("transfer", "txn_1", conversation_id="conv-5") as txn:
        assert txn.kind == "transaction" and txn.id == "txn_1"
        assert ledger_rows(pipeline.ledger, "conv-5") == [
            ("transaction", "txn_1", "transfer", "conv-5", 0, None)
        ]
        assert number_points(pipeline.metrics()[OPEN]) == {
            key({sc.OBLIGATION_KIND: "transaction"}): 1
        }
        assert pipeline.spans() == []
    with (
        pytest.raises(KeyError, match="account"),
        pipeline.recorder.transaction("refund", "txn_2", conversation_id="conv-5"),
    ):
        raise KeyError("account")

    commit, rollback = pipeline.spans()
    assert names([commit, rollback]) == [
        "compaction.transaction transfer",
        "compaction.transaction refund",
    ]
    assert commit.kind is SpanKind.INTERNAL
    assert dict(commit.attributes or {}) == {
        "compaction.obligation.kind": "transaction",
        "compaction.obligation.id": "txn_1",
        "gen_ai.conversation.id": "conv-5",
        "compaction.obligation.status": "result",
    }
    assert commit.status.status_code is StatusCode.UNSET
    assert dict(rollback.attributes or {}) == {
        "compaction.obligation.kind": "transaction",
        "compaction.obligation.id": "txn_2",
        "gen_ai.conversation.id": "conv-5",
        "compaction.obligation.status": "error",
        "error.type": "KeyError",
    }
    assert rollback.status.status_code is StatusCode.ERROR
    assert commit.events == () and rollback.events == ()
    assert ledger_rows(pipeline.ledger, "conv-5") == [
        ("transaction", "txn_1", "transfer", "conv-5", 0, "result"),
        ("transaction", "txn_2", "refund", "conv-5", 1, "error"),
    ]
    metrics = pipeline.metrics()
    assert number_points(metrics[OPEN]) == {key({sc.OBLIGATION_KIND: "transaction"}): 0}
    assert histogram_counts(metrics[AGE]) == {
        _age_key("transaction", "result"): 1,
        _age_key("transaction", "error", error_type="KeyError"): 1,
    }


def test_a_retry_chain_stays_open_until_an_attempt_succeeds(pipeline: Pipeline) -> None:
    chain = pipeline.recorder.retry_chain("fetch", "retry_1", conversation_id="conv-6")
    chain.attempt_failed(TimeoutError("slow"))
    chain.attempt_failed("rate_limited")
    assert chain.attempts == 2
    assert ledger_rows(pipeline.ledger, "conv-6") == [
        ("retry", "retry_1", "fetch", "conv-6", 0, None)
    ]
    assert number_points(pipeline.metrics()[OPEN]) == {key({sc.OBLIGATION_KIND: "retry"}): 1}
    chain.succeeded()
    chain.abandon("ignored: already closed")

    given_up = pipeline.recorder.retry_chain("upload", "retry_2", conversation_id="conv-6")
    given_up.attempt_failed()
    given_up.abandon("quota exhausted")

    succeeded, abandoned = pipeline.spans()
    assert names([succeeded, abandoned]) == ["compaction.retry fetch", "compaction.retry upload"]
    assert succeeded.kind is SpanKind.INTERNAL
    assert dict(succeeded.attributes or {}) == {
        "compaction.obligation.kind": "retry",
        "compaction.obligation.id": "retry_1",
        "gen_ai.conversation.id": "conv-6",
        "compaction.retry.attempt": 3,
        "compaction.obligation.status": "result",
    }
    assert [(e.name, dict(e.attributes or {})) for e in succeeded.events] == [
        ("compaction.retry.attempt", {"compaction.retry.attempt": 1, "error.type": "TimeoutError"}),
        ("compaction.retry.attempt", {"compaction.retry.attempt": 2, "error.type": "rate_limited"}),
    ]
    assert succeeded.status.status_code is StatusCode.UNSET
    assert dict(abandoned.attributes or {}) == {
        "compaction.obligation.kind": "retry",
        "compaction.obligation.id": "retry_2",
        "gen_ai.conversation.id": "conv-6",
        "compaction.obligation.status": "abandoned",
    }
    assert [(e.name, dict(e.attributes or {})) for e in abandoned.events] == [
        ("compaction.retry.attempt", {"compaction.retry.attempt": 1, "error.type": "_OTHER"}),
        ("compaction.obligation.abandoned", {"compaction.abandon.reason": "quota exhausted"}),
    ]
    assert abandoned.status.status_code is StatusCode.UNSET
    assert ledger_rows(pipeline.ledger, "conv-6") == [
        ("retry", "retry_1", "fetch", "conv-6", 0, "result"),
        ("retry", "retry_2", "upload", "conv-6", 1, "abandoned"),
    ]
    metrics = pipeline.metrics()
    assert number_points(metrics[OPEN]) == {key({sc.OBLIGATION_KIND: "retry"}): 0}
    assert histogram_counts(metrics[AGE]) == {
        _age_key("retry", "result"): 1,
        _age_key("retry", "abandoned"): 1,
    }


def test_a_foreign_tool_span_records_one_age_with_its_tool_and_error_type(
    pipeline: Pipeline,
) -> None:
    tracer = pipeline.tracer_provider.get_tracer("vendor.agents", "2.0")

    def foreign(call_id: str, error_type: str | None, failed: bool) -> None:
        span = tracer.start_span(
            "execute_tool fetch",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "fetch",
                "gen_ai.tool.call.id": call_id,
                "gen_ai.conversation.id": "conv-7",
            },
        )
        if error_type is not None:
            span.set_attribute("error.type", error_type)
        if failed:
            span.set_status(StatusCode.ERROR)
        span.end()

    foreign("f1", None, failed=False)
    foreign("f2", "TimeoutError", failed=True)
    foreign("f3", None, failed=True)  # failed, but no type given: the semconv fallback

    assert [row[-1] for row in ledger_rows(pipeline.ledger, "conv-7")] == [
        "result",
        "error",
        "error",
    ]
    assert histogram_counts(pipeline.metrics()[AGE]) == {
        _age_key("tool_call", "result", "fetch"): 1,
        _age_key("tool_call", "error", "fetch", "TimeoutError"): 1,
        _age_key("tool_call", "error", "fetch", "_OTHER"): 1,
    }
