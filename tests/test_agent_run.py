"""One trace per agent run: the run's tool calls, results and decisions under its
``invoke_agent`` span."""

from __future__ import annotations

import pytest
from opentelemetry.trace import StatusCode
from telemetry_harness import FLIGHT_MESSAGES, Pipeline, make_pipeline

from otel_compaction.context import current_conversation_id


@pytest.fixture(name="pipeline")
def pipeline_fixture() -> Pipeline:
    return make_pipeline(agent_name="planner")


def test_everything_of_a_run_is_one_trace_under_its_agent_span(pipeline: Pipeline) -> None:
    telemetry = pipeline.telemetry
    with telemetry.agent_run(conversation_id="conv-run") as run:
        assert current_conversation_id() == "conv-run"
        call = telemetry.recorder.call("search", "s1", arguments={"q": "OOM"})
        call.result("no matches")
        telemetry.gate().evaluate(FLIGHT_MESSAGES, 4, 8)
    assert current_conversation_id() is None

    [agent] = pipeline.spans("invoke_agent planner")
    assert dict(agent.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "planner",
        "gen_ai.conversation.id": "conv-run",
        "openinference.span.kind": "AGENT",
    }
    assert agent.parent is None
    assert agent.context is not None and run.get_span_context() == agent.context
    children = [s for s in pipeline.spans() if s is not agent]
    assert sorted(s.name for s in children) == [
        "compaction.evaluate", "execute_tool search", "tool_result search",
    ]  # fmt: skip
    for span in children:
        assert span.context is not None and span.context.trace_id == agent.context.trace_id
        assert span.parent is not None and span.parent.span_id == agent.context.span_id
    [evaluate] = pipeline.spans("compaction.evaluate")
    assert (evaluate.attributes or {})["gen_ai.conversation.id"] == "conv-run"


def test_two_runs_are_two_traces(pipeline: Pipeline) -> None:
    telemetry = pipeline.telemetry
    for conversation_id in ("conv-a", "conv-b"):
        with telemetry.agent_run("deployer", conversation_id=conversation_id):
            telemetry.recorder.call("restart", f"r-{conversation_id}").result("ok")
    traces = {s.context.trace_id for s in pipeline.spans() if s.context is not None}
    assert len(traces) == 2
    assert [s.name for s in pipeline.spans(prefix="invoke_agent")] == [
        "invoke_agent deployer", "invoke_agent deployer",
    ]  # fmt: skip


def test_a_run_that_raises_is_an_error_span_and_the_error_propagates(pipeline: Pipeline) -> None:
    with pytest.raises(KeyError), pipeline.telemetry.agent_run("planner"):
        raise KeyError("svc")
    [agent] = pipeline.spans("invoke_agent planner")
    assert agent.status.status_code is StatusCode.ERROR
    assert (agent.attributes or {})["error.type"] == "KeyError"
    assert agent.end_time is not None
