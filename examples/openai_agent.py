"""A plain OpenAI SDK tool loop, instrumented with no code change, compacting on usage.

The agent imports nothing of otel-compaction to be instrumented: ``opentelemetry-instrument``
records its model requests and tool calls. It compacts its history (`UsageBudget`, a
`GuardedCompactor`) when the model reports more than half of the context window used, before
running the tools the model just asked for: with ``deploy`` in flight the gate defers (the
older, closed turn is compacted, the live one held), and at a critical 90% with ``verify`` in
flight it refuses. The run is one trace, under the ``invoke_agent ops-agent`` span of
`agent_run`.

Run it against the fake model server (``python examples/fake_model_server.py``, in another
terminal), from the clone's root::

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=fake \\
    OTEL_TRACES_EXPORTER=console OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none \\
      .venv/bin/opentelemetry-instrument .venv/bin/python examples/openai_agent.py

Look for the ``compaction.evaluate`` spans: one with the ``compaction.deferred`` event, one
with ``compaction.refused``. With ``OTEL_TRACES_EXPORTER=otlp`` (the default) the same trace
goes to the Collector at ``OTEL_EXPORTER_OTLP_ENDPOINT``.
"""

from __future__ import annotations

import json
from typing import Any

import openai
from usage_budget import UsageBudget

from otel_compaction import configure
from otel_compaction.instrumentation import CompactionOpenAIInstrumentor, agent_run

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {"service": {"type": "string"}}},
        },
    }
    for name, description in [
        ("check_health", "Check a service's health."),
        ("deploy", "Deploy a build of a service."),
        ("verify", "Verify a service after a deploy."),
    ]
]


def run_tool(name: str, arguments: dict[str, Any]) -> str:
    """The agent's own tools."""
    return f"{name} {arguments.get('service')}: ok"


def main() -> None:
    """Run the agent once and print what each compaction did, then the answer."""
    # The instrumentation's telemetry under opentelemetry-instrument; else build it here.
    telemetry = CompactionOpenAIInstrumentor().telemetry or configure()
    budget = UsageBudget(telemetry)
    client = openai.OpenAI(max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Deploy build 1234 of web-7."}]
    with agent_run("ops-agent", conversation_id="ticket-4711"):
        while True:
            reply = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=TOOLS
            )
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            # Compact before the tool results come in: the calls just made are in flight.
            messages = budget.compact(messages, reply.usage.prompt_tokens if reply.usage else 0)
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                if call.type == "function":
                    output = run_tool(call.function.name, json.loads(call.function.arguments))
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    print(message.content)


if __name__ == "__main__":
    main()
