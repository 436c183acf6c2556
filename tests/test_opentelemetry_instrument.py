"""Zero code change: an unmodified agent script under the real ``opentelemetry-instrument``.

The script below knows nothing about OpenTelemetry or otel-compaction: it calls the fake model
through the real ``openai`` client (configured by ``OPENAI_BASE_URL``), sends a tool result
back, then compacts its own transcript and cuts a call that is still owed. Run in a subprocess
under ``opentelemetry-instrument``, it exports over OTLP/HTTP to a receiver in this test: the
tool-call spans, the result's link to its call, the severed-call event and metric must arrive.

Twice: with a distro configuring the SDK providers (otel-compaction attaches to them; the
other OpenAI instrumentations installed, opentelemetry-instrumentation-openai-v2 and
OpenInference's, run alongside), and with no distro and no other instrumentation
(otel-compaction builds the providers from ``OTEL_*`` itself).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from auto_instrumentation import environment, instrument_command
from fake_llm_server import (
    FakeLLMServer,
    ToolCall,
)
from otlp_receiver import (
    OtlpReceiver,
    Span,
)

from otel_compaction.instrumentation.conversation import derived_id
from otel_compaction.telemetry import semconv as sc

AGENT = '''\
"""A tool-using agent with its own compactor. No telemetry code."""
import openai

SYSTEM = "You operate the service fleet."
TASK = "Restart the api service, then check it."
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("restart_service", "check_health")
]

client = openai.OpenAI()
messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]

reply = client.chat.completions.create(model="gpt-test", messages=messages, tools=TOOLS)
message = reply.choices[0].message
messages.append(message)
for call in message.tool_calls:
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "restarted"})

chunks = client.chat.completions.create(
    model="gpt-test", messages=messages, tools=TOOLS, stream=True
)
pending = [
    c.id for chunk in chunks for d in chunk.choices for c in d.delta.tool_calls or [] if c.id
]

# The agent's compactor keeps the instruction and the task and summarises the rest: the
# health check it is still waiting for is cut.
messages = messages[:2] + [{"role": "assistant", "content": "Summary: api restarted."}]
reply = client.chat.completions.create(model="gpt-test", messages=messages, tools=TOOLS)
print("pending", pending, "final", reply.choices[0].message.content)
'''

SETUPS = {
    "distro-providers-with-other-instrumentations": {},
    "own-providers": {
        "OTEL_PYTHON_DISTRO": "no-such-distro",
        "OTEL_PYTHON_CONFIGURATOR": "no-such-configurator",
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "openai",
    },
}


def _one(spans: list[Span], name: str) -> Span:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


@pytest.mark.parametrize("setup", list(SETUPS))
def test_an_unmodified_agent_under_opentelemetry_instrument(
    fake_llm_server: FakeLLMServer,
    otlp_http_receiver: OtlpReceiver,
    tmp_path: Path,
    setup: str,
) -> None:
    command = instrument_command(
        "openai",
        "opentelemetry.distro",
        "opentelemetry.instrumentation.openai_v2",
        "openinference.instrumentation.openai",
    )
    (tmp_path / "agent.py").write_text(AGENT)
    fake_llm_server.enqueue("chat", tool_calls=[ToolCall("restart_service", {}, id="call_r1")])
    fake_llm_server.enqueue("chat", tool_calls=[ToolCall("check_health", {}, id="call_h1")])
    fake_llm_server.enqueue("chat", "The api service is restarted.")

    run = subprocess.run(
        [str(command), "python", "agent.py"],
        cwd=tmp_path,
        env=environment(fake_llm_server, otlp_http_receiver, **SETUPS[setup]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "pending ['call_h1'] final The api service is restarted.", (
        run.stderr
    )
    otlp_http_receiver.wait_for_spans("execute_tool check_health", count=1, timeout=10)
    spans = otlp_http_receiver.spans()
    # The spans carrying the requests' bookkeeping: the OpenAI instrumentation's chat spans
    # when it runs alongside, otel-compaction's own otherwise.
    requests = sorted(
        (s for s in spans if sc.REQUEST_API in s.attributes), key=lambda s: s.start_time_unix_nano
    )
    restart = _one(spans, "execute_tool restart_service")
    result = _one(spans, "tool_result restart_service")
    check = _one(spans, "execute_tool check_health")
    conversation = derived_id(
        "You operate the service fleet.", "Restart the api service, then check it."
    )

    assert {s.resource_attributes["service.name"] for s in spans} == {"fleet-agent"}
    assert [s.attributes[sc.GEN_AI_CONVERSATION_ID] for s in requests] == [conversation] * 3
    assert [s.attributes[sc.REQUEST_STREAM] for s in requests] == [False, True, False]
    # The call span, linked to the request that emitted it; the result, linked to the call.
    assert [(link.span_id, link.attributes) for link in restart.links] == [
        (requests[0].span_id, {sc.GEN_AI_TOOL_CALL_ID: "call_r1"})
    ]
    assert restart.attributes[sc.OBLIGATION_STATUS] == "result"
    assert [(link.span_id, link.attributes) for link in result.links] == [
        (restart.span_id, {sc.GEN_AI_TOOL_CALL_ID: "call_r1"})
    ]
    assert result.parent_span_id == requests[1].span_id
    # The cut: an event on the request that no longer carries the call, and on the call,
    # which the process abandoned at exit (so that it was exported at all).
    severed: dict[str, Any] = {
        sc.GEN_AI_TOOL_CALL_ID: "call_h1",
        sc.GEN_AI_TOOL_NAME: "check_health",
        sc.OBLIGATION_KIND: "tool_call",
    }
    assert [(e.name, e.attributes) for e in requests[2].events] == [(sc.EVENT_SEVERED, severed)]
    assert [e.name for e in check.events] == [sc.EVENT_SEVERED, sc.EVENT_ABANDONED]
    assert check.attributes[sc.OBLIGATION_STATUS] == "abandoned"
    assert [(link.span_id, link.attributes) for link in check.links] == [
        (requests[1].span_id, {sc.GEN_AI_TOOL_CALL_ID: "call_h1"})
    ]
    metric = otlp_http_receiver.wait_for_metric(sc.METRIC_SEVERED)
    point = {sc.OBLIGATION_KIND: "tool_call", sc.GEN_AI_TOOL_NAME: "check_health"}
    assert metric.number_point(point).value == 1

    chat_spans = [s for s in spans if s.name in ("chat gpt-test", "ChatCompletion")]
    executions = [s for s in spans if s.name.startswith("execute_tool ")]
    assert len(executions) == 2  # one obligation per call, whoever else instruments the SDK
    # The distro's SDK configurator marks its resource; otel-compaction's own providers do not.
    auto_versions = {"telemetry.auto.version" in s.resource_attributes for s in spans}
    if setup == "distro-providers-with-other-instrumentations":
        assert auto_versions == {True}  # attached to the providers auto-instrumentation made
        assert sorted(s.name for s in chat_spans) == ["ChatCompletion"] * 3 + ["chat gpt-test"] * 3
        assert all(s.scope_name != sc.SCOPE for s in chat_spans)
        assert [s.name for s in requests] == ["chat gpt-test"] * 3
        assert [s for s in spans if s.name == sc.MODEL_REQUEST_SPAN] == []
    else:
        assert auto_versions == {False}
        assert chat_spans == []
        assert [s.name for s in requests] == [sc.MODEL_REQUEST_SPAN] * 3
    assert [s.attributes[sc.GEN_AI_OPERATION_NAME] for s in requests] == ["chat"] * 3
