"""End to end with a real OTLP trace backend: Arize Phoenix on loopback receives the agent's
spans over OTLP/HTTP, and the test reads them back through Phoenix's REST API.

The agent process (``e2e_agent.py``) is configured only by the standard ``OTEL_*`` variables,
as a user's would be. Found in Phoenix: the ``execute_tool`` span of every call with the GenAI
attributes, a ``tool_result`` span for each resolution carrying the same
``gen_ai.tool.call.id``, and the ``compaction.evaluate`` span whose ``compaction.refused``
event names the call that was still open when the gate refused.

Needs Phoenix in its own environment (``.venv-phoenix``, from ``tests/phoenix-requirements.txt``;
``.ci/run`` makes it): skips without it, fails under ``CI=true``.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_servers import (
    ManagedProcess,
    PhoenixServer,
    loopback_environment,
    phoenix_python,
    wait_until,
)
from readme_snippets import keyed

from otel_compaction.telemetry import semconv

PROJECT = "otel-compaction-e2e"
DEMO_PROJECT = "otel-compaction-demo"  # as the zero-code page's command names it
STEPS = 2
AGENT = Path(__file__).with_name("e2e_agent.py")


@pytest.fixture(name="phoenix")
def phoenix_fixture(tmp_path: Path) -> Iterator[PhoenixServer]:
    """A Phoenix server on loopback, stopped afterwards."""
    server = PhoenixServer(tmp_path / "phoenix", python=phoenix_python())
    with server:
        yield server


def _value(any_value: dict[str, Any] | None) -> Any:
    """An OTLP JSON ``AnyValue`` as a Python value."""
    if not any_value:
        return None
    array = any_value.get("array_value")
    if array is not None:
        return [_value(item) for item in array.get("values") or []]
    for key in ("string_value", "bool_value", "int_value", "double_value"):
        if any_value.get(key) is not None:
            return any_value[key]
    return None


def _attributes(item: dict[str, Any]) -> dict[str, Any]:
    return {kv["key"]: _value(kv.get("value")) for kv in item.get("attributes") or []}


def test_phoenix_receives_tool_calls_results_and_the_refusal(
    phoenix: PhoenixServer, tmp_path: Path
) -> None:
    agent = ManagedProcess(
        [sys.executable, str(AGENT), f"--steps={STEPS}", "--interval=0", "--resolve-at-end"],
        log_path=tmp_path / "agent.log",
        env=loopback_environment(
            {
                "OTEL_SERVICE_NAME": PROJECT,
                "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={PROJECT}",
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": phoenix.traces_endpoint,
            }
        ),
    )
    with agent:
        assert agent.wait(timeout=30) == 0, agent.describe()
    assert "Failed to export" not in agent.log_tail(200), agent.describe()

    expected = 3 * STEPS * 2 + 3 * STEPS  # calls and results; three evaluations a step

    def arrived() -> list[dict[str, Any]] | None:
        found = phoenix.spans(PROJECT)
        return found if len(found) >= expected else None

    spans = wait_until(
        arrived,
        timeout=20,
        message=f"Phoenix did not return the agent's {expected} spans",
        describe=lambda: str(Counter(s["name"] for s in phoenix.spans(PROJECT))),
    )
    names = Counter(span["name"] for span in spans)
    for tool in ("read_config", "write_config", "restart"):
        assert names[f"{semconv.EXECUTE_TOOL} {tool}"] == STEPS, names
        assert names[f"{semconv.TOOL_RESULT_SPAN} {tool}"] == STEPS, names
    assert names[semconv.EVALUATE_SPAN] == 3 * STEPS, names

    # Every call span carries the GenAI attributes; its result carries the same call id.
    calls = {}
    for span in spans:
        attributes = _attributes(span)
        if span["name"].startswith(semconv.EXECUTE_TOOL + " "):
            assert attributes[semconv.GEN_AI_OPERATION_NAME] == semconv.EXECUTE_TOOL
            assert attributes[semconv.GEN_AI_AGENT_NAME] == "e2e-agent"
            assert attributes[semconv.GEN_AI_TOOL_NAME] == span["name"].split(" ", 1)[1]
            assert attributes[semconv.GEN_AI_CONVERSATION_ID].startswith("e2e-")
            calls[attributes[semconv.GEN_AI_TOOL_CALL_ID]] = span
    results = [s for s in spans if s["name"].startswith(semconv.TOOL_RESULT_SPAN + " ")]
    assert {_attributes(r)[semconv.GEN_AI_TOOL_CALL_ID] for r in results} == set(calls)
    for result in results:
        attributes = _attributes(result)
        call = calls[attributes[semconv.GEN_AI_TOOL_CALL_ID]]
        assert attributes[semconv.OBLIGATION_STATUS] == "result"
        assert semconv.GEN_AI_OPERATION_NAME not in attributes  # not a second execution
        assert result["name"].split(" ", 1)[1] == _attributes(call)[semconv.GEN_AI_TOOL_NAME]

    # The refusal: its event names the write that was open, and that call ended only later.
    refusals = [
        span
        for span in spans
        if span["name"] == semconv.EVALUATE_SPAN and _attributes(span)[semconv.ACTION] == "refuse"
    ]
    assert len(refusals) == STEPS
    for refusal in refusals:
        [event] = [e for e in refusal["events"] or [] if e["name"] == semconv.EVENT_REFUSED]
        event_attributes = _attributes(event)
        assert event_attributes[semconv.RULES] == ["open_tool_call"]
        [call_id] = event_attributes[semconv.OBLIGATION_IDS]
        assert call_id.startswith("write_")
        assert event_attributes[semconv.OBLIGATION_KINDS] == ["tool_call"]
        call = calls[call_id]
        assert int(call["start_time_unix_nano"]) <= int(event["time_unix_nano"])
        assert int(event["time_unix_nano"]) <= int(call["end_time_unix_nano"])
    deferrals = [s for s in spans if _attributes(s).get(semconv.ACTION) == "defer"]
    assert len(deferrals) == 2 * STEPS
    assert all(any(e["name"] == semconv.EVENT_DEFERRED for e in s["events"]) for s in deferrals)


def test_the_readme_demo_command_reaches_phoenix(phoenix: PhoenixServer, tmp_path: Path) -> None:
    """The zero-code page's "See it" command, run against this Phoenix instead of port 6006."""
    command = keyed()["phoenix-demo"].code
    assert "http://127.0.0.1:6006" in command
    command = command.replace("http://127.0.0.1:6006", phoenix.url)
    environment = loopback_environment(
        {"PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    )
    for name in [name for name in environment if name.startswith("OTEL_")]:
        del environment[name]
    demo = ManagedProcess(
        ["bash", "-euo", "pipefail", "-c", command],
        log_path=tmp_path / "demo.log",
        env=environment,
        cwd=tmp_path,
    )
    with demo:
        assert demo.wait(timeout=60) == 0, demo.describe()
    assert "Failed to export" not in demo.log_tail(200), demo.describe()

    def refusals_arrived() -> list[dict[str, Any]] | None:
        spans = phoenix.spans(DEMO_PROJECT)
        refused = [
            span
            for span in spans
            if span["name"] == semconv.EVALUATE_SPAN
            and _attributes(span).get(semconv.ACTION) == "refuse"
        ]
        return spans if len(refused) == 3 else None

    spans = wait_until(
        refusals_arrived,
        timeout=60,
        message="Phoenix did not return the demo's three refusals",
        describe=lambda: str(Counter(s["name"] for s in phoenix.spans(DEMO_PROJECT))),
    )
    names = Counter(span["name"].split(" ", 1)[0] for span in spans)
    assert names[semconv.EXECUTE_TOOL] > 0, names
    assert names[semconv.TOOL_RESULT_SPAN] == names[semconv.EXECUTE_TOOL], names
    call_ids = {
        _attributes(s)[semconv.GEN_AI_TOOL_CALL_ID]
        for s in spans
        if s["name"].startswith(semconv.EXECUTE_TOOL + " ")
    }
    result_ids = {
        _attributes(s)[semconv.GEN_AI_TOOL_CALL_ID]
        for s in spans
        if s["name"].startswith(semconv.TOOL_RESULT_SPAN + " ")
    }
    assert result_ids == call_ids
    for span in spans:
        if _attributes(span).get(semconv.ACTION) != "refuse":
            continue
        [event] = [e for e in span["events"] or [] if e["name"] == semconv.EVENT_REFUSED]
        assert "open_tool_call" in _attributes(event)[semconv.RULES]
        named = zip(
            _attributes(event)[semconv.OBLIGATION_KINDS],
            _attributes(event)[semconv.OBLIGATION_IDS],
            strict=True,
        )
        in_flight = {call_id for kind, call_id in named if kind == "tool_call"}
        assert in_flight, _attributes(event)
        assert in_flight <= call_ids
