"""The README's code, and every page's in ``docs/``, runs as written.

Every ``python`` block of the README and of the pages in ``docs/`` runs, page by page in the
order of `readme_snippets.pages` and in each page's order, as a script of its own: in a
subprocess of this interpreter, in a temporary directory, with the real SDK clients pointed at
the tests' fake model server by ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` and fake keys, no
OTLP endpoint and the exporters off (``none``) unless the block is about exporting. Each block
carries a key (``<!-- snippet: KEY -->`` on the line above it, unique over all the pages)
naming what the fake model answers it; a block without a key, or a key without a block, fails.
A block must exit 0 without a traceback, print exactly the lines its comments show, and use
every answer scripted for it.

The shell blocks that are safe and quick run too, with this interpreter's environment first on
``PATH`` as an activated ``.venv`` puts it: the console exporters' first look (what they print
must contain the sample), the quiet run under ``opentelemetry-instrument``, and the commands
whose output a page shows (a ``text`` block keyed ``KEY-output`` right after the command
``KEY``: printed exactly). The policy files the pages show pass ``policy validate``.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import (
    Api,
    FakeLLMServer,
    Reply,
    ToolCall,
)
from postgres_server import postgres_fixture, postgres_url_fixture  # noqa: F401 - fixtures
from readme_snippets import PAGES, Block, blocks, expected_output, keyed

BIN = Path(sys.executable).parent

# A careful summary of messages 1..10 of the bundled example: it states the negative search
# result by tool and call id, as verification requires.
DEPLOY_SUMMARY = (
    "The user asked to switch svc-payments to port 8443 with TLS on, then restart it. The agent "
    "read /srv/payments/config.yaml (port 8080, tls false) and wrote the new configuration. "
    "search_logs (call_logs_1) for 'TLS handshake error' found no matches in the last 24h."
)


RESTART: tuple[tuple[Api, Reply], ...] = (
    ("chat", Reply(tool_calls=(ToolCall("restart", {"service": "web-7"}),))),
    ("chat", Reply("web-7 is restarted.")),
)
"""A model that calls ``restart`` for web-7, then says it is done."""


@dataclass(frozen=True)
class Snippet:
    """What one python block needs: the fake model's answers, and its environment."""

    answers: tuple[tuple[Api, Reply], ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    lock: str | None = None
    """A fixed port the block binds: runs of this test on one machine take turns."""
    postgres: bool = False
    """The block reads ``OTEL_COMPACTION_LEDGER_URL``: a database of the tests' PostgreSQL."""


PYTHON_SNIPPETS: dict[str, Snippet] = {
    # README.md
    "gate": Snippet(),
    # docs/api.md
    "compactor": Snippet(answers=(("chat", Reply(DEPLOY_SUMMARY)),)),
    # docs/fleets.md
    "fleet": Snippet(postgres=True),
    # docs/frameworks.md
    "langchain": Snippet(answers=RESTART),
    "agents": Snippet(
        answers=(
            ("responses", Reply(tool_calls=(ToolCall("deploy", {"service": "web-7"}),))),
            ("responses", Reply("web-7 is deployed.")),
        )
    ),
    # docs/observability.md
    "prometheus": Snippet(lock="9464"),
    # docs/telemetry.md
    "telemetry": Snippet(),
    "agent-run": Snippet(),
    # docs/verification.md
    "verify": Snippet(),
    # docs/zero-code.md
    "sdk-agent": Snippet(answers=RESTART),
    "sdk-agent-run": Snippet(),
}
"""Every python block of the pages, by key, page by page (`readme_snippets.pages`) and in each
page's order."""

SHELL_SNIPPETS = ("console", "quiet", "sdk-agent-console")
"""The shell blocks run here with an agent (the Phoenix ones run in ``test_e2e_phoenix.py``)."""

OUTPUT_SNIPPETS = ("demo", "hook-help", "hook-status-help", "hook-resolve-help")
"""The commands whose output a page shows, in the ``text`` block keyed ``KEY-output``."""

POLICY_SNIPPETS = ("side-effects-policy", "my-policy")
"""The ``yaml`` blocks that are policy files."""


def _environment(server: FakeLLMServer, extra: dict[str, str]) -> dict[str, str]:
    """A user's environment: the fake server as the provider, no backend, exporters off."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OTEL_", "OPENAI_", "ANTHROPIC_", "PYTHONPATH"))
        and name.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
    }
    environment.update(
        {
            "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
            "NO_PROXY": "127.0.0.1,localhost",
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "test-key-not-secret",
            "ANTHROPIC_BASE_URL": server.anthropic_base_url,
            "ANTHROPIC_API_KEY": "test-key-not-secret",
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            **extra,
        }
    )
    return environment


@pytest.fixture(name="port_lock")
def port_lock_fixture(request: pytest.FixtureRequest) -> Iterator[None]:
    """Take turns with other runs of this test for the fixed port a block binds."""
    snippet = PYTHON_SNIPPETS.get(request.node.callspec.params.get("key", ""))
    if snippet is None or snippet.lock is None:
        yield
        return
    path = Path(tempfile.gettempdir()) / f"otel-compaction-readme-port-{snippet.lock}.lock"
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _describe(block: Block, result: subprocess.CompletedProcess[str]) -> str:
    return (
        f"{block.where} ({block.key}) exited {result.returncode}\n"
        f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
    )


def test_every_python_block_has_a_key_and_every_key_a_block() -> None:
    python = [block for page in PAGES for block in blocks(page) if block.language == "python"]
    assert python, "the pages have no python blocks"
    unkeyed = [block.where for block in python if block.key is None]
    assert not unkeyed, f"python blocks without a <!-- snippet: KEY --> comment at {unkeyed}"
    assert [block.key for block in python] == list(PYTHON_SNIPPETS)
    shell = keyed()
    for key in (*SHELL_SNIPPETS, *OUTPUT_SNIPPETS):
        assert key in shell and shell[key].language == "sh", key
    for key in OUTPUT_SNIPPETS:
        output = shell.get(f"{key}-output")
        assert output is not None and output.language == "text", f"{key}-output"
        assert output.page == shell[key].page, f"{key}-output is on another page"
    for key in POLICY_SNIPPETS:
        assert key in shell and shell[key].language == "yaml", key


def test_expected_output_reads_printed_lines_and_their_continuations() -> None:
    code = (
        "x = 1  # not output\n"
        "# not output either\n"
        "print(x)\n"
        "# 1 {'a': 1,\n"
        "#      'b': 2}\n"
        "for item in (1, 2):\n"
        "    print(item)\n"
        "    # 1\n"
        "    # 2\n"
        "y = 2\n"
        "# not output\n"
    )
    assert expected_output(code) == ["1 {'a': 1, 'b': 2}", "1", "2"]


@pytest.mark.usefixtures("port_lock")
@pytest.mark.parametrize("key", list(PYTHON_SNIPPETS))
def test_python_block_runs_as_written(
    key: str, fake_llm_server: FakeLLMServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    block = keyed()[key]
    snippet = PYTHON_SNIPPETS[key]
    env = dict(snippet.env)
    if snippet.postgres:
        env["OTEL_COMPACTION_LEDGER_URL"] = request.getfixturevalue("postgres_url")
    for api, reply in snippet.answers:
        fake_llm_server.enqueue_reply(api, reply)
    script = tmp_path / f"readme_{key}.py"  # not named like a module it imports
    script.write_text(block.code, encoding="utf-8")

    result = _run([sys.executable, script.name], tmp_path, _environment(fake_llm_server, env))

    assert result.returncode == 0, _describe(block, result)
    assert "Traceback" not in result.stderr, _describe(block, result)
    assert result.stdout.splitlines() == expected_output(block.code), _describe(block, result)
    assert fake_llm_server.pending() == 0, f"{key}: answers left unasked"
    if not snippet.answers:
        assert not fake_llm_server.requests, f"{key}: the block called a model unasked"


def _json_objects(text: str) -> Iterator[Any]:
    """The JSON objects printed in `text`, skipping what is not JSON."""
    decoder = json.JSONDecoder()
    index = 0
    while (start := text.find("{", index)) != -1:
        try:
            value, index = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            index = start + 1
            continue
        yield value


def _contains(actual: Any, sample: Any) -> bool:
    """True when `sample` is `actual` with some object keys left out (lists in full)."""
    if isinstance(sample, dict):
        return isinstance(actual, dict) and all(
            name in actual and _contains(actual[name], value) for name, value in sample.items()
        )
    if isinstance(sample, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(sample)
            and all(_contains(a, s) for a, s in zip(actual, sample, strict=True))
        )
    return bool(actual == sample)


def _shell(
    key: str,
    server: FakeLLMServer,
    cwd: Path,
    strip: tuple[str, ...] = (),
    agent: str = "telemetry",
) -> subprocess.CompletedProcess[str]:
    """Run the shell block `key` with bash in `cwd`, the python block `agent` as ``agent.py``;
    `strip` removes variables from the environment."""
    (cwd / "agent.py").write_text(keyed()[agent].code, encoding="utf-8")
    environment = _environment(server, {})
    for name in strip:
        environment.pop(name, None)
    return _run(["bash", "-euo", "pipefail", "-c", keyed()[key].code], cwd, environment)


def test_console_exporters_print_the_sample(fake_llm_server: FakeLLMServer, tmp_path: Path) -> None:
    block = keyed()["console"]
    result = _shell("console", fake_llm_server, tmp_path, strip=("OTEL_TRACES_EXPORTER",))
    assert result.returncode == 0, _describe(block, result)
    assert "Traceback" not in result.stderr, _describe(block, result)

    printed = list(_json_objects(result.stdout))
    spans = [item for item in printed if "context" in item and "name" in item]
    names = sorted(span["name"] for span in spans)
    assert names == sorted(
        [
            "compaction.evaluate",
            "compaction.evaluate",
            "execute_tool write_file",
            "tool_result write_file",
            "execute_tool search",
            "tool_result search",
            "execute_tool reserve_seat",
            "tool_result reserve_seat",
            "compaction.transaction booking",
            "compaction.retry fetch",
        ]
    ), names
    assert any("resource_metrics" in item for item in printed), "no metrics were printed"
    samples = [json.loads(keyed()[key].code) for key in ("console-span", "console-link")]
    for sample in samples:
        assert any(_contains(span, sample) for span in spans), sample

    # The link the sample shows points at the call span.
    [call] = [span for span in spans if span["name"] == "execute_tool write_file"]
    [result_span] = [span for span in spans if span["name"] == "tool_result write_file"]
    [link] = result_span["links"]
    assert link["context"]["span_id"] == call["context"]["span_id"]


def test_quiet_first_run_under_opentelemetry_instrument(
    fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    block = keyed()["quiet"]
    assert "opentelemetry-instrument" in block.code
    result = _shell(
        "quiet",
        fake_llm_server,
        tmp_path,
        strip=("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER"),
    )
    assert result.returncode == 0, _describe(block, result)
    assert result.stdout.splitlines() == expected_output(keyed()["telemetry"].code)
    assert result.stderr == "", _describe(block, result)


@pytest.mark.parametrize("key", OUTPUT_SNIPPETS)
def test_a_command_prints_what_its_page_shows(
    key: str, fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    block = keyed()[key]
    environment = _environment(fake_llm_server, {"COLUMNS": "80"})
    result = _run(["bash", "-euo", "pipefail", "-c", block.code], tmp_path, environment)
    assert result.returncode == 0, _describe(block, result)
    assert result.stdout == keyed()[f"{key}-output"].code, _describe(block, result)


@pytest.mark.parametrize("key", POLICY_SNIPPETS)
def test_a_policy_a_page_shows_is_valid(
    key: str, fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    block = keyed()[key]
    (tmp_path / "my-policy.yaml").write_text(block.code, encoding="utf-8")
    argv = [str(BIN / "otel-compaction"), "policy", "validate", "my-policy.yaml"]
    result = _run(argv, tmp_path, _environment(fake_llm_server, {}))
    assert result.returncode == 0, _describe(block, result)


def test_a_plain_sdk_loop_under_opentelemetry_instrument_records_its_tool_call(
    fake_llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    block = keyed()["sdk-agent-console"]
    assert "opentelemetry-instrument" in block.code
    for api, reply in RESTART:
        fake_llm_server.enqueue_reply(api, reply)
    result = _shell(
        "sdk-agent-console",
        fake_llm_server,
        tmp_path,
        strip=("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER"),
        agent="sdk-agent",
    )
    assert result.returncode == 0, _describe(block, result)
    assert "Traceback" not in result.stderr, _describe(block, result)
    assert expected_output(keyed()["sdk-agent"].code)[0] in result.stdout.splitlines()
    assert fake_llm_server.pending() == 0

    spans = [item for item in _json_objects(result.stdout) if "context" in item and "name" in item]
    [call] = [span for span in spans if span["name"] == "execute_tool restart"]
    [answer] = [span for span in spans if span["name"] == "tool_result restart"]
    assert call["attributes"]["gen_ai.tool.name"] == "restart"
    assert answer["attributes"]["compaction.obligation.status"] == "result"
    assert [link["context"]["span_id"] for link in answer["links"]] == [call["context"]["span_id"]]
