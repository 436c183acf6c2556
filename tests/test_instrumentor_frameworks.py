"""The instrumentor and the framework integrations: one obligation per tool call.

`CompactionInstrumentor` turns on the LangChain, MCP and Agents SDK integrations through
post-import hooks (``OTEL_COMPACTION_FRAMEWORKS`` selects them) and turns them off again. When
the OpenAI SDK wrapper and a framework both see a tool call, the recorder keeps one obligation
(the first layer's) and the first resolution wins: a real ``create_agent`` over the real
``ChatOpenAI`` against the loopback fake model records each call exactly once, with no severed
or orphaned findings.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from fake_llm_server import (
    FakeLLMServer,
    ToolCall,
)
from frameworks import integrations, integrations_off, require_framework
from llm_clients import API_KEY, require_sdks
from pydantic import SecretStr
from telemetry_harness import Pipeline, make_pipeline

from otel_compaction import ToolCallRecorder
from otel_compaction.instrumentation import CompactionInstrumentor
from otel_compaction.instrumentation._settings import FRAMEWORKS, frameworks
from otel_compaction.ledger import ObligationLedger
from otel_compaction.telemetry import semconv as sc

try:
    import agents  # noqa: F401 - imported so the post-import hook fires
    import langchain_core  # noqa: F401
    import mcp  # noqa: F401
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    from otel_compaction.instrumentation import mcp as mcp_integration
    from otel_compaction.integrations import langchain as lc
except ImportError as error:
    MISSING: ImportError | None = error
else:
    MISSING = None
require_framework(MISSING, "langchain, langchain-openai, mcp and openai-agents", "test")

_ENV = (
    sc.FRAMEWORKS_ENV,
    sc.CAPTURE_CONTENT_ENV,
    sc.POLICY_ENV,
    sc.DETECTION_ENV,
    sc.AGENT_NAME_ENV,
    "OTEL_COMPACTION_GUARD_LANGCHAIN_SUMMARIZATION",
)


def _states() -> dict[str, bool]:
    return {name: module.is_instrumented() for name, module in integrations().items()}


@pytest.fixture(name="pipeline")
def pipeline_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    """A pipeline, the environment cleared and every integration off before and after."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    integrations_off()
    pipeline = make_pipeline()
    try:
        yield pipeline
    finally:
        integrations_off()
        pipeline.shutdown()


@pytest.fixture(name="instrumentor")
def instrumentor_fixture() -> Iterator[CompactionInstrumentor]:
    instrumentor = CompactionInstrumentor()
    try:
        yield instrumentor
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()


# -- the recorder: one obligation per call id across layers ---------------------------------------


def test_a_call_seen_by_two_layers_is_one_obligation_resolved_once() -> None:
    recorder = ToolCallRecorder(ledger=ObligationLedger())
    first = recorder.call("search", "call_1", conversation_id="conv-a", layer="sdk")
    second = recorder.call("search", "call_1", conversation_id="conv-a", layer="langchain")
    assert second is first
    assert [o.id for o in recorder.ledger.snapshot("conv-a").obligations] == ["call_1"]

    second.result("found")  # the framework's tool ended
    assert recorder.resolve("call_1", "found", conversation_id="conv-a") is False  # the SDK's
    first.error("late")  # ignored: the first resolution won
    (record,) = recorder.ledger.snapshot("conv-a").obligations
    assert (record.status, recorder.ledger.open_obligations()) == ("result", ())


def test_another_conversation_joins_the_first_layers_call() -> None:
    recorder = ToolCallRecorder(ledger=ObligationLedger())
    first = recorder.call("search", "call_1", conversation_id="derived:abc", layer="sdk")
    second = recorder.call("search", "call_1", conversation_id="thread-7", layer="langchain")
    assert second is first and second.conversation_id == "derived:abc"
    assert recorder.ledger.conversations() == ("derived:abc",)
    assert recorder.resolve("call_1", "ok", conversation_id="derived:abc")
    assert second.resolved and recorder.ledger.open_obligations() == ()


def test_a_resolved_id_reused_is_a_new_obligation() -> None:
    recorder = ToolCallRecorder(ledger=ObligationLedger())
    first = recorder.call("search", "call_1", conversation_id="c", layer="sdk")
    first.result("one")
    again = recorder.call("search", "call_1", conversation_id="c", layer="langchain")
    assert again is not first
    joined = recorder.call("search", "call_1", conversation_id="c", layer="sdk")
    assert joined is again  # the other layer's open call
    again.result("two")
    assert [(o.id, o.status) for o in recorder.ledger.snapshot("c").obligations] == [
        ("call_1", "result"),
        ("call_1", "result"),
    ]


def test_an_id_reused_within_one_layer_or_without_layers_stays_two_obligations() -> None:
    recorder = ToolCallRecorder(ledger=ObligationLedger())
    sdk = [recorder.call("t", "dup", conversation_id="c", layer="sdk") for _ in range(2)]
    plain = [recorder.call("t", "plain", conversation_id="c") for _ in range(2)]
    assert sdk[0] is not sdk[1] and plain[0] is not plain[1]
    # A second layer joins each of the first layer's calls once, earliest first.
    joined = [recorder.call("t", "dup", conversation_id="c", layer="langchain") for _ in range(3)]
    assert joined[:2] == sdk and joined[2] not in sdk
    assert len(recorder.ledger.open_obligations("c")) == 5


# -- settings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, set(FRAMEWORKS)),
        ("", set(FRAMEWORKS)),
        ("none", set()),
        ("NONE", set()),
        ("langchain, mcp", {"langchain", "mcp"}),
        ("agents,bogus", {"agents"}),
    ],
)
def test_frameworks_setting(value: str | None, expected: set[str]) -> None:
    environ = {} if value is None else {sc.FRAMEWORKS_ENV: value}
    assert frameworks(None, environ) == expected
    # An argument (``instrument(frameworks=...)``) overrides the environment.
    overridden = frameworks(value, {sc.FRAMEWORKS_ENV: "none"})
    assert overridden == (set() if value is None else expected)


# -- the instrumentor's post-import hooks ---------------------------------------------------------


def test_the_instrumentor_instruments_each_framework_and_uninstruments_it(
    pipeline: Pipeline, instrumentor: CompactionInstrumentor
) -> None:
    assert _states() == dict.fromkeys(FRAMEWORKS, False)
    instrumentor.instrument(telemetry=pipeline.telemetry)
    assert _states() == dict.fromkeys(FRAMEWORKS, True)
    instrumentor.uninstrument()
    assert _states() == dict.fromkeys(FRAMEWORKS, False)


def test_frameworks_none_skips_them(
    pipeline: Pipeline, instrumentor: CompactionInstrumentor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sc.FRAMEWORKS_ENV, "none")
    instrumentor.instrument(telemetry=pipeline.telemetry)
    assert _states() == dict.fromkeys(FRAMEWORKS, False)


def test_a_framework_list_selects_them(
    pipeline: Pipeline, instrumentor: CompactionInstrumentor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sc.FRAMEWORKS_ENV, "mcp")
    instrumentor.instrument(telemetry=pipeline.telemetry)
    assert _states() == {"langchain": False, "mcp": True, "agents": False}


def test_a_framework_the_application_instrumented_is_left_alone(
    pipeline: Pipeline, instrumentor: CompactionInstrumentor
) -> None:
    own = make_pipeline()
    try:
        assert mcp_integration.instrument(own.telemetry)
        instrumentor.instrument(telemetry=pipeline.telemetry)
        instrumentor.uninstrument()
        assert _states() == {"langchain": False, "mcp": True, "agents": False}
    finally:
        own.shutdown()


# -- both layers on one agent ---------------------------------------------------------------------


@tool
def restart(service: str) -> str:
    """Restart a service."""
    return f"{service} restarted"


@tool
def check(service: str) -> str:
    """Check a service."""
    return f"{service} healthy"


class SdkReadChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` calling ``chat.completions.create`` itself: ``ChatOpenAI`` reads its
    answers through ``with_raw_response``, which the SDK layer leaves to the caller, so only
    this way does the SDK layer open the calls too."""

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        payload = self._get_request_payload(messages, stop=stop, **kwargs)
        return self._create_chat_result(self.client.create(**payload))


@pytest.mark.parametrize("model_class", ["ChatOpenAI", "SdkReadChatOpenAI"])
def test_create_agent_over_chat_openai_records_each_call_once(
    pipeline: Pipeline,
    instrumentor: CompactionInstrumentor,
    fake_llm_server: FakeLLMServer,
    caplog: pytest.LogCaptureFixture,
    model_class: str,
) -> None:
    require_sdks()
    instrumentor.instrument(telemetry=pipeline.telemetry)
    assert lc.is_instrumented()
    fake = fake_llm_server
    fake.enqueue(
        "chat",
        tool_calls=[
            ToolCall("restart", {"service": "api"}, id="call_restart"),
            ToolCall("check", {"service": "db"}, id="call_check"),
        ],
    )
    fake.enqueue("chat", tool_calls=[ToolCall("check", {"service": "api"}, id="call_check_2")])
    fake.enqueue("chat", "The api service is restarted and healthy.")
    chat_model = ChatOpenAI if model_class == "ChatOpenAI" else SdkReadChatOpenAI
    model = chat_model(
        model="model-test", base_url=fake.openai_base_url, api_key=SecretStr(API_KEY), max_retries=0
    )
    agent = create_agent(model, [restart, check])

    with caplog.at_level(logging.ERROR, logger="otel_compaction"):
        state = agent.invoke(
            {"messages": [{"role": "user", "content": "Restart api, then check it."}]},
            {"configurable": {"thread_id": "chat-7"}},
        )
    assert state["messages"][-1].content == "The api service is restarted and healthy."
    assert not [r for r in caplog.records if r.name.startswith("otel_compaction")]
    assert len(fake.requests_to("chat")) == 3

    ledger = pipeline.ledger
    records = [o for c in ledger.conversations() for o in ledger.snapshot(c).obligations]
    assert Counter(o.id for o in records) == Counter(
        {"call_restart": 1, "call_check": 1, "call_check_2": 1}
    )
    assert {o.status for o in records} == {"result"}
    assert ledger.open_obligations() == ()
    # The run's thread is the conversation of every layer: the run span scopes it, so the
    # SDK layer, which saw each call first when it reads the answers, records it there too.
    conversations = {o.conversation_id for o in records}
    assert conversations == {"chat-7"}
    if model_class != "ChatOpenAI":
        requests = pipeline.spans(sc.MODEL_REQUEST_SPAN)
        assert [(s.attributes or {})[sc.RESPONSE_TOOL_CALLS] for s in requests] == [2, 1, 0]

    spans = pipeline.spans()
    assert len([s for s in spans if s.name.startswith("execute_tool ")]) == 3
    assert len([s for s in spans if s.name.startswith("tool_result ")]) == 3
    findings = [
        event.name
        for span in spans
        for event in span.events
        if event.name in (sc.EVENT_SEVERED, sc.EVENT_ORPHANED, sc.EVENT_DUPLICATE)
    ]
    assert findings == []
    instrumentor.uninstrument()
    assert not lc.is_instrumented()
