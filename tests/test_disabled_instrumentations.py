"""One instrumentor per library under the real ``opentelemetry-instrument``.

An unmodified agent script calls the fake model through the real ``openai`` client and the
real ``anthropic`` client, one tool call and its result each. Run in a subprocess with a distro
(and the other OpenAI instrumentations installed, which run alongside), it exports over
OTLP/HTTP to a receiver in this test. ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` naming
``compaction_anthropic`` leaves the OpenAI SDK's calls recorded and none of Anthropic's, and the
reverse; ``compaction`` switches every otel-compaction instrumentor off. An ``anthropic`` whose
installed version is outside the supported range (a distribution record shadowing the real one
on ``PYTHONPATH``) is the loader's dependency conflict: it says so and skips that instrumentor
only, and the agent runs as without it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

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

AGENT = '''\
"""An agent asking two providers, one tool call each. No telemetry code."""
import anthropic
import openai

chat = openai.OpenAI()
messages = [
    {"role": "system", "content": "You track orders."},
    {"role": "user", "content": "Where is order 7?"},
]
tools = [{"type": "function", "function": {"name": "find_order", "parameters": {"type": "object"}}}]
reply = chat.chat.completions.create(model="gpt-test", messages=messages, tools=tools)
call = reply.choices[0].message.tool_calls[0]
messages.append(reply.choices[0].message)
messages.append({"role": "tool", "tool_call_id": call.id, "content": "shipped"})
first = chat.chat.completions.create(model="gpt-test", messages=messages, tools=tools)

claude = anthropic.Anthropic()
history = [{"role": "user", "content": "Is widget 3 in stock?"}]
stock = [{"name": "check_stock", "input_schema": {"type": "object"}}]
ask = dict(model="claude-test", max_tokens=256, system="You keep the stock.", tools=stock)
reply = claude.messages.create(messages=history, **ask)
use = next(block for block in reply.content if block.type == "tool_use")
history += [
    {"role": "assistant", "content": reply.content},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "12"}]},
]
second = claude.messages.create(messages=history, **ask)
print(first.choices[0].message.content, "|", second.content[0].text)
'''

# Beside openai-v2, a request's bookkeeping goes on openai-v2's chat span (no span of our own).
OPENAI_CALLS = [
    ("bookkeeping on chat gpt-test", "chat.completions"),
    ("bookkeeping on chat gpt-test", "chat.completions"),
    ("execute_tool find_order", "call_o1"),
    ("tool_result find_order", "call_o1"),
]
ANTHROPIC_CALLS = [
    ("compaction.model_request", "anthropic"),
    ("compaction.model_request", "anthropic"),
    ("execute_tool check_stock", "toolu_a1"),
    ("tool_result check_stock", "toolu_a1"),
]
# The other instrumentations' spans (the OpenAI ones and the Anthropic SDK's own tracing): two
# requests each, whatever otel-compaction does.
OTHERS = [
    "ChatCompletion",
    "ChatCompletion",
    "anthropic.messages.create",
    "anthropic.messages.create",
    "chat gpt-test",
    "chat gpt-test",
]

CONFLICT = (
    'compaction_anthropic only instruments "anthropic >= 0.40", but currently installed '
    'version ("anthropic 0.39.0") falls outside of that range, so nothing can be instrumented.'
)


def _run(
    server: FakeLLMServer, receiver: OtlpReceiver, directory: Path, **settings: str
) -> tuple[subprocess.CompletedProcess[str], list[Span]]:
    command = instrument_command(
        "openai",
        "anthropic",
        "opentelemetry.distro",
        "opentelemetry.instrumentation.openai_v2",
        "openinference.instrumentation.openai",
    )
    (directory / "agent.py").write_text(AGENT)
    server.enqueue("chat", tool_calls=[ToolCall("find_order", {}, id="call_o1")])
    server.enqueue("chat", "Order 7 has shipped.")
    server.enqueue("messages", tool_calls=[ToolCall("check_stock", {}, id="toolu_a1")])
    server.enqueue("messages", "Twelve left.")
    run = subprocess.run(
        [str(command), "python", "agent.py"],
        cwd=directory,
        env=environment(server, receiver, **settings),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "Order 7 has shipped. | Twelve left.\n", run.stderr
    assert server.pending() == 0
    # The exporters flushed at exit, before the process ended: every span has arrived.
    return run, receiver.spans()


def _recorded(spans: list[Span]) -> list[tuple[str, str]]:
    """otel-compaction's spans: the requests by provider, the calls and results by call id; and
    another instrumentation's request span carrying otel-compaction's bookkeeping, by API."""
    recorded = []
    for span in spans:
        if span.scope_name != "otel_compaction":
            if "compaction.request.api" in span.attributes:
                api = str(span.attributes["compaction.request.api"])
                recorded.append((f"bookkeeping on {span.name}", api))
            continue
        key = "gen_ai.provider.name" if span.name == "compaction.model_request" else None
        recorded.append((span.name, str(span.attributes[key or "gen_ai.tool.call.id"])))
    return sorted(recorded)


def _others(spans: list[Span]) -> list[str]:
    return sorted(span.name for span in spans if span.scope_name != "otel_compaction")


@pytest.mark.parametrize(
    ("disabled", "expected"),
    [
        ("compaction_anthropic", sorted(OPENAI_CALLS)),
        ("compaction_openai", sorted(ANTHROPIC_CALLS)),
        ("requests, compaction", []),  # spaced as the loader allows
    ],
)
def test_disabling_one_instrumentor_leaves_the_others_on(
    fake_llm_server: FakeLLMServer,
    otlp_http_receiver: OtlpReceiver,
    tmp_path: Path,
    disabled: str,
    expected: list[tuple[str, str]],
) -> None:
    _, spans = _run(
        fake_llm_server,
        otlp_http_receiver,
        tmp_path,
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=disabled,
    )
    assert _recorded(spans) == expected
    assert _others(spans) == OTHERS


def test_an_unsupported_library_version_skips_its_instrumentor_only(
    fake_llm_server: FakeLLMServer, otlp_http_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    shadow = tmp_path / "shadow"
    record = shadow / "anthropic-0.39.0.dist-info"
    record.mkdir(parents=True)
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: anthropic\nVersion: 0.39.0\n")
    agent = tmp_path / "agent"
    agent.mkdir()

    run, spans = _run(fake_llm_server, otlp_http_receiver, agent, PYTHONPATH=str(shadow))

    assert _recorded(spans) == sorted(OPENAI_CALLS)
    assert _others(spans) == OTHERS
    assert run.stderr.splitlines() == [CONFLICT]
