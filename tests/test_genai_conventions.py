"""Where otel-compaction's bookkeeping meets the GenAI semantic conventions, through the real
``openai`` client and the loopback fake model.

* ``compaction.obligations.severed`` has one producer: a severed obligation is one point, by
  ``compaction.obligation.kind`` and ``gen_ai.tool.name``, whether passive detection or the
  gate found it, and however often the gate evaluates it again.
"""

from __future__ import annotations

from typing import Any

from fake_llm_server import (  # noqa: F401 - the fixture import registers the fixture
    FakeLLMServer,
    ToolCall,
    fake_llm_server_fixture,
)
from instrumentation_harness import (  # noqa: F401 - instrumented_fixture registers the fixture
    SYSTEM,
    USER,
    Agent,
    Instrumented,
    instrumented_fixture,
    request_spans,
)
from telemetry_harness import key, number_points

from otel_compaction.instrumentation.conversation import derived_id

CONVERSATION = derived_id(SYSTEM, USER)
CHECK_CALL: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_check",
            "type": "function",
            "function": {"name": "check_health", "arguments": '{"service": "api"}'},
        }
    ],
}


def test_a_severed_obligation_is_counted_once_whoever_finds_it_and_however_often(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    agent = Agent(fake_llm_server, "chat")
    agent.script(ToolCall("check_health", {"service": "api"}, id="call_check"))
    agent.ask()
    # The agent's compactor cuts the health check while it is owed: detection finds it.
    agent.history[1:] = [agent.summary()]
    agent.script(text="Waiting for the health check.")
    agent.ask()
    # Its result arrives late and resolves it.
    agent.history.append(agent.result("call_check", "healthy"))
    agent.script(text="The api service is healthy.")
    agent.ask()
    # The gate, twice, over the agent's own uncut log: the call is there, its result is not.
    gate = instrumented.instrumentor.gate
    assert gate is not None
    log = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}, CHECK_CALL]
    decisions = [
        gate.evaluate(log, 1, 3, conversation_id=CONVERSATION, raise_on_refuse=False)
        for _ in range(2)
    ]

    severed_events = [
        [e.name for e in s.events if e.name == "compaction.obligation.severed"]
        for s in request_spans(instrumented.spans())
    ]
    assert severed_events == [[], ["compaction.obligation.severed"], []]
    assert [d.action for d in decisions] == ["defer", "defer"]
    conflicts = gate.analyse(log, conversation_id=CONVERSATION).ledger_conflicts
    assert [(c.rule, c.id) for c in conflicts] == [("severed_obligation", "call_check")]
    metrics = instrumented.pipeline.metrics()
    assert number_points(metrics["compaction.obligations.severed"]) == {
        key({"compaction.obligation.kind": "tool_call", "gen_ai.tool.name": "check_health"}): 1
    }
