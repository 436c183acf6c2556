"""otel-compaction beside the OpenTelemetry OpenAI instrumentation (opentelemetry-instrumentation-
openai-v2), in one process, on the same providers, instrumented in either order.

Both wrap ``chat.completions.create``; otel-compaction's wrapper runs inside the OpenAI one in
either order. Each request is one ``chat`` span, the OpenAI instrumentation's, and it carries
otel-compaction's bookkeeping: no second chat-like span. The ``chat`` spans must not open
obligations (the ledger's span processor only takes ``execute_tool`` spans), every call must be
one obligation, and every detection must be reported once; streams pass through both wrappers,
and taking either instrumentation out leaves the SDK working.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
from fake_llm_server import (
    FakeLLMServer,
    ToolCall,
)
from instrumentation_harness import (
    Agent,
    Beside,
    Mode,
    ScenarioIds,
    Style,
    expected_scenario,
    request_spans,
    run_compaction_scenario,
    scenario_summary,
    unavailable,
)
from llm_clients import require_sdks
from opentelemetry.trace import SpanKind

from otel_compaction.telemetry import semconv as sc

IDS = ScenarioIds(restart="call_restart_1", check="call_check_1", again="call_restart_2")


def _openai_v2() -> Any:
    require_sdks()
    if importlib.util.find_spec("opentelemetry.instrumentation.openai_v2") is None:
        unavailable(
            "opentelemetry-instrumentation-openai-v2 is not installed; install the 'test' extra"
        )
    try:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    except ImportError as error:  # e.g. an opentelemetry-util-genai it does not work with
        unavailable(f"opentelemetry-instrumentation-openai-v2 cannot be imported: {error}")
    return OpenAIInstrumentor()  # type: ignore[no-untyped-call]


@pytest.fixture(name="both", params=["compaction-first", "openai-v2-first"])
def both_fixture(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Beside]:
    """Both instrumentations, in each order."""
    for name in (sc.CAPTURE_CONTENT_ENV, sc.POLICY_ENV, sc.DETECTION_ENV):
        monkeypatch.delenv(name, raising=False)
    openai_v2 = _openai_v2()
    from openai.resources.chat.completions import Completions

    made = Beside(
        openai_v2, [(Completions, "create")], compaction_first=request.param == "compaction-first"
    )
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize(("mode", "style"), [("sync", "json"), ("sync", "stream"),
                                             ("async", "json"), ("async", "helper")])  # fmt: skip
def test_one_chat_span_per_request_carries_the_bookkeeping(
    both: Beside, fake_llm_server: FakeLLMServer, mode: Mode, style: Style
) -> None:
    run_compaction_scenario(Agent(fake_llm_server, "chat", mode, style), both.instrumented, IDS)

    # Every call is one obligation, every detection one report, on the OpenAI instrumentation's
    # chat spans: the results are their children, the calls link to them and start beside them.
    summary = scenario_summary(both.instrumented)
    assert summary == expected_scenario("chat", IDS, streamed=style != "json")
    spans = both.pipeline.spans()
    chats = sorted(
        (s for s in spans if (s.attributes or {}).get(sc.GEN_AI_OPERATION_NAME) == "chat"),
        key=lambda s: s.start_time or 0,
    )
    assert [
        (s.name, s.kind, s.instrumentation_scope.name)  # type: ignore[union-attr]
        for s in chats
    ] == [("chat model-test", SpanKind.CLIENT, "opentelemetry.util.genai.handler")] * 4
    assert request_spans(spans) == chats
    assert both.pipeline.spans(sc.MODEL_REQUEST_SPAN) == []


def test_openai_v2_chat_spans_open_no_obligations(
    both: Beside, fake_llm_server: FakeLLMServer
) -> None:
    agent = Agent(fake_llm_server, "chat")
    agent.script(text="Nothing to do.")
    agent.ask()
    agent.script(text="Still nothing.")
    agent.ask()

    assert len(both.pipeline.spans("chat model-test")) == 2
    ledger = both.pipeline.ledger
    assert [ledger.snapshot(c).obligations for c in ledger.conversations()] == []
    assert ledger.open_counts() == {}


@pytest.mark.parametrize("first_out", ["compaction", "openai-v2"])
def test_taking_either_out_leaves_the_sdk_working(
    both: Beside, fake_llm_server: FakeLLMServer, first_out: str
) -> None:
    first, second = (
        (both.compaction, both.other)
        if first_out == "compaction"
        else (both.other, both.compaction)
    )
    agent = Agent(fake_llm_server, "chat", "sync", "stream")
    for instrumentor in (first, second):
        instrumentor.uninstrument()
        agent.script(ToolCall("search", {"q": "x"}))
        assert agent.ask().calls[0][1] == "search"  # the client works, streams included

    # The OpenAI instrumentation's uninstrument() unwraps whatever wrapper is outermost, and
    # otel-compaction's is beneath it in either order: each takes out its own.
    recorded_after_first = first_out == "openai-v2"
    assert len(request_spans(both.pipeline.spans())) == int(recorded_after_first)
    assert both.restored()
