"""otel-compaction beside OpenInference's OpenAI instrumentation (openinference-instrumentation-
openai), in one process, on the same tracer provider, instrumented in either order.

OpenInference wraps the client's ``request`` method, below ``create``: its LLM spans
(``ChatCompletion``, ``Response``) start inside otel-compaction's request span and end before
the response is read back, so otel-compaction keeps its own ``compaction.model_request`` span
for the bookkeeping, without ``gen_ai.operation.name`` (the LLM span is the request's inference
span). The LLM spans must open no obligations, every call must be one obligation and every
detection be reported once, with streams and the ``.stream()`` helpers included.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
from fake_llm_server import (
    Api,
    FakeLLMServer,
)
from instrumentation_harness import (
    Agent,
    Instrumented,
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
from telemetry_harness import make_pipeline

from otel_compaction.instrumentation import CompactionInstrumentor
from otel_compaction.telemetry import semconv as sc

IDS = ScenarioIds(restart="call_restart_1", check="call_check_1", again="call_restart_2")
SPAN_OF_API = {"chat": "ChatCompletion", "responses": "Response"}


def _openinference() -> Any:
    require_sdks()
    if importlib.util.find_spec("openinference.instrumentation.openai") is None:
        unavailable("openinference-instrumentation-openai is not installed; install 'test'")
    from openinference.instrumentation.openai import OpenAIInstrumentor

    return OpenAIInstrumentor()


@pytest.fixture(name="instrumented", params=["compaction-first", "openinference-first"])
def instrumented_fixture(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Instrumented]:
    """Both instrumentations on one in-memory pipeline, in each order."""
    for name in (sc.CAPTURE_CONTENT_ENV, sc.POLICY_ENV, sc.DETECTION_ENV):
        monkeypatch.delenv(name, raising=False)
    openinference = _openinference()
    pipeline = make_pipeline()
    compaction = CompactionInstrumentor()
    steps = [
        lambda: compaction.instrument(telemetry=pipeline.telemetry),
        lambda: openinference.instrument(tracer_provider=pipeline.tracer_provider),
    ]
    for step in steps if request.param == "compaction-first" else reversed(steps):
        step()
    try:
        yield Instrumented(compaction, pipeline)
    finally:
        compaction.uninstrument()
        openinference.uninstrument()
        pipeline.shutdown()


@pytest.mark.parametrize(
    ("api", "mode", "style"),
    [
        ("chat", "sync", "json"),
        ("chat", "sync", "stream"),
        ("chat", "async", "helper"),
        ("responses", "sync", "helper"),
        ("responses", "async", "stream"),
    ],
)
def test_one_obligation_per_call_and_one_report_per_detection(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer, api: Api, mode: Mode, style: Style
) -> None:
    run_compaction_scenario(Agent(fake_llm_server, api, mode, style), instrumented, IDS)

    # otel-compaction's request spans carry the bookkeeping but do not claim to be chat spans:
    # OpenInference's LLM span, inside each, is the request's inference span.
    expected = expected_scenario(api, IDS, streamed=style != "json", claims_chat=False)
    assert scenario_summary(instrumented) == expected
    spans = instrumented.spans()
    ours = request_spans(spans)
    assert {s.name for s in ours} == {"compaction.model_request"}
    theirs = sorted(instrumented.spans(SPAN_OF_API[api]), key=lambda s: s.start_time or 0)
    assert [(s.attributes or {}).get("openinference.span.kind") for s in theirs] == ["LLM"] * 4
    assert [s.parent.span_id for s in theirs] == [r.context.span_id for r in ours]  # type: ignore[union-attr]
    assert [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"] == []
