"""One tool call, one obligation, however many instrumentation layers see it.

The real OpenAI Agents SDK ``Runner`` runs on the real ``openai`` client, which the instrumentor
wraps, against the loopback fake model server: the SDK layer opens each call from the model's
``function_call`` (with its call id) and the Agents SDK processor's function span joins it. A
real LangChain agent (``create_agent`` over ``ChatOpenAI``) and an Agents SDK agent call tools on
a real MCP server over stdio: the MCP request made inside a framework's tool is part of that
tool's call. Each call must leave exactly one obligation, one ``execute_tool`` span, one
``tool_result`` span and one conversation.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import (
    FakeLLMServer,
    ToolCall,
)
from frameworks import integrations, integrations_off, require_framework
from llm_clients import API_KEY, async_openai_client, require_sdks
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from pydantic import SecretStr
from telemetry_harness import Pipeline, ledger_rows, make_pipeline

from otel_compaction.instrumentation import CompactionInstrumentor
from otel_compaction.telemetry import semconv as sc

try:
    from agents import (
        Agent,
        OpenAIResponsesModel,
        RunConfig,
        Runner,
        function_tool,
        set_trace_processors,
        set_tracing_disabled,
    )
    from agents.mcp import MCPServerStdio, MCPServerStdioParams
    from agents.tracing import function_span, trace
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from otel_compaction.integrations import outer_call
    from otel_compaction.integrations.openai_agents.tracing import ObligationTracingProcessor
except ImportError as error:
    MISSING: ImportError | None = error
else:
    MISSING = None
require_framework(MISSING, "openai-agents, langchain, langchain-openai and mcp", "test")

MODEL = "model-test"

SERVER = '''
"""A FastMCP server spoken to over stdio."""
from mcp.server.fastmcp import FastMCP

app = FastMCP("inventory", log_level="WARNING")


@app.tool()
def stock(item: str) -> str:
    """How many of `item` are in stock."""
    return f"{item}: 12"


if __name__ == "__main__":
    app.run("stdio")
'''


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(name="pipeline")
def pipeline_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    """Every layer instrumented into an in-memory pipeline (content capture on); the obligation
    processor is the Agents SDK's only trace processor, so nothing is exported elsewhere."""
    require_sdks()
    monkeypatch.delenv(sc.FRAMEWORKS_ENV, raising=False)
    integrations_off()
    set_tracing_disabled(False)
    set_trace_processors([])
    pipeline = make_pipeline(capture_content=True)
    instrumentor = CompactionInstrumentor()
    instrumentor.instrument(telemetry=pipeline.telemetry)
    assert all(module.is_instrumented() for module in integrations().values())
    try:
        yield pipeline
    finally:
        instrumentor.uninstrument()
        integrations_off()
        set_trace_processors([])
        pipeline.shutdown()


@pytest.fixture(name="server", scope="module")
def server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MCP server script, written to a temporary directory."""
    path = tmp_path_factory.mktemp("mcp") / "server.py"
    path.write_text(SERVER, encoding="utf-8")
    return path


def _agent(fake: FakeLLMServer, *tools: Any, **options: Any) -> Agent[Any]:
    """An Agents SDK agent on the Responses API of the real client, pointed at `fake`."""
    model = OpenAIResponsesModel(model=MODEL, openai_client=async_openai_client(fake))
    return Agent(name="ops", model=model, tools=list(tools), **options)


def _run_one_call(
    fake: FakeLLMServer, function: Any, call: ToolCall, answer: str, **config: Any
) -> Any:
    """Run an agent with `function` whose model makes `call`, then answers `answer`; the final
    output."""
    fake.enqueue("responses", tool_calls=[call])
    fake.enqueue("responses", answer)
    run = Runner.run(_agent(fake, function), "Go ahead.", run_config=RunConfig(**config))
    return asyncio.run(run).final_output


def _records(pipeline: Pipeline) -> list[tuple[Any, ...]]:
    """Every ledger record, conversation by conversation."""
    ledger = pipeline.ledger
    return [
        row for conversation in ledger.conversations() for row in ledger_rows(ledger, conversation)
    ]


def _tool_spans(pipeline: Pipeline, prefix: str) -> list[ReadableSpan]:
    return pipeline.spans(prefix=f"{prefix} ")


def _findings(pipeline: Pipeline) -> list[str]:
    findings = (sc.EVENT_SEVERED, sc.EVENT_ORPHANED, sc.EVENT_DUPLICATE)
    return [e.name for s in pipeline.spans() for e in s.events if e.name in findings]


def _result_of(pipeline: Pipeline, call_id: str) -> dict[str, Any]:
    (found,) = [
        dict(s.attributes or {})
        for s in _tool_spans(pipeline, sc.TOOL_RESULT_SPAN)
        if (s.attributes or {}).get(sc.GEN_AI_TOOL_CALL_ID) == call_id
    ]
    return found


# -- the Agents SDK over the instrumented OpenAI SDK ---------------------------------------------


@function_tool
def lookup(host: str) -> str:
    """Look a host up."""
    return f"{host} is up"


def test_an_agents_sdk_call_is_one_obligation_span_and_conversation(
    pipeline: Pipeline, fake_llm_server: FakeLLMServer
) -> None:
    emitted = ToolCall("lookup", {"host": "web-7"}, id="call_look")
    final = _run_one_call(fake_llm_server, lookup, emitted, "web-7 is up.", group_id="conv-ops")

    assert final == "web-7 is up."
    assert _records(pipeline) == [("tool_call", "call_look", "lookup", "conv-ops", 0, "result")]
    (call,) = _tool_spans(pipeline, sc.EXECUTE_TOOL)
    assert dict(call.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "call_look",
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": "conv-ops",
        "gen_ai.tool.call.arguments": '{"host":"web-7"}',
        "compaction.obligation.status": "result",
    }
    (answer,) = _tool_spans(pipeline, sc.TOOL_RESULT_SPAN)
    assert dict(answer.attributes or {}) == {
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "call_look",
        "gen_ai.conversation.id": "conv-ops",
        "compaction.obligation.status": "result",
        "gen_ai.tool.call.result": "web-7 is up",
    }
    assert [link.context.span_id for link in answer.links] == [call.context.span_id]
    requests = pipeline.spans(sc.MODEL_REQUEST_SPAN)
    assert [
        (
            (s.attributes or {})["gen_ai.conversation.id"],
            (s.attributes or {})["compaction.conversation.source"],
        )
        for s in requests
    ] == [("conv-ops", "agents"), ("conv-ops", "agents")]
    assert _findings(pipeline) == []
    assert pipeline.ledger.open_obligations() == ()


def test_parallel_calls_of_one_tool_are_each_matched_to_their_own_call(
    pipeline: Pipeline, fake_llm_server: FakeLLMServer
) -> None:
    async def run() -> Any:
        second_done = asyncio.Event()

        @function_tool
        async def ping(host: str) -> str:
            """Ping a host."""
            if host == "a":  # the first call ends last: its span ends after the second's
                await second_done.wait()
            else:
                second_done.set()
            return f"{host} answers"

        agent = _agent(fake, ping)
        return await Runner.run(agent, "Ping a and b.", run_config=RunConfig(group_id="conv-ping"))

    fake = fake_llm_server
    fake.enqueue(
        "responses",
        tool_calls=[
            ToolCall("ping", {"host": "a"}, id="call_a"),
            ToolCall("ping", {"host": "b"}, id="call_b"),
        ],
    )
    fake.enqueue("responses", "Both answer.")

    assert asyncio.run(run()).final_output == "Both answer."

    assert _records(pipeline) == [
        ("tool_call", "call_a", "ping", "conv-ping", 0, "result"),
        ("tool_call", "call_b", "ping", "conv-ping", 1, "result"),
    ]
    assert len(_tool_spans(pipeline, sc.EXECUTE_TOOL)) == 2
    assert len(_tool_spans(pipeline, sc.TOOL_RESULT_SPAN)) == 2
    assert _result_of(pipeline, "call_a")["gen_ai.tool.call.result"] == "a answers"
    assert _result_of(pipeline, "call_b")["gen_ai.tool.call.result"] == "b answers"
    assert _findings(pipeline) == []


def test_a_tool_that_raises_is_one_obligation_resolved_error(
    pipeline: Pipeline, fake_llm_server: FakeLLMServer
) -> None:
    @function_tool
    def migrate(table: str) -> str:
        """Migrate a table."""
        raise RuntimeError(f"{table} is locked")

    emitted = ToolCall("migrate", {"table": "users"}, id="call_mig")
    final = _run_one_call(
        fake_llm_server, migrate, emitted, "The migration failed.", group_id="conv-m"
    )

    assert final == "The migration failed."
    assert _records(pipeline) == [("tool_call", "call_mig", "migrate", "conv-m", 0, "error")]
    (call,) = _tool_spans(pipeline, sc.EXECUTE_TOOL)
    assert call.status.status_code == StatusCode.ERROR
    (answer,) = _tool_spans(pipeline, sc.TOOL_RESULT_SPAN)
    assert (answer.attributes or {})["compaction.obligation.status"] == "error"
    assert (answer.attributes or {})["error.type"] == "Error running tool (non-fatal)"
    # The model was still told: its next request carries the call's output.
    (_, second) = fake_llm_server.requests_to("responses")
    outputs = [i for i in second.body["input"] if i.get("type") == "function_call_output"]
    assert [i["call_id"] for i in outputs] == ["call_mig"]


def test_without_a_group_id_both_layers_still_share_one_conversation(
    pipeline: Pipeline, fake_llm_server: FakeLLMServer
) -> None:
    emitted = ToolCall("lookup", {"host": "db-1"}, id="call_db")
    assert _run_one_call(fake_llm_server, lookup, emitted, "db-1 is up.") == "db-1 is up."

    ((kind, call_id, name, conversation, _, status),) = _records(pipeline)
    assert (kind, call_id, name, status) == ("tool_call", "call_db", "lookup", "result")
    assert conversation.startswith("derived:")  # the SDK layer's, which saw the call first
    assert len(_tool_spans(pipeline, sc.EXECUTE_TOOL)) == 1
    assert len(_tool_spans(pipeline, sc.TOOL_RESULT_SPAN)) == 1


# -- the processor's matching, on the SDK's own tracing ------------------------------------------


@pytest.fixture(name="processed")
def processed_fixture() -> Iterator[Pipeline]:
    """A pipeline whose processor is the Agents SDK's only one; no OpenAI SDK layer."""
    pipeline = make_pipeline(capture_content=True)
    set_tracing_disabled(False)
    set_trace_processors([ObligationTracingProcessor(pipeline.recorder)])
    try:
        yield pipeline
    finally:
        set_trace_processors([])
        pipeline.shutdown()


def test_a_span_started_out_of_order_is_rebound_to_the_call_its_arguments_name(
    processed: Pipeline,
) -> None:
    """Two open calls of one tool: the spans start in the opposite order, so the first guess
    (open order) is wrong for both; their inputs put each on its own call before they end."""
    recorder = processed.recorder
    with trace("run", group_id="conv-r"):
        first = recorder.call(
            "fetch", "c1", arguments='{"n": 1}', conversation_id="conv-r", layer="sdk"
        )
        second = recorder.call(
            "fetch", "c2", arguments={"n": 2}, conversation_id="conv-r", layer="sdk"
        )
        span_two = function_span("fetch")
        span_two.start()
        span_one = function_span("fetch")
        span_one.start()
        span_two.span_data.input = '{"n":2}'
        span_one.span_data.input = '{"n": 1}'
        span_two.span_data.output = "two"
        span_two.finish()
        span_one.span_data.output = "one"
        span_one.finish()
    assert (first.layers, second.layers) == (
        frozenset({"sdk", "agents"}),
        frozenset({"sdk", "agents"}),
    )
    assert ledger_rows(processed.ledger, "conv-r") == [
        ("tool_call", "c1", "fetch", "conv-r", 0, "result"),
        ("tool_call", "c2", "fetch", "conv-r", 1, "result"),
    ]
    assert _result_of(processed, "c1")["gen_ai.tool.call.result"] == "one"
    assert _result_of(processed, "c2")["gen_ai.tool.call.result"] == "two"


def test_a_guess_read_before_the_other_span_starts_takes_the_call_the_arguments_name(
    processed: Pipeline,
) -> None:
    """A span's call is read while its tool runs (an MCP call inside it) before the span of the
    guessed call started: it takes the call its input names, and leaves the guess to that span."""
    recorder = processed.recorder
    with trace("run", group_id="conv-g"):
        first = recorder.call(
            "fetch", "c1", arguments={"n": 1}, conversation_id="conv-g", layer="sdk"
        )
        second = recorder.call(
            "fetch", "c2", arguments={"n": 2}, conversation_id="conv-g", layer="sdk"
        )
        with function_span("fetch") as span_two:
            span_two.span_data.input = '{"n": 2}'
            running_two = outer_call.current()
            with function_span("fetch") as span_one:
                running_one = outer_call.current()
                span_one.span_data.input = '{"n": 1}'
            assert outer_call.current() is running_two
    assert (running_two, running_one) == (second, first)
    assert outer_call.current() is None
    assert [row[5] for row in ledger_rows(processed.ledger, "conv-g")] == ["result", "result"]


def test_a_call_no_other_layer_opened_is_the_spans_own_obligation(processed: Pipeline) -> None:
    recorder = processed.recorder
    # Another run's call, and one of another tool: neither is this span's.
    stale = recorder.call("fetch", "old", conversation_id="conv-s", layer="sdk")
    with trace("run", group_id="conv-s"):
        other = recorder.call("store", "c9", conversation_id="conv-s", layer="sdk")
        with function_span("fetch") as span:
            pass
    assert (stale.layers, other.layers) == (frozenset({"sdk"}), frozenset({"sdk"}))
    assert ledger_rows(processed.ledger, "conv-s") == [
        ("tool_call", "old", "fetch", "conv-s", 0, None),
        ("tool_call", "c9", "store", "conv-s", 1, None),
        ("tool_call", span.span_id, "fetch", "conv-s", 2, "result"),
    ]


@pytest.mark.parametrize("approve", [True, False])
def test_a_call_waiting_for_approval_is_one_obligation_until_it_is_decided(
    pipeline: Pipeline, fake_llm_server: FakeLLMServer, approve: bool
) -> None:
    ran: list[str] = []

    @function_tool(needs_approval=True)
    def restart(service: str) -> str:
        """Restart a service."""
        ran.append(service)
        return f"{service} restarted"

    fake = fake_llm_server
    fake.enqueue("responses", tool_calls=[ToolCall("restart", {"service": "api"}, id="call_re")])
    fake.enqueue("responses", "Done.")
    agent = _agent(fake, restart)
    config = RunConfig(group_id="conv-approve")

    async def scenario() -> tuple[list[tuple[Any, ...]], Any]:
        paused = await Runner.run(agent, "Restart api.", run_config=config)
        [item] = paused.interruptions
        at_pause = _records(pipeline)
        state = paused.to_state()
        if approve:
            state.approve(item)
        else:
            state.reject(item)
        resumed = await Runner.run(agent, state, run_config=config)
        return at_pause, resumed.final_output

    at_pause, final = asyncio.run(scenario())

    # The SDK layer opened the call from the model's function_call; the paused run's function
    # span joined it and left it open; the decision resolves it, once.
    assert at_pause == [("tool_call", "call_re", "restart", "conv-approve", 0, None)]
    assert final == "Done."
    status = "result" if approve else "error"
    assert _records(pipeline) == [("tool_call", "call_re", "restart", "conv-approve", 0, status)]
    assert ran == (["api"] if approve else [])
    assert [s.name for s in _tool_spans(pipeline, sc.EXECUTE_TOOL)] == ["execute_tool restart"]
    assert [_result_of(pipeline, "call_re")[sc.OBLIGATION_STATUS]] == [status]
    assert _findings(pipeline) == []


# -- MCP inside a framework's tool ---------------------------------------------------------------


def test_mcp_calls_inside_langchain_tools_are_the_tools_calls(
    pipeline: Pipeline, fake_llm_server: FakeLLMServer, server: Path
) -> None:
    fake = fake_llm_server
    fake.enqueue(
        "chat",
        tool_calls=[
            ToolCall("check_stock", {"item": "bolts"}, id="call_bolts"),
            ToolCall("check_stock", {"item": "nuts"}, id="call_nuts"),
        ],
    )
    fake.enqueue("chat", "12 bolts and 12 nuts.")

    async def scenario() -> tuple[str, str]:
        params = StdioServerParameters(command=sys.executable, args=[str(server)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()

            @tool
            async def check_stock(item: str) -> str:
                """How many of an item are in stock."""
                answer = await session.call_tool("stock", {"item": item})
                return str(answer.content[0].text)  # type: ignore[union-attr]

            model = ChatOpenAI(
                model=MODEL,
                base_url=fake.openai_base_url,
                api_key=SecretStr(API_KEY),
                max_retries=0,
            )
            agent = create_agent(model, [check_stock])
            state = await agent.ainvoke(
                {"messages": [{"role": "user", "content": "Bolts and nuts in stock?"}]},
                {"configurable": {"thread_id": "thread-stock"}},
            )
            # Outside any tool, an MCP call is its own obligation.
            direct = await session.call_tool("stock", {"item": "washers"})
        return str(state["messages"][-1].content), str(direct.content[0].text)  # type: ignore[union-attr]

    final, direct = asyncio.run(scenario())

    assert (final, direct) == ("12 bolts and 12 nuts.", "washers: 12")
    rows = _records(pipeline)
    assert rows[:2] == [
        ("tool_call", "call_bolts", "check_stock", "thread-stock", 0, "result"),
        ("tool_call", "call_nuts", "check_stock", "thread-stock", 1, "result"),
    ]
    ((kind, mcp_id, name, _, _, status),) = rows[2:]
    assert (kind, name, status) == ("tool_call", "stock", "result")
    assert mcp_id.startswith("mcp-")
    calls = _tool_spans(pipeline, sc.EXECUTE_TOOL)
    assert sorted(str((s.attributes or {})["gen_ai.tool.call.id"]) for s in calls) == sorted(
        ["call_bolts", "call_nuts", mcp_id]
    )
    assert len(_tool_spans(pipeline, sc.TOOL_RESULT_SPAN)) == 3
    assert _result_of(pipeline, "call_bolts")["gen_ai.conversation.id"] == "thread-stock"
    assert _result_of(pipeline, "call_nuts")["gen_ai.tool.call.result"] == "nuts: 12"
    assert _findings(pipeline) == []
    assert pipeline.ledger.open_obligations() == ()


def test_mcp_calls_of_an_agents_sdk_mcp_server_are_the_models_calls(
    pipeline: Pipeline, fake_llm_server: FakeLLMServer, server: Path
) -> None:
    fake = fake_llm_server
    fake.enqueue("responses", tool_calls=[ToolCall("stock", {"item": "gears"}, id="call_gears")])
    fake.enqueue("responses", "12 gears.")

    async def scenario() -> Any:
        params: MCPServerStdioParams = {"command": sys.executable, "args": [str(server)]}
        async with MCPServerStdio(params=params, cache_tools_list=True) as mcp_server:
            agent = _agent(fake, mcp_servers=[mcp_server])
            return await Runner.run(
                agent, "Gears in stock?", run_config=RunConfig(group_id="conv-gears")
            )

    assert asyncio.run(scenario()).final_output == "12 gears."

    assert _records(pipeline) == [("tool_call", "call_gears", "stock", "conv-gears", 0, "result")]
    (call,) = _tool_spans(pipeline, sc.EXECUTE_TOOL)
    assert (call.attributes or {})["gen_ai.tool.call.id"] == "call_gears"
    (answer,) = _tool_spans(pipeline, sc.TOOL_RESULT_SPAN)
    assert (answer.attributes or {})["compaction.obligation.status"] == "result"
    assert _findings(pipeline) == []
