"""A plain Anthropic SDK tool loop, instrumented with no code change, compacting on usage.

The Anthropic twin of ``openai_agent.py``: ``opentelemetry-instrument`` records the Messages
requests and the ``tool_use`` blocks as tool calls; the agent compacts its history
(`UsageBudget`) when the model reports more than half of the context window used, before
running the tools just asked for. With ``deploy`` in flight the gate defers; at a critical 90%
with ``verify`` in flight it refuses. One trace, under ``invoke_agent ops-agent``.

Run it against the fake model server (``python examples/fake_model_server.py``, in another
terminal), from the clone's root::

    ANTHROPIC_BASE_URL=http://127.0.0.1:8000 ANTHROPIC_API_KEY=fake \\
    OTEL_TRACES_EXPORTER=console OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none \\
      .venv/bin/opentelemetry-instrument .venv/bin/python examples/anthropic_agent.py

Look for the ``compaction.evaluate`` spans: one with the ``compaction.deferred`` event, one
with ``compaction.refused``.
"""

from __future__ import annotations

from typing import Any

import anthropic
from usage_budget import UsageBudget

from otel_compaction import configure
from otel_compaction.instrumentation import CompactionAnthropicInstrumentor, agent_run

TOOLS: list[Any] = [
    {
        "name": name,
        "description": description,
        "input_schema": {"type": "object", "properties": {"service": {"type": "string"}}},
    }
    for name, description in [
        ("check_health", "Check a service's health."),
        ("deploy", "Deploy a build of a service."),
        ("verify", "Verify a service after a deploy."),
    ]
]


def run_tool(name: str, arguments: Any) -> str:
    """The agent's own tools."""
    return f"{name} {arguments.get('service')}: ok"


def main() -> None:
    """Run the agent once and print what each compaction did, then the answer."""
    # The instrumentation's telemetry under opentelemetry-instrument; else build it here.
    telemetry = CompactionAnthropicInstrumentor().telemetry or configure()
    budget = UsageBudget(telemetry)
    client = anthropic.Anthropic(max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Deploy build 1234 of web-7."}]
    with agent_run("ops-agent", conversation_id="ticket-4712"):
        while True:
            reply = client.messages.create(
                model="claude-sonnet-4-5", max_tokens=1024, messages=messages, tools=TOOLS
            )
            messages.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in reply.content],
                }
            )
            # Compact before the tool results come in: the calls just made are in flight.
            messages = budget.compact(messages, reply.usage.input_tokens)
            calls = [block for block in reply.content if block.type == "tool_use"]
            if not calls:
                break
            results = [
                {"type": "tool_result", "tool_use_id": c.id, "content": run_tool(c.name, c.input)}
                for c in calls
            ]
            messages.append({"role": "user", "content": results})
    print("".join(block.text for block in reply.content if block.type == "text"))


if __name__ == "__main__":
    main()
