"""The real Claude Code and OpenAI Codex command lines, run offline against `FakeLLMServer`.

Both CLIs come from npm (see `INSTALL_COMMAND`; about 800 MB in ``<repo>/.cli``). The tests
find them at ``<repo>/.cli/node_modules/.bin/{claude,codex}``, or wherever the environment
variables ``OTEL_COMPACTION_CLAUDE`` / ``OTEL_COMPACTION_CODEX`` point; `require_cli` skips the
calling test with the install command when one is missing, and fails it under ``CI=true``.

Each runner keeps everything in a directory of the test's own (``tmp_path``): a ``HOME``, the
CLI's configuration (``CLAUDE_CONFIG_DIR`` / ``CODEX_HOME``), a working directory and a
``TMPDIR``. The environment is built from scratch (only ``PATH`` is inherited), the model
endpoint is the fake server on 127.0.0.1, the API key is fake and the CLIs' telemetry, update
checks and other network traffic are switched off, so a run talks to loopback only. Every
subprocess has a timeout; on timeout, or when a run ends, its whole process group is killed
(background commands an agent started die with it).

* `ClaudeCode`: ``claude -p PROMPT --output-format json`` (`ClaudeCode.run`), headless
  ``/compact`` (`ClaudeCode.compact`), hooks in ``$CLAUDE_CONFIG_DIR/settings.json``
  (`ClaudeCode.hook`), the session log (`ClaudeCode.session_file`).
* `Codex`: ``codex exec --json PROMPT`` (`Codex.exec`), the JSON-RPC ``codex app-server``
  (`Codex.app_server`, whose `AppServer.compact` is ``thread/compact/start``), hooks in
  ``$CODEX_HOME/hooks.json``, trusted the way the CLI persists trust (`Codex.hook`), the
  rollout file (`Codex.rollout_file`).
* `HookRecorder`: one hook command for every event, recording each payload it reads on stdin
  and answering (stdout, stderr, exit code) as the test scripts it.

What the CLIs were seen doing is written down in ``tests/data/sessions/NOTES.md``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import pytest
from conftest import REPO_ROOT, unavailable
from fake_llm_server import FakeLLMServer
from loopback import LOOPBACK

__all__ = [
    "CLAUDE_CODE_VERSION",
    "CLAUDE_COMPACTION_MARKER",
    "CLI_DIR",
    "CLI_ENV",
    "CODEX_COMPACTION_MARKER",
    "CODEX_SUMMARY_PREFIX",
    "CODEX_VERSION",
    "INSTALL_COMMAND",
    "RECORD_ENV",
    "SESSIONS_DIR",
    "AppServer",
    "ClaudeCode",
    "ClaudeResult",
    "CliName",
    "Codex",
    "CodexResult",
    "HookCall",
    "HookRecorder",
    "ProcessResult",
    "claude_compaction_request",
    "cli_version",
    "codex_request_kind",
    "find_cli",
    "last_user_text",
    "read_jsonl",
    "record_session",
    "require_cli",
    "run_process",
]

CliName = Literal["claude", "codex"]
"""The two CLIs, by the name of their executable."""

CLAUDE_CODE_VERSION = "2.1.332"
"""The Claude Code version the tests and ``tests/data/sessions`` were made with."""

CODEX_VERSION = "0.171.0"
"""The OpenAI Codex CLI version the tests and ``tests/data/sessions`` were made with."""

CLI_DIR = REPO_ROOT / ".cli"
"""Where `INSTALL_COMMAND` puts the CLIs (``node_modules/.bin`` under it)."""

INSTALL_COMMAND = (
    "npm install --prefix .cli --save-exact --no-fund --no-audit "
    f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION} @openai/codex@{CODEX_VERSION}"
)
"""How to install both CLIs, from the repository root (npm runs Claude Code's postinstall
script, which puts its native binary in place)."""

CLI_ENV: dict[CliName, str] = {
    "claude": "OTEL_COMPACTION_CLAUDE",
    "codex": "OTEL_COMPACTION_CODEX",
}
"""The environment variable naming each CLI's executable, overriding `CLI_DIR`."""

_LABELS: dict[CliName, str] = {"claude": "Claude Code", "codex": "OpenAI Codex CLI"}

DEFAULT_TIMEOUT = 60.0
"""Seconds a CLI run may take before it is killed and the test fails (runs take ~1 s)."""

FAKE_API_KEY = "sk-fake-otel-compaction-tests"
"""The API key the CLIs send to the fake server."""

CODEX_KEY_ENV = "OTEL_COMPACTION_FAKE_OPENAI_KEY"
"""The variable Codex's fake provider reads its key from (``env_key``)."""

CODEX_MODEL = "gpt-fake"
"""The model Codex asks the fake server for (unknown to Codex: it warns and uses defaults)."""

SESSIONS_DIR = REPO_ROOT / "tests" / "data" / "sessions"
"""Where real session files of the CLIs are kept (see ``NOTES.md`` there)."""

RECORD_ENV = "OTEL_COMPACTION_RECORD_SESSIONS"
"""Set to ``1`` to make the tests copy the session files they produce to `SESSIONS_DIR`."""

CLAUDE_COMPACTION_MARKER = "Your task is to create a detailed summary of the conversation so far"
"""Text of the instructions Claude Code appends to the last user message of the request that
asks the model for a compaction summary (the request is otherwise an ordinary one)."""

CODEX_COMPACTION_MARKER = "You are performing a CONTEXT CHECKPOINT COMPACTION."
"""How the user message Codex ends its compaction request with begins."""

CODEX_SUMMARY_PREFIX = (
    "Another language model started to solve this problem and produced a summary of its"
    " thinking process."
)
"""How the user message carrying Codex's summary after a compaction begins."""


# --------------------------------------------------------------------------
# Finding the CLIs
# --------------------------------------------------------------------------


def _default_path(name: CliName) -> Path:
    return CLI_DIR / "node_modules" / ".bin" / name


def find_cli(name: CliName) -> Path | None:
    """The executable of CLI ``name``: ``$OTEL_COMPACTION_CLAUDE`` / ``$OTEL_COMPACTION_CODEX``
    when set, else ``<repo>/.cli/node_modules/.bin/<name>``; None when it is not there."""
    override = os.environ.get(CLI_ENV[name])
    path = Path(override) if override else _default_path(name)
    return path if path.is_file() and os.access(path, os.X_OK) else None


def require_cli(name: CliName) -> Path:
    """The executable of CLI ``name``; skips the test (fails it under ``CI=true``) when it is
    missing, naming the install command."""
    path = find_cli(name)
    if path is not None:
        return path
    override = os.environ.get(CLI_ENV[name])
    where = f"${CLI_ENV[name]}={override}" if override else str(_default_path(name))
    reason = (
        f"{_LABELS[name]} not found at {where}; install it with `{INSTALL_COMMAND}` "
        f"from {REPO_ROOT}, or point {CLI_ENV[name]} at the executable"
    )
    return unavailable(reason)


_VERSIONS: dict[Path, str] = {}


def cli_version(executable: Path) -> str:
    """What ``<executable> --version`` prints (cached), e.g. ``2.1.332 (Claude Code)``."""
    if executable not in _VERSIONS:
        with tempfile.TemporaryDirectory(prefix="cli-version-") as scratch:
            root = Path(scratch)
            env = _base_env(root)
            env.update(CLAUDE_CONFIG_DIR=str(root / "claude"), CODEX_HOME=str(root / "codex"))
            (root / "codex").mkdir()
            result = run_process([str(executable), "--version"], env=env, cwd=root, timeout=30)
        _VERSIONS[executable] = result.stdout.strip()
    return _VERSIONS[executable]


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessResult:
    """One finished subprocess."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        """The command, its exit code and its output, for assertion messages."""
        return (
            f"$ {shlex.join(self.argv)}\nexit code {self.returncode} after {self.seconds:.1f} s"
            f"\n--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        )


def _kill_group(process: subprocess.Popen[Any]) -> None:
    """Kill the process group ``process`` leads (it was started in a session of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    timeout: float,
    stdin: str | None = None,
) -> ProcessResult:
    """Run ``argv`` in a new session with exactly ``env``; fail the test if it outlives
    ``timeout`` seconds. ``stdin`` is written to it (else it reads /dev/null). Whatever it
    leaves running in its process group is killed when it exits."""
    started = time.monotonic()
    process = subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        stdout, stderr = process.communicate()
        result = ProcessResult(
            tuple(argv), -9, stdout, stderr, time.monotonic() - started
        ).describe()
        pytest.fail(f"timed out after {timeout} s and was killed:\n{result}", pytrace=False)
    finally:
        _kill_group(process)
    return ProcessResult(
        tuple(argv), process.returncode, stdout, stderr, time.monotonic() - started
    )


def _base_env(root: Path) -> dict[str, str]:
    """A fresh environment rooted at ``root``: its own HOME and TMPDIR, no proxies, nothing
    inherited but ``PATH`` (and ``PYTHONPATH``, so that the hooks import the code under
    test)."""
    home, tmp = root / "home", root / "tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    inherited = {name: os.environ[name] for name in ("PYTHONPATH",) if os.environ.get(name)}
    return inherited | {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "NO_PROXY": f"{LOOPBACK},localhost",
        "no_proxy": f"{LOOPBACK},localhost",
    }


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON Lines file, blank lines skipped."""
    records: list[dict[str, Any]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        assert isinstance(record, dict), f"{path} line {number} is not a JSON object"
        records.append(record)
    return records


def _parse_jsonl(text: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("{"):
            value = json.loads(line)
            if isinstance(value, dict):
                records.append(value)
    return records


def record_session(source: Path, name: str) -> Path | None:
    """Copy the session file ``source`` to ``tests/data/sessions/<name>`` when
    ``OTEL_COMPACTION_RECORD_SESSIONS=1``; return the copy (None when not recording)."""
    if os.environ.get(RECORD_ENV) != "1":
        return None
    SESSIONS_DIR.mkdir(parents=True, exist_ok=True)
    target = SESSIONS_DIR / name
    shutil.copyfile(source, target)
    return target


# --------------------------------------------------------------------------
# Recognising what the CLIs send
# --------------------------------------------------------------------------


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        str(part.get("text", ""))
        for part in content
        if isinstance(part, dict) and part.get("type") in ("text", "input_text")
    ]


def last_user_text(body: Mapping[str, Any]) -> str:
    """The text parts of the last ``user`` message of an Anthropic Messages body
    (``messages``) or an OpenAI Responses body (``input``), joined by blank lines."""
    history = body.get("messages", body.get("input"))
    if not isinstance(history, list):
        return ""
    for message in reversed(history):
        if isinstance(message, dict) and message.get("role") == "user":
            return "\n\n".join(_texts(message.get("content")))
    return ""


def claude_compaction_request(body: Mapping[str, Any]) -> bool:
    """Whether a Messages request from Claude Code asks for a compaction summary: its last
    user message carries `CLAUDE_COMPACTION_MARKER`."""
    return CLAUDE_COMPACTION_MARKER in last_user_text(body)


def codex_request_kind(headers: Mapping[str, str]) -> str | None:
    """The ``request_kind`` of a Codex request (``"turn"``, ``"compaction"``, ...), from the
    JSON of its ``x-codex-turn-metadata`` header; None without one."""
    raw = headers.get("x-codex-turn-metadata")
    if raw is None:
        return None
    metadata = json.loads(raw)
    kind = metadata.get("request_kind") if isinstance(metadata, dict) else None
    return str(kind) if kind is not None else None


# --------------------------------------------------------------------------
# Hooks
# --------------------------------------------------------------------------

_HOOK_SCRIPT = r'''"""A hook from tests/agent_clis.py: record the payload, answer as scripted."""
import json
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
raw = sys.stdin.read()
try:
    payload = json.loads(raw)
except ValueError:
    payload = {"unparsed_stdin": raw}
event = payload.get("hook_event_name", "?") if isinstance(payload, dict) else "?"
with open(here / "calls.jsonl", "a", encoding="utf-8") as calls:
    calls.write(json.dumps({"event": event, "payload": payload}) + "\n")
rules_file = here / "responses.json"
rules = json.loads(rules_file.read_text(encoding="utf-8")) if rules_file.exists() else []
for rule in rules:
    if rule["event"] != event:
        continue
    if any(payload.get(key) != value for key, value in rule["match"].items()):
        continue
    sys.stdout.write(rule["stdout"])
    sys.stderr.write(rule["stderr"])
    sys.exit(rule["exit_code"])
'''


@dataclass(frozen=True)
class HookCall:
    """One invocation of the hook command: the event and the JSON it got on stdin."""

    event: str
    payload: dict[str, Any]


class HookRecorder:
    """A hook command, shared by every event, that appends each payload it reads on stdin to
    ``<directory>/calls.jsonl`` and answers with the first rule `respond` scripted for its
    event (nothing, exit code 0, when none matches).

    Claude Code and Codex feed hooks the same way (a JSON object on stdin with
    ``hook_event_name``) and read the same answers (exit code, stdout, stderr), so one
    recorder serves both.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.script = directory / "record_hook.py"
        self.script.write_text(_HOOK_SCRIPT, encoding="utf-8")
        self._rules: list[dict[str, Any]] = []
        self._write_rules()

    @property
    def command(self) -> str:
        """The shell command to configure as the hook."""
        return shlex.join([sys.executable, "-I", str(self.script)])

    def respond(
        self,
        event: str,
        *,
        stdout: str | Mapping[str, Any] = "",
        stderr: str = "",
        exit_code: int = 0,
        when: Mapping[str, Any] | None = None,
    ) -> None:
        """Make the hook answer ``event`` (only payloads whose keys equal ``when``'s, if
        given) with ``stdout`` (a mapping is written as JSON), ``stderr`` and ``exit_code``.
        Rules are tried in the order they were added."""
        text = json.dumps(dict(stdout)) if isinstance(stdout, Mapping) else stdout
        self._rules.append(
            {
                "event": event,
                "match": dict(when or {}),
                "stdout": text,
                "stderr": stderr,
                "exit_code": exit_code,
            }
        )
        self._write_rules()

    def _write_rules(self) -> None:
        (self.directory / "responses.json").write_text(json.dumps(self._rules), "utf-8")

    @property
    def calls(self) -> list[HookCall]:
        """Every invocation so far, in order."""
        path = self.directory / "calls.jsonl"
        if not path.exists():
            return []
        return [HookCall(str(c["event"]), dict(c["payload"])) for c in read_jsonl(path)]

    def payloads(self, event: str) -> list[dict[str, Any]]:
        """The payloads of the invocations for ``event``, in order."""
        return [call.payload for call in self.calls if call.event == event]

    @property
    def events(self) -> list[str]:
        """The events the hook was invoked for, in order."""
        return [call.event for call in self.calls]


def _hooks_config(command: str, events: Iterable[str], timeout: int) -> dict[str, Any]:
    """The ``hooks`` table both CLIs read: each event runs ``command``, whatever the matcher."""
    handler = {"type": "command", "command": command, "timeout": timeout}
    return {event: [{"hooks": [handler]}] for event in events}


# --------------------------------------------------------------------------
# Claude Code
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaudeResult:
    """One ``claude -p ... --output-format json`` run."""

    process: ProcessResult
    output: dict[str, Any]
    """The JSON object Claude Code printed (``type: "result"``, ``result``, ``session_id``,
    ``is_error``, ``usage``, ...)."""

    @property
    def session_id(self) -> str:
        """The session the run belonged to (pass it to ``resume``)."""
        return str(self.output["session_id"])

    @property
    def result(self) -> str:
        """The final text of the run (empty for ``/compact``)."""
        return str(self.output.get("result") or "")


class ClaudeCode:
    """Claude Code in ``root``, its model being ``server``'s Anthropic Messages API.

    ``root/home`` is ``HOME``, ``root/claude`` is ``CLAUDE_CONFIG_DIR`` (settings, hooks,
    session logs), ``root/work`` the working directory, ``root/tmp`` ``TMPDIR`` and
    ``CLAUDE_CODE_TMPDIR`` (background tasks' output files), ``root/hooks`` the
    `HookRecorder`'s.
    """

    def __init__(
        self,
        server: FakeLLMServer,
        root: Path,
        *,
        executable: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.executable = executable if executable is not None else require_cli("claude")
        self.server = server
        self.root = root
        self.config_dir = root / "claude"
        self.cwd = root / "work"
        self.timeout = timeout
        self.extra_env = dict(env or {})
        """Variables added to (or overriding) `env`."""
        self.settings: dict[str, Any] = {}
        """What is written to ``$CLAUDE_CONFIG_DIR/settings.json`` (by `write_settings`)."""
        for directory in (self.config_dir, self.cwd):
            directory.mkdir(parents=True, exist_ok=True)
        self.recorder = HookRecorder(root / "hooks")

    @property
    def env(self) -> dict[str, str]:
        """The whole environment of a run."""
        env = _base_env(self.root)
        env.update(
            {
                "ANTHROPIC_BASE_URL": self.server.anthropic_base_url,
                "ANTHROPIC_API_KEY": FAKE_API_KEY,
                "CLAUDE_CONFIG_DIR": str(self.config_dir),
                "CLAUDE_CODE_TMPDIR": env["TMPDIR"],
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1",
                "DISABLE_ERROR_REPORTING": "1",
                # --dangerously-skip-permissions refuses to run as root outside a sandbox.
                "IS_SANDBOX": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def hook(self, *events: str, timeout: int = 30) -> HookRecorder:
        """Run the `HookRecorder` on each of ``events`` (``PreCompact``, ``PostCompact``,
        ``SessionStart``, ``PreToolUse``, ...) for every matcher; return it."""
        hooks = self.settings.setdefault("hooks", {})
        hooks.update(_hooks_config(self.recorder.command, events, timeout))
        self.write_settings()
        return self.recorder

    def write_settings(self) -> Path:
        """Write `settings` to ``$CLAUDE_CONFIG_DIR/settings.json``; return its path."""
        path = self.config_dir / "settings.json"
        path.write_text(json.dumps(self.settings, indent=2), encoding="utf-8")
        return path

    def run(
        self,
        prompt: str,
        *,
        resume: str | None = None,
        extra_args: Sequence[str] = (),
        timeout: float | None = None,
        check: bool = True,
    ) -> ClaudeResult:
        """``claude -p PROMPT --output-format json --dangerously-skip-permissions``, in
        session ``resume`` if given; fail the test when it exits non-zero (unless not
        ``check``) or prints no JSON object."""
        argv = [
            str(self.executable),
            "-p",
            prompt,
            "--output-format",
            "json",
            "--dangerously-skip-permissions",
        ]
        if resume is not None:
            argv += ["--resume", resume]
        argv += list(extra_args)
        process = run_process(argv, env=self.env, cwd=self.cwd, timeout=timeout or self.timeout)
        if check and process.returncode != 0:
            pytest.fail(f"Claude Code failed:\n{process.describe()}", pytrace=False)
        try:
            output = json.loads(process.stdout)
        except ValueError:
            output = None
        if not isinstance(output, dict):
            pytest.fail(f"Claude Code printed no JSON object:\n{process.describe()}", pytrace=False)
        return ClaudeResult(process, output)

    def compact(self, session_id: str, instructions: str = "", **kwargs: Any) -> ClaudeResult:
        """Compact session ``session_id`` headless: ``claude -p "/compact INSTRUCTIONS"
        --resume SESSION_ID`` (keyword arguments go to `run`)."""
        prompt = f"/compact {instructions}".rstrip()
        return self.run(prompt, resume=session_id, **kwargs)

    def session_file(self, session_id: str) -> Path:
        """The session log ``$CLAUDE_CONFIG_DIR/projects/<cwd, / and . turned into
        ->/<session_id>.jsonl``; fails the test when there is none."""
        found = sorted((self.config_dir / "projects").glob(f"*/{session_id}.jsonl"))
        assert found, f"no session log for {session_id} under {self.config_dir / 'projects'}"
        return found[0]

    def session_records(self, session_id: str) -> list[dict[str, Any]]:
        """The records of `session_file`."""
        return read_jsonl(self.session_file(session_id))


# --------------------------------------------------------------------------
# OpenAI Codex
# --------------------------------------------------------------------------


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


@dataclass(frozen=True)
class CodexResult:
    """One ``codex exec --json`` run."""

    process: ProcessResult
    events: list[dict[str, Any]]
    """The JSON Lines events it printed (``thread.started``, ``turn.started``,
    ``item.started``/``item.completed``, ``turn.completed``, ...)."""

    @property
    def thread_id(self) -> str:
        """The thread (session) the run belonged to (pass it to ``resume``)."""
        for event in self.events:
            if event.get("type") == "thread.started":
                return str(event["thread_id"])
        raise AssertionError(f"no thread.started event:\n{self.process.describe()}")

    def items(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The completed items (``agent_message``, ``command_execution``, ``error``, ...),
        only those of type ``kind`` if given."""
        items = [e["item"] for e in self.events if e.get("type") == "item.completed"]
        return [item for item in items if kind is None or item.get("type") == kind]

    @property
    def messages(self) -> list[str]:
        """The texts of the agent's messages."""
        return [str(item.get("text", "")) for item in self.items("agent_message")]


class Codex:
    """The Codex CLI in ``root``, its model being ``server``'s OpenAI Responses API.

    ``root/home`` is ``HOME``, ``root/codex`` is ``CODEX_HOME`` (``config.toml``,
    ``hooks.json``, ``sessions/``), ``root/work`` the working directory, ``root/tmp``
    ``TMPDIR``, ``root/hooks`` the `HookRecorder`'s. ``config.toml`` declares a provider
    ``fake`` at the server (``wire_api = "responses"``), never asks for approval, runs
    commands unsandboxed and turns plugins and analytics off; ``config`` adds top-level keys
    (TOML values, e.g. ``{"model_auto_compact_token_limit": 1000}``).
    """

    def __init__(
        self,
        server: FakeLLMServer,
        root: Path,
        *,
        executable: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        config: Mapping[str, str | int | bool] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.executable = executable if executable is not None else require_cli("codex")
        self.server = server
        self.root = root
        self.home = root / "codex"
        self.cwd = root / "work"
        self.timeout = timeout
        self.config: dict[str, str | int | bool] = dict(config or {})
        """Top-level ``config.toml`` keys added to the fixed ones (`write_config`)."""
        self.extra_env = dict(env or {})
        """Variables added to (or overriding) `env`."""
        self.hooks: dict[str, Any] = {}
        """The ``hooks`` table of ``$CODEX_HOME/hooks.json`` (`hook`)."""
        self._trusted: dict[str, str] = {}
        for directory in (self.home, self.cwd):
            directory.mkdir(parents=True, exist_ok=True)
        self.recorder = HookRecorder(root / "hooks")
        self.write_config()

    @property
    def env(self) -> dict[str, str]:
        """The whole environment of a run."""
        env = _base_env(self.root)
        env.update({"CODEX_HOME": str(self.home), CODEX_KEY_ENV: FAKE_API_KEY})
        env.update(self.extra_env)
        return env

    def config_toml(self) -> str:
        """The text of ``$CODEX_HOME/config.toml``."""
        top = {
            "model": _toml_string(CODEX_MODEL),
            "model_provider": _toml_string("fake"),
            "approval_policy": _toml_string("never"),
            "sandbox_mode": _toml_string("danger-full-access"),
        }
        for key, value in self.config.items():
            top[key] = (
                _toml_string(value)
                if isinstance(value, str)
                else str(value).lower()
                if isinstance(value, bool)
                else str(value)
            )
        lines = [f"{key} = {value}" for key, value in top.items()]
        lines += [
            "",
            "[model_providers.fake]",
            'name = "FakeLLMServer"',
            f"base_url = {_toml_string(self.server.openai_base_url)}",
            f"env_key = {_toml_string(CODEX_KEY_ENV)}",
            'wire_api = "responses"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
            "",
            "[features]",
            "plugins = false",
            "",
            "[analytics]",
            "enabled = false",
        ]
        for key, digest in sorted(self._trusted.items()):
            lines += [
                "",
                f"[hooks.state.{_toml_string(key)}]",
                f"trusted_hash = {_toml_string(digest)}",
            ]
        return "\n".join(lines) + "\n"

    def write_config(self) -> Path:
        """Write ``$CODEX_HOME/config.toml`` (`config_toml`); return its path."""
        path = self.home / "config.toml"
        path.write_text(self.config_toml(), encoding="utf-8")
        return path

    def hook(self, *events: str, timeout: int = 30) -> HookRecorder:
        """Run the `HookRecorder` on each of ``events`` (``PreCompact``, ``PostCompact``,
        ``SessionStart``, ``PreToolUse``, ...) for every matcher, write
        ``$CODEX_HOME/hooks.json`` and trust its hooks (`trust_hooks`); return the recorder."""
        self.hooks.update(_hooks_config(self.recorder.command, events, timeout))
        path = self.home / "hooks.json"
        path.write_text(json.dumps({"hooks": self.hooks}, indent=2), encoding="utf-8")
        self.trust_hooks()
        return self.recorder

    def trust_hooks(self) -> dict[str, str]:
        """Trust every hook Codex finds, as approving them in its UI would: ask the app
        server (``hooks/list``) for each hook's key and ``currentHash`` and record them under
        ``[hooks.state."<key>"] trusted_hash`` in ``config.toml``. Return the trusted
        hashes by key. (Untrusted hooks do not run; ``codex exec
        --dangerously-bypass-hook-trust`` would run them anyway.)"""
        with self.app_server() as server:
            listed = server.request("hooks/list", {"cwds": [str(self.cwd)]})
        for entry in listed["data"]:
            assert not entry["errors"], f"Codex rejected hooks.json: {entry['errors']}"
            for hook in entry["hooks"]:
                self._trusted[str(hook["key"])] = str(hook["currentHash"])
        self.write_config()
        return dict(self._trusted)

    def _config_args(self, config: Mapping[str, str]) -> list[str]:
        return [arg for key, value in config.items() for arg in ("-c", f"{key}={value}")]

    def exec(
        self,
        prompt: str,
        *,
        resume: str | None = None,
        config: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        timeout: float | None = None,
        check: bool = True,
    ) -> CodexResult:
        """``codex exec --json --skip-git-repo-check PROMPT`` (``codex exec resume THREAD_ID
        PROMPT`` with ``resume``), stdin at /dev/null; ``config`` adds ``-c key=value``
        overrides (values in TOML). Fails the test when it exits non-zero, unless not
        ``check``."""
        argv = [str(self.executable), "exec"]
        if resume is not None:
            argv += ["resume"]
        argv += ["--json", "--skip-git-repo-check", *self._config_args(config or {})]
        argv += list(extra_args)
        argv += [resume, prompt] if resume is not None else [prompt]
        process = run_process(argv, env=self.env, cwd=self.cwd, timeout=timeout or self.timeout)
        if check and process.returncode != 0:
            pytest.fail(f"Codex failed:\n{process.describe()}", pytrace=False)
        return CodexResult(process, _parse_jsonl(process.stdout))

    @contextlib.contextmanager
    def app_server(
        self, *, config: Mapping[str, str] | None = None, timeout: float | None = None
    ) -> Iterator[AppServer]:
        """A running, initialized ``codex app-server`` (JSON-RPC over stdio), stopped on
        exit; ``config`` adds ``-c key=value`` overrides."""
        argv = [str(self.executable), "app-server", *self._config_args(config or {})]
        server = AppServer(argv, env=self.env, cwd=self.cwd, timeout=timeout or self.timeout)
        try:
            server.initialize()
            yield server
        finally:
            server.close()

    def rollout_file(self, thread_id: str) -> Path:
        """The rollout ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread_id>.jsonl``;
        fails the test when there is none."""
        found = sorted((self.home / "sessions").glob(f"*/*/*/rollout-*-{thread_id}.jsonl"))
        assert found, f"no rollout for thread {thread_id} under {self.home / 'sessions'}"
        return found[0]

    def rollout_records(self, thread_id: str) -> list[dict[str, Any]]:
        """The ``{timestamp, type, payload}`` records of `rollout_file`."""
        return read_jsonl(self.rollout_file(thread_id))


class AppServer:
    """A ``codex app-server`` process, spoken to in JSON-RPC (one JSON object a line, no
    ``jsonrpc`` member) over its stdin and stdout; its stderr goes to `stderr_path`.

    Notifications are kept, in order, in `notifications`; `wait_for` waits for the next one
    of a method. Requests the server makes (approvals, user input) are answered with a
    JSON-RPC error and kept in `server_requests`. Every wait is bounded by ``timeout``.
    """

    def __init__(
        self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, timeout: float
    ) -> None:
        self.cwd = cwd
        self.timeout = timeout
        self.notifications: list[dict[str, Any]] = []
        """Every notification received (``{"method", "params"}``), in order."""
        self.server_requests: list[dict[str, Any]] = []
        """Every request the server sent the client, in order."""
        self.stderr_path = cwd.parent / "app-server.stderr"
        self._stderr: IO[str] = self.stderr_path.open("a", encoding="utf-8")
        self._process = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,
        )
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._unseen: deque[dict[str, Any]] = deque()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, name="codex-app-server", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        for raw in stdout:
            line = raw.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except ValueError:
                message = {"method": "<unparsed>", "params": {"line": line}}
            if isinstance(message, dict):
                self._messages.put(message)
        self._messages.put(None)

    def _send(self, message: Mapping[str, Any]) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(json.dumps(message) + "\n")
        stdin.flush()

    def _receive(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        """The next message, answering server requests on the way; fails on timeout or EOF."""
        while True:
            remaining = deadline - time.monotonic()
            try:
                message = self._messages.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                pytest.fail(f"codex app-server: no {waiting_for} within {self.timeout} s")
            if message is None:
                pytest.fail(f"codex app-server exited while waiting for {waiting_for}")
            if "method" in message and "id" in message:
                self.server_requests.append(message)
                error = {"code": -32601, "message": "not supported by the test client"}
                self._send({"id": message["id"], "error": error})
                continue
            if "method" in message:
                self.notifications.append(message)
            return message

    def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Send request ``method`` and return its ``result``; fail the test on an error."""
        self._next_id += 1
        ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method}
        if params is not None:
            message["params"] = dict(params)
        self._send(message)
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            received = self._receive(deadline, f"answer to {method}")
            if "method" in received:
                self._unseen.append(received)
                continue
            if received.get("id") != ident:
                continue
            if "error" in received:
                pytest.fail(f"codex app-server {method} failed: {received['error']}")
            result = received.get("result")
            return dict(result) if isinstance(result, dict) else {}

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send notification ``method``."""
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = dict(params)
        self._send(message)

    def wait_for(
        self,
        method: str,
        predicate: Callable[[dict[str, Any]], bool] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """The ``params`` of the next notification ``method`` (satisfying ``predicate``, if
        given) not waited for yet."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            if self._unseen:
                message = self._unseen.popleft()
            else:
                message = self._receive(deadline, f"{method} notification")
                if "method" not in message:
                    continue
            params = message.get("params")
            params = dict(params) if isinstance(params, dict) else {}
            if message["method"] == method and (predicate is None or predicate(params)):
                return params

    def initialize(self) -> dict[str, Any]:
        """The ``initialize`` handshake (and the ``initialized`` notification)."""
        result = self.request(
            "initialize", {"clientInfo": {"name": "otel-compaction-tests", "version": "0"}}
        )
        self.notify("initialized")
        return result

    def start_thread(self, **params: Any) -> str:
        """``thread/start`` in the runner's working directory; return the thread id."""
        result = self.request("thread/start", {"cwd": str(self.cwd), **params})
        return str(result["thread"]["id"])

    def run_turn(self, thread_id: str, text: str, **params: Any) -> dict[str, Any]:
        """``turn/start`` with user message ``text``; wait for the turn to complete and
        return its ``turn``."""
        user_input = [{"type": "text", "text": text}]
        started = self.request("turn/start", {"threadId": thread_id, "input": user_input, **params})
        return self._completed(thread_id, str(started["turn"]["id"]))

    def compact(self, thread_id: str) -> dict[str, Any]:
        """``thread/compact/start`` (the CLI's ``/compact``): wait for the compaction turn to
        complete and return its ``turn``."""
        self.request("thread/compact/start", {"threadId": thread_id})
        started = self.wait_for("turn/started", lambda p: p.get("threadId") == thread_id)
        return self._completed(thread_id, str(started["turn"]["id"]))

    def _completed(self, thread_id: str, turn_id: str) -> dict[str, Any]:
        done = self.wait_for(
            "turn/completed",
            lambda p: p.get("threadId") == thread_id and p.get("turn", {}).get("id") == turn_id,
        )
        turn = done["turn"]
        assert isinstance(turn, dict)
        return turn

    def close(self) -> None:
        """Close its stdin (which stops it), wait a little, then kill what is left."""
        with contextlib.suppress(OSError):
            if self._process.stdin is not None:
                self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        finally:
            _kill_group(self._process)
            self._process.wait(timeout=10)
            self._reader.join(timeout=5)
            if self._process.stdout is not None:
                self._process.stdout.close()
            self._stderr.close()
