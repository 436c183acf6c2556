"""otel-compaction beside OpenLLMetry's instrumentations of the OpenAI SDK
(opentelemetry-instrumentation-openai) and the Anthropic SDK (opentelemetry-instrumentation-
anthropic), in one process, on the same providers, instrumented in either order.

Each wraps the methods otel-compaction wraps, and otel-compaction's wrapper runs inside theirs
in either order. Each request is one chat-like span, OpenLLMetry's (``openai.chat``,
``anthropic.chat``), and it carries otel-compaction's bookkeeping: no ``compaction.model_request``
span. OpenLLMetry's OpenAI span is current around the SDK call; its Anthropic span is not, and
is found all the same; its Responses span starts only after the call, so there otel-compaction's
request span keeps the bookkeeping and does not claim ``chat``. The chat spans open no
obligations, every call is one obligation, every detection is reported once, streams and the
``.stream()`` helpers pass through both wrappers, and taking either instrumentation out leaves
the SDK working.

OpenLLMetry registers its instrumentors under the same ``opentelemetry_instrumentor`` names as
the other OpenAI instrumentations the tests install (``openai``), so it lives in an environment
of its own and ``test_alongside_openllmetry.py`` runs these tests there.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from fake_llm_server import Api, FakeLLMServer, ToolCall
from instrumentation_harness import (
    Agent,
    Beside,
    Mode,
    ScenarioIds,
    Style,
    bookkeeping_on_their_chat_spans,
    each_taken_out,
    their_chat_spans_open_no_obligations,
)
from llm_clients import require_sdks

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
    # OpenLLMetry adds an event per streamed chunk to its span.
    chunks = frozenset({"gen_ai.content.completion.chunk"})
    agent = both.agent(fake_llm_server, mode, style)
    bookkeeping_on_their_chat_spans(
        both, agent, IDS[both.library], SPAN[both.library], their_events=chunks
    )


def test_openllmetry_chat_spans_open_no_obligations(
    both: Both, fake_llm_server: FakeLLMServer
) -> None:
    their_chat_spans_open_no_obligations(both, both.agent(fake_llm_server), SPAN[both.library][0])


@pytest.mark.parametrize("first_out", ["compaction", "openllmetry"])
def test_taking_either_out_leaves_the_sdk_working(
    both: Both, fake_llm_server: FakeLLMServer, first_out: str
) -> None:
    agent = both.agent(fake_llm_server, *STYLES[both.library][1])
    each_taken_out(both, agent, other_first=first_out == "openllmetry")
    # OpenLLMetry's OpenAI instrumentation leaves a wrapper of its own on ``create`` even when
    # it is alone; its Anthropic one puts every method back.
    assert both.restored() == (both.library == "anthropic")


@pytest.mark.parametrize("order", ["compaction-first", "openllmetry-first"])
def test_a_responses_request_has_one_span_that_claims_chat(
    order: Order, fake_llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # OpenLLMetry starts its Responses span once the SDK call has returned: otel-compaction's
    # request span keeps the bookkeeping and leaves the ``chat`` claim to it.
    for name in (sc.CAPTURE_CONTENT_ENV, sc.POLICY_ENV, sc.DETECTION_ENV):
        monkeypatch.delenv(name, raising=False)
    both = Both("openai", order)
    try:
        agent = Agent(fake_llm_server, "responses")
        agent.script(ToolCall("search", {"q": "x"}))
        call_id = agent.ask().calls[0][0]
        agent.history.append(agent.result(call_id, "no matches"))
        agent.script(text="Nothing found.")
        agent.ask()
        spans = both.pipeline.spans()
        ours = both.pipeline.spans(sc.MODEL_REQUEST_SPAN)
        chat_like = [
            s.name
            for s in spans
            if (s.attributes or {}).get(sc.GEN_AI_OPERATION_NAME) == sc.CHAT
            or s.name.startswith("openai.")
        ]
    finally:
        both.close()
    assert chat_like == ["openai.response", "openai.response"]
    assert [s.attributes.get(sc.REQUEST_API) for s in ours if s.attributes] == ["responses"] * 2
    assert [sc.GEN_AI_OPERATION_NAME in (s.attributes or {}) for s in ours] == [False, False]
    assert not any(both.pipeline.ledger.open_counts().values())  # the call resolved
