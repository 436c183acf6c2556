"""No content without consent: a marker in every piece of transcript text, then a scan of
everything exported and logged.

The marker stands in user and assistant text, tool-call arguments, tool results (a negative
one among them), the messages of exceptions that tools and the provider raise, and in three
identifiers: a booking code, an e-mail address and a path. Each scenario drives one part of
the package for real (the recorder, the gate, the compactor, the openai and anthropic SDKs
against the loopback fake server, LangChain, the Agents SDK, MCP over stdio) under the
``default`` and ``strict`` policies, then scans every span, event, status, link, metric point
and log record. With content capture off the marker is nowhere; with it on it is exactly where
the README says: arguments and results on the tool spans, exception messages in the statuses
of the spans whose work failed, identifier values in the decision events' obligation ids, and
the missing items of a rejected summary.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from content_scan import LogRecords, Place, logged, places
from fake_llm_server import Api, FakeLLMServer, ToolCall
from frameworks import require_framework
from instrumentation_harness import Agent
from llm_clients import require_sdks
from telemetry_harness import Pipeline, make_pipeline

from otel_compaction import Archive, CompactionRefused, GuardedCompactor, conversation
from otel_compaction.instrumentation import CompactionInstrumentor
from otel_compaction.summarizers import SummaryRequest

MARKER = "QZ7MARK"
BOOKING = MARKER  # a booking code: six to ten capitals and digits
EMAIL = f"ops.{MARKER.lower()}@example.com"
PATH = f"/srv/{MARKER.lower()}/deploy.yaml"
NEGATIVE = f"no booking {BOOKING} found"
FAILURE = f"mailbox {EMAIL} is full"
POLICIES = ("default", "strict")

TOOL_ARGUMENTS = ("span attribute", "execute_tool", "gen_ai.tool.call.arguments")
TOOL_RESULT = ("span attribute", "tool_result", "gen_ai.tool.call.result")
CALL_STATUS = ("status", "execute_tool", "description")
RESULT_STATUS = ("status", "tool_result", "description")
ALLOWED_WITH_CAPTURE = {
    TOOL_ARGUMENTS,
    TOOL_RESULT,
    CALL_STATUS,
    RESULT_STATUS,
    ("status", "compaction.model_request", "description"),
    ("status", "compaction.transaction", "description"),
    ("status", "compaction.retry", "description"),
    ("status", "compaction.apply", "description"),
    ("event attribute", "compaction.apply", "exception exception.message"),
    ("event attribute", "compaction.apply", "exception exception.stacktrace"),
    (
        "event attribute",
        "compaction.apply",
        "compaction.summary.rejected compaction.summary.missing",
    ),
    ("span attribute", "compaction.evaluate", "output.value"),  # the decision, as it reads
    ("span attribute", "compaction.apply", "output.value"),  # the summary
    *(
        ("event attribute", "compaction.evaluate", f"{event} compaction.obligation.ids")
        for event in ("compaction.compacted", "compaction.deferred", "compaction.refused")
    ),
}
"""(signal, span name or its first word, key): where the README says content goes."""


def shape(place: Place) -> tuple[str, str, str]:
    """A place with the span's name cut to its first word (``execute_tool``, ``tool_result``)."""
    return (place.signal, place.owner.split(" ")[0], place.key)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def calls(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def tool(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


TRANSCRIPT = [
    user(f"Find booking {BOOKING}, tell {EMAIL}; the config is {PATH}."),
    calls("c1", "lookup_booking", {"code": BOOKING, "mail": EMAIL}),
    tool("c1", NEGATIVE),
    calls("c2", "read_file", {"path": PATH}),
    tool("c2", f"{PATH}: owner {EMAIL}, booking {BOOKING}"),
    {"role": "assistant", "content": f"Booking {BOOKING} is missing; {EMAIL} owns {PATH}."},
    user(f"Then write to {EMAIL} about {BOOKING} and {PATH}."),
    calls("c3", "send_mail", {"to": EMAIL, "about": BOOKING}),
]
"""A negative result, three identifiers minted early and used later, and an open call."""


@dataclass
class Scan:
    """One pipeline and the package's log records while a scenario ran."""

    pipeline: Pipeline
    logs: LogRecords

    def places(self) -> set[Place]:
        return places(
            MARKER,
            self.pipeline.exporter.get_finished_spans(),
            self.pipeline.reader.get_metrics_data(),
            self.logs.records,
        )


@pytest.fixture(params=[False, True], ids=["capture-off", "capture-on"])
def capture(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Content capture as the environment sets it, for every part (the compactor and the
    instrumentation read it too)."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", str(request.param))
    for name in ("OTEL_COMPACTION_POLICY", "OTEL_COMPACTION_DETECTION"):
        monkeypatch.delenv(name, raising=False)
    return bool(request.param)


@pytest.fixture
def scan(capture: bool) -> Iterator[Scan]:
    pipeline = make_pipeline(agent_name="planner")
    with logged() as logs:
        yield Scan(pipeline, logs)
    pipeline.shutdown()


def check(scan: Scan, capture: bool, required: set[tuple[str, str, str]]) -> None:
    """Capture off: the marker nowhere. Capture on: only where the README allows it, and at
    least in the `required` places."""
    found = scan.places()
    if not capture:
        assert sorted(found) == []
        return
    assert sorted(p for p in found if shape(p) not in ALLOWED_WITH_CAPTURE) == []
    assert required <= {shape(p) for p in found}


# -- the recorder --------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_the_recorder(scan: Scan, capture: bool, policy: str) -> None:
    recorder = scan.pipeline.recorder
    telemetry = scan.pipeline.telemetry
    with conversation("conv-recorder"):
        recorder.call("lookup_booking", "r1", arguments={"code": BOOKING}).result(NEGATIVE)
        recorder.call("send_mail", "r2", arguments={"to": EMAIL}).error(OSError(FAILURE), PATH)
        recorder.call("read_file", "r3", arguments={"path": PATH}).abandon("cancelled")
        recorder.call("read_file", "r4", arguments={"path": PATH})
        assert recorder.resolve("r4", f"{PATH} is empty")

        @recorder.tool()
        def send_mail(to: str) -> str:
            raise ValueError(f"{to} bounced")

        with pytest.raises(ValueError, match="bounced"):
            send_mail(EMAIL)
        with pytest.raises(KeyError), recorder.transaction("refund"):
            raise KeyError(BOOKING)
        chain = recorder.retry_chain("deploy")
        chain.attempt_failed(TimeoutError(PATH))
        chain.succeeded()
        telemetry.gate(policy).evaluate(TRANSCRIPT[:5], 0, 3, raise_on_refuse=False)

    check(scan, capture, {TOOL_ARGUMENTS, TOOL_RESULT, CALL_STATUS, RESULT_STATUS})


# -- the gate ------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_the_gate(scan: Scan, capture: bool, policy: str) -> None:
    gate = scan.pipeline.telemetry.gate(policy)
    actions = [
        gate.evaluate(TRANSCRIPT, 0, 3, raise_on_refuse=False).action,
        gate.evaluate(TRANSCRIPT, 0, 5, raise_on_refuse=False).action,
        gate.evaluate(TRANSCRIPT, 0, 8, raise_on_refuse=False).action,
    ]
    with pytest.raises(CompactionRefused):
        gate.evaluate(TRANSCRIPT, 0, 8, critical=True)

    assert actions == {"default": ["compact", "compact", "defer"], "strict": ["refuse"] * 3}[policy]
    required = set()
    if policy == "strict":  # the identifier's own value is the reference's id
        first = scan.pipeline.spans("compaction.evaluate")[0]
        [refused] = [e for e in first.events if e.name == "compaction.refused"]
        shown = PATH if capture else "reference@0"  # without capture: where it is first seen
        assert (refused.attributes or {})["compaction.obligation.ids"] == (shown, "0:3")
        ids = (
            "event attribute",
            "compaction.evaluate",
            "compaction.refused compaction.obligation.ids",
        )
        required = {ids}
    check(scan, capture, required)


# -- the compactor -------------------------------------------------------------------------------


class Forgetful:
    """Writes a summary that drops every identifier and the negative result."""

    def summarize(self, request: SummaryRequest) -> str:
        return "Summary: a booking was looked up and a file was read."


@pytest.mark.parametrize("policy", POLICIES)
def test_the_compactor(scan: Scan, capture: bool, policy: str, tmp_path: Path) -> None:
    with Archive(tmp_path / "archive.db") as archive:
        compactor = GuardedCompactor(
            Forgetful(),
            budget=10_000,
            policy=policy,
            telemetry=scan.pipeline.telemetry,
            archive=archive,
        )
        messages = TRANSCRIPT[:7]
        if policy == "strict":  # a summary that fails verification is refused
            with pytest.raises(CompactionRefused, match="failed verification"):
                compactor.compact(messages, force=True, end=5, conversation_id="conv-c")
        else:  # and held verbatim by default, with what it lost named
            result = compactor.compact(messages, force=True, end=5, conversation_id="conv-c")
            assert result.compacted is False and result.verification is not None
            assert not result.verification.ok
        with pytest.raises(CompactionRefused) as refused:
            compactor.compact(TRANSCRIPT, force=True, critical=True, end=8, conversation_id="c")
        compactor.force_terminal(refused.value)

    missing = (
        "event attribute",
        "compaction.apply",
        "compaction.summary.rejected compaction.summary.missing",
    )
    failed = ("status", "compaction.apply", "description")
    check(scan, capture, {failed if policy == "strict" else missing})


# -- the openai and anthropic SDKs -----------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_the_sdk_instrumentation(scan: Scan, capture: bool, policy: str, api: Api) -> None:
    require_sdks()
    instrumentor = CompactionInstrumentor()
    instrumentor.instrument(telemetry=scan.pipeline.telemetry, policy=policy)
    try:
        with FakeLLMServer() as server:
            agent = Agent(server, api, system=f"Mail {EMAIL} first.", user=TRANSCRIPT[0]["content"])
            lookup = ToolCall("lookup_booking", {"code": BOOKING, "mail": EMAIL}, id="call_1")
            agent.script(lookup)
            agent.ask()
            agent.history.append(agent.result("call_1", NEGATIVE))
            agent.script(ToolCall("read_file", {"path": PATH}, id="call_2"))
            agent.ask()
            # A compactor cut the read while it was owed; the model repeats the lookup.
            agent.history[1:] = [agent.summary(f"Summary: {BOOKING} not found; {EMAIL}.")]
            agent.script(ToolCall("lookup_booking", {"code": BOOKING, "mail": EMAIL}, id="call_3"))
            agent.ask()
            agent.history.append(agent.result("call_3", FAILURE, error=True))
            agent.history.append(agent.result("call_2", f"{PATH}: empty"))
            agent.script(text=f"Done: {BOOKING} is gone.")
            agent.ask()
            server.enqueue_error(api, 400, f"invalid value {EMAIL}", type="invalid_request_error")
            with pytest.raises(Exception, match="invalid value"):
                agent.ask()
            gate = instrumentor.gate
            assert gate is not None
            gate.evaluate(TRANSCRIPT, 0, 8, raise_on_refuse=False)
    finally:
        instrumentor.uninstrument()

    check(scan, capture, {TOOL_ARGUMENTS, TOOL_RESULT})


def lookup_booking(code: str) -> str:
    """Look a booking up."""
    return f"no booking {code} found"


def mailbox_full(to: str) -> str:
    """What sending a mail to `to` fails with."""
    return f"mailbox {to} is full"


# -- LangChain -----------------------------------------------------------------------------------


def langchain_scenario(scan: Scan, policy: str) -> None:
    try:
        from langchain.agents import create_agent
        from langchain.agents.middleware import AgentState
        from langchain_core.language_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        from langchain_core.tools import ToolException, tool
        from langgraph.runtime import Runtime

        from otel_compaction.integrations import langchain as lc
    except ImportError as missing:
        require_framework(missing, "langchain>=1.0 (with langgraph)", "langchain")
        return

    class Model(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    @tool
    def send_mail(to: str) -> str:
        """Send a mail."""
        raise ToolException(mailbox_full(to))

    send_mail.handle_tool_error = True

    lc.instrument(scan.pipeline.telemetry, policy=policy)
    try:
        emitted = AIMessage(
            content=f"Looking up {BOOKING}.",
            tool_calls=[
                {
                    "name": "lookup_booking",
                    "args": {"code": BOOKING},
                    "id": "l1",
                    "type": "tool_call",
                },
                {"name": "send_mail", "args": {"to": EMAIL}, "id": "l2", "type": "tool_call"},
            ],
        )
        model = Model(messages=iter([emitted, f"{BOOKING} is gone; {EMAIL} is full."]))
        agent = create_agent(model, tools=[tool(lookup_booking), send_mail])
        agent.invoke(
            {"messages": [HumanMessage(TRANSCRIPT[0]["content"])]},
            {"configurable": {"thread_id": "lc-1"}},
        )
        promise = AIMessage(content=f"I'll verify {PATH} before writing to {EMAIL}.")
        history = [
            HumanMessage(TRANSCRIPT[0]["content"], id="h0"),
            AIMessage(content="", tool_calls=emitted.tool_calls, id="h1"),
            ToolMessage(NEGATIVE, tool_call_id="l1", id="h2"),
            ToolMessage(FAILURE, tool_call_id="l2", status="error", id="h3"),
            promise.model_copy(update={"id": "h4"}),
            HumanMessage(f"Go on with {BOOKING}.", id="h5"),
            AIMessage(content="", tool_calls=[emitted.tool_calls[0] | {"id": "l3"}], id="h6"),
        ]
        for critical in (None, ("tokens", 10)):
            guarded = lc.GuardedSummarizationMiddleware(
                ("tokens", 10), ("messages", 2), policy=policy, critical=critical,
                telemetry=scan.pipeline.telemetry, on_refuse="hold",
            )  # fmt: skip
            state = cast("AgentState[Any]", {"messages": history})
            guarded.before_model(state, cast("Runtime[Any]", None))
    finally:
        lc.uninstrument()


@pytest.mark.parametrize("policy", POLICIES)
def test_langchain(scan: Scan, capture: bool, policy: str) -> None:
    langchain_scenario(scan, policy)
    check(scan, capture, {TOOL_ARGUMENTS, TOOL_RESULT})


# -- the OpenAI Agents SDK -------------------------------------------------------------------------


def agents_scenario(scan: Scan) -> None:
    try:
        from agents import Agent as SdkAgent
        from agents import (
            RunConfig,
            Runner,
            function_tool,
            set_trace_processors,
            set_tracing_disabled,
        )
        from agents_sdk import ScriptedModel, call, text

        from otel_compaction.integrations.openai_agents import ObligationTracingProcessor
    except ImportError as missing:
        require_framework(missing, "the OpenAI Agents SDK (openai-agents)", "agents")
        return

    model = ScriptedModel(
        [call("a1", "lookup_booking", code=BOOKING), call("a2", "send_mail", to=EMAIL)],
        [text(f"{BOOKING}: gone")],
    )

    @function_tool
    def send_mail(to: str) -> str:
        """Send a mail."""
        raise RuntimeError(mailbox_full(to))

    set_tracing_disabled(False)
    set_trace_processors([ObligationTracingProcessor(scan.pipeline.recorder)])
    try:
        agent = SdkAgent(name="ops", model=model, tools=[function_tool(lookup_booking), send_mail])
        asyncio.run(
            Runner.run(agent, TRANSCRIPT[0]["content"], run_config=RunConfig(group_id="ag"))
        )
    finally:
        set_trace_processors([])


@pytest.mark.parametrize("policy", POLICIES)
def test_the_agents_sdk(scan: Scan, capture: bool, policy: str) -> None:
    agents_scenario(scan)
    scan.pipeline.telemetry.gate(policy).evaluate(TRANSCRIPT, 0, 8, raise_on_refuse=False)
    check(scan, capture, {TOOL_RESULT})


# -- MCP -----------------------------------------------------------------------------------------

MCP_SERVER = '''
from mcp.server.fastmcp import FastMCP

app = FastMCP("content", log_level="WARNING")


@app.tool()
def lookup_booking(code: str) -> str:
    """Look a booking up."""
    return f"no booking {code} found"


@app.tool()
def send_mail(to: str) -> str:
    """Fail: the server answers with a result that says isError."""
    raise ValueError(f"mailbox {to} is full")


if __name__ == "__main__":
    app.run("stdio")
'''


def mcp_scenario(scan: Scan, server: Path) -> None:
    try:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        from otel_compaction.instrumentation import mcp as mcp_integration
    except ImportError as missing:
        require_framework(missing, "the mcp package", "mcp")
        return

    async def run() -> None:
        params = StdioServerParameters(command=sys.executable, args=[str(server)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            assert not (await session.call_tool("lookup_booking", {"code": BOOKING})).isError
            assert (await session.call_tool("send_mail", {"to": EMAIL})).isError

    assert mcp_integration.instrument(scan.pipeline.telemetry)
    try:
        with conversation("mcp-1"):
            asyncio.run(run())
    finally:
        mcp_integration.uninstrument()


@pytest.mark.parametrize("policy", POLICIES)
def test_mcp(scan: Scan, capture: bool, policy: str, tmp_path: Path) -> None:
    server = tmp_path / "server.py"
    server.write_text(MCP_SERVER, encoding="utf-8")
    mcp_scenario(scan, server)
    scan.pipeline.telemetry.gate(policy).evaluate(TRANSCRIPT, 0, 8, raise_on_refuse=False)
    check(scan, capture, {TOOL_ARGUMENTS, TOOL_RESULT})


def test_the_scan_sees_every_kind_of_signal(scan: Scan) -> None:
    """The scan itself: a marker on each kind of signal is found there."""
    from opentelemetry.trace import Link, Status, StatusCode

    tracer = scan.pipeline.tracer_provider.get_tracer("scan-test")
    with tracer.start_as_current_span(f"named {MARKER}") as first:
        pass
    with tracer.start_as_current_span(
        "carrier",
        attributes={"plain": MARKER, "listed": ["x", EMAIL]},
        links=[Link(first.get_span_context(), {"linked": PATH})],
    ) as span:
        span.add_event("told", {"what": BOOKING})
        span.add_event(f"event {MARKER}")
        span.set_status(Status(StatusCode.ERROR, FAILURE))
    counter = scan.pipeline.meter_provider.get_meter("scan-test").create_counter("c")
    counter.add(1, {"tool": EMAIL})
    import logging

    logging.getLogger("otel_compaction.scan").debug("seen %s", PATH)
    try:
        raise ValueError(BOOKING)
    except ValueError:
        logging.getLogger("otel_compaction.scan").exception("failed")

    assert sorted(scan.places()) == [
        Place("event attribute", "carrier", "told what"),
        Place("event name", "carrier", f"event {MARKER}"),
        Place("link attribute", "carrier", "linked"),
        Place("log", "otel_compaction.scan", "failed"),
        Place("log", "otel_compaction.scan", "seen %s"),
        Place("metric attribute", "c", "tool"),
        Place("span attribute", "carrier", "listed"),
        Place("span attribute", "carrier", "plain"),
        Place("span name", f"named {MARKER}", ""),
        Place("status", "carrier", "description"),
    ]
