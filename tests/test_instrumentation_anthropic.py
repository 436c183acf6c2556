"""The real ``anthropic`` client, auto-instrumented, against the loopback fake Messages API.

Messages, sync and async, as JSON, as the raw event stream (``create(stream=True)``) and
through the SDK's ``messages.stream()`` helper (whose request is sent only when the manager is
entered): ``tool_use`` blocks open obligations linked to the request that emitted them,
``tool_result`` blocks in a later request resolve them (``is_error`` as an error), and what a
compactor cut is detected. Server tools, run inside the response, owe nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import pytest
from fake_llm_server import (
    FakeLLMServer,
    RawReply,
    ToolCall,
)
from instrumentation_harness import (
    MODEL,
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
from llm_clients import anthropic_client, async_anthropic_client
from opentelemetry.trace import StatusCode

from otel_compaction.telemetry import semconv as sc

with contextlib.suppress(ImportError):  # the ``instrumented`` fixture skips, or fails in CI
    import anthropic

IDS = ScenarioIds(restart="toolu_restart_1", check="toolu_check_1", again="toolu_restart_2")


@pytest.mark.parametrize("style", ["json", "stream", "helper"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_calls_results_and_compaction_damage_are_recorded(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer, mode: Mode, style: Style
) -> None:
    agent = Agent(fake_llm_server, "messages", mode, style)

    run_compaction_scenario(agent, instrumented, IDS)

    assert scenario_summary(instrumented) == expected_scenario(
        "messages", IDS, streamed=style != "json"
    )
    assert fake_llm_server.pending() == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_error_result_resolves_the_call_as_an_error(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer, mode: Mode
) -> None:
    agent = Agent(fake_llm_server, "messages", mode)
    agent.script(ToolCall("deploy", {"version": "1.2"}, id="toolu_d1"))
    agent.ask()
    agent.history.append(agent.result("toolu_d1", "permission denied", error=True))
    agent.script(text="It failed.")
    agent.ask()

    call = instrumented.pipeline.span("execute_tool deploy")
    result = instrumented.pipeline.span("tool_result deploy")
    assert (call.attributes or {})[sc.OBLIGATION_STATUS] == "error"
    assert call.status.status_code is StatusCode.ERROR
    assert (result.attributes or {})[sc.ERROR_TYPE] == "_OTHER"
    ledger = instrumented.pipeline.ledger
    [conversation_id] = ledger.conversations()
    [record] = ledger.snapshot(conversation_id).obligations
    assert (record.id, record.status) == ("toolu_d1", "error")


def test_server_tools_owe_nothing(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    content = [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": "x"}},
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": [],
        },
        {"type": "tool_use", "id": "toolu_c1", "name": "calendar", "input": {"day": "mon"}},
    ]
    fake_llm_server.enqueue_reply(
        "messages",
        RawReply(
            {
                "id": "msg_raw_1",
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": content,
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 10},
            }
        ),
    )
    with anthropic_client(fake_llm_server) as client:
        message = client.messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": USER}]
        )
    assert [block.type for block in message.content][-1] == "tool_use"
    [call] = instrumented.pipeline.ledger.open_obligations()
    assert (call.id, call.name) == ("toolu_c1", "calendar")
    [span] = request_spans(instrumented.spans())
    assert (span.attributes or {})[sc.GEN_AI_RESPONSE_ID] == "msg_raw_1"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sdk_errors_pass_through_the_stream_helper_unchanged(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer, mode: Mode
) -> None:
    fake_llm_server.enqueue_error("messages", 529, "overloaded", type="overloaded_error")
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": USER}],
    }

    async def ask_async() -> None:
        async with (
            async_anthropic_client(fake_llm_server) as client,
            client.messages.stream(**kwargs) as events,
        ):
            await events.get_final_message()

    with pytest.raises(anthropic.APIStatusError, match="overloaded") as raised:
        if mode == "sync":
            with anthropic_client(fake_llm_server) as client, client.messages.stream(**kwargs):
                pass
        else:
            asyncio.run(ask_async())

    assert raised.value.status_code == 529
    [span] = request_spans(instrumented.spans())
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})[sc.ERROR_TYPE] == type(raised.value).__qualname__


def test_the_stream_helper_records_the_request_when_it_is_sent(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    fake_llm_server.enqueue("messages", tool_calls=[ToolCall("search", {"q": "a long query"})])
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": USER}],
    }
    with anthropic_client(fake_llm_server) as client:
        manager = client.messages.stream(**kwargs)
        assert request_spans(instrumented.spans()) == []
        assert fake_llm_server.requests == []  # nothing sent before the manager is entered
        with manager as events:
            first = next(iter(events))  # then left early: closed before the stop reason
    assert first.type == "message_start"
    [span] = request_spans(instrumented.spans())
    assert (span.attributes or {})[sc.RESPONSE_TOOL_CALLS] == 0
    assert instrumented.pipeline.ledger.open_obligations() == ()


def test_an_unknown_stream_manager_is_returned_untouched(
    instrumented: Instrumented, caplog: pytest.LogCaptureFixture
) -> None:
    from otel_compaction.instrumentation import _anthropic

    runtime = instrumented.instrumentor._runtime
    assert runtime is not None
    wrapper = _anthropic._stream_manager(runtime, is_async=False)
    shaped_otherwise = object()
    with caplog.at_level(logging.DEBUG, logger="otel_compaction"):
        assert wrapper(lambda: shaped_otherwise, None, (), {}) is shaped_otherwise
    assert "stream manager not recognised" in caplog.text


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_parse_is_instrumented_like_create(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer, mode: Mode
) -> None:
    fake_llm_server.enqueue("messages", tool_calls=[ToolCall("lookup", {"a": 1}, id="toolu_p1")])
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": USER}],
    }

    async def parse_async() -> Any:
        async with async_anthropic_client(fake_llm_server) as client:
            return await client.messages.parse(**kwargs)

    if mode == "sync":
        with anthropic_client(fake_llm_server) as client:
            message = client.messages.parse(**kwargs)
    else:
        message = asyncio.run(parse_async())

    assert [block.type for block in message.content] == ["tool_use"]
    [call] = instrumented.pipeline.ledger.open_obligations()
    assert (call.id, call.name) == ("toolu_p1", "lookup")
