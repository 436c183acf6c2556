"""One hook run: read the CLI's JSON, act on its event, answer the way that CLI reads it.

The two CLIs differ only in where they keep their files and how a hook speaks to them:

=============  =======================================  ==========================================
               Claude Code                              Codex
=============  =======================================  ==========================================
config home    ``$CLAUDE_CONFIG_DIR`` (``~/.claude``)   ``$CODEX_HOME`` (``~/.codex``)
block          exit 2, the reason on standard error     ``{"continue": false, "stopReason": ...}``
summary        PostCompact's ``compact_summary``        the session log's latest compaction
repair         ``hookSpecificOutput.additionalContext``  the same
=============  =======================================  ==========================================
"""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from otel_compaction._internal_errors import internal_errors
from otel_compaction.gate import CompactionGate
from otel_compaction.hooks.guard import Guard
from otel_compaction.hooks.reissue_guard import check_call, record_compaction
from otel_compaction.policy import Policy
from otel_compaction.sessions import Session, read_session

__all__ = ["CLIS", "HookResult", "collector_paused", "main", "run_hook"]

CLIS: Final = ("claude-code", "codex")
_HOMES: Final = {"claude-code": ("CLAUDE_CONFIG_DIR", ".claude"), "codex": ("CODEX_HOME", ".codex")}
_OTEL_SWITCHES: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


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


def run_hook(cli: str, stdin: str, environ: Mapping[str, str] | None = None) -> HookResult:
    """Act on one hook event of `cli` (``claude-code`` or ``codex``). Never raises: an internal
    error or unusable input answers exit 0 with one line on standard error."""
    environ = os.environ if environ is None else environ
    try:
        payload = json.loads(stdin)
        if not isinstance(payload, dict):
            raise ValueError(f"expected a JSON object, got {type(payload).__name__}")
    except ValueError as exc:
        return HookResult(0, "", f"otel-compaction hook {cli}: unreadable hook input: {exc}\n")
    try:
        return _Hook(cli, payload, environ).run()
    except Exception as exc:  # a hook must never stop the CLI by accident
        where = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return HookResult(0, "", f"otel-compaction hook {cli}: skipped ({where})\n")


class _Hook:
    def __init__(self, cli: str, payload: dict[str, Any], environ: Mapping[str, str]) -> None:
        self.cli = cli
        self.payload = payload
        self.environ = environ
        self.event = str(payload.get("hook_event_name", ""))
        self.session_id = _text(payload.get("session_id"))

    def run(self) -> HookResult:
        telemetry = None
        if any(self.environ.get(name) for name in _OTEL_SWITCHES):
            from otel_compaction.telemetry.configuration import configure

            telemetry = configure(set_global=False)
        policy = Policy.load(self.environ.get("OTEL_COMPACTION_POLICY") or "default")
        gate = telemetry.gate(policy) if telemetry is not None else CompactionGate(policy)
        guard = Guard(gate, home_of(self.cli, self.environ))
        try:
            if self.event == "PreCompact":
                return self._pre_compact(guard)
            if self.event == "PreToolUse":
                return self._pre_tool_use(guard)
            if self.event == "PostCompact":
                return self._post_compact(guard)
            if self.event == "SessionStart" and self.payload.get("source") == "compact":
                return self._session_start(guard)
            return HookResult()
        finally:
            if telemetry is not None:
                telemetry.shutdown()

    def _session(self) -> Session:
        path = _text(self.payload.get("transcript_path"))
        if not path:
            raise ValueError("the hook input has no transcript_path")
        return read_session(path)

    def _pre_compact(self, guard: Guard) -> HookResult:
        session = self._session()
        pre = guard.before_compaction(session)
        trigger = _text(self.payload.get("trigger")) or "manual"
        mode = guard.gate.policy.hooks.mode(trigger)
        # The ledger's failure must not turn a refusal into a compaction: it only logs.
        with internal_errors("recording the side effects before a compaction"):
            record_compaction(guard, session, proceeds=not (pre.refused and mode == "block"))
        if pre.refused and mode == "block":
            return self._block(pre.reason())
        warning = ""
        if pre.refused:
            warning = pre.reason().replace("compaction refused", f"{trigger} compaction allowed")
            warning += "\n(the policy only warns on this trigger)\n"
        # Claude Code appends this to the summarizer's prompt; Codex shows it to nobody.
        stdout = pre.instructions() if self.cli == "claude-code" else ""
        return HookResult(0, stdout, warning)

    def _pre_tool_use(self, guard: Guard) -> HookResult:
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
            session = read_session(path)
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
        return HookResult(2, "", reason + "\n")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def main(cli: str, environ: Mapping[str, str] | None = None) -> int:
    """Run one hook of `cli` on this process's standard input and output."""
    stdin = sys.stdin.read()
    with collector_paused():
        result = run_hook(cli, stdin, environ)
    if result.stdout:
        sys.stdout.write(result.stdout)
    if result.stderr:
        sys.stderr.write(result.stderr)
    return result.exit_code


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
