"""MCP client tool calls as obligations, against a real MCP server over stdio.

The server is the ``mcp`` package's ``FastMCP``, run as a subprocess; the client is the real
``ClientSession`` over ``stdio_client``. One scenario (a result, a tool error, a JSON-RPC
error, a timeout, a cancellation, then a result again on the same session) runs once without
instrumentation and once with it: the host must see the same results and the same exceptions,
and the instrumented run must leave exactly the spans and ledger records asserted here.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from frameworks import require_framework
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from telemetry_harness import Pipeline, ledger_rows, make_pipeline

from otel_compaction import conversation
from otel_compaction.instrumentation import mcp as mcp_integration
from otel_compaction.telemetry import semconv as sc

try:
    import mcp.client.session as mcp_session_module
    import mcp.shared.exceptions as mcp_exceptions
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.shared.exceptions import McpError
except ImportError as missing:
    MCP_MISSING: ImportError | None = missing
else:
    MCP_MISSING = None

require_framework(MCP_MISSING, "the mcp package", "mcp")

SERVER = '''
"""A FastMCP server for the MCP integration tests, spoken to over stdio."""
import asyncio

from mcp.server.fastmcp import FastMCP

try:
    from mcp.shared.exceptions import UrlElicitationRequiredError
    from mcp.types import ElicitRequestURLParams
except ImportError:  # older mcp: no JSON-RPC error a tool can raise on purpose
    UrlElicitationRequiredError = None

app = FastMCP("obligations", log_level="WARNING")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@app.tool()
def fail(reason: str) -> str:
    """Raise: the server answers with a result that says isError."""
    raise ValueError(reason)


@app.tool()
async def slow(seconds: float) -> str:
    """Answer after `seconds`."""
    await asyncio.sleep(seconds)
    return "late"


@app.tool()
async def wait() -> str:
    """Answer after a long time: the client gives up first."""
    await asyncio.sleep(30)
    return "never seen"


@app.tool()
def sign_in() -> str:
    """Answer with a JSON-RPC error (URL elicitation required)."""
    if UrlElicitationRequiredError is None:
        raise RuntimeError("unsupported")
    raise UrlElicitationRequiredError(
        [ElicitRequestURLParams(mode="url", message="sign in", url="http://127.0.0.1/auth",
                                elicitationId="e1")]
    )


if __name__ == "__main__":
    app.run("stdio")
'''

CONVERSATION = "mcp-conversation"
CALL_ID = re.compile(r"^mcp-[0-9a-f]{8}-(\d+)$")
JSON_RPC_ERRORS = hasattr(mcp_exceptions, "UrlElicitationRequiredError")

Outcome = tuple[str, Any]
"""What the host saw for one step: ("result", the result as JSON), ("raised", (exception type,
JSON-RPC code, message)) or ("cancelled", None)."""


@dataclass
class Run:
    """One run of the scenario: what the host saw and, when instrumented, the telemetry."""

    outcomes: dict[str, Outcome]
    pipeline: Pipeline | None


async def _outcome(step: Awaitable[Any]) -> Outcome:
    try:
        result = await step
    except McpError as exc:
        return ("raised", (type(exc).__qualname__, exc.error.code, exc.error.message))
    return ("result", result.model_dump(mode="json"))


async def _cancelled(session: ClientSession) -> Outcome:
    task = asyncio.create_task(session.call_tool("wait", {}))
    await asyncio.sleep(0.3)  # the request is out and the server is waiting
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return ("cancelled", None)
    return ("result", "not cancelled")


async def _scenario(server: Path) -> dict[str, Outcome]:
    params = StdioServerParameters(command=sys.executable, args=[str(server)])
    outcomes: dict[str, Outcome] = {}
    with conversation(CONVERSATION):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            outcomes["add"] = await _outcome(session.call_tool("add", {"a": 2, "b": 3}))
            outcomes["fail"] = await _outcome(session.call_tool("fail", {"reason": "disk full"}))
            if JSON_RPC_ERRORS:
                outcomes["sign_in"] = await _outcome(session.call_tool("sign_in", {}))
            outcomes["slow"] = await _outcome(
                session.call_tool(
                    "slow", {"seconds": 3}, read_timeout_seconds=timedelta(seconds=0.2)
                )
            )
            outcomes["wait"] = await _cancelled(session)
            outcomes["again"] = await _outcome(session.call_tool("add", arguments={"a": 1, "b": 1}))
    return outcomes


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server script, written to a temporary directory."""
    path = tmp_path_factory.mktemp("mcp") / "server.py"
    path.write_text(SERVER, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def plain(server: Path) -> Run:
    """The scenario without instrumentation."""
    mcp_integration.uninstrument()
    return Run(asyncio.run(_scenario(server)), None)


@pytest.fixture(scope="module")
def instrumented(server: Path, plain: Run) -> Iterator[Run]:
    """The scenario with instrumentation (content capture on), after the plain run."""
    pipeline = make_pipeline(capture_content=True)
    assert mcp_integration.instrument(pipeline.telemetry)
    try:
        outcomes = asyncio.run(_scenario(server))
    finally:
        mcp_integration.uninstrument()
    yield Run(outcomes, pipeline)
    pipeline.shutdown()


def _pipeline(run: Run) -> Pipeline:
    assert run.pipeline is not None
    return run.pipeline


def _spans(run: Run, prefix: str, tool: str) -> list[ReadableSpan]:
    return _pipeline(run).spans(f"{prefix} {tool}")


def _result_of(run: Run, tool: str, index: int = 0) -> ReadableSpan:
    return _spans(run, sc.TOOL_RESULT_SPAN, tool)[index]


def _call_of(run: Run, tool: str, index: int = 0) -> ReadableSpan:
    return _spans(run, sc.EXECUTE_TOOL, tool)[index]


def test_the_host_sees_exactly_what_it_sees_without_instrumentation(
    plain: Run, instrumented: Run
) -> None:
    assert instrumented.outcomes == plain.outcomes
    assert plain.outcomes["add"][0] == "result"
    assert plain.outcomes["add"][1]["isError"] is False
    assert plain.outcomes["fail"][1]["isError"] is True
    assert plain.outcomes["slow"] == (
        "raised",
        (
            "McpError",
            408,
            "Timed out while waiting for response to ClientRequest. Waited 0.2 seconds.",
        ),
    )
    assert plain.outcomes["wait"] == ("cancelled", None)
    assert plain.outcomes["again"][1]["content"][0]["text"] == "2"


def test_every_call_is_an_obligation_resolved_exactly_once(instrumented: Run) -> None:
    ledger = _pipeline(instrumented).ledger
    rows = ledger_rows(ledger, CONVERSATION)
    expected = [("add", "result"), ("fail", "error")]
    expected += [("sign_in", "error")] if JSON_RPC_ERRORS else []
    expected += [("slow", "abandoned"), ("wait", "abandoned"), ("add", "result")]
    assert [(row[2], row[5]) for row in rows] == expected
    assert {row[0] for row in rows} == {"tool_call"}
    assert {row[3] for row in rows} == {CONVERSATION}
    assert ledger.open_obligations() == ()


def test_call_ids_are_the_json_rpc_ids_of_one_session(instrumented: Run) -> None:
    ids = [row[1] for row in ledger_rows(_pipeline(instrumented).ledger, CONVERSATION)]
    matches = [CALL_ID.match(call_id) for call_id in ids]
    assert all(matches), ids
    assert len({call_id.split("-")[1] for call_id in ids}) == 1  # one session, one tag
    numbers = [int(match.group(1)) for match in matches if match]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)


def test_a_result_is_a_linked_result_span(instrumented: Run) -> None:
    call, result = _call_of(instrumented, "add"), _result_of(instrumented, "add")
    call_id = call.attributes[sc.GEN_AI_TOOL_CALL_ID] if call.attributes else None
    assert dict(call.attributes or {}) == {
        sc.GEN_AI_OPERATION_NAME: sc.EXECUTE_TOOL,
        sc.GEN_AI_TOOL_NAME: "add",
        sc.GEN_AI_TOOL_CALL_ID: call_id,
        sc.GEN_AI_TOOL_TYPE: "extension",
        sc.GEN_AI_CONVERSATION_ID: CONVERSATION,
        sc.GEN_AI_TOOL_CALL_ARGUMENTS: '{"a": 2, "b": 3}',
        sc.OBLIGATION_STATUS: "result",
    }
    assert dict(result.attributes or {}) == {  # no gen_ai.operation.name: not an execution
        sc.GEN_AI_TOOL_NAME: "add",
        sc.GEN_AI_TOOL_CALL_ID: call_id,
        sc.OBLIGATION_STATUS: "result",
        sc.GEN_AI_CONVERSATION_ID: CONVERSATION,
        sc.GEN_AI_TOOL_CALL_RESULT: '{"result": 5}',
    }
    assert [link.context.span_id for link in result.links] == [call.context.span_id]
    assert call.status.status_code == StatusCode.UNSET


def test_a_tool_error_is_an_error_resolution(instrumented: Run) -> None:
    call, result = _call_of(instrumented, "fail"), _result_of(instrumented, "fail")
    assert (result.attributes or {})[sc.OBLIGATION_STATUS] == "error"
    assert (result.attributes or {})[sc.ERROR_TYPE] == mcp_integration.TOOL_ERROR
    assert (result.attributes or {})[sc.GEN_AI_TOOL_CALL_RESULT] == (
        "Error executing tool fail: disk full"
    )
    assert (call.attributes or {})[sc.ERROR_TYPE] == mcp_integration.TOOL_ERROR
    assert call.status.status_code == StatusCode.ERROR


@pytest.mark.skipif(not JSON_RPC_ERRORS, reason="this mcp version has no JSON-RPC tool error")
def test_a_json_rpc_error_is_an_error_resolution(instrumented: Run) -> None:
    call, result = _call_of(instrumented, "sign_in"), _result_of(instrumented, "sign_in")
    assert (result.attributes or {})[sc.OBLIGATION_STATUS] == "error"
    assert (result.attributes or {})[sc.ERROR_TYPE] == "McpError"
    assert call.status.status_code == StatusCode.ERROR
    assert call.status.description == "URL elicitation required"


@pytest.mark.parametrize(("tool", "reason"), [("slow", "timeout"), ("wait", "cancelled")])
def test_a_timeout_or_a_cancellation_abandons_the_call(
    instrumented: Run, tool: str, reason: str
) -> None:
    call, result = _call_of(instrumented, tool), _result_of(instrumented, tool)
    assert (result.attributes or {})[sc.OBLIGATION_STATUS] == "abandoned"
    assert (result.attributes or {})[sc.ABANDON_REASON] == reason
    assert sc.ERROR_TYPE not in (result.attributes or {})
    assert (call.attributes or {})[sc.OBLIGATION_STATUS] == "abandoned"
    assert [(e.name, dict(e.attributes or {})) for e in call.events] == [
        (sc.EVENT_ABANDONED, {sc.ABANDON_REASON: reason})
    ]
    assert call.status.status_code == StatusCode.UNSET  # abandonment is not a crash


def _one_call(server: Path) -> Outcome:
    """``add(20, 22)`` on a fresh session."""

    async def one_call() -> Outcome:
        params = StdioServerParameters(command=sys.executable, args=[str(server)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await _outcome(session.call_tool("add", {"a": 20, "b": 22}))

    return asyncio.run(one_call())


def test_instrument_is_idempotent_and_uninstrument_restores_call_tool(
    server: Path, instrumented: Run
) -> None:
    original = mcp_session_module.ClientSession.__dict__["call_tool"]
    pipeline = make_pipeline()
    try:
        assert mcp_integration.instrument(pipeline.telemetry)
        assert mcp_integration.instrument(pipeline.telemetry)
        assert mcp_integration.is_instrumented()
        assert _one_call(server)[1]["structuredContent"] == {"result": 42}
        assert [row[5] for row in ledger_rows(pipeline.ledger, None)] == ["result"]
        mcp_integration.uninstrument()
        mcp_integration.uninstrument()
        assert not mcp_integration.is_instrumented()
        assert mcp_session_module.ClientSession.__dict__["call_tool"] is original
        _one_call(server)
        assert len(ledger_rows(pipeline.ledger, None)) == 1  # nothing recorded once removed
    finally:
        mcp_integration.uninstrument()
        pipeline.shutdown()


def test_a_telemetry_failure_never_reaches_the_host(
    server: Path,
    instrumented: Run,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pipeline = make_pipeline()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("ledger on fire")

    try:
        assert mcp_integration.instrument(pipeline.telemetry)
        monkeypatch.setattr(pipeline.telemetry.recorder, "call", broken)
        with caplog.at_level(logging.ERROR, logger=mcp_integration.__name__):
            outcome = _one_call(server)
        assert outcome[1]["structuredContent"] == {"result": 42}
        assert "recording an MCP tool call failed" in caplog.text
    finally:
        mcp_integration.uninstrument()
        pipeline.shutdown()
