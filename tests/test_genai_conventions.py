"""Where otel-compaction's bookkeeping meets the GenAI semantic conventions, through the real
``openai`` client and the loopback fake model.

* ``gen_ai.conversation.compacted`` is ``true`` on the first inference span after a compaction
  of its conversation: one a `GuardedCompactor` applied in this process, even when the request
  is not shorter than the one before (the compactor's note), and one detection saw (the
  request shrank: see the scenario of ``instrumentation_harness``, asserted with every API and
  beside openai-v2 and OpenInference). It is never ``false``: other requests do not have it.
* ``compaction.obligations.severed`` has one producer: a severed obligation is one point, by
  ``compaction.obligation.kind`` and ``gen_ai.tool.name``, whether passive detection or the
  gate found it, and however often the gate evaluates it again.
"""

from __future__ import annotations

from typing import Any

from fake_llm_server import (
    FakeLLMServer,
    ToolCall,
)
from instrumentation_harness import (
    SYSTEM,
    USER,
    Agent,
    Instrumented,
    request_spans,
)
from telemetry_harness import key, number_points

from otel_compaction import GuardedCompactor, conversation
from otel_compaction.instrumentation.conversation import derived_id
from otel_compaction.summarizers import SummaryRequest

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


class _Brief:
    """A summarizer that writes one short line."""

    def summarize(self, request: SummaryRequest) -> str:
        return "Summary: the fleet status was read."


def test_the_first_request_after_a_guarded_compaction_says_the_conversation_was_compacted(
    instrumented: Instrumented, fake_llm_server: FakeLLMServer
) -> None:
    agent = Agent(fake_llm_server, "chat", style="stream")  # the history stays plain dicts
    with conversation("fleet-7"):
        agent.script(text="The fleet has 12 services; 11 are healthy and one is degraded.")
        agent.ask()
        agent.history.append(agent.user("Which one is degraded, and since when?"))
        agent.script(text="The api service, since the deployment at 09:40 this morning.")
        agent.ask()
        compactor = GuardedCompactor(_Brief(), budget=100_000, token_counter=len)
        result = compactor.compact(agent.history, end=3, force=True)
        assert (result.compacted, result.span) == (True, (0, 2))
        # Two messages replaced by one, two appended: the request is no shorter than the
        # previous one, so only the compactor's note can say it was compacted.
        agent.history = [*result.messages, agent.user("Restart it."), agent.user("Now.")]
        for text in ("Restarting the api service.", "Restarted."):
            agent.script(text=text)
            agent.ask()

    requests = request_spans(instrumented.spans())
    assert [(r.attributes or {}).get("gen_ai.conversation.compacted") for r in requests] == [
        None,
        None,
        True,
        None,
    ]
    compacted = dict(requests[2].attributes or {})
    assert compacted.pop("gen_ai.response.id")
    assert compacted == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "model-test",
        "gen_ai.conversation.id": "fleet-7",
        "compaction.conversation.source": "explicit",
        "compaction.request.api": "chat.completions",
        "compaction.request.stream": True,
        "compaction.response.tool_calls": 0,
        "gen_ai.conversation.compacted": True,
    }
