"""otel-compaction beside OpenLLMetry's instrumentations of the OpenAI SDK
(opentelemetry-instrumentation-openai) and the Anthropic SDK (opentelemetry-instrumentation-
anthropic), in one process, on the same providers, instrumented in either order.

Each wraps the methods otel-compaction wraps, and otel-compaction's wrapper runs inside theirs
in either order. Each request is one chat-like span, OpenLLMetry's (``openai.chat``,
``anthropic.chat``), and it carries otel-compaction's bookkeeping: no ``compaction.model_request``
span. OpenLLMetry's OpenAI span is current around the SDK call; its Anthropic span is not, and
is found all the same. The chat spans open no obligations, every call is one obligation, every
detection is reported once, streams and the ``.stream()`` helpers pass through both wrappers,
and taking either instrumentation out leaves the SDK working.

OpenLLMetry registers its instrumentors under the same ``opentelemetry_instrumentor`` names as
the other OpenAI instrumentations the tests install (``openai``), so it lives in an environment
of its own and ``test_alongside_openllmetry.py`` runs these tests there.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from fake_llm_server import (
    Api,
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
)
from llm_clients import require_sdks
from opentelemetry.trace import SpanKind

from otel_compaction.telemetry import semconv as sc

Library = Literal["openai", "anthropic"]
Order = Literal["compaction-first", "openllmetry-first"]

IDS = {
    "openai": ScenarioIds(restart="call_restart_1", check="call_check_1", again="call_restart_2"),
    "anthropic": ScenarioIds(restart="toolu_restart_1", check="toolu_check_1", again="toolu_2"),
}
API: dict[Library, Api] = {"openai": "chat", "anthropic": "messages"}
SPAN: dict[Library, tuple[str, str]] = {  # name, instrumentation scope
    "openai": ("openai.chat", "opentelemetry.instrumentation.openai.v1"),
    "anthropic": ("anthropic.chat", "opentelemetry.instrumentation.anthropic"),
}
INSTRUMENTOR = {
    "openai": ("opentelemetry.instrumentation.openai", "OpenAIInstrumentor"),
    "anthropic": ("opentelemetry.instrumentation.anthropic", "AnthropicInstrumentor"),
}


def _wrapped_methods(library: Library) -> list[tuple[type[Any], str]]:
    """The SDK methods both instrumentations wrap."""
    if library == "openai":
        from openai.resources.chat.completions import AsyncCompletions, Completions

        owners: list[type[Any]] = [Completions, AsyncCompletions]
        names = ["create"]
    else:
        from anthropic.resources.messages import AsyncMessages, Messages

        owners, names = [Messages, AsyncMessages], ["create", "stream"]
    return [(o, n) for o in owners for n in names]


class Both(Beside):
    """otel-compaction and one OpenLLMetry instrumentor on one in-memory pipeline."""

    def __init__(self, library: Library, order: Order) -> None:
        require_sdks()
        module, name = INSTRUMENTOR[library]
        self.library = library
        openllmetry = getattr(importlib.import_module(module), name)()
        first = order == "compaction-first"
        super().__init__(openllmetry, _wrapped_methods(library), compaction_first=first)

    def agent(self, server: FakeLLMServer, mode: Mode = "sync", style: Style = "json") -> Agent:
        return Agent(server, API[self.library], mode, style)


PAIRS = [(library, order) for library in API for order in ("compaction-first", "openllmetry-first")]
# OpenLLMetry's Anthropic span ends only when its own stream proxy is iterated, which a raw
# stream entered with ``with`` is not (the SDK's ``__enter__`` returns the stream beneath the
# proxy): its span would never end, with or without otel-compaction, so Anthropic streams are
# the ``.stream()`` helper's.
STYLES: dict[Library, list[tuple[Mode, Style]]] = {
    "openai": [("sync", "json"), ("sync", "stream"), ("async", "json"), ("async", "helper")],
    "anthropic": [("sync", "json"), ("sync", "helper"), ("async", "json"), ("async", "helper")],
}


@pytest.fixture(name="both", params=PAIRS, ids="-".join)
def both_fixture(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Both]:
    """Both instrumentations, for each SDK, in each order."""
    for name in (sc.CAPTURE_CONTENT_ENV, sc.POLICY_ENV, sc.DETECTION_ENV):
        monkeypatch.delenv(name, raising=False)
    made = Both(*request.param)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize(
    ("both", "mode", "style"),
    [(pair, *styled) for pair in PAIRS for styled in STYLES[pair[0]]],
    ids=["-".join((*pair, *styled)) for pair in PAIRS for styled in STYLES[pair[0]]],
    indirect=["both"],
)
def test_one_chat_span_per_request_carries_the_bookkeeping(
    both: Both, fake_llm_server: FakeLLMServer, mode: Mode, style: Style
) -> None:
    ids = IDS[both.library]
    run_compaction_scenario(both.agent(fake_llm_server, mode, style), both.instrumented, ids)

    # Every call is one obligation, every detection one report, on OpenLLMetry's chat spans:
    # the results are their children, the calls link to them and start beside them.
    api = API[both.library]
    summary = scenario_summary(both.instrumented)
    # OpenLLMetry adds an event per streamed chunk to its span; otel-compaction's are its own.
    for request in summary["requests"]:
        theirs = [name for name, _ in request["events"] if not name.startswith("compaction.")]
        assert set(theirs) <= {"gen_ai.content.completion.chunk"}
        request["events"] = [e for e in request["events"] if e[0].startswith("compaction.")]
    assert summary == expected_scenario(api, ids, streamed=style != "json")
    spans = both.pipeline.spans()
    chats = sorted(
        (s for s in spans if (s.attributes or {}).get(sc.GEN_AI_OPERATION_NAME) == "chat"),
        key=lambda s: s.start_time or 0,
    )
    name, scope = SPAN[both.library]
    assert [
        (s.name, s.kind, s.instrumentation_scope.name)  # type: ignore[union-attr]
        for s in chats
    ] == [(name, SpanKind.CLIENT, scope)] * 4
    assert request_spans(spans) == chats
    assert both.pipeline.spans(sc.MODEL_REQUEST_SPAN) == []


def test_openllmetry_chat_spans_open_no_obligations(
    both: Both, fake_llm_server: FakeLLMServer
) -> None:
    agent = both.agent(fake_llm_server)
    agent.script(text="Nothing to do.")
    agent.ask()
    agent.script(text="Still nothing.")
    agent.ask()

    assert len(both.pipeline.spans(SPAN[both.library][0])) == 2
    ledger = both.pipeline.ledger
    assert [ledger.snapshot(c).obligations for c in ledger.conversations()] == []
    assert ledger.open_counts() == {}


@pytest.mark.parametrize("first_out", ["compaction", "openllmetry"])
def test_taking_either_out_leaves_the_sdk_working(
    both: Both, fake_llm_server: FakeLLMServer, first_out: str
) -> None:
    first, second = (
        (both.compaction, both.other)
        if first_out == "compaction"
        else (both.other, both.compaction)
    )
    agent = both.agent(fake_llm_server, *STYLES[both.library][1])
    for instrumentor in (first, second):
        instrumentor.uninstrument()
        agent.script(ToolCall("search", {"q": "x"}))
        assert agent.ask().calls[0][1] == "search"  # the client works, streams included

    # OpenLLMetry's uninstrument() unwraps whatever wrapper is outermost, and otel-compaction's
    # is beneath it in either order: each takes out its own. (OpenLLMetry's OpenAI
    # instrumentation leaves a wrapper of its own on ``create`` even when it is alone.)
    recorded_after_first = first_out == "openllmetry"
    assert len(request_spans(both.pipeline.spans())) == int(recorded_after_first)
    assert both.ours_left() == []
    assert both.restored() == (both.library == "anthropic")
