"""LangChain v1 agents and LangGraph graphs, driven by langchain-core's fake chat models.

Real ``create_agent`` agents, a real ``StateGraph`` with ``ToolNode`` and real ``@tool`` tools:
the callback handler turns their tool calls into spans and ledger records; the guarded
summarization middleware extends or defers where the built-in ``SummarizationMiddleware``
cuts; the guard makes the built-in middleware obey the gate. Skips without langchain, and
fails instead when ``CI=true``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pytest
from frameworks import require_framework
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic import Field

from otel_compaction import (
    CompactionRefused,
    OpenObligationError,
    Telemetry,
    configure,
    conversation,
)
from otel_compaction.ledger import ObligationLedger
from otel_compaction.telemetry import semconv as sc
from otel_compaction.transcript import Transcript

try:
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentState, SummarizationMiddleware
    from langchain_core.callbacks import CallbackManagerForLLMRun
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        HumanMessage,
        RemoveMessage,
        SystemMessage,
        ToolMessage,
    )
    from langchain_core.messages import ToolCall as LcToolCall
    from langchain_core.outputs import ChatResult
    from langchain_core.runnables import Runnable, RunnableConfig
    from langchain_core.tools import ToolException, tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph.runtime import Runtime
    from langgraph.types import Command, interrupt

    from otel_compaction.integrations import langchain as lc
except ImportError as error:
    MISSING: ImportError | None = error
else:
    MISSING = None
require_framework(MISSING, "langchain>=1.0 (with langgraph)", "langchain")


# -- the fake model and the telemetry --------------------------------------------------------------


class ToolCallingFakeModel(GenericFakeChatModel):
    """langchain-core's fake chat model, able to "bind" tools (it answers from its script) and
    keeping every prompt it was sent."""

    prompts: list[list[BaseMessage]] = Field(default_factory=list)
    called_at: list[int] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, AIMessage]:
        """The script already holds the tool calls; binding changes nothing."""
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.prompts.append(list(messages))
        self.called_at.append(time.time_ns())
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def scripted(*replies: AIMessage | str) -> ToolCallingFakeModel:
    """A fake model answering with `replies`, in order."""
    return ToolCallingFakeModel(messages=iter(replies), prompts=[], called_at=[])


def call(call_id: str, name: str, **args: Any) -> LcToolCall:
    """One tool call as a model emits it."""
    return LcToolCall(name=name, args=args, id=call_id, type="tool_call")


def calls(*emitted: LcToolCall) -> AIMessage:
    """An assistant message emitting `emitted`."""
    return AIMessage(content="", tool_calls=list(emitted))


@dataclass
class Pipeline:
    """`configure()` over in-memory exporters."""

    exporter: InMemorySpanExporter
    telemetry: Telemetry

    @property
    def ledger(self) -> ObligationLedger:
        """The configured ledger."""
        return self.telemetry.ledger

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        """Finished spans whose name starts with `prefix`, in the order they ended."""
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def span(self, name: str) -> ReadableSpan:
        """The one finished span called `name`."""
        found = [s for s in self.spans() if s.name == name]
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]

    def decisions(self) -> list[dict[str, Any]]:
        """Every gate decision, as the attributes of its ``compaction.evaluate`` span."""
        return [dict(s.attributes or {}) for s in self.spans(sc.EVALUATE_SPAN)]

    def rows(self, conversation_id: str) -> list[tuple[str, str, str, str | None]]:
        """(kind, id, name, status) of a conversation's ledger records, in opening order."""
        return [
            (o.kind, o.id, o.name, o.status)
            for o in self.ledger.snapshot(conversation_id).obligations
        ]


@pytest.fixture(name="pipeline")
def pipeline_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    """Fresh in-memory providers, content capture on, nothing installed globally; whatever a
    test instruments or guards is undone after it."""
    monkeypatch.setenv(sc.CAPTURE_CONTENT_ENV, "true")
    monkeypatch.delenv(lc.GUARD_SUMMARIZATION_ENV, raising=False)
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    telemetry = configure(
        tracer_provider=tracer_provider, meter_provider=meter_provider, set_global=False
    )
    yield Pipeline(exporter, telemetry)
    lc.uninstrument()
    lc.unguard_builtin_summarization()
    tracer_provider.shutdown()
    meter_provider.shutdown()


# -- tools ---------------------------------------------------------------------------------------


@tool
def search_flights(destination: str) -> str:
    """Search flights to a destination."""
    return f"2 flights to {destination} on Saturday"


@tool
def book_flight(flight: str) -> str:
    """Book a flight."""
    raise ToolException(f"fare for {flight} expired")


book_flight.handle_tool_error = True  # the failure becomes a ToolMessage with status="error"


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key}=42"


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


_deploy_attempts: list[str] = []


@tool
def deploy(build: str) -> str:
    """Deploy a build to staging; the first attempt times out."""
    _deploy_attempts.append(build)
    if len(_deploy_attempts) % 2 == 1:
        raise ToolException("deploy timed out, try again")
    return f"build {build} deployed to staging"


deploy.handle_tool_error = True


@tool
def restart(host: str) -> str:
    """Restart a host."""
    return f"{host} restarted"


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _before_model(
    middleware: lc.GuardedSummarizationMiddleware, messages: list[AnyMessage]
) -> dict[str, Any] | None:
    """The middleware's hook, called as the agent calls it (the runtime is not read)."""
    return middleware.before_model(
        cast("AgentState[Any]", {"messages": messages}), cast("Runtime[Any]", None)
    )


def _sequence(attributes: Mapping[str, Any] | None, key: str) -> list[Any]:
    value = (attributes or {})[key]
    assert isinstance(value, (list, tuple)), value
    return list(value)


# -- the callback handler ----------------------------------------------------------------------


def test_agent_tool_calls_become_spans_and_ledger_records(pipeline: Pipeline) -> None:
    lc.instrument(pipeline.telemetry)
    model = scripted(
        calls(
            call("c1", "search_flights", destination="Oslo"),
            call("c2", "book_flight", flight="SK4711"),
        ),
        "No flight could be booked: the fare expired.",
    )
    agent = create_agent(model, tools=[search_flights, book_flight])

    out = agent.invoke(
        {"messages": [HumanMessage("Book me a flight to Oslo")]},
        {"configurable": {"thread_id": "trip-42"}},
    )

    assert [type(m).__name__ for m in out["messages"]] == [
        "HumanMessage", "AIMessage", "ToolMessage", "ToolMessage", "AIMessage",
    ]  # fmt: skip
    assert pipeline.rows("trip-42") == [
        ("tool_call", "c1", "search_flights", "result"),
        ("tool_call", "c2", "book_flight", "error"),
    ]
    assert pipeline.ledger.open_obligations() == ()
    assert sorted(s.name for s in pipeline.spans()) == [
        "execute_tool book_flight",
        "execute_tool search_flights",
        "invoke_agent LangGraph",
        "tool_result book_flight",
        "tool_result search_flights",
    ]
    # One trace: the graph's run span is the parent of its tool calls and results.
    run = pipeline.span("invoke_agent LangGraph")
    assert _attrs(run)[sc.GEN_AI_CONVERSATION_ID] == "trip-42"
    assert all(
        s.parent is not None and s.parent.span_id == run.context.span_id
        for s in pipeline.spans()
        if s is not run
    )
    search = pipeline.span("execute_tool search_flights")
    assert _attrs(search) == {
        sc.GEN_AI_OPERATION_NAME: "execute_tool",
        sc.GEN_AI_TOOL_NAME: "search_flights",
        sc.GEN_AI_TOOL_CALL_ID: "c1",
        sc.GEN_AI_TOOL_TYPE: "function",
        sc.GEN_AI_CONVERSATION_ID: "trip-42",
        sc.GEN_AI_TOOL_CALL_ARGUMENTS: '{"destination": "Oslo"}',
        sc.OBLIGATION_STATUS: "result",
    }
    result = pipeline.span("tool_result search_flights")
    assert _attrs(result)[sc.GEN_AI_TOOL_CALL_RESULT] == "2 flights to Oslo on Saturday"
    assert [link.context.span_id for link in result.links] == [search.context.span_id]
    assert dict(result.links[0].attributes or {}) == {sc.GEN_AI_TOOL_CALL_ID: "c1"}
    booking = pipeline.span("execute_tool book_flight")
    assert _attrs(booking)[sc.OBLIGATION_STATUS] == "error"
    assert _attrs(booking)[sc.ERROR_TYPE] == "_OTHER"
    assert booking.status.status_code == StatusCode.ERROR
    failed = pipeline.span("tool_result book_flight")
    assert _attrs(failed)[sc.GEN_AI_TOOL_CALL_RESULT] == "fare for SK4711 expired"
    # Opened from the model's response, resolved when the tools returned: before the model
    # was called again.
    first_call, second_call = model.called_at
    for span in (search, result, booking, failed):
        assert span.start_time is not None and span.end_time is not None
        assert first_call < span.start_time <= span.end_time < second_call


def test_langgraph_tool_node_errors_and_results_written_without_a_tool_run(
    pipeline: Pipeline,
) -> None:
    """A tool that raises (ToolNode turns it into an error ToolMessage) is an error of type
    ValueError; a call ToolNode answers itself (an unknown tool: no tool run, no callback) is
    resolved from its ToolMessage when the model is next called; the conversation comes from
    the scope when the graph has no thread."""
    model = scripted(
        calls(
            call("c1", "lookup", key="region"),
            call("c2", "explode", reason="disk full"),
            call("c3", "delete_everything"),
        ),
        "region=42; the rest failed.",
    )
    bound = model.bind_tools([lookup, explode])

    def agent_node(state: MessagesState) -> dict[str, list[AnyMessage]]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent_node)
    graph.add_node("tools", ToolNode([lookup, explode], handle_tool_errors=True))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    app = graph.compile()
    handler = lc.ObligationCallbackHandler(pipeline.telemetry.recorder)

    with conversation("ops-7"):
        out = app.invoke({"messages": [HumanMessage("clean up")]}, {"callbacks": [handler]})

    statuses = {m.tool_call_id: m.status for m in out["messages"] if isinstance(m, ToolMessage)}
    assert statuses == {"c1": "success", "c2": "error", "c3": "error"}
    assert pipeline.rows("ops-7") == [
        ("tool_call", "c1", "lookup", "result"),
        ("tool_call", "c2", "explode", "error"),
        ("tool_call", "c3", "delete_everything", "error"),
    ]
    assert pipeline.ledger.open_obligations() == ()
    assert _attrs(pipeline.span("execute_tool explode"))[sc.ERROR_TYPE] == "ValueError"
    unknown = pipeline.span("tool_result delete_everything")
    assert _attrs(unknown)[sc.GEN_AI_TOOL_CALL_RESULT].startswith(
        "Error: delete_everything is not a valid tool"
    )
    assert {_attrs(s)[sc.GEN_AI_CONVERSATION_ID] for s in pipeline.spans("execute_tool")} == {
        "ops-7"
    }


def test_tool_runs_without_a_model_call_are_recorded_from_the_tool_events(
    pipeline: Pipeline,
) -> None:
    """No model emitted these calls: the tool's own start and end open and resolve them."""
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode([lookup]))
    graph.add_edge(START, "tools")
    app = graph.compile()
    handler = lc.ObligationCallbackHandler(pipeline.telemetry.recorder)

    app.invoke(
        {"messages": [calls(call("k1", "lookup", key="zone"))]},
        {"callbacks": [handler], "configurable": {"thread_id": "direct-1"}},
    )
    with conversation("direct-2"):
        assert lookup.invoke({"key": "ttl"}, {"callbacks": [handler]}) == "ttl=42"

    assert pipeline.rows("direct-1") == [("tool_call", "k1", "lookup", "result")]
    ((_, generated_id, name, status),) = pipeline.rows("direct-2")
    assert (generated_id.startswith("call_"), name, status) == (True, "lookup", "result")
    assert [_attrs(s)[sc.GEN_AI_TOOL_CALL_RESULT] for s in pipeline.spans("tool_result")] == [
        "zone=42",
        "ttl=42",
    ]


def test_an_interrupted_tool_stays_open_until_it_runs_again(pipeline: Pipeline) -> None:
    """A LangGraph ``interrupt`` inside a tool is no failure: the call stays open while the
    graph waits for a human, and resolves when the resumed tool returns."""

    @tool
    def wire_money(amount: int) -> str:
        """Wire money, once a human approved it."""
        approval = interrupt({"approve": amount})
        return f"wired {amount}" if approval == "yes" else "not wired"

    lc.instrument(pipeline.telemetry)
    model = scripted(calls(call("w1", "wire_money", amount=300)), "Wired 300.")
    agent = create_agent(model, tools=[wire_money], checkpointer=InMemorySaver())
    thread: RunnableConfig = {"configurable": {"thread_id": "pay-1"}}

    agent.invoke({"messages": [HumanMessage("Pay the invoice.")]}, thread)
    assert pipeline.rows("pay-1") == [("tool_call", "w1", "wire_money", None)]
    assert pipeline.spans("execute_tool") == []  # still open

    out = agent.invoke(Command(resume="yes"), thread)

    assert out["messages"][-2].content == "wired 300"
    assert pipeline.rows("pay-1") == [("tool_call", "w1", "wire_money", "result")]
    assert _attrs(pipeline.span("tool_result wire_money"))[sc.GEN_AI_TOOL_CALL_RESULT] == (
        "wired 300"
    )


def test_async_agent_records_and_summarizes_off_the_event_loop(pipeline: Pipeline) -> None:
    lc.instrument(pipeline.telemetry)
    history = _with_ids([*SPLIT_RESPONSE, HumanMessage("Thanks. Anything else?")])
    guarded = lc.GuardedSummarizationMiddleware(("tokens", 100), ("messages", 8))
    model = scripted(calls(call("a1", "lookup", key="uptime")), "Uptime is fine.")
    agent = create_agent(model, tools=[restart, lookup], middleware=[guarded])

    out = asyncio.run(agent.ainvoke({"messages": history}, {"configurable": {"thread_id": "as-1"}}))

    assert str(out["messages"][0].content).startswith("[Summary of compacted messages 0..4]")
    assert out["messages"][-1].content == "Uptime is fine."
    assert pipeline.rows("as-1") == [("tool_call", "a1", "lookup", "result")]
    # Before each model call: the split response closed by extension, then (ten messages
    # later) a span of the summary and one message, whose summary would be no smaller.
    assert [
        (d[sc.REQUESTED_END], d[sc.SPAN_END], d[sc.EXTENDED], d[sc.GEN_AI_CONVERSATION_ID])
        for d in pipeline.decisions()
    ] == [(4, 5, True, "as-1"), (2, 2, False, "as-1")]
    assert [_attrs(s)[sc.COMPACTED] for s in pipeline.spans(sc.APPLY_SPAN)] == [True, False]


def test_instrument_is_idempotent_and_uninstrument_stops_recording(pipeline: Pipeline) -> None:
    assert lc.instrument(pipeline.telemetry)
    assert lc.instrument(pipeline.telemetry)
    assert lc.is_instrumented()
    agent = create_agent(scripted(calls(call("c1", "lookup", key="a")), "done"), tools=[lookup])
    agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t1"}})
    assert pipeline.rows("t1") == [("tool_call", "c1", "lookup", "result")]
    # Handlers are added once per run, not once per instrument call.
    assert len(pipeline.spans("execute_tool")) == 1

    lc.uninstrument()
    assert not lc.is_instrumented()
    agent = create_agent(scripted(calls(call("c2", "lookup", key="b")), "done"), tools=[lookup])
    agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t2"}})
    assert pipeline.rows("t2") == []


def test_a_failing_recorder_never_breaks_the_agent(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("recorder down")

    monkeypatch.setattr(pipeline.telemetry.recorder, "call", broken)
    lc.instrument(pipeline.telemetry)
    agent = create_agent(scripted(calls(call("c1", "lookup", key="a")), "done"), tools=[lookup])
    with caplog.at_level(logging.ERROR):
        out = agent.invoke({"messages": [HumanMessage("go")]})
    assert out["messages"][-1].content == "done"
    assert "LangChain callback on_llm_end failed" in caplog.text
    assert "LangChain callback on_tool_start failed" in caplog.text


# -- guarded summarization -----------------------------------------------------------------------

_LOG = "\n".join(f"line {i}: service ok, p99 latency {i % 7} ms" for i in range(60))

SPLIT_RESPONSE: list[AnyMessage] = [
    HumanMessage("Restart web-1 and web-2, then report."),
    calls(call("c1", "restart", host="web-1")),  # one response, split over two messages
    calls(call("c2", "restart", host="web-2")),
    ToolMessage("web-1 restarted\n" + _LOG, tool_call_id="c1"),
    ToolMessage("web-2 restarted\n" + _LOG, tool_call_id="c2"),
    AIMessage("Both restarted."),
    HumanMessage("Now check the health of both."),
    calls(call("c3", "lookup", key="health:web-1"), call("c4", "lookup", key="health:web-2")),
    ToolMessage("healthy", tool_call_id="c3"),
    ToolMessage("healthy", tool_call_id="c4"),
    AIMessage("Both healthy."),
]
"""A transcript where keeping the last eight messages (with the next user turn) cuts at the
result of c2. The built-in middleware moves that cut back to c2's call, and so severs c1: its
call is summarized, its result kept."""

PROMISE: list[AnyMessage] = [
    HumanMessage("Move the DNS of shop.example to the new provider."),
    calls(call("c1", "lookup", key="zone:shop.example")),
    ToolMessage("zone shop.example: 40 records\n" + _LOG, tool_call_id="c1"),
    AIMessage("The zone has 40 records; ready to move it."),
    HumanMessage("Go ahead."),
    AIMessage("I'll verify the TTLs before proceeding."),
    HumanMessage("Fine, tell me when you are done."),
    AIMessage("Still working on it."),
    HumanMessage("Any news?"),
]
"""An open promise (message 5) no tool call has discharged yet."""


def _kept(messages: Sequence[AnyMessage], after: Sequence[AnyMessage]) -> int:
    """Where in `messages` the messages `after` a summary were kept from."""
    ids = [m.id for m in messages]
    return ids.index(after[0].id)


def _with_ids(messages: Sequence[AnyMessage]) -> list[AnyMessage]:
    copies = [m.model_copy() for m in messages]
    for index, message in enumerate(copies):
        message.id = f"m{index}"
    return copies


def builtin_middleware(keep: int, summaries: list[list[AnyMessage]]) -> SummarizationMiddleware:
    """The built-in middleware with a recording summarizer (no model call)."""

    def summarize(messages: list[AnyMessage]) -> str:
        summaries.append(list(messages))
        return "SUMMARY"

    return SummarizationMiddleware(
        scripted(), trigger=("messages", 4), keep=("messages", keep), summarizer=summarize
    )


def test_builtin_middleware_severs_a_split_response(pipeline: Pipeline) -> None:
    """The baseline: where the built-in middleware cuts, computed by its own method and seen
    in the state it writes."""
    history = _with_ids([*SPLIT_RESPONSE, HumanMessage("Thanks. Anything else?")])
    summaries: list[list[AnyMessage]] = []
    builtin = builtin_middleware(8, summaries)
    assert builtin._determine_cutoff_index(history) == 2  # asked 12 - 8 = 4, moved back to 2

    agent = create_agent(scripted("No."), tools=[restart, lookup], middleware=[builtin])
    out = agent.invoke({"messages": history})

    assert [m.id for m in summaries[0]] == ["m0", "m1"]  # c1's call is summarized...
    assert out["messages"][0].content.endswith("SUMMARY")
    kept = out["messages"][1:-1]
    assert _kept(history, kept) == 2
    assert isinstance(kept[1], ToolMessage) and kept[1].tool_call_id == "c1"  # ...its result kept
    transcript = Transcript.parse(lc.to_openai_messages(history))
    assert not transcript.is_closed(2)
    assert transcript.closed_cuts() == [0, 1, 5, 6, 7, 10, 11, 12]


def test_guarded_middleware_extends_where_the_builtin_severs(pipeline: Pipeline) -> None:
    history = _with_ids([*SPLIT_RESPONSE, HumanMessage("Thanks. Anything else?")])
    guarded = lc.GuardedSummarizationMiddleware(
        ("tokens", 100), ("messages", 8), telemetry=pipeline.telemetry
    )
    assert guarded.planned_cut(history) == 4
    agent = create_agent(scripted("No."), tools=[restart, lookup], middleware=[guarded])

    out = agent.invoke({"messages": history}, {"configurable": {"thread_id": "ops-1"}})

    summary, *kept, answer = out["messages"]
    assert summary.content.startswith("[Summary of compacted messages 0..4]")
    assert "restart" in summary.content and "[c1]" in summary.content
    assert summary.additional_kwargs == {"lc_source": "summarization"}
    assert _kept(history, kept) == 5
    assert [m.id for m in kept] == [f"m{i}" for i in range(5, 12)]
    assert answer.content == "No."
    assert Transcript.parse(lc.to_openai_messages(history)).is_closed(5)
    (decision,) = pipeline.decisions()
    assert decision[sc.ACTION] == "compact"
    assert decision[sc.EXTENDED] is True
    assert (decision[sc.REQUESTED_START], decision[sc.REQUESTED_END]) == (0, 4)
    assert (decision[sc.SPAN_START], decision[sc.SPAN_END]) == (0, 5)
    assert decision[sc.GEN_AI_CONVERSATION_ID] == "ops-1"
    applied = _attrs(pipeline.span(sc.APPLY_SPAN))
    assert applied[sc.COMPACTED] is True
    assert applied[sc.TOKENS_AFTER] < applied[sc.TOKENS_BEFORE]


def test_guarded_middleware_rewrites_the_state_as_the_builtin_does(pipeline: Pipeline) -> None:
    """Remove every message, then the head, the summary and the kept originals (the same
    objects, ids and all), so the ``add_messages`` reducer rebuilds the history."""
    history = [
        SystemMessage("You operate the web fleet.", id="sys"),
        *_with_ids([*SPLIT_RESPONSE, HumanMessage("Thanks. Anything else?")])[1:],
    ]
    guarded = lc.GuardedSummarizationMiddleware(
        ("tokens", 100), ("messages", 8), telemetry=pipeline.telemetry
    )
    update = _before_model(guarded, history)

    assert update is not None
    remove, head, summary, *kept = update["messages"]
    assert isinstance(remove, RemoveMessage) and remove.id == REMOVE_ALL_MESSAGES
    assert head is history[0]  # the protected head is never summarized
    assert isinstance(summary, HumanMessage)
    assert str(summary.content).startswith("[Summary of compacted messages 1..4]")
    assert len(kept) == 7 and all(a is b for a, b in zip(kept, history[5:], strict=True))
    assert _before_model(guarded, history[:3]) is None  # below the trigger


def test_guarded_middleware_defers_a_promise_the_builtin_would_summarize(
    pipeline: Pipeline,
) -> None:
    history = _with_ids(PROMISE)
    summaries: list[list[AnyMessage]] = []
    assert builtin_middleware(2, summaries)._determine_cutoff_index(history) == 7
    guarded = lc.GuardedSummarizationMiddleware(
        ("tokens", 100), ("messages", 2), telemetry=pipeline.telemetry
    )
    agent = create_agent(scripted("Done: TTLs verified."), tools=[lookup], middleware=[guarded])

    out = agent.invoke({"messages": history})

    summary, *kept, _ = out["messages"]
    assert summary.content.startswith("[Summary of compacted messages 0..4]")
    assert _kept(history, kept) == 5
    assert kept[0].content == "I'll verify the TTLs before proceeding."  # held verbatim
    (decision,) = pipeline.decisions()
    assert decision[sc.ACTION] == "defer"
    assert (decision[sc.REQUESTED_START], decision[sc.REQUESTED_END]) == (0, 7)
    assert (decision[sc.SPAN_START], decision[sc.SPAN_END]) == (0, 5)
    (span,) = pipeline.spans(sc.EVALUATE_SPAN)
    deferred = next(e for e in span.events if e.name == sc.EVENT_DEFERRED)
    assert _sequence(deferred.attributes, sc.RULES) == ["dangling_commitment"]
    [commitment] = _sequence(deferred.attributes, sc.OBLIGATION_IDS)
    assert commitment.startswith("commitment-")


def test_guarded_middleware_refuses_at_a_critical_budget(pipeline: Pipeline) -> None:
    history = _with_ids(PROMISE)
    guarded = lc.GuardedSummarizationMiddleware(
        ("tokens", 100), ("messages", 2), critical=("tokens", 100), telemetry=pipeline.telemetry
    )
    model = scripted("never called")
    agent = create_agent(model, tools=[lookup], middleware=[guarded])

    with pytest.raises(OpenObligationError) as refused:
        agent.invoke({"messages": history})

    assert [(o.kind, o.id[:11], o.message_index) for o in refused.value.obligations] == [
        ("commitment", "commitment-", 5)
    ]
    assert model.prompts == []
    (decision,) = pipeline.decisions()
    assert decision[sc.ACTION] == "refuse"
    assert decision[sc.CRITICAL] is True


def test_guarded_middleware_can_hold_on_refusal(
    pipeline: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    history = _with_ids(PROMISE)
    guarded = lc.GuardedSummarizationMiddleware(
        ("tokens", 100),
        ("messages", 2),
        critical=("tokens", 100),
        telemetry=pipeline.telemetry,
        on_refuse="hold",
    )
    model = scripted("Still verifying.")
    agent = create_agent(model, tools=[lookup], middleware=[guarded])

    with caplog.at_level(logging.WARNING):
        out = agent.invoke({"messages": history})

    assert [m.id for m in out["messages"][:-1]] == [f"m{i}" for i in range(9)]  # verbatim
    assert [m.id for m in model.prompts[0]] == [f"m{i}" for i in range(9)]
    assert [d[sc.ACTION] for d in pipeline.decisions()] == ["refuse"]
    assert "refusing compaction of span 0:7" in caplog.text
    assert "holding every message verbatim" in caplog.text


def test_agent_run_retry_spans_ledger_and_guarded_summary(pipeline: Pipeline) -> None:
    """A real agent: a deploy times out and is retried; on the next turn the history is
    summarized. The built-in middleware would cut between the failure and the retry; the
    guarded one extends to the retry's result, and the ledger agrees with the transcript."""
    _deploy_attempts.clear()
    lc.instrument(pipeline.telemetry)
    model = scripted(
        calls(call("d1", "deploy", build="1234")),
        calls(call("d2", "deploy", build="1234")),
        "Build 1234 is on staging.",
        "Next: run the smoke tests.",
    )
    guarded = lc.GuardedSummarizationMiddleware(("messages", 7), ("messages", 4))
    agent = create_agent(model, tools=[deploy], middleware=[guarded], checkpointer=InMemorySaver())
    thread: RunnableConfig = {"configurable": {"thread_id": "deploy-9"}}

    first = agent.invoke({"messages": [HumanMessage("Deploy build 1234 to staging.")]}, thread)
    assert [getattr(m, "status", None) for m in first["messages"]] == [
        None, None, "error", None, "success", None,
    ]  # fmt: skip
    assert pipeline.rows("deploy-9") == [
        ("tool_call", "d1", "deploy", "error"),
        ("tool_call", "d2", "deploy", "result"),
    ]
    assert pipeline.decisions() == []  # six messages: below the trigger
    before = first["messages"] + [HumanMessage("What's next?")]
    summaries: list[list[AnyMessage]] = []
    assert builtin_middleware(4, summaries)._determine_cutoff_index(before) == 3

    second = agent.invoke({"messages": [HumanMessage("What's next?")]}, thread)

    summary, *kept, answer = second["messages"]
    assert summary.content.startswith("[Summary of compacted messages 0..4]")
    assert "deploy timed out" in summary.content  # the failure survives as a negative
    assert [m.content for m in kept] == ["Build 1234 is on staging.", "What's next?"]
    assert answer.content == "Next: run the smoke tests."
    (decision,) = pipeline.decisions()
    assert decision[sc.ACTION] == "compact"
    assert (decision[sc.REQUESTED_END], decision[sc.SPAN_END], decision[sc.EXTENDED]) == (
        3, 5, True,
    )  # fmt: skip
    assert decision[sc.GEN_AI_CONVERSATION_ID] == "deploy-9"
    assert pipeline.ledger.open_obligations() == ()
    assert sorted(s.name for s in pipeline.spans("execute_tool")) == ["execute_tool deploy"] * 2


def test_chat_model_summarizer_gets_the_structured_request(pipeline: Pipeline) -> None:
    lc.instrument(pipeline.telemetry)
    writer = scripted("Restarted web-1 [c1] and web-2 [c2]; both healthy so far.")
    guarded = lc.GuardedSummarizationMiddleware(
        ("tokens", 100), ("messages", 8), summarizer=writer, telemetry=pipeline.telemetry
    )
    history = _with_ids([*SPLIT_RESPONSE, HumanMessage("Thanks. Anything else?")])
    agent = create_agent(scripted("No."), tools=[restart, lookup], middleware=[guarded])

    out = agent.invoke({"messages": history}, {"configurable": {"thread_id": "ops-2"}})

    assert out["messages"][0].content == "Restarted web-1 [c1] and web-2 [c2]; both healthy so far."
    (prompt,) = writer.prompts
    assert prompt[0].type == "system" and "identifiers_to_keep_verbatim" in prompt[0].content
    request = json.loads(str(prompt[1].content))
    assert request["span"] == {"first_message": 0, "last_message": 4}
    assert [m["role"] for m in request["messages"]] == [
        "user", "assistant", "assistant", "tool", "tool",
    ]  # fmt: skip
    # The summarizer's own model run is no agent turn: nothing recorded for it.
    assert pipeline.rows("ops-2") == []


def test_middleware_rejects_sizes_it_cannot_honour() -> None:
    with pytest.raises(ValueError, match="a fraction needs max_input_tokens"):
        lc.GuardedSummarizationMiddleware(("fraction", 0.8))
    with pytest.raises(ValueError, match="keep: messages must be a positive integer"):
        lc.GuardedSummarizationMiddleware(("tokens", 100), ("messages", 0))
    with pytest.raises(ValueError, match="on_refuse"):
        lc.GuardedSummarizationMiddleware(("tokens", 100), on_refuse="ignore")  # type: ignore[arg-type]
    middleware = lc.GuardedSummarizationMiddleware(
        ("fraction", 0.5), ("fraction", 0.25), max_input_tokens=1_000
    )
    history = [HumanMessage("x" * 800) for _ in range(4)]  # about 200 tokens each
    assert middleware.planned_cut(history) == 3


# -- the built-in middleware, guarded ----------------------------------------------------------


def test_guard_makes_the_builtin_middleware_obey_the_gate(pipeline: Pipeline) -> None:
    history = _with_ids([*SPLIT_RESPONSE, HumanMessage("Thanks. Anything else?")])
    summaries: list[list[AnyMessage]] = []
    builtin = builtin_middleware(8, summaries)
    assert lc.guard_builtin_summarization("default", telemetry=pipeline.telemetry)
    assert lc.guard_builtin_summarization("default", telemetry=pipeline.telemetry)  # idempotent
    assert lc.builtin_summarization_guarded()

    assert builtin._determine_cutoff_index(history) == 5
    agent = create_agent(scripted("No."), tools=[restart, lookup], middleware=[builtin])
    out = agent.invoke({"messages": history}, {"configurable": {"thread_id": "ops-3"}})

    assert [m.id for m in summaries[0]] == [f"m{i}" for i in range(5)]  # the pair together
    assert _kept(history, out["messages"][1:-1]) == 5
    assert [(d[sc.ACTION], d[sc.REQUESTED_END], d[sc.SPAN_END]) for d in pipeline.decisions()] == [
        ("compact", 2, 5),
        ("compact", 2, 5),
    ]

    lc.unguard_builtin_summarization()
    assert not lc.builtin_summarization_guarded()
    assert builtin._determine_cutoff_index(history) == 2


def test_guarded_builtin_defers_refuses_or_holds(pipeline: Pipeline) -> None:
    history = _with_ids(PROMISE)
    summaries: list[list[AnyMessage]] = []
    builtin = builtin_middleware(2, summaries)
    lc.guard_builtin_summarization(telemetry=pipeline.telemetry)
    assert builtin._determine_cutoff_index(history) == 5  # deferred before the promise

    history = _with_ids(PROMISE[5:])  # nothing older than the promise to compact instead
    agent = create_agent(scripted("unused"), tools=[lookup], middleware=[builtin])
    with pytest.raises(CompactionRefused):
        agent.invoke({"messages": history})
    assert summaries == []

    lc.guard_builtin_summarization(telemetry=pipeline.telemetry, on_refuse="hold")
    agent = create_agent(scripted("Still verifying."), tools=[lookup], middleware=[builtin])
    out = agent.invoke({"messages": history})
    assert summaries == []
    assert [m.id for m in out["messages"][:-1]] == [f"m{i}" for i in range(4)]
    assert [d[sc.ACTION] for d in pipeline.decisions()] == ["defer", "refuse", "refuse"]


SYSTEM = SystemMessage("You operate the web fleet. Never restart both hosts at once.")


def _summarized(model: ToolCallingFakeModel) -> str:
    """The one prompt the built-in middleware sent its summary model."""
    [[prompt]] = model.prompts
    return str(prompt.content)


def _prompt_for(builtin: SummarizationMiddleware, messages: list[AnyMessage]) -> str:
    """The summary prompt LangChain renders for exactly `messages`."""
    return builtin._format_summary_prompt(builtin._trim_messages_for_summary(messages))


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_guarded_builtin_keeps_the_head_and_summarizes_exactly_the_allowed_span(
    pipeline: Pipeline, asynchronous: bool
) -> None:
    history = _with_ids([SYSTEM, *SPLIT_RESPONSE, HumanMessage("Thanks. Anything else?")])
    summary_model = scripted("Restarted web-1 and web-2 (c1, c2); both came back.")
    builtin = SummarizationMiddleware(summary_model, trigger=("messages", 4), keep=("messages", 8))
    lc.guard_builtin_summarization(telemetry=pipeline.telemetry)
    agent = create_agent(scripted("No."), tools=[restart, lookup], middleware=[builtin])

    if asynchronous:
        out = asyncio.run(agent.ainvoke({"messages": history}))
    else:
        out = agent.invoke({"messages": history})

    # Asked to keep 8 (a cut at 5, moved back by LangChain to c2's call at 3); the gate keeps
    # the system message and extends the span to the first cut closing both calls.
    assert [(d[sc.ACTION], d[sc.SPAN_START], d[sc.SPAN_END]) for d in pipeline.decisions()] == [
        ("compact", 1, 6)
    ]
    messages = out["messages"]
    assert messages[0].id == "m0"
    assert messages[0].content == SYSTEM.content and isinstance(messages[0], SystemMessage)
    summary = messages[1]
    assert isinstance(summary, HumanMessage)
    assert summary.content == (
        "Here is a summary of the conversation to date:\n\n"
        "Restarted web-1 and web-2 (c1, c2); both came back."
    )
    assert [m.id for m in messages[2:-1]] == [f"m{i}" for i in range(6, 13)]
    assert [m.content for m in messages[2:-1]] == [m.content for m in history[6:]]
    assert messages[-1].content == "No."
    # Exactly the allowed span went to the summary model.
    assert _summarized(summary_model) == _prompt_for(builtin, history[1:6])


def test_guarded_builtin_deferral_keeps_the_head_and_holds_the_live_span(
    pipeline: Pipeline,
) -> None:
    history = _with_ids([SYSTEM, *PROMISE])
    summary_model = scripted("Zone shop.example has 40 records (c1); the user approved the move.")
    builtin = SummarizationMiddleware(summary_model, trigger=("messages", 4), keep=("messages", 2))
    lc.guard_builtin_summarization(telemetry=pipeline.telemetry)
    agent = create_agent(
        scripted("Still verifying the TTLs."), tools=[lookup], middleware=[builtin]
    )

    out = agent.invoke({"messages": history})

    # LangChain asks for [0, 8); the promise at 6 is live, so the gate defers to [1, 6).
    [decision] = pipeline.decisions()
    assert (decision[sc.ACTION], decision[sc.REQUESTED_END]) == ("defer", 8)
    assert (decision[sc.SPAN_START], decision[sc.SPAN_END]) == (1, 6)
    messages = out["messages"]
    assert (messages[0].id, messages[0].content) == ("m0", SYSTEM.content)
    assert messages[1].content == (
        "Here is a summary of the conversation to date:\n\n"
        "Zone shop.example has 40 records (c1); the user approved the move."
    )
    assert [m.id for m in messages[2:-1]] == ["m6", "m7", "m8", "m9"]  # the promise, verbatim
    assert messages[2].content == "I'll verify the TTLs before proceeding."
    assert messages[-1].content == "Still verifying the TTLs."
    assert _summarized(summary_model) == _prompt_for(builtin, history[1:6])


def test_guarded_builtin_without_a_head_summarizes_from_the_start(pipeline: Pipeline) -> None:
    history = _with_ids([*SPLIT_RESPONSE, HumanMessage("Thanks. Anything else?")])
    summaries: list[list[AnyMessage]] = []
    builtin = builtin_middleware(8, summaries)
    lc.guard_builtin_summarization(telemetry=pipeline.telemetry)
    agent = create_agent(scripted("No."), tools=[restart, lookup], middleware=[builtin])
    out = agent.invoke({"messages": history})
    assert [m.id for m in summaries[0]] == [f"m{i}" for i in range(5)]
    assert out["messages"][0].content.endswith("SUMMARY")
    assert [m.id for m in out["messages"][1:-1]] == [f"m{i}" for i in range(5, 12)]


def test_instrument_guards_the_builtin_middleware_when_the_environment_asks(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    lc.instrument(pipeline.telemetry)
    assert not lc.builtin_summarization_guarded()
    monkeypatch.setenv(lc.GUARD_SUMMARIZATION_ENV, "true")
    lc.instrument(pipeline.telemetry)
    assert lc.builtin_summarization_guarded()
    history = _with_ids([*SPLIT_RESPONSE, HumanMessage("Thanks. Anything else?")])
    assert builtin_middleware(8, [])._determine_cutoff_index(history) == 5
    lc.uninstrument()
    assert not lc.builtin_summarization_guarded()
    assert builtin_middleware(8, [])._determine_cutoff_index(history) == 2


# -- conversion ------------------------------------------------------------


def test_messages_convert_one_to_one() -> None:
    converted = lc.to_openai_messages(
        [
            HumanMessage("hi"),
            calls(call("c1", "lookup", key="a"), call("", "ghost")),
            ToolMessage("boom", tool_call_id="c1", status="error"),
            ToolMessage("stray", tool_call_id=""),
            AIMessage([{"type": "text", "text": "done"}]),
        ]
    )
    assert converted == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"key": "a"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "boom", "error": True},
        {"role": "function", "name": "", "content": "stray"},
        {"role": "assistant", "content": "done"},
    ]
    assert Transcript.parse(converted).results[0].status == "error"
