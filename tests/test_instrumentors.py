"""One instrumentor per library, one runtime, and one protocol for the framework integrations.

Each library has its own ``BaseInstrumentor`` and entry point, with the versions it supports as
its dependencies. Whichever is instrumented first builds the runtime and the others record into
it: one ledger and one gate. `CompactionInstrumentor` instruments every one whose library is
installed, skipping one at an unsupported version (with ``BaseInstrumentor``'s own error) or not
installed (quietly). As ``opentelemetry-instrument`` calls them (``skip_dep_check=True``), each
checks its own library, stays off when ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` names
``compaction``, and the framework ones follow ``OTEL_COMPACTION_FRAMEWORKS``. Every row of the
integrations' registry satisfies the `Integration` protocol.
"""

from __future__ import annotations

import doctest
import inspect
import logging
from collections.abc import Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import pytest
import wrapt
from fake_llm_server import (
    FakeLLMServer,
    ToolCall,
)
from frameworks import require_framework
from llm_clients import anthropic_client, openai_client, require_sdks
from opentelemetry.instrumentation.dependencies import DependencyConflictError
from telemetry_harness import Pipeline, make_pipeline

from otel_compaction import integrations
from otel_compaction.instrumentation import (
    CompactionAgentsInstrumentor,
    CompactionAnthropicInstrumentor,
    CompactionInstrumentor,
    CompactionLangChainInstrumentor,
    CompactionMCPInstrumentor,
    CompactionOpenAIInstrumentor,
    instrumentors,
)
from otel_compaction.integrations import REGISTRY, Integration

try:
    from anthropic.resources.messages import Messages
    from openai.resources.chat.completions import Completions

    from otel_compaction.instrumentation import mcp as mcp_integration
    from otel_compaction.integrations import langchain as lc
    from otel_compaction.integrations import openai_agents
except ImportError as error:
    MISSING: ImportError | None = error
else:
    MISSING = None
require_framework(MISSING, "openai, anthropic, langchain, mcp and openai-agents", "test")

ENTRY_POINTS = {
    "compaction_openai": "otel_compaction.instrumentation:CompactionOpenAIInstrumentor",
    "compaction_anthropic": "otel_compaction.instrumentation:CompactionAnthropicInstrumentor",
    "compaction_mcp": "otel_compaction.instrumentation:CompactionMCPInstrumentor",
    "compaction_langchain": "otel_compaction.instrumentation:CompactionLangChainInstrumentor",
    "compaction_agents": "otel_compaction.instrumentation:CompactionAgentsInstrumentor",
}

# Typed as the protocol, so the type check verifies each module against it.
MODULES: dict[str, Integration] = {
    "mcp": mcp_integration,
    "langchain": lc,
    "agents": openai_agents,
}

_ENV = (
    "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS",
    "OTEL_COMPACTION_FRAMEWORKS",
    "OTEL_COMPACTION_GUARD_LANGCHAIN_SUMMARIZATION",
    "OTEL_COMPACTION_POLICY",
)


def _everything_off() -> None:
    for instrumentor in (CompactionInstrumentor(), *instrumentors()):
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
    for module in MODULES.values():
        module.uninstrument()


@pytest.fixture(name="pipeline")
def pipeline_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    """A pipeline; the environment cleared and every instrumentor off before and after."""
    require_sdks()
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    _everything_off()
    pipeline = make_pipeline()
    try:
        yield pipeline
    finally:
        _everything_off()
        pipeline.shutdown()


def _states() -> dict[str, bool]:
    return {i.entry_point: i.is_instrumented_by_opentelemetry for i in instrumentors()}


def _wrapped(owner: type[Any]) -> bool:
    """Whether an instrumentation wraps ``create`` (the SDKs' own decorators set
    ``__wrapped__`` too)."""
    return isinstance(owner.__dict__["create"], wrapt.FunctionWrapper)


def _shadow(tmp_path: Path, name: str, version: str) -> Path:
    """A directory whose distribution record says `name` is at `version`: first on the path,
    it is what the dependency checks read, while the real package still imports."""
    record = tmp_path / "shadow" / f"{name}-{version}.dist-info"
    record.mkdir(parents=True)
    (record / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return record.parent


def _ask_openai(server: FakeLLMServer, call_id: str) -> None:
    server.enqueue("chat", tool_calls=[ToolCall("find_order", {}, id=call_id)])
    openai_client(server).chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": f"Where is order {call_id}?"}],
        tools=[{"type": "function", "function": {"name": "find_order", "parameters": {}}}],
    )


def _ask_anthropic(server: FakeLLMServer, call_id: str) -> None:
    server.enqueue("messages", tool_calls=[ToolCall("check_stock", {}, id=call_id)])
    anthropic_client(server).messages.create(
        model="claude-test",
        max_tokens=64,
        messages=[{"role": "user", "content": f"Stock for {call_id}?"}],
        tools=[{"name": "check_stock", "input_schema": {"type": "object"}}],
    )


# -- entry points and dependencies ----------------------------------------------------------------


def test_each_library_has_its_own_entry_point() -> None:
    found = {
        ep.name: ep.value
        for ep in entry_points(group="opentelemetry_instrumentor")
        if ep.dist is not None and ep.dist.name == "otel-compaction"
    }
    assert found == ENTRY_POINTS
    for name, value in found.items():
        instrumentor = EntryPoint(name, value, "opentelemetry_instrumentor").load()()
        assert instrumentor.entry_point == name
    assert [i.entry_point for i in instrumentors()] == list(ENTRY_POINTS)


@pytest.mark.parametrize(
    ("instrumentor", "dependencies"),
    [
        (CompactionOpenAIInstrumentor, ("openai >= 1.66",)),
        (CompactionAnthropicInstrumentor, ("anthropic >= 0.40",)),
        (CompactionMCPInstrumentor, ("mcp >= 1.10, < 2",)),
        (CompactionLangChainInstrumentor, ("langchain-core >= 1.0", "langgraph >= 1.0")),
        (CompactionAgentsInstrumentor, ("openai-agents >= 0.3",)),
    ],
)
def test_instrumentation_dependencies_name_each_library(
    instrumentor: type[CompactionOpenAIInstrumentor], dependencies: tuple[str, ...]
) -> None:
    assert tuple(instrumentor().instrumentation_dependencies()) == dependencies
    assert instrumentor()._check_dependency_conflicts() is None  # installed here, supported
    assert CompactionInstrumentor().instrumentation_dependencies() == ()


# -- the integrations' protocol and registry ------------------------------------------------------


def test_every_registry_row_satisfies_the_protocol(pipeline: Pipeline) -> None:
    assert [row.name for row in REGISTRY] == list(MODULES)
    for row in REGISTRY:
        module = row.load()
        assert module is MODULES[row.name]
        inspect.signature(module.instrument).bind(pipeline.telemetry)
        inspect.signature(module.uninstrument).bind()
        inspect.signature(module.is_instrumented).bind()
        assert ENTRY_POINTS[row.entry_point] == row.instrumentor
        instrumentor = EntryPoint(row.entry_point, row.instrumentor, "x").load()()
        assert (instrumentor.name, tuple(instrumentor.instrumentation_dependencies())) == (
            row.name,
            row.instruments,
        )

        assert module.is_instrumented() is False
        assert module.instrument(pipeline.telemetry) is True
        assert module.is_instrumented() is True
        assert module.instrument(pipeline.telemetry) is True  # idempotent
        module.uninstrument()
        assert module.is_instrumented() is False
        module.uninstrument()  # and again: nothing to do, no error


def test_the_registry_example_runs() -> None:
    failed, attempted = doctest.testmod(integrations)
    assert (failed, attempted) == (0, 3)


# -- one runtime ----------------------------------------------------------------------------------


def test_each_library_alone_and_every_one_into_one_ledger(
    pipeline: Pipeline, fake_llm_server: FakeLLMServer
) -> None:
    openai_instrumentor = CompactionOpenAIInstrumentor()
    anthropic_instrumentor = CompactionAnthropicInstrumentor()
    openai_instrumentor.instrument(telemetry=pipeline.telemetry)
    assert (_wrapped(Completions), _wrapped(Messages)) == (True, False)

    anthropic_instrumentor.instrument()  # no arguments: it joins the running instrumentation
    assert _wrapped(Messages)
    assert anthropic_instrumentor.telemetry is openai_instrumentor.telemetry is pipeline.telemetry
    assert anthropic_instrumentor.gate is openai_instrumentor.gate is not None
    _ask_openai(fake_llm_server, "call_o1")
    _ask_anthropic(fake_llm_server, "toolu_a1")
    assert sorted(o.id for o in pipeline.ledger.open_obligations()) == ["call_o1", "toolu_a1"]

    openai_instrumentor.uninstrument()
    assert (_wrapped(Completions), _wrapped(Messages)) == (False, True)
    assert openai_instrumentor.telemetry is None and openai_instrumentor.gate is None
    _ask_openai(fake_llm_server, "call_o2")  # not recorded
    _ask_anthropic(fake_llm_server, "toolu_a2")
    open_ids = sorted(o.id for o in pipeline.ledger.open_obligations())
    assert open_ids == ["call_o1", "toolu_a1", "toolu_a2"]  # held while the runtime runs

    anthropic_instrumentor.uninstrument()  # the last one: what is still open is abandoned
    assert pipeline.ledger.open_obligations() == ()
    statuses = {
        (s.attributes or {})["gen_ai.tool.call.id"]: (s.attributes or {})[
            "compaction.obligation.status"
        ]
        for s in pipeline.spans(prefix="execute_tool ")
    }
    assert statuses == dict.fromkeys(["call_o1", "toolu_a1", "toolu_a2"], "abandoned")


def test_another_telemetry_joins_the_running_one_and_says_so(
    pipeline: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    other = make_pipeline()
    try:
        CompactionOpenAIInstrumentor().instrument(telemetry=pipeline.telemetry)
        with caplog.at_level(logging.WARNING, logger="otel_compaction"):
            CompactionMCPInstrumentor().instrument(telemetry=other.telemetry)
        assert CompactionMCPInstrumentor().telemetry is pipeline.telemetry
        assert [r.getMessage() for r in caplog.records] == [
            "otel-compaction: CompactionMCPInstrumentor records into the instrumentation "
            "already running; uninstrument every otel-compaction instrumentor to record elsewhere"
        ]
    finally:
        other.shutdown()


# -- CompactionInstrumentor, every installed library ----------------------------------------------


def test_the_one_object_instruments_every_library_and_uninstruments_them(
    pipeline: Pipeline,
) -> None:
    umbrella = CompactionInstrumentor()
    umbrella.instrument(telemetry=pipeline.telemetry)
    assert _states() == dict.fromkeys(ENTRY_POINTS, True)
    assert {name: m.is_instrumented() for name, m in MODULES.items()} == dict.fromkeys(
        MODULES, True
    )
    assert umbrella.gate is CompactionOpenAIInstrumentor().gate is not None
    umbrella.uninstrument()
    assert _states() == dict.fromkeys(ENTRY_POINTS, False)
    assert not any(m.is_instrumented() for m in MODULES.values())
    assert umbrella.gate is None


def test_the_one_object_skips_a_library_at_an_unsupported_version(
    pipeline: Pipeline,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.syspath_prepend(str(_shadow(tmp_path, "anthropic", "0.39.0")))
    with caplog.at_level(logging.WARNING):
        CompactionInstrumentor().instrument(telemetry=pipeline.telemetry)
    assert _states() == {**dict.fromkeys(ENTRY_POINTS, True), "compaction_anthropic": False}
    assert (_wrapped(Completions), _wrapped(Messages)) == (True, False)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "ERROR",
            'CompactionAnthropicInstrumentor only instruments "anthropic >= 0.40", but currently '
            'installed version ("anthropic 0.39.0") falls outside of that range, so nothing can '
            "be instrumented.",
        )
    ]


def test_the_one_object_skips_a_missing_library_quietly(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The agents SDK as if it were not installed: a distribution no environment has.
    monkeypatch.setattr(CompactionAgentsInstrumentor, "_instruments", ("openai-agents-absent",))
    with caplog.at_level(logging.WARNING):
        CompactionInstrumentor().instrument(telemetry=pipeline.telemetry)
    assert _states() == {**dict.fromkeys(ENTRY_POINTS, True), "compaction_agents": False}
    assert openai_agents.is_instrumented() is False
    assert caplog.records == []


def test_the_one_object_leaves_an_instrumentor_it_did_not_start(pipeline: Pipeline) -> None:
    CompactionAnthropicInstrumentor().instrument(telemetry=pipeline.telemetry)
    umbrella = CompactionInstrumentor()
    umbrella.instrument(telemetry=pipeline.telemetry, frameworks="none")
    assert _states() == {
        "compaction_openai": True,
        "compaction_anthropic": True,
        "compaction_mcp": False,
        "compaction_langchain": False,
        "compaction_agents": False,
    }
    umbrella.uninstrument()
    assert _states() == {**dict.fromkeys(ENTRY_POINTS, False), "compaction_anthropic": True}
    assert _wrapped(Messages)


# -- as opentelemetry-instrument calls them -------------------------------------------------------


def _as_the_loader(pipeline: Pipeline) -> None:
    """Instrument each as ``opentelemetry-instrument``'s loader does once its own checks of
    the distribution and of the disabled list let the entry point through (into the test's
    pipeline rather than the global providers)."""
    for instrumentor in instrumentors():
        instrumentor.instrument(skip_dep_check=True, telemetry=pipeline.telemetry)


def test_compaction_in_the_disabled_list_switches_every_one_off_under_the_loader(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "requests , compaction")
    _as_the_loader(pipeline)
    assert _states() == dict.fromkeys(ENTRY_POINTS, False)
    # The list is auto-instrumentation's: instrumenting in code still works.
    CompactionOpenAIInstrumentor().instrument(telemetry=pipeline.telemetry)
    assert _states() == {**dict.fromkeys(ENTRY_POINTS, False), "compaction_openai": True}


def test_the_frameworks_setting_selects_the_framework_instrumentors_under_the_loader(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_COMPACTION_FRAMEWORKS", "mcp")
    _as_the_loader(pipeline)
    assert _states() == {
        "compaction_openai": True,
        "compaction_anthropic": True,
        "compaction_mcp": True,
        "compaction_langchain": False,
        "compaction_agents": False,
    }


def test_an_unsupported_library_is_the_loaders_dependency_conflict(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(_shadow(tmp_path, "mcp", "2.0.0")))
    with pytest.raises(DependencyConflictError) as raised:
        CompactionMCPInstrumentor().instrument(skip_dep_check=True, telemetry=pipeline.telemetry)
    assert str(raised.value) == (
        'This instrumentation only instruments "mcp >= 1.10, < 2", but currently installed '
        'version ("mcp 2.0.0") falls outside of that range, so nothing can be instrumented.'
    )
    assert _states() == dict.fromkeys(ENTRY_POINTS, False)
    assert mcp_integration.is_instrumented() is False
