"""The example agents in ``examples/`` run, and their traces show a deferral and a refusal.

Each example runs as its README says, in a subprocess (the SDK loops under the real
``opentelemetry-instrument``), against the fake model server playing its built-in deploy
scenario on a free loopback port, and exports over OTLP/HTTP to a receiver in this test. From
what arrives: one ``compaction.evaluate`` span deferred, with its ``compaction.deferred`` event
naming the call in flight, one refused, with ``compaction.refused``, both in the run's trace.
The fake server itself is also run as the program people start (``--port``, ``--script``).
An example whose framework is missing skips, and fails instead under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from auto_instrumentation import environment, instrument_command
from conftest import REPO_ROOT, unavailable
from deploy_scenario import FINAL_ANSWER, deploy_scenario
from fake_llm_server import FakeLLMServer
from loopback import bypass_proxies
from otlp_receiver import OtlpReceiver, Span

EXAMPLES = REPO_ROOT / "examples"


@dataclass(frozen=True)
class Example:
    """One example agent: its script, the modules it needs, how it is run."""

    script: str
    modules: tuple[str, ...]
    zero_code: bool
    """Run under ``opentelemetry-instrument`` (else with ``python``)."""
    deferred_call: str
    """The tool whose call the deferral names as in flight."""
    refused_call: str
    """The tool whose call the refusal names as in flight."""


EXAMPLE_AGENTS = {
    "openai": Example("openai_agent.py", ("openai",), True, "deploy", "verify"),
    "anthropic": Example("anthropic_agent.py", ("anthropic",), True, "deploy", "verify"),
}


@pytest.fixture(name="scenario_server")
def scenario_server_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    """The fake model server playing the deploy scenario."""
    bypass_proxies(monkeypatch)
    with FakeLLMServer(responder=deploy_scenario) as server:
        yield server
    assert not server.errors, "\n".join(server.errors)


def _run(example: Example, server: FakeLLMServer, receiver: OtlpReceiver) -> str:
    """Run `example` as its docstring says; return its stdout."""
    for module in example.modules:
        if importlib.util.find_spec(module) is None:
            unavailable(f"{module} is not installed; install the 'dev' extra")
    command = (
        [str(instrument_command(*example.modules)), sys.executable]
        if example.zero_code
        else [sys.executable]
    )
    run = subprocess.run(
        [*command, str(EXAMPLES / example.script)],
        cwd=REPO_ROOT,
        env=environment(server, receiver, PYTHONPATH=str(REPO_ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def _tool_call_ids(spans: list[Span], tool: str) -> list[str]:
    return [
        str(s.attributes["gen_ai.tool.call.id"]) for s in spans if s.name == f"execute_tool {tool}"
    ]


@pytest.mark.parametrize("name", list(EXAMPLE_AGENTS))
def test_the_example_defers_one_compaction_and_refuses_another(
    name: str, scenario_server: FakeLLMServer, otlp_http_receiver: OtlpReceiver
) -> None:
    example = EXAMPLE_AGENTS[name]

    stdout = _run(example, scenario_server, otlp_http_receiver)

    assert stdout.splitlines()[-1] == FINAL_ANSWER
    otlp_http_receiver.wait_for_spans("compaction.evaluate", count=2, timeout=10)
    spans = otlp_http_receiver.spans()
    decisions = sorted(
        (s for s in spans if s.name == "compaction.evaluate"),
        key=lambda s: s.start_time_unix_nano,
    )
    assert [(s.attributes["compaction.action"], [e.name for e in s.events]) for s in decisions] == [
        ("defer", ["compaction.deferred"]),
        ("refuse", ["compaction.refused"]),
    ]
    deferred, refused = (s.events[0].attributes for s in decisions)
    [in_flight] = _tool_call_ids(spans, example.deferred_call)
    assert in_flight in list(deferred["compaction.obligation.ids"])  # type: ignore[arg-type]
    [in_flight] = _tool_call_ids(spans, example.refused_call)
    assert in_flight in list(refused["compaction.obligation.ids"])  # type: ignore[arg-type]
    assert "open_tool_call" in list(refused["compaction.rules"])  # type: ignore[arg-type]
    # One trace: the run's span is the root, the decisions are in it.
    [root] = [s for s in spans if s.parent_span_id is None and s.scope_name]
    assert root.name.startswith("invoke_agent ")
    assert {s.trace_id for s in decisions} == {root.trace_id}


# -- the fake model server, as a program -------------------------------------------------------


def _server(*arguments: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / "fake_model_server.py"), *arguments],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _chat(base_url: str, body: Mapping[str, object]) -> dict[str, object]:
    import urllib.request

    request = urllib.request.Request(
        base_url + "/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as answer:
        result: dict[str, object] = json.load(answer)
    return result


def test_the_server_program_prints_its_urls_and_answers_its_script_then_the_scenario(
    tmp_path: Path,
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"chat": [{"text": "scripted first", "input_tokens": 12000}]}))
    server = _server("--port", "0", "--script", str(script))
    try:
        assert server.stdout is not None
        first, openai_line, anthropic_line = (server.stdout.readline() for _ in range(3))
        url = first.split()[4]
        assert first == f"fake model server on {url} (Ctrl-C stops it); set:\n"
        assert openai_line == f"  export OPENAI_BASE_URL={url}/v1 OPENAI_API_KEY=fake\n"
        assert anthropic_line == f"  export ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY=fake\n"
        body = {"model": "m", "messages": [{"role": "user", "content": "deploy"}]}

        scripted = _chat(url + "/v1", body)
        scenario = _chat(url + "/v1", body)
    finally:
        server.terminate()
        server.wait(timeout=10)

    assert scripted["choices"][0]["message"]["content"] == "scripted first"  # type: ignore[index]
    assert scripted["usage"]["prompt_tokens"] == 12000  # type: ignore[index]
    [call] = scenario["choices"][0]["message"]["tool_calls"]  # type: ignore[index]
    assert call["function"] == {"name": "check_health", "arguments": '{"service":"web-7"}'}
    assert call["id"].startswith("call_t1_")


def test_the_server_program_rejects_a_bad_script(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"completions": []}))
    server = _server("--port", "0", "--script", str(script))
    _, stderr = server.communicate(timeout=30)

    assert server.returncode == 2
    assert stderr.splitlines()[-1].endswith(
        f"error: {script}: unknown API 'completions'; expected one of chat, responses, messages"
    )
