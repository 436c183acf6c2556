"""One hook run: read the CLI's JSON, act on its event, answer the way that CLI reads it.

The two CLIs differ only in where they keep their files and how a hook speaks to them:

=============  =======================================  ==========================================
               Claude Code                              Codex
=============  =======================================  ==========================================
config home    ``$CLAUDE_CONFIG_DIR`` (``~/.claude``)   ``$CODEX_HOME`` (``~/.codex``)
block          exit 2, the reason on standard error     ``{"continue": false, "stopReason": ...}``
               (a manual ``/compact`` only)             (a manual ``/compact`` only)
summary        PostCompact's ``compact_summary``        the session log's latest compaction
repair         ``hookSpecificOutput.additionalContext``  the same
=============  =======================================  ==========================================

A hook fails open, fast, always: whatever its input, options or environment, it answers exit 0
and blocks nothing unless the gate refused. What it cannot use (a payload that is not a JSON
object, not UTF-8, nested too deeply or larger than `MAX_PAYLOAD_BYTES`; a session log that is
a FIFO, a device or with more than `MAX_LOG_BYTES` to decode; an option it does not know, from
another version) is one line on standard error naming it. A session log being written is read as it
was when opened; telemetry never delays the answer (`otel_compaction.hooks.export`); and past
`HARD_CAP_S` (``OTEL_COMPACTION_HOOK_CAP`` seconds), whatever holds the hook up, it answers
that it skipped, and exits.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # the gate loads only for a payload worth deciding on: a fault is answered
    # before it, in a fraction of the time
    from otel_compaction.hooks.guard import Guard
    from otel_compaction.sessions import Session

__all__ = [
    "CAP_ENV",
    "CLIS",
    "HARD_CAP_S",
    "MAX_LOG_BYTES",
    "MAX_PAYLOAD_BYTES",
    "HookOptions",
    "HookResult",
    "collector_paused",
    "main",
    "parse_options",
    "run_hook",
]

CLIS: Final = ("claude-code", "codex")
_HOMES: Final = {"claude-code": ("CLAUDE_CONFIG_DIR", ".claude"), "codex": ("CODEX_HOME", ".codex")}
_OTEL_SWITCHES: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

HARD_CAP_S: Final = 10.0
"""The longest a hook process runs before answering that it skipped (Claude Code gives a hook
60 s): a fault is answered far sooner, this is for what nothing else bounds (another process
holding the archive's lock, a store that does not answer)."""
CAP_ENV: Final = "OTEL_COMPACTION_HOOK_CAP"
"""Overrides `HARD_CAP_S` (seconds)."""
MAX_PAYLOAD_BYTES: Final = 4 * 1024 * 1024
"""The largest hook input read (4 MiB; a summary is a few kB)."""
MAX_LOG_BYTES: Final = 64 * 1024 * 1024
"""The most of a session log a hook decodes (64 MiB from its latest compaction on, or of a
log without one; its analysis must fit in the hard cap). The file itself may be larger, up to
`otel_compaction.inputs.MAX_INPUT_BYTES`: the part before that compaction is only scanned."""
_VALUED: Final = ("--policy", "--otlp-endpoint")
_HANDLED: Final = frozenset({"PreCompact", "PreToolUse", "PostCompact", "SessionStart"})


@dataclass(frozen=True, slots=True)
class HookOptions:
    """A hook's command line, read leniently: what it does not know is noted, not fatal."""

    policy: str | None = None
    otlp_endpoint: str | None = None
    ignored: tuple[str, ...] = ()
    """Arguments not understood (an option of another version, say)."""
    missing: tuple[str, ...] = ()
    """Options given without their value."""


def parse_options(argv: Sequence[str]) -> HookOptions:
    """Read ``--policy NAME|FILE`` and ``--otlp-endpoint URL`` (or ``--option=value``) from
    `argv`; anything else is ignored and named in `HookOptions.ignored`."""
    values: dict[str, str] = {}
    ignored: list[str] = []
    missing: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, equals, value = arg.partition("=")
        if name not in _VALUED:
            ignored.append(arg)
            continue
        if not equals:
            value = args.pop(0) if args and not args[0].startswith("-") else ""
        if value:
            values[name] = value
        else:
            missing.append(name)
    return HookOptions(
        values.get("--policy"), values.get("--otlp-endpoint"), tuple(ignored), tuple(missing)
    )


@dataclass(frozen=True, slots=True)
class HookResult:
    """What the hook process answers: its exit status and what it writes."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""


def home_of(cli: str, environ: Mapping[str, str]) -> Path:
    """The CLI's configuration directory."""
    variable, default = _HOMES[cli]
    value = environ.get(variable)
    return Path(value) if value else Path(environ.get("HOME", str(Path.home()))) / default


def run_hook(
    cli: str,
    stdin: str | bytes,
    environ: Mapping[str, str] | None = None,
    *,
    deferred: list[Callable[[], bool]] | None = None,
) -> HookResult:
    """Act on one hook event of `cli` (``claude-code`` or ``codex``). Never raises: an internal
    error or unusable input answers exit 0 with one line on standard error.

    With `deferred`, the run's telemetry is left to flush by calling what it appends, after
    the answer is written; without it, it is flushed before returning (within the export
    grace)."""
    environ = os.environ if environ is None else environ
    try:
        payload = _payload(stdin)
    except ValueError as exc:
        return HookResult(0, "", f"otel-compaction hook {cli}: unreadable hook input: {exc}\n")
    pending: list[Callable[[], bool]] = []
    try:
        return _Hook(cli, payload, environ, pending).run()
    except Exception as exc:  # a hook must never stop the CLI by accident
        where = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return HookResult(0, "", f"otel-compaction hook {cli}: skipped ({where})\n")
    finally:
        if deferred is not None:
            deferred.extend(pending)
        else:
            for task in pending:
                task()


def _payload(stdin: str | bytes) -> dict[str, Any]:
    """The hook input as a JSON object; ValueError says why it is not one."""
    if len(stdin) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"larger than {MAX_PAYLOAD_BYTES:,} bytes; not read")
    if isinstance(stdin, bytes):
        try:
            stdin = stdin.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"not UTF-8: byte 0x{stdin[exc.start]:02x} at offset {exc.start}"
            ) from None
    try:
        payload = json.loads(stdin)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(payload, dict):
        raise ValueError(f"expected a JSON object, got {type(payload).__name__}")
    return payload


class _Hook:
    def __init__(
        self,
        cli: str,
        payload: dict[str, Any],
        environ: Mapping[str, str],
        pending: list[Callable[[], bool]],
    ) -> None:
        self.cli = cli
        self.payload = payload
        self.environ = environ
        self.pending = pending
        self.event = str(payload.get("hook_event_name", ""))
        self.session_id = _text(payload.get("session_id"))

    def handled(self) -> bool:
        """Whether the event is one a hook acts on: any other is answered before the gate, the
        policy and the telemetry are loaded, since a CLI runs its hooks on many events."""
        if self.event == "SessionStart":
            return self.payload.get("source") == "compact"
        return self.event in _HANDLED

    def run(self) -> HookResult:
        if not self.handled():
            return HookResult()
        from otel_compaction.gate import CompactionGate
        from otel_compaction.hooks.guard import Guard
        from otel_compaction.hooks.policy_cache import load_policy

        home = home_of(self.cli, self.environ)
        policy = load_policy(
            self.environ.get("OTEL_COMPACTION_POLICY") or "default",
            home / "otel-compaction" / "policy-cache",
        )
        gate = CompactionGate(policy)
        if any(self.environ.get(name) for name in _OTEL_SWITCHES):
            from otel_compaction.hooks import export
            from otel_compaction.telemetry.configuration import configure

            telemetry = configure(set_global=False)
            self.pending.append(lambda: export.finish(telemetry, home))
            export.count_drops(telemetry, home)
            gate = telemetry.gate(policy)
        guard = Guard(gate, home, self.cli, self.environ)
        if self.event == "PreCompact":
            return self._pre_compact(guard)
        if self.event == "PreToolUse":
            return self._pre_tool_use(guard)
        if self.event == "PostCompact":
            return self._post_compact(guard)
        return self._session_start(guard)

    def _session(self) -> Session:
        path = _text(self.payload.get("transcript_path"))
        if not path:
            raise ValueError("the hook input has no transcript_path")
        return _read_session(path)

    def _pre_compact(self, guard: Guard) -> HookResult:
        session = self._session()
        trigger = _text(self.payload.get("trigger")) or "manual"
        pre = guard.before_compaction(session, trigger=trigger)
        from otel_compaction._internal_errors import internal_errors
        from otel_compaction.hooks.reissue_guard import record_compaction

        # The ledger's failure must not turn a refusal into a compaction: it only logs.
        with internal_errors("recording the side effects before a compaction"):
            record_compaction(guard, session, proceeds=not pre.blocked)
        if pre.blocked:
            return self._block(pre.reason())
        warning = pre.reason() if pre.refused else ""
        # Claude Code appends this to the summarizer's prompt; Codex shows it to nobody.
        stdout = pre.instructions() if self.cli == "claude-code" else ""
        return HookResult(0, stdout, warning)

    def _pre_tool_use(self, guard: Guard) -> HookResult:
        from otel_compaction.hooks.reissue_guard import check_call

        stopped = check_call(guard, self.payload)
        if stopped is None:
            return HookResult()
        _, why = stopped
        # Codex 0.171.0 accepts only "deny" from a PreToolUse hook; Claude Code asks the user.
        ask = guard.gate.policy.hooks.reissue == "ask" and self.cli == "claude-code"
        decision = {
            "hookEventName": "PreToolUse",
            "permissionDecision": "ask" if ask else "deny",
            "permissionDecisionReason": why,
        }
        return HookResult(0, json.dumps({"hookSpecificOutput": decision}, ensure_ascii=False))

    def _post_compact(self, guard: Guard) -> HookResult:
        summary = _text(self.payload.get("compact_summary"))
        if summary is None:
            session = self._session()
            if not session.compactions:
                return HookResult()
            summary = session.compactions[-1].summary
        checked = guard.after_compaction(self.session_id, summary)
        if checked is None or checked.ok:
            return HookResult()
        lost = len(checked.describe())
        return HookResult(0, "", f"otel-compaction: the summary left out {lost} item(s)\n")

    def _session_start(self, guard: Guard) -> HookResult:
        summary = None
        path = _text(self.payload.get("transcript_path"))
        if path:
            session = _read_session(path)
            if session.compactions:
                summary = session.compactions[-1].summary
        context = guard.repair(self.session_id, summary)
        if context is None:
            return HookResult()
        output = {
            "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}
        }
        return HookResult(0, json.dumps(output, ensure_ascii=False), "")

    def _block(self, reason: str) -> HookResult:
        if self.cli == "codex":
            return HookResult(0, json.dumps({"continue": False, "stopReason": reason}), "")
        return HookResult(2, "", reason.rstrip("\n") + "\n")


def _read_session(path: str) -> Session:
    """The session log from its latest compaction on: what the hook decides over, read in a
    time that follows the context, not the log's history."""
    from otel_compaction.sessions import read_context

    return read_context(path, limit=MAX_LOG_BYTES)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def main(
    cli: str,
    argv: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    *,
    owns_process: bool = False,
) -> int:
    """Run one hook of `cli`, with its command line `argv` (the options after ``hook CLI``),
    on this process's standard input and output; return its exit status.

    The hard cap is armed first; the answer is written before the telemetry is flushed, and
    the process ends at once when the telemetry is still trying after its grace.

    Only with `owns_process` (the hook is the process's own command, as the CLIs run it) does
    the hook end the process: called in a host's process, it answers and returns."""
    environ = dict(os.environ if environ is None else environ)
    answer = _Answer(cli, owns_process=owns_process)
    answer.arm(_cap(environ))
    try:
        # Library warnings (an exporter retrying, say) are not the hook's answer.
        logging.getLogger().addHandler(logging.NullHandler())
        options = parse_options(argv)
        notes = _notes(cli, options)
        if "--policy" in options.missing:
            return answer.give(HookResult(0, "", notes))
        if options.policy:
            environ["OTEL_COMPACTION_POLICY"] = options.policy
        if options.otlp_endpoint:  # the SDK reads its exporter settings from the process
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = options.otlp_endpoint
            environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = options.otlp_endpoint
        stdin = _read_stdin(MAX_PAYLOAD_BYTES)
        deferred: list[Callable[[], bool]] = []
        with collector_paused():
            result = run_hook(cli, stdin, environ, deferred=deferred)
        code = answer.give(HookResult(result.exit_code, result.stdout, notes + result.stderr))
        finished = [task() for task in deferred]  # each, even after one that did not finish
        if not all(finished) and owns_process:
            # An export still trying (its drop counted): the process ends now rather than
            # at the interpreter's exit, which would wait on the exporter's connection.
            os._exit(code)
        return code
    finally:
        answer.disarm()


def _notes(cli: str, options: HookOptions) -> str:
    """One line naming what the command line held that the hook could not use."""
    parts = []
    if "--policy" in options.missing:
        parts.append("--policy has no value, so the policy is unknown: skipped")
    if "--otlp-endpoint" in options.missing:
        parts.append("--otlp-endpoint has no value: not exporting")
    if options.ignored:
        parts.append(f"ignored unknown argument(s) {' '.join(options.ignored)[:200]}")
    return f"otel-compaction hook {cli}: {'; '.join(parts)}\n" if parts else ""


def _cap(environ: Mapping[str, str]) -> float:
    try:
        cap = float(environ.get(CAP_ENV) or HARD_CAP_S)
    except ValueError:
        return HARD_CAP_S
    return cap if 0 < cap <= HARD_CAP_S * 6 else HARD_CAP_S


def _read_stdin(limit: int) -> bytes:
    """At most `limit` + 1 bytes of standard input (more is refused by `_payload`)."""
    stream = sys.stdin
    if stream is None:
        return b""
    binary: IO[bytes] | None = getattr(stream, "buffer", None)
    if binary is None:  # a text stream put in its place (a test, an embedding host)
        return stream.read(limit + 1).encode("utf-8", "surrogatepass")
    return binary.read(limit + 1)


class _Answer:
    """The process's one answer: given by the hook, or by the hard cap when the hook is held
    up past it, whichever comes first; the cap then ends the process."""

    def __init__(self, cli: str, *, owns_process: bool) -> None:
        self.cli = cli
        self.owns_process = owns_process
        self._lock = threading.Lock()
        self._code: int | None = None
        self._timer: threading.Timer | None = None

    def arm(self, cap_s: float) -> None:
        self.cap_s = cap_s
        self._timer = threading.Timer(cap_s, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def give(self, result: HookResult) -> int:
        with self._lock:
            if self._code is None:
                _write(sys.stdout, result.stdout)
                _write(sys.stderr, result.stderr)
                self._code = result.exit_code
            return self._code

    def _expire(self) -> None:
        with self._lock:
            if self._code is None:
                _write(
                    sys.stderr,
                    f"otel-compaction hook {self.cli}: skipped (no answer within "
                    f"{self.cap_s:g} s)\n",
                )
                self._code = 0
        if self.owns_process:
            os._exit(self._code)


def _write(stream: Any, text: str) -> None:
    """`text` on `stream` as UTF-8, whatever the locale: what cannot be encoded (a lone
    surrogate from the input) is written as its escape, valid in JSON too."""
    if not text or stream is None:
        return
    try:
        binary = getattr(stream, "buffer", None)
        if binary is not None:
            stream.flush()
            binary.write(text.encode("utf-8", "backslashreplace"))
            binary.flush()
        else:
            stream.write(text)
            stream.flush()
    except (OSError, ValueError):  # the CLI stopped reading: nothing more to say
        pass


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused, then resumed as it was.

    A hook process reads a whole session log into a tree of dicts and lists, analyses it once
    and exits. The collector would walk that growing tree again and again (about a quarter of
    a PreCompact run on a 10 MB log) to find little: the tree holds no cycle and is freed by
    reference counting; the few cycles the run leaves are collected when the collector
    resumes, or at exit.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
