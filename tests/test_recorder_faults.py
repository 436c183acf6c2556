"""The recorder never raises into the host: not with a ledger whose ``open`` or ``resolve``
raises, nor with spans that raise (an SDK span processor that fails), nor with a metrics
listener that raises. The host sees only its own results and exceptions, each tool's side effect
runs exactly once, and the fault is logged, with no content in the message."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import Span as SdkSpan
from telemetry_harness import Pipeline, ledger_rows, make_pipeline, names

from otel_compaction import ToolCallRecorder
from otel_compaction.ledger import Obligation, ObligationLedger

MARKER = "content-7f3a"  # arguments and results: never in a log message
LOG_LINE = re.compile(r"^otel-compaction: [a-z' -]+ failed$")


class FailingLedger(ObligationLedger):
    """A ledger whose `open` or `resolve` raises."""

    def __init__(self, failing: str) -> None:
        super().__init__()
        self.failing = failing

    def open(self, *args: Any, **kwargs: Any) -> Obligation:
        if self.failing == "open":
            raise RuntimeError("the ledger cannot open")
        return super().open(*args, **kwargs)

    def resolve(self, *args: Any, **kwargs: Any) -> Obligation | None:
        if self.failing == "resolve":
            raise RuntimeError("the ledger cannot resolve")
        return super().resolve(*args, **kwargs)


class FailingProcessor(SpanProcessor):
    """A span processor that raises: the SDK lets it out of `start_span` and `end`."""

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        raise RuntimeError("the span processor cannot start")

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("the span processor cannot end")


class FailingInstrument:
    """A metric instrument whose every recording raises."""

    def record(self, *args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError("the histogram cannot record")

    def add(self, *args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError("the counter cannot add")


FAULTS = ["ledger open", "ledger resolve", "span processor", "metrics listener"]


@pytest.fixture(name="faulty", params=FAULTS)
def faulty_fixture(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Pipeline]:
    """A configured pipeline with one internal fault."""
    fault: str = request.param
    ledger = FailingLedger(fault.removeprefix("ledger ")) if fault.startswith("ledger") else None
    pipeline = make_pipeline(ledger=ledger, capture_content=False)
    if fault == "span processor":
        pipeline.tracer_provider.add_span_processor(FailingProcessor())
    if fault == "metrics listener":
        monkeypatch.setattr(pipeline.telemetry.metrics, "obligation_age", FailingInstrument())
        monkeypatch.setattr(pipeline.telemetry.metrics, "ledger_overflow", FailingInstrument())
    yield pipeline
    pipeline.shutdown()


def _caught(run: Callable[[], object]) -> BaseException:
    try:
        run()
    except Exception as raised:
        return raised
    raise AssertionError("nothing was raised")


class Host:
    """An agent's work through every entry point of the recorder, keeping what it saw, what
    ran and the exceptions its own code raised."""

    def __init__(self, recorder: ToolCallRecorder) -> None:
        self.recorder = recorder
        self.ran = Counter[str]()
        self.raised: list[BaseException] = []

    def fail(self, error: BaseException) -> NoReturn:
        self.raised.append(error)
        raise error

    def run(self) -> list[object]:
        recorder, ran = self.recorder, self.ran

        @recorder.tool()
        def add(a: int, b: int) -> int:
            ran["add"] += 1
            return a + b

        @recorder.tool()
        def lookup(key: str) -> str:
            ran["lookup"] += 1
            self.fail(KeyError(key))

        @recorder.tool()
        async def fetch(url: str) -> int:
            ran["fetch"] += 1
            return len(url)

        @recorder.tool()
        async def parse(text: str) -> int:
            ran["parse"] += 1
            self.fail(ValueError(text))

        def failing_tool_call() -> None:
            with recorder.tool_call("rm", "c4", conversation_id="conv"):
                ran["rm"] += 1
                self.fail(PermissionError("read-only"))

        def failing_transaction() -> None:
            with recorder.transaction("refund", "txn_2", conversation_id="conv"):
                ran["refund"] += 1
                self.fail(LookupError("no such order"))

        seen: list[object] = [add(2, 3), _caught(lambda: lookup(MARKER))]
        seen += [
            asyncio.run(fetch("https://example.org")),
            _caught(lambda: asyncio.run(parse(MARKER))),
        ]
        call = recorder.call("search", "c1", conversation_id="conv", arguments={"q": MARKER})
        call.result(MARKER)
        call.error(ValueError(MARKER))
        call.abandon("stop")
        recorder.call("search", "c2", conversation_id="conv")
        seen.append(type(recorder.resolve("c2", MARKER, conversation_id="conv")))
        with recorder.tool_call("ls", "c3", conversation_id="conv"):
            ran["ls"] += 1
        seen.append(_caught(failing_tool_call))
        with recorder.transaction("transfer", "txn_1", conversation_id="conv"):
            ran["transfer"] += 1
        seen.append(_caught(failing_transaction))
        chain = recorder.retry_chain("deploy", "retry_1", conversation_id="conv")
        chain.attempt_failed(TimeoutError())
        chain.succeeded()
        return seen


def test_the_host_sees_only_its_own_results_and_exceptions(
    faulty: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    host = Host(faulty.recorder)
    with caplog.at_level(logging.ERROR, logger="otel_compaction"):
        seen = host.run()

    lookup_error, parse_error, rm_error, refund_error = host.raised
    assert seen == [
        5,
        lookup_error,
        19,
        parse_error,
        bool,
        rm_error,
        refund_error,
    ]
    # Each exception is the host's own, raised once, with nothing of ours chained to it.
    assert [type(e) for e in host.raised] == [KeyError, ValueError, PermissionError, LookupError]
    assert all(e.__context__ is None and e.__cause__ is None for e in host.raised)
    # Every side effect ran exactly once per invocation.
    assert host.ran == {
        "add": 1,
        "lookup": 1,
        "fetch": 1,
        "parse": 1,
        "ls": 1,
        "rm": 1,
        "transfer": 1,
        "refund": 1,
    }
    # The fault was logged, each line naming the step that failed and no content.
    messages = [record.getMessage() for record in caplog.records]
    assert messages
    assert [m for m in messages if not LOG_LINE.match(m)] == []
    assert all(record.exc_info is not None for record in caplog.records)


def _one_tool_call(pipeline: Pipeline, caplog: pytest.LogCaptureFixture) -> tuple[int, list[str]]:
    ran = Counter[str]()

    @pipeline.recorder.tool()
    def add(a: int, b: int) -> int:
        ran["add"] += 1
        return a + b

    with caplog.at_level(logging.ERROR, logger="otel_compaction"):
        value = add(2, 3)
    assert ran == {"add": 1}
    return value, [record.getMessage() for record in caplog.records]


def test_a_ledger_that_cannot_open_gives_a_handle_that_does_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pipeline = make_pipeline(ledger=FailingLedger("open"))
    assert _one_tool_call(pipeline, caplog) == (
        5,
        ["otel-compaction: recording a tool call failed"],
    )
    handle = pipeline.recorder.call("search", "c1", conversation_id="conv")
    assert handle.resolved  # nothing to resolve
    handle.result("late")
    assert pipeline.spans() == []
    assert not pipeline.recorder.resolve("c1", conversation_id="conv")
    pipeline.shutdown()


def test_a_ledger_that_cannot_resolve_still_ends_both_spans(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pipeline = make_pipeline(ledger=FailingLedger("resolve"))
    assert _one_tool_call(pipeline, caplog) == (
        5,
        ["otel-compaction: resolving a tool call in the ledger failed"],
    )
    assert names(pipeline.spans()) == ["tool_result add", "execute_tool add"]
    assert ledger_rows(pipeline.ledger, None) == [("tool_call", "call_1", "add", "", 0, None)]
    pipeline.shutdown()


def test_spans_that_raise_leave_the_ledger_right(caplog: pytest.LogCaptureFixture) -> None:
    pipeline = make_pipeline()
    pipeline.tracer_provider.add_span_processor(FailingProcessor())
    assert _one_tool_call(pipeline, caplog) == (
        5,
        [
            "otel-compaction: starting a tool-call span failed",
            "otel-compaction: recording a tool result span failed",
        ],
    )
    assert ledger_rows(pipeline.ledger, None) == [("tool_call", "call_1", "add", "", 0, "result")]
    pipeline.shutdown()


def test_a_metrics_listener_that_raises_leaves_the_call_recorded(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = make_pipeline()
    monkeypatch.setattr(pipeline.telemetry.metrics, "obligation_age", FailingInstrument())
    assert _one_tool_call(pipeline, caplog) == (5, ["otel-compaction: a ledger listener failed"])
    assert names(pipeline.spans()) == ["tool_result add", "execute_tool add"]
    assert ledger_rows(pipeline.ledger, None) == [("tool_call", "call_1", "add", "", 0, "result")]
    pipeline.shutdown()


@pytest.mark.parametrize(
    ("failing", "logged"),
    [
        ("open", ["otel-compaction: feeding the ledger from a started span failed"] * 2),
        (
            "resolve",
            [
                "otel-compaction: feeding the ledger from an ended span failed",
                "otel-compaction: abandoning an open span's obligation at shutdown failed",
            ],
        ),
    ],
)
def test_the_span_processor_callbacks_never_raise(
    failing: str, logged: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = make_pipeline(ledger=FailingLedger(failing))
    tracer = pipeline.tracer_provider.get_tracer("another-instrumentation")
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": "t1"}
    with caplog.at_level(logging.ERROR, logger="otel_compaction"):
        tracer.start_span("execute_tool lookup", attributes=attributes).end()
        tracer.start_span(
            "execute_tool lookup", attributes={**attributes, "gen_ai.tool.call.id": "t2"}
        )
        pipeline.tracer_provider.shutdown()  # the second span is still open
    assert [r.getMessage() for r in caplog.records] == logged
    pipeline.meter_provider.shutdown()
