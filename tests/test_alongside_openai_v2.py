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
from fake_llm_server import FakeLLMServer
from instrumentation_harness import (
    Agent,
    Beside,
    Mode,
    ScenarioIds,
    Style,
    bookkeeping_on_their_chat_spans,
    each_taken_out,
    their_chat_spans_open_no_obligations,
    unavailable,
)
from llm_clients import require_sdks

from otel_compaction.telemetry import semconv as sc

IDS = ScenarioIds(restart="call_restart_1", check="call_check_1", again="call_restart_2")
CHAT_SPAN = ("chat model-test", "opentelemetry.util.genai.handler")  # name, scope


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
    agent = Agent(fake_llm_server, "chat", mode, style)
    bookkeeping_on_their_chat_spans(both, agent, IDS, CHAT_SPAN)


def test_openai_v2_chat_spans_open_no_obligations(
    both: Beside, fake_llm_server: FakeLLMServer
) -> None:
    their_chat_spans_open_no_obligations(both, Agent(fake_llm_server, "chat"), CHAT_SPAN[0])


@pytest.mark.parametrize("first_out", ["compaction", "openai-v2"])
def test_taking_either_out_leaves_the_sdk_working(
    both: Beside, fake_llm_server: FakeLLMServer, first_out: str
) -> None:
    agent = Agent(fake_llm_server, "chat", "sync", "stream")
    each_taken_out(both, agent, other_first=first_out == "openai-v2")
    assert both.restored()
