"""The hooks under faults: whatever the input, the options or the environment, a hook process
answers within its budget, exits 0 and blocks nothing unless the gate itself refused.

Each case runs ``python -m otel_compaction hook <cli> ...`` as the CLIs run it: a fresh process,
the hook's JSON (or something else) on standard input. A fault is answered with one line on
standard error naming it, never a traceback, never a block. The cases cover every input class
seen to go wrong: malformed and hostile hook JSON, non-UTF-8 bytes under a strict UTF-8 locale,
nesting deeper than any parser's stack, unknown options and options without their value (a CLI
or project version skew), special files and oversized inputs, a session log being appended
while the hook reads it, and an OTLP endpoint that never answers. Both CLIs' payload shapes are
used: Claude Code's PreCompact, PostCompact and SessionStart, and Codex's.

The fast cases run by default; the long ones (streams that never end, endpoints that never
answer, the full matrix of events by fault) carry the ``faults`` marker, which CI runs.
"""

from __future__ import annotations

import io
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from otlp_receiver import OtlpReceiver
from session_builders import ClaudeSession

from otel_compaction.errors import TranscriptError
from otel_compaction.hooks.run import HARD_CAP_S
from otel_compaction.sessions import read_session

AIM_S = 1.0
"""How long a hook may take to answer on any input (the process included)."""
SLACK_S = 1.5
"""What a loaded machine may add to a process's start (the suite runs beside other work)."""
HARNESS_TIMEOUT_S = HARD_CAP_S + 20.0
"""How long this harness waits for a hook process before calling it hung."""

SESSIONS = Path(__file__).parent / "data" / "sessions"
CLAUDE_LOG = SESSIONS / "claude_code_compacted.jsonl"
CODEX_LOG = SESSIONS / "codex_compacted.jsonl"


@dataclass(frozen=True)
class Answer:
    """What a hook process answered, and how long it took."""

    code: int
    stdout: str
    stderr: str
    seconds: float

    def blocked(self, cli: str) -> bool:
        """True when the CLI would read this answer as blocking the compaction."""
        if cli == "claude-code":
            return self.code == 2
        try:
            answer = json.loads(self.stdout) if self.stdout.strip() else {}
        except ValueError:
            return False
        return isinstance(answer, dict) and answer.get("continue") is False


def hook(
    cli: str,
    home: Path,
    stdin: bytes | Path = b"",
    *args: str,
    env: Mapping[str, str] | None = None,
) -> Answer:
    """Run one hook process as the CLI would; `stdin` is the bytes it reads, or a file opened
    as its standard input (a device, say)."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OTEL_") and key not in ("LC_ALL", "LANG", "PYTHONIOENCODING")
    }
    environ |= {"CLAUDE_CONFIG_DIR": str(home / "claude"), "CODEX_HOME": str(home / "codex")}
    environ |= dict(env or {})
    argv = [sys.executable, "-m", "otel_compaction", "hook", cli, *args]
    run: dict[str, Any] = {"capture_output": True, "env": environ, "timeout": HARNESS_TIMEOUT_S}
    started = time.monotonic()
    if isinstance(stdin, Path):
        with stdin.open("rb") as source:
            done = subprocess.run(argv, check=False, stdin=source, **run)
    else:
        done = subprocess.run(argv, check=False, input=stdin, **run)
    seconds = time.monotonic() - started
    return Answer(
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
        seconds,
    )


def payload(event: str, cli: str = "claude-code", **fields: Any) -> bytes:
    """A hook payload of `cli`'s shape (the keys each CLI sends; see test_agent_clis.py)."""
    base: dict[str, Any] = {"session_id": "sess-faults", "cwd": "/home/dev/shop"}
    if cli == "codex":
        base |= {"turn_id": "turn-1", "model": "gpt-5", "transcript_path": str(CODEX_LOG)}
    else:
        base |= {"prompt_id": "p-1", "transcript_path": str(CLAUDE_LOG)}
    if event in ("PreCompact", "PostCompact"):
        base["trigger"] = "manual"
    if event == "PreCompact" and cli == "claude-code":
        base["custom_instructions"] = None
    if event == "SessionStart":
        base["source"] = "compact"
    return json.dumps({**base, "hook_event_name": event, **fields}).encode()


def assert_fails_open(answer: Answer, cli: str, naming: str | None = None) -> None:
    """Exit 0, nothing that blocks, and one line on standard error (naming `naming`)."""
    assert answer.code == 0, answer
    assert not answer.blocked(cli), answer
    assert "Traceback" not in answer.stderr, answer.stderr
    lines = answer.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("otel-compaction"), answer.stderr
    if naming is not None:
        assert naming in lines[0], answer.stderr
    assert answer.seconds < AIM_S + SLACK_S, answer


def assert_answers(answer: Answer, cli: str) -> None:
    """Exit 0 and no block, no traceback, within the aim (a warning line is allowed)."""
    assert answer.code == 0, answer
    assert not answer.blocked(cli), answer
    assert "Traceback" not in answer.stderr, answer.stderr
    assert answer.seconds < AIM_S + SLACK_S, answer


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# -- the hook's JSON ---------------------------------------------------------------------------

STRICT_UTF8 = {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8:strict"}
"""A UTF-8 locale whose standard streams refuse what is not UTF-8."""

MALFORMED = {
    "empty": b"",
    "whitespace": b"  \n\t ",
    "not json": b"PreCompact please",
    "truncated": payload("PreCompact")[:40],
    "a list": b"[1, 2]",
    "a number": b"42",
    "null": b"null",
    "a string": b'"PreCompact"',
    "NUL bytes": b"\x00" * 64,
    "nested 100000 deep": nested(100_000).encode(),
    "nested inside the payload": (
        b'{"hook_event_name": "PreCompact", "session_id": "s", "x": '
        + nested(100_000).encode()
        + b"}"
    ),
    "a 5000-digit number": b'{"hook_event_name": "PreCompact", "n": ' + b"7" * 5000 + b"}",
    "non-UTF-8 bytes": b'{"hook_event_name": "PreCompact", "session_id": "\xff\xfe\x80"}',
    "UTF-16": payload("PreCompact").decode().encode("utf-16"),
}


@pytest.mark.parametrize("cli", ["claude-code", "codex"])
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_payload_is_one_line(cli: str, case: str, tmp_path: Path) -> None:
    answer = hook(cli, tmp_path, MALFORMED[case], env=STRICT_UTF8)
    assert_fails_open(answer, cli, naming="hook input")


WRONG_TYPES: dict[str, dict[str, Any]] = {
    "transcript_path a number": {"transcript_path": 7},
    "transcript_path a list": {"transcript_path": ["a", "b"]},
    "transcript_path with NUL": {"transcript_path": "/tmp/a\x00b.jsonl"},
    "transcript_path too long": {"transcript_path": "/" + "a" * 5000},
    "transcript_path a loop": {"transcript_path": "LOOP"},
    "no transcript_path": {"transcript_path": None},
    "hook_event_name an object": {"hook_event_name": {"PreCompact": True}},
    "session_id a list": {"session_id": ["../../etc/passwd"]},
    "session_id a path": {"session_id": "../../../../tmp/escape"},
    "trigger an object": {"trigger": {"auto": 1}},
    "lone surrogate in session_id": {"session_id": "\ud800"},
}


@pytest.mark.parametrize("cli", ["claude-code", "codex"])
@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_a_payload_with_odd_fields_never_blocks(cli: str, case: str, tmp_path: Path) -> None:
    fields = dict(WRONG_TYPES[case])
    if fields.get("transcript_path") == "LOOP":
        loop = tmp_path / "loop.jsonl"
        loop.symlink_to(loop)
        fields["transcript_path"] = str(loop)
    stdin = payload("PreCompact", cli, **fields)
    assert_answers(hook(cli, tmp_path, stdin), cli)


def test_a_lone_surrogate_in_the_summary_is_answered(tmp_path: Path) -> None:
    """A summary naming an identifier with a lone surrogate escape: the repair it leads to is
    still written as valid output, under a strict UTF-8 locale."""
    strict = STRICT_UTF8
    pre = hook("claude-code", tmp_path, payload("PreCompact"), env=strict)
    assert_answers(pre, "claude-code")
    post = payload("PostCompact", compact_summary="lost it all \ud800")
    assert_answers(hook("claude-code", tmp_path, post, env=strict), "claude-code")
    start = hook("claude-code", tmp_path, payload("SessionStart"), env=strict)
    assert_answers(start, "claude-code")
    if start.stdout:
        json.loads(start.stdout)


# -- options: a CLI or project version skew ---------------------------------------------------

OPTIONS = {
    "an unknown option": (("--frobnicate",), "--frobnicate"),
    "an unknown option with a value": (("--budget=3", "--policy", "default"), "--budget"),
    "an unknown argument": (("extra",), "extra"),
    "--policy without its value": (("--policy",), "--policy"),
    "--policy followed by an option": (("--policy", "--otlp-endpoint", "x"), "--policy"),
    "--otlp-endpoint without its value": (("--otlp-endpoint",), "--otlp-endpoint"),
    "--policy naming no file": (("--policy", "/nonexistent/policy.yaml"), "policy.yaml"),
    "--policy=": (("--policy=",), "--policy"),
    "a short unknown option": (("--policy", "default", "-x"), "-x"),
}


@pytest.mark.parametrize("cli", ["claude-code", "codex"])
@pytest.mark.parametrize("case", sorted(OPTIONS))
def test_an_unusable_option_is_one_line_and_never_blocks(
    cli: str, case: str, tmp_path: Path
) -> None:
    args, naming = OPTIONS[case]
    answer = hook(cli, tmp_path, payload("PreCompact", cli), *args)
    assert answer.code == 0 and not answer.blocked(cli), answer
    assert "Traceback" not in answer.stderr
    [line, *_] = answer.stderr.splitlines()
    assert line.startswith("otel-compaction") and naming in line, answer.stderr
    assert answer.seconds < AIM_S + SLACK_S, answer


@pytest.mark.parametrize("cli", ["claude-code", "codex"])
def test_an_unknown_option_leaves_the_gate_on_guard(cli: str, tmp_path: Path) -> None:
    """An option of another version is ignored (and named), not a reason to stop guarding:
    over a call in flight, the gate still refuses."""
    busy = busy_session(tmp_path)
    stdin = payload("PreCompact", cli, transcript_path=str(busy))
    answer = hook(cli, tmp_path, stdin, "--frobnicate", "--policy", "default")
    assert answer.blocked(cli) and "toolu_2" in answer.stdout + answer.stderr, answer
    assert answer.stderr.startswith(f"otel-compaction hook {cli}: ignored unknown argument(s) ")


def test_the_options_still_work_spelled_either_way(tmp_path: Path) -> None:
    """``--policy FILE`` and ``--policy=FILE`` both set the policy: a manual compaction the
    default policy blocks only warns under one that says so."""
    policy = tmp_path / "warn-manual.yaml"
    policy.write_text("hooks:\n  manual: warn\n")
    busy = busy_session(tmp_path)
    stdin = payload("PreCompact", transcript_path=str(busy), trigger="manual")
    assert hook("claude-code", tmp_path, stdin).code == 2
    for args in (("--policy", str(policy)), (f"--policy={policy}",)):
        answer = hook("claude-code", tmp_path, stdin, *args)
        assert answer.code == 0 and "toolu_2" in answer.stderr, answer


# -- what the hook reads -----------------------------------------------------------------------


def busy_session(tmp_path: Path) -> Path:
    """A deploy whose call is still waiting for its result: the gate refuses."""
    s = ClaudeSession(tmp_path / "busy.jsonl")
    s.user("Deploy the release.")
    s.call("toolu_1", "Bash", command="make build")
    s.result("toolu_1", "built")
    s.call("toolu_2", "Bash", command="make deploy")
    return s.write()


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "session.fifo"
    os.mkfifo(path)
    return path


SPECIAL = ["fifo", "/dev/zero", "/dev/urandom", "/dev/null", "directory"]


@pytest.mark.parametrize("cli", ["claude-code", "codex"])
@pytest.mark.parametrize("special", SPECIAL)
def test_a_special_transcript_path_is_refused_at_once(
    cli: str, special: str, tmp_path: Path, fifo: Path
) -> None:
    path = {"fifo": str(fifo), "directory": str(tmp_path)}.get(special, special)
    for event in ("PreCompact", "PostCompact", "SessionStart"):
        answer = hook(cli, tmp_path, payload(event, cli, transcript_path=path))
        assert_fails_open(answer, cli, naming=path)


def test_a_partial_last_line_is_a_record_being_written(tmp_path: Path) -> None:
    """The CLI is writing its next record: the hook reads the complete lines before it, and
    the gate decides on them (here, refusing over the call in flight)."""
    busy = busy_session(tmp_path)
    with busy.open("a") as log:
        log.write('{"type": "assistant", "uuid": "u-99", "message": {"role": "assi')
    answer = hook("claude-code", tmp_path, payload("PreCompact", transcript_path=str(busy)))
    assert answer.code == 2 and "toolu_2" in answer.stderr, answer


def test_a_session_log_is_read_as_it_was_when_opened(tmp_path: Path, fifo: Path) -> None:
    """`read_session` directly: the record being written (cut inside a character, even) is
    left out; a FIFO with no writer is refused at once, not waited on."""
    busy = busy_session(tmp_path)
    whole = read_session(busy).messages
    with busy.open("ab") as log:
        log.write('{"type": "user", "uuid": "u-9", "message": {"content": "caf\u00e9'.encode()[:-1])
    assert read_session(busy).messages == whole
    with pytest.raises(TranscriptError, match="a FIFO, not a regular file"):
        read_session(fifo)
    with pytest.raises(TranscriptError, match="a device, not a regular file"):
        read_session("/dev/zero")


def test_a_deeply_nested_log_line_never_blocks(tmp_path: Path) -> None:
    busy = busy_session(tmp_path)
    with busy.open("a") as log:
        log.write(json.dumps({"type": "user", "uuid": "u-x", "sessionId": "s"})[:-1])
        log.write(', "message": ' + nested(50_000) + "}\n")
    for cli in ("claude-code", "codex"):
        answer = hook(cli, tmp_path, payload("PreCompact", cli, transcript_path=str(busy)))
        assert_fails_open(answer, cli, naming="nested")


def test_a_non_utf8_log_never_blocks(tmp_path: Path) -> None:
    log = tmp_path / "latin1.jsonl"
    latin1 = '{"type": "user", "x": "caf\xe9"}\n'.encode("latin-1")
    log.write_bytes(CLAUDE_LOG.read_bytes() + latin1)
    answer = hook("claude-code", tmp_path, payload("PreCompact", transcript_path=str(log)))
    assert_fails_open(answer, "claude-code", naming="UTF-8")


class Appender:
    """A CLI writing its session log: a record every millisecond (a busy CLI streaming its
    model's answer), each in two writes (so the reader often meets half a record), until
    stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.records = 0

    def _run(self) -> None:
        with self.path.open("a", encoding="utf-8") as log:
            while not self.stop.is_set():
                self.records += 1
                text = "All good, still building. " * 40
                record = json.dumps(
                    {
                        "type": "assistant",
                        "uuid": f"w-{self.records}",
                        "sessionId": "sess-1",
                        "message": {
                            "id": f"msg_w{self.records}",
                            "role": "assistant",
                            "content": [{"type": "text", "text": text}],
                        },
                    }
                )
                log.write(record[:100])
                log.flush()
                log.write(record[100:] + "\n")
                log.flush()
                time.sleep(0.001)

    def __enter__(self) -> Appender:
        self.thread.start()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.mark.parametrize("cli", ["claude-code", "codex"])
def test_a_log_being_appended_is_read_to_its_last_complete_line(cli: str, tmp_path: Path) -> None:
    busy = busy_session(tmp_path)
    with Appender(busy) as appender:
        answers = [
            hook(cli, tmp_path, payload(event, cli, transcript_path=str(busy)))
            for event in ("PreCompact", "PostCompact", "SessionStart")
        ]
    assert appender.records > 100
    pre, *after = answers
    # The call in flight is in the prefix read: the gate refuses (a decision, not a fault).
    assert pre.blocked(cli) and pre.seconds < AIM_S + SLACK_S, pre
    for answer in after:
        assert_answers(answer, cli)
        assert "not JSON" not in answer.stderr


# -- oversized inputs --------------------------------------------------------------------------


@pytest.mark.faults
@pytest.mark.parametrize("cli", ["claude-code", "codex"])
def test_a_50_mb_summary_is_refused(cli: str, tmp_path: Path) -> None:
    summary = "All of it was done. " * (50 * 1024 * 1024 // 20)
    stdin = payload("PostCompact", cli, compact_summary=summary)
    assert_fails_open(hook(cli, tmp_path, stdin), cli, naming="larger than")


@pytest.mark.faults
@pytest.mark.parametrize("cli", ["claude-code", "codex"])
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_an_endless_stdin_is_refused(cli: str, device: str, tmp_path: Path) -> None:
    assert_fails_open(hook(cli, tmp_path, Path(device)), cli, naming="hook input")


@pytest.mark.faults
def test_an_oversized_log_is_refused(tmp_path: Path) -> None:
    from otel_compaction.hooks.run import MAX_LOG_BYTES

    log = tmp_path / "huge.jsonl"
    with log.open("wb") as handle:
        handle.truncate(MAX_LOG_BYTES + 1)  # sparse: no disk spent
    answer = hook("claude-code", tmp_path, payload("PreCompact", transcript_path=str(log)))
    assert_fails_open(answer, "claude-code", naming="larger than")


# -- exporting telemetry -----------------------------------------------------------------------


@pytest.fixture
def blackhole() -> Iterator[str]:
    """An OTLP endpoint that never answers: a listening socket that never accepts (the kernel
    completes the handshakes its backlog holds, then nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def refusing() -> Iterator[str]:
    """An OTLP endpoint where every connection is refused (bound, never listening)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.faults
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
@pytest.mark.parametrize("endpoint", ["blackhole", "refusing"])
def test_an_endpoint_that_is_down_never_delays_the_answer(
    protocol: str, endpoint: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(endpoint)
    busy = busy_session(tmp_path)
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
    for cli in ("claude-code", "codex"):
        stdin = payload("PreCompact", cli, transcript_path=str(busy))
        answer = hook(cli, tmp_path, stdin, "--otlp-endpoint", url, env=env)
        # The gate's refusal is answered as fast as without telemetry.
        assert answer.blocked(cli) and "toolu_2" in answer.stderr + answer.stdout, answer
        assert answer.seconds < AIM_S + SLACK_S, answer
        assert "Traceback" not in answer.stderr


@pytest.mark.faults
def test_dropped_exports_are_counted(tmp_path: Path, blackhole: str) -> None:
    from otel_compaction.hooks.export import dropped_exports

    busy = busy_session(tmp_path)
    stdin = payload("PostCompact", transcript_path=str(busy), compact_summary="done")
    for _ in range(2):
        assert_answers(hook("claude-code", tmp_path, stdin, "--otlp-endpoint", blackhole), "x")
    assert dropped_exports(tmp_path / "claude") == 2


def test_the_drop_count_reaches_the_endpoint_once_it_answers(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    otlp_http_receiver: OtlpReceiver,
) -> None:
    """Runs that dropped their telemetry are reported by the next one that gets through."""
    from otel_compaction.cli import main

    counter = tmp_path / "claude" / "otel-compaction" / "exports-dropped"
    counter.parent.mkdir(parents=True)
    counter.write_text("3\n")
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    stdin = payload("PostCompact", compact_summary="done")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    assert main(["hook", "claude-code", "--otlp-endpoint", otlp_http_receiver.endpoint_http]) == 0
    metric = otlp_http_receiver.wait_for_metric("compaction.hook.exports.dropped")
    assert metric.number_point().value == 3


# -- the environment ---------------------------------------------------------------------------

ENVIRONMENTS = {
    "a policy that is not one": {"OTEL_COMPACTION_POLICY": "/nonexistent.yaml"},
    "a policy that is a device": {"OTEL_COMPACTION_POLICY": "/dev/zero"},
    "a home that is a file": {"CLAUDE_CONFIG_DIR": "/etc/hostname", "CODEX_HOME": "/etc/hostname"},
    "a home that is read-only": {"CLAUDE_CONFIG_DIR": "/proc/self", "CODEX_HOME": "/proc/self"},
    "an export timeout that is not one": {
        "OTEL_EXPORTER_OTLP_TIMEOUT": "soon",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
    },
    "an endpoint that is not a URL": {"OTEL_EXPORTER_OTLP_ENDPOINT": "::not a url::"},
    "an ASCII locale": {"LC_ALL": "C", "PYTHONIOENCODING": "ascii"},
}


@pytest.mark.parametrize("cli", ["claude-code", "codex"])
@pytest.mark.parametrize("case", sorted(ENVIRONMENTS))
def test_an_odd_environment_never_blocks(cli: str, case: str, tmp_path: Path) -> None:
    for event in ("PreCompact", "PostCompact", "SessionStart"):
        stdin = payload(event, cli, compact_summary="Résumé: all done ✓")
        assert_answers(hook(cli, tmp_path, stdin, env=ENVIRONMENTS[case]), cli)


def test_a_hook_past_its_hard_cap_answers_and_exits(tmp_path: Path) -> None:
    """Whatever holds a hook up (here another process holding the archive's write lock, which
    the archive would wait 30 s for), the hard cap answers for it: exit 0, one line."""
    archive = tmp_path / "claude" / "otel-compaction" / "archive.sqlite3"
    archive.parent.mkdir(parents=True)
    holder = sqlite3.connect(archive, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        answer = hook(
            "claude-code", tmp_path, payload("PreCompact"), env={"OTEL_COMPACTION_HOOK_CAP": "1"}
        )
    finally:
        holder.close()
    assert_fails_open(answer, "claude-code", naming="1 s")


# -- the whole matrix ---------------------------------------------------------------------------

EVENTS = ["PreCompact", "PostCompact", "SessionStart"]


@pytest.mark.faults
@pytest.mark.parametrize("cli", ["claude-code", "codex"])
@pytest.mark.parametrize("event", EVENTS)
@pytest.mark.parametrize("fault", ["fifo", "/dev/zero", "/dev/urandom", "appended", "nested"])
def test_every_event_of_both_clis_under_every_reading_fault(
    cli: str, event: str, fault: str, tmp_path: Path, fifo: Path
) -> None:
    busy = busy_session(tmp_path)
    if fault == "nested":
        with busy.open("a") as log:
            log.write('{"type": "user", "uuid": "u-x", "sessionId": "s", "message": ')
            log.write(nested(200_000) + "}\n")
    path = {"fifo": str(fifo), "appended": str(busy), "nested": str(busy)}.get(fault, fault)
    stdin = payload(event, cli, transcript_path=path)
    if fault == "appended":
        with Appender(busy):
            answer = hook(cli, tmp_path, stdin)
    else:
        answer = hook(cli, tmp_path, stdin)
    if event == "PreCompact" and fault == "appended":
        assert answer.blocked(cli), answer  # the gate's own refusal
    else:
        assert_answers(answer, cli)
