"""The real ``openai`` client, auto-instrumented, against the loopback fake of the OpenAI APIs.

Chat Completions and Responses, sync and async, as JSON and as server-sent event streams
(``create(stream=True)`` and the SDK's ``.stream()`` helpers): the calls the model emits open
obligations whose spans link to the request that emitted them; results sent in a later request
resolve them (result spans linked to the call spans); a compaction that cuts an open call, a
result whose call is gone and a repeated call are detected as span events and metrics. Around
that: streams pass through unchanged and finish their bookkeeping however they end, the SDK's
exceptions pass through unchanged, internal failures never reach the application, and
``uninstrument`` restores the SDK.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

import pytest
from fake_llm_server import (
    Api,
    FakeLLMServer,
    ToolCall,
)
from instrumentation_harness import (
    MODEL,
    SYSTEM,
    USER,
    Agent,
    Instrumented,
    Mode,
    ScenarioIds,
    Style,
    expected_scenario,
    request_spans,
    run_compaction_scenario,
    scenario_summary,
)
from llm_clients import async_openai_client, openai_client
from opentelemetry.trace import StatusCode

from otel_compaction import conversation
from otel_compaction.instrumentation import CompactionInstrumentor
from otel_compaction.instrumentation.conversation import derived_id
from otel_compaction.telemetry import semconv as sc

try:
    import openai
    from openai.resources.chat.completions import Completions
except ImportError:  # the ``instrumented`` fixture skips, or fails under CI
    pass

MESSAGES: Any = [{"role": "user", "content": USER}]

IDS = ScenarioIds(restart="call_restart_1", check="call_check_1", again="call_restart_2")


@pytest.mark.parametrize("style", ["json", "stream", "helper"])
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_calls_results_and_compaction_damage_are_recorded(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer, api: Api, mode: Mode, style: Style
) -> None:
    agent = Agent(fake_llm_server, api, mode, style)

    run_compaction_scenario(agent, instrumented, IDS)

    assert scenario_summary(instrumented) == expected_scenario(api, IDS, streamed=style != "json")
    # Alone, each request is otel-compaction's own span, and it is the chat span.
    requests = request_spans(instrumented.spans())
    assert [s.name for s in requests] == ["compaction.model_request"] * 4
    assert fake_llm_server.pending() == 0


# -- streams ----------------------------------------------------------------------------------


def _chunks(server: FakeLLMServer, api: Api) -> list[Any]:
    server.enqueue(api, "All good.", tool_calls=[ToolCall("search", {"q": "oslo"}, id="call_s1")])
    with openai_client(server) as client:
        if api == "chat":
            stream: Any = client.chat.completions.create(
                model=MODEL, messages=MESSAGES, stream=True
            )
        else:
            stream = client.responses.create(model=MODEL, input=USER, stream=True)
        with stream:
            return [chunk.model_dump() for chunk in stream]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_streams_pass_every_chunk_through_unchanged(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer, api: Api
) -> None:
    observed = _chunks(fake_llm_server, api)
    [call] = instrumented.pipeline.ledger.open_obligations()
    assert (call.id, call.name) == ("call_s1", "search")
    instrumented.instrumentor.uninstrument()
    plain = _chunks(fake_llm_server, api)
    instrumented.instrumentor.instrument(telemetry=instrumented.pipeline.telemetry)

    def stable(chunks: list[Any]) -> str:  # ids and timestamps differ per request
        text = json.dumps(chunks, sort_keys=True)
        text = re.sub(r'"(created|created_at|completed_at)": [0-9.]+', "", text)
        return re.sub(r"fake[-_][0-9]+", "fake", text)

    assert stable(observed) == stable(plain)
    assert len(observed) > 6  # fragments of text and arguments, not one blob


def test_the_stream_proxy_is_the_sdk_stream_to_the_application(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    fake_llm_server.enqueue("chat", "Hi.")
    with openai_client(fake_llm_server) as client:
        stream: Any = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        assert isinstance(stream, openai.Stream)
        assert stream.response.status_code == 200  # attributes are the stream's
        first = next(stream)  # ``next`` and ``for`` share one iterator
        rest = list(stream)
    assert first.choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in rest if c.choices) == "Hi."
    [span] = request_spans(instrumented.spans())
    assert span.attributes is not None
    assert span.attributes[sc.RESPONSE_TOOL_CALLS] == 0


@pytest.mark.parametrize("how", ["close", "with", "break"])
def test_a_stream_closed_early_ends_its_span_and_opens_nothing(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer, how: str
) -> None:
    fake_llm_server.enqueue("chat", tool_calls=[ToolCall("search", {"q": "a long query"})])
    with openai_client(fake_llm_server) as client:
        stream: Any = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        if how == "close":
            next(stream)
            stream.close()
        elif how == "with":
            with stream:
                next(stream)
        else:
            for _ in stream:
                break
            del stream  # the application drops it unread

    [span] = request_spans(instrumented.spans())
    assert span.attributes is not None
    assert span.attributes[sc.RESPONSE_TOOL_CALLS] == 0  # the response never completed
    assert instrumented.pipeline.ledger.open_obligations() == ()


def test_an_async_stream_closed_early_ends_its_span(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    fake_llm_server.enqueue("responses", tool_calls=[ToolCall("search", {"q": "a long query"})])

    async def read_one() -> str:
        async with async_openai_client(fake_llm_server) as client:
            stream = await client.responses.create(model=MODEL, input=USER, stream=True)
            async with stream:
                async for event in stream:
                    return str(event.type)
        return ""

    assert asyncio.run(read_one()) == "response.created"
    [span] = request_spans(instrumented.spans())
    assert span.attributes is not None
    assert span.attributes[sc.RESPONSE_TOOL_CALLS] == 0
    assert instrumented.pipeline.ledger.open_obligations() == ()


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sdk_errors_pass_through_unchanged(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer, mode: Mode
) -> None:
    fake_llm_server.enqueue_error("chat", 429, "slow down", type="rate_limit_error")

    async def ask_async() -> None:
        async with async_openai_client(fake_llm_server) as client:
            await client.chat.completions.create(model=MODEL, messages=MESSAGES)

    with pytest.raises(openai.RateLimitError, match="slow down") as raised:
        if mode == "sync":
            with openai_client(fake_llm_server) as client:
                client.chat.completions.create(model=MODEL, messages=MESSAGES)
        else:
            asyncio.run(ask_async())

    assert type(raised.value) is openai.RateLimitError
    [span] = request_spans(instrumented.spans())
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes[sc.ERROR_TYPE] == "RateLimitError"
    assert sc.RESPONSE_TOOL_CALLS not in span.attributes


def test_internal_failures_never_reach_the_application(
    instrumented: Instrumented,
    fake_llm_server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from otel_compaction.instrumentation import _openai, _runtime

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("instrumentation bug")

    monkeypatch.setattr(_runtime.Runtime, "_begin", broken)
    fake_llm_server.enqueue("chat", "first")
    fake_llm_server.enqueue("chat", tool_calls=[ToolCall("search", {"q": "x"}, id="call_x")])
    with caplog.at_level(logging.ERROR), openai_client(fake_llm_server) as client:
        completion = client.chat.completions.create(model=MODEL, messages=MESSAGES)
        monkeypatch.undo()
        monkeypatch.setattr(_openai._ChatStream, "add", broken)
        with client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True) as chunks:
            streamed = list(chunks)

    assert completion.choices[0].message.content == "first"
    calls = [c for chunk in streamed for c in (chunk.choices[0].delta.tool_calls or [])]
    assert calls[0].id == "call_x"  # every chunk still arrived
    logged = [r.getMessage() for r in caplog.records]
    assert "otel-compaction: recording a model request failed" in logged
    assert "otel-compaction: reading a streamed chunk failed" in logged


# -- conversation identity --------------------------------------------------------------------


def _conversation_of(span: Any) -> tuple[Any, Any]:
    attributes = span.attributes or {}
    return attributes.get(sc.GEN_AI_CONVERSATION_ID), attributes.get(sc.CONVERSATION_SOURCE)


def test_an_explicit_scope_or_baggage_names_the_conversation(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    from opentelemetry import baggage
    from opentelemetry import context as otel_context

    agent = Agent(fake_llm_server, "chat")
    agent.script(ToolCall("search", {"q": "x"}, id="call_1"))
    with conversation("support-4711"):
        agent.ask()
    agent.script(text="ok")
    token = otel_context.attach(baggage.set_baggage(sc.GEN_AI_CONVERSATION_ID, "upstream-9"))
    try:
        agent.ask()
    finally:
        otel_context.detach(token)
    other = Agent(fake_llm_server, "chat", user="Another task.")
    other.script(text="ok")
    other.ask()

    assert [_conversation_of(s) for s in request_spans(instrumented.spans())] == [
        ("support-4711", "explicit"),
        ("upstream-9", "baggage"),
        (derived_id(SYSTEM, "Another task."), "derived"),
    ]
    [call] = instrumented.pipeline.ledger.open_obligations()
    assert call.conversation_id == "support-4711"


def test_a_compactor_rewriting_the_first_messages_keeps_the_conversation(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    agent = Agent(fake_llm_server, "chat")
    agent.script(ToolCall("search", {"q": "x"}, id="call_1"))
    agent.ask()
    agent.script(ToolCall("fetch", {"id": 1}, id="call_2"))
    agent.history.append(agent.result("call_1", "found 1"))
    agent.ask()
    # The compactor rewrote the first user message too; the open call is kept verbatim.
    agent.history[:3] = [agent.user("Summary: search found 1; fetching it.")]
    agent.history.append(agent.result("call_2", "fetched"))
    agent.script(text="Done.")
    agent.ask()
    agent.script(text="And again.")
    agent.ask()  # the rewritten form is remembered

    original = derived_id(SYSTEM, USER)
    assert [_conversation_of(s) for s in request_spans(instrumented.spans())] == [
        (original, "derived"),
        (original, "derived"),
        (original, "continued"),
        (original, "continued"),
    ]
    assert [
        (o.id, o.status) for o in instrumented.pipeline.ledger.snapshot(original).obligations
    ] == [
        ("call_1", "result"),
        ("call_2", "result"),
    ]


def test_responses_chained_by_previous_response_id(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    fake_llm_server.enqueue("responses", tool_calls=[ToolCall("search", {"q": "x"}, id="call_1")])
    fake_llm_server.enqueue("responses", tool_calls=[ToolCall("fetch", {"n": 1}, id="call_2")])
    fake_llm_server.enqueue("responses", "Done.")
    with openai_client(fake_llm_server) as client:
        first = client.responses.create(model=MODEL, instructions=SYSTEM, input=USER)
        # Only the new items: the provider keeps the history, so nothing is severed or orphaned.
        second = client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": "call_1", "output": "found"}],
        )
        client.responses.create(
            model=MODEL,
            conversation="conv_provider_1",
            input=[{"type": "function_call_output", "call_id": "call_2", "output": "fetched"}],
        )
    assert second.output[0].type == "function_call"

    spans = request_spans(instrumented.spans())
    original = derived_id(SYSTEM, USER)
    assert [_conversation_of(s) for s in spans] == [
        (original, "derived"),
        (original, "provider"),
        ("conv_provider_1", "provider"),
    ]
    assert [list(s.events) for s in spans] == [[], [], []]
    ledger = instrumented.pipeline.ledger
    assert [(o.id, o.status) for o in ledger.snapshot(original).obligations] == [
        ("call_1", "result"),
        ("call_2", None),  # its result went to another conversation
    ]


# -- settings ---------------------------------------------------------------------------------


def test_content_capture_puts_arguments_and_results_on_the_spans(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sc.CAPTURE_CONTENT_ENV, "true")
    agent = Agent(fake_llm_server, "chat")
    agent.script(ToolCall("search", {"q": "Oslo"}, id="call_1"))
    agent.ask()
    agent.history.append(agent.result("call_1", "2 flights"))
    agent.script(text="ok")
    agent.ask()

    call = instrumented.pipeline.span("execute_tool search")
    result = instrumented.pipeline.span("tool_result search")
    assert (call.attributes or {})[sc.GEN_AI_TOOL_CALL_ARGUMENTS] == '{"q":"Oslo"}'
    assert (result.attributes or {})[sc.GEN_AI_TOOL_CALL_RESULT] == "2 flights"


def test_detection_switched_off_still_tracks_obligations(
    fake_llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from telemetry_harness import make_pipeline

    monkeypatch.setenv(sc.DETECTION_ENV, "false")
    pipeline = make_pipeline()
    instrumentor = CompactionInstrumentor()
    instrumentor.instrument(telemetry=pipeline.telemetry)
    try:
        run_compaction_scenario(
            Agent(fake_llm_server, "chat"), Instrumented(instrumentor, pipeline), IDS
        )
    finally:
        instrumentor.uninstrument()
    summary = scenario_summary(Instrumented(instrumentor, pipeline))
    assert [r["events"] for r in summary["requests"]] == [[], [], [], []]
    assert summary["detections"] == {}
    assert [row[2] for row in summary["ledger"]] == ["result", "result", "result"]


def test_policy_from_the_environment_and_a_bad_one(
    fake_llm_server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from telemetry_harness import make_pipeline

    pipeline = make_pipeline()
    instrumentor = CompactionInstrumentor()
    monkeypatch.setenv(sc.POLICY_ENV, "strict")
    instrumentor.instrument(telemetry=pipeline.telemetry)
    try:
        gate = instrumentor.gate
        assert gate is not None
        assert gate.policy.name == "strict"
        assert gate.ledger is pipeline.ledger
        decision = gate.evaluate([{"role": "user", "content": "hi"}], 0, 1, raise_on_refuse=False)
        assert decision.policy == "strict"
        assert (pipeline.span(sc.EVALUATE_SPAN).attributes or {})[sc.POLICY] == "strict"
    finally:
        instrumentor.uninstrument()
    assert instrumentor.gate is None

    monkeypatch.setenv(sc.POLICY_ENV, "/no/such/policy.yaml")
    with caplog.at_level(logging.ERROR):
        instrumentor.instrument(telemetry=pipeline.telemetry)
    try:
        gate = instrumentor.gate
        assert gate is not None
        assert gate.policy.name == "default"
        assert "cannot be loaded; using 'default'" in caplog.text
    finally:
        instrumentor.uninstrument()


# -- instrument and uninstrument ---------------------------------------------------------------


def test_uninstrument_restores_the_sdk_and_abandons_open_calls(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    assert hasattr(Completions.__dict__["create"], "__wrapped__")
    original = Completions.__dict__["create"].__wrapped__
    agent = Agent(fake_llm_server, "chat")
    agent.script(ToolCall("search", {"q": "x"}, id="call_1"))
    agent.ask()

    instrumented.instrumentor.uninstrument()

    assert Completions.__dict__["create"] is original
    call = instrumented.pipeline.span("execute_tool search")
    assert (call.attributes or {})[sc.OBLIGATION_STATUS] == "abandoned"
    assert [(e.name, dict(e.attributes or {})) for e in call.events] == [
        (sc.EVENT_ABANDONED, {sc.ABANDON_REASON: "uninstrumented"})
    ]
    agent.script(text="ok")
    agent.ask()  # no longer recorded
    assert len(request_spans(instrumented.spans())) == 1
    instrumented.instrumentor.instrument(telemetry=instrumented.pipeline.telemetry)


def test_instrumenting_twice_wraps_once(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        CompactionInstrumentor().instrument(telemetry=instrumented.pipeline.telemetry)
    assert "Attempting to instrument while already instrumented" in caplog.text
    agent = Agent(fake_llm_server, "chat")
    agent.script(text="ok")
    agent.ask()
    assert len(request_spans(instrumented.spans())) == 1


def test_raw_responses_and_parse_keep_working(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    fake_llm_server.enqueue("chat", "raw")
    fake_llm_server.enqueue("chat", tool_calls=[ToolCall("search", {"q": "x"}, id="call_p")])
    fake_llm_server.enqueue("responses", tool_calls=[ToolCall("fetch", {"n": 1}, id="call_r")])
    with openai_client(fake_llm_server) as client:
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES)
        parsed = client.chat.completions.parse(model=MODEL, messages=MESSAGES)
        response = client.responses.parse(model=MODEL, input="other task")

    assert raw.parse().choices[0].message.content == "raw"  # the body is the caller's to read
    assert [call.id for call in parsed.choices[0].message.tool_calls or []] == ["call_p"]
    assert [item.type for item in response.output] == ["function_call"]
    assert [
        (s.attributes or {}).get(sc.RESPONSE_TOOL_CALLS)
        for s in request_spans(instrumented.spans())
    ] == [
        None,  # a raw response is not read by the instrumentation
        1,
        1,
    ]
    calls = instrumented.pipeline.ledger.open_obligations()
    assert sorted(call.id for call in calls) == ["call_p", "call_r"]


def test_concurrent_conversations_keep_their_own_obligations(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    for n in range(8):
        fake_llm_server.enqueue("chat", tool_calls=[ToolCall("search", {"n": n}, id=f"call_{n}")])

    def converse(n: int) -> None:
        with conversation(f"conv-{n}"):
            Agent(fake_llm_server, "chat").ask()

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(converse, range(8)))

    ledger = instrumented.pipeline.ledger
    assert sorted(ledger.conversations()) == sorted(f"conv-{n}" for n in range(8))
    for n in range(8):
        [call] = ledger.open_obligations(f"conv-{n}")
        assert call.name == "search"


# -- the stream proxy on its own -----------------------------------------------------------------


class _Outcome:
    """A finisher that records how the stream ended."""

    def __init__(self) -> None:
        self.ended: list[Any] = []

    def respond(self, response: Any) -> None:
        self.ended.append(("respond", response))

    def fail(self, error: BaseException) -> None:
        self.ended.append(("fail", type(error).__name__))


class _Observer:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def add(self, chunk: Any) -> None:
        self.seen.append(chunk)

    def response(self) -> Any:
        return tuple(self.seen)


class _FakeStream:
    """Yields 1, 2, then raises (or ends); records close()."""

    def __init__(self, fail: bool) -> None:
        self.fail, self.closed = fail, 0

    def __iter__(self) -> Any:
        yield 1
        yield 2
        if self.fail:
            raise ConnectionResetError("peer went away")

    def __enter__(self) -> _FakeStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.closed += 1


def test_a_stream_that_fails_midway_passes_the_error_through_once() -> None:
    from otel_compaction.instrumentation._streams import TracedStream

    outcome, observer = _Outcome(), _Observer()
    wrapped = _FakeStream(fail=True)
    stream = TracedStream(wrapped, observer, outcome)
    seen: list[int] = []
    with pytest.raises(ConnectionResetError, match="peer went away"), stream as entered:
        assert entered is stream
        seen.extend(stream)

    assert seen == [1, 2] == observer.seen
    assert outcome.ended == [("fail", "ConnectionResetError")]  # once, though closed after
    assert wrapped.closed == 1


def test_an_async_stream_ends_once_when_read_to_the_end_and_closed() -> None:
    from otel_compaction.instrumentation._streams import AsyncTracedStream

    class Chunks:
        closed = 0

        async def __aiter__(self) -> Any:
            for n in (1, 2, 3):
                yield n

        async def __aenter__(self) -> Chunks:
            return self

        async def __aexit__(self, *exc: Any) -> None:
            await self.close()

        async def close(self) -> None:
            Chunks.closed += 1

    outcome, observer = _Outcome(), _Observer()

    async def read() -> list[int]:
        async with AsyncTracedStream(Chunks(), observer, outcome) as stream:
            first = await stream.__anext__()
            return [first] + [n async for n in stream]

    assert asyncio.run(read()) == [1, 2, 3]
    assert outcome.ended == [("respond", (1, 2, 3))]
    assert Chunks.closed == 1


def test_settings_apply_to_the_telemetry_it_configures(
    fake_llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    # Providers "installed" by auto-instrumentation, without touching this process's globals.
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: tracer_provider)
    monkeypatch.setattr(metrics, "get_meter_provider", lambda: meter_provider)
    monkeypatch.setenv(sc.AGENT_NAME_ENV, "fleet-operator")
    monkeypatch.delenv(sc.CAPTURE_CONTENT_ENV, raising=False)
    instrumentor = CompactionInstrumentor()
    instrumentor.instrument()
    try:
        first = instrumentor.telemetry
        assert first is not None
        assert first.tracer_provider is tracer_provider  # attached, not replaced
        instrumentor.uninstrument()
        instrumentor.instrument()
        assert instrumentor.telemetry is first  # the same ledger: no second processor
        agent = Agent(fake_llm_server, "chat")
        agent.script(ToolCall("search", {"q": "x"}, id="call_1"))
        agent.ask()
    finally:
        instrumentor.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()

    [call] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool search"]
    assert (call.attributes or {})[sc.GEN_AI_AGENT_NAME] == "fleet-operator"
    assert (call.attributes or {})[sc.OBLIGATION_STATUS] == "abandoned"


def test_a_loop_inside_agent_run_is_one_trace(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    """A plain SDK loop in `agent_run`: its model requests and the calls they emit are
    children of the run's ``invoke_agent`` span, with the run's conversation."""
    from otel_compaction.instrumentation import agent_run

    client = openai_client(fake_llm_server)
    fake_llm_server.enqueue("chat", tool_calls=[ToolCall("restart", {"service": "web"}, id="c1")])
    fake_llm_server.enqueue("chat", "Restarted.")
    tracer_provider = instrumented.pipeline.telemetry.tracer_provider
    messages: list[Any] = [{"role": "user", "content": "Restart web."}]
    with agent_run("ops", conversation_id="conv-loop", tracer_provider=tracer_provider):
        first = client.chat.completions.create(model=MODEL, messages=messages)
        [call] = first.choices[0].message.tool_calls or []
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "ok"},
        ]
        client.chat.completions.create(model=MODEL, messages=messages)
    [run] = instrumented.spans("invoke_agent ops")
    assert run.context is not None
    others = [s for s in instrumented.spans() if s is not run]
    assert {s.name for s in others} >= {"compaction.model_request", "execute_tool restart"}
    for span in others:
        assert span.context is not None and span.context.trace_id == run.context.trace_id
    requests = instrumented.spans("compaction.model_request")
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in requests)
    assert {(s.attributes or {}).get(sc.GEN_AI_CONVERSATION_ID) for s in requests} == {"conv-loop"}
