"""The hooks as a user sees them: ``hook resolve``, ``hook status`` and ``hook doctor``.

``resolve`` is the way out of a blocked compaction: it marks the open work the block named as
done or abandoned for that session (the next PreCompact discharges it, as `force_terminal`
does in code) and, with an OTLP endpoint, records a ``compaction.force_terminal`` span with
one ``compaction.obligation.discharged`` event per item. ``status`` shows what is installed
where (and which interpreter and version each entry runs), where the state and the archive
live, and the latest decisions; ``doctor`` checks the same and says what to fix.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TextIO

from otel_compaction._version import __version__
from otel_compaction.archive import ARCHIVE_ENV, Archive
from otel_compaction.errors import CompactionError
from otel_compaction.gate import CompactionGate
from otel_compaction.hooks.guard import Guard, Resolution
from otel_compaction.hooks.install import EVENTS, settings_path
from otel_compaction.hooks.run import home_of
from otel_compaction.hooks.state import DIR_MODE, FILE_MODE, SessionState, sessions, state_dir
from otel_compaction.stores import ARCHIVE_URL_ENV

__all__ = ["doctor", "homes_of", "resolve", "status"]

_MARK: Final = "otel_compaction hook "
_BINARIES: Final = {"claude-code": "claude", "codex": "codex"}
_LATEST: Final = 5


def resolve(
    cli: str,
    session_id: str,
    ids: Sequence[str],
    resolution: Resolution,
    *,
    home: Path,
    out: TextIO,
) -> None:
    """Mark the open work `ids` of a session resolved; write what was."""
    guard = Guard(CompactionGate("default"), home, cli)
    try:
        resolved = guard.resolve(session_id, ids, resolution)
    except LookupError as exc:
        raise CompactionError(str(exc.args[0])) from None
    if any(os.environ.get(v) for v in ("OTEL_EXPORTER_OTLP_ENDPOINT",
                                        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):  # fmt: skip
        _record(session_id, resolved)
    for r in resolved:
        out.write(f"resolved ({resolution}): {r['what']}\n")
    out.write("The next compaction of this session proceeds over it.\n")


def _record(session_id: str, resolved: list[dict[str, Any]]) -> None:
    """The resolutions as the gate's telemetry records a forced terminal state."""
    from otel_compaction.gate import shown_id
    from otel_compaction.rules.base import ObligationRef
    from otel_compaction.telemetry import semconv
    from otel_compaction.telemetry.configuration import configure
    from otel_compaction.telemetry.scope import capture_content_enabled

    capture = capture_content_enabled()
    telemetry = configure(set_global=False)
    try:
        tracer = telemetry.tracer_provider.get_tracer(semconv.SCOPE, __version__)
        with tracer.start_as_current_span(semconv.FORCE_TERMINAL_SPAN) as span:
            span.set_attribute(semconv.GEN_AI_CONVERSATION_ID, session_id)
            for r in resolved:
                ref = ObligationRef(r["kind"], r["id"], r.get("message_index"))
                span.add_event(
                    semconv.EVENT_DISCHARGED,
                    {
                        semconv.OBLIGATION_KIND: r["kind"],
                        semconv.OBLIGATION_ID: ref.id if capture else shown_id(ref),
                        semconv.OBLIGATION_STATUS: r["status"],
                        semconv.OBLIGATION_RESOLUTION: r["resolution"],
                    },
                )
    finally:
        telemetry.shutdown()


# -- status ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Entry:
    """One of our hook entries in a settings file."""

    event: str
    command: str

    @property
    def interpreter(self) -> str:
        return shlex.split(self.command)[0] if self.command.strip() else ""


def _entries(path: Path) -> list[_Entry]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    hooks = data.get("hooks") if isinstance(data, dict) else None
    found: list[_Entry] = []
    for event, groups in (hooks or {}).items() if isinstance(hooks, dict) else ():
        for group in groups if isinstance(groups, list) else ():
            for entry in group.get("hooks", []) if isinstance(group, dict) else ():
                command = entry.get("command", "") if isinstance(entry, dict) else ""
                if isinstance(command, str) and _MARK in command:
                    found.append(_Entry(event, command))
    return found


def _cli_version(cli: str) -> str | None:
    binary = shutil.which(_BINARIES[cli])
    if binary is None:
        return None
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else None


def _archive_location(home: Path) -> str:
    if os.environ.get(ARCHIVE_URL_ENV):
        return f"${ARCHIVE_URL_ENV}"
    if os.environ.get(ARCHIVE_ENV):
        return os.environ[ARCHIVE_ENV]
    return str(home / "otel-compaction" / "archive.sqlite3")


def _status_of(cli: str, home: Path, session: str | None) -> dict[str, Any]:
    installed = []
    for scope in ("user", "project"):
        path = settings_path(cli, scope, {**os.environ, _home_variable(cli): str(home)},
                             Path.cwd())  # fmt: skip
        entries = _entries(path)
        if entries:
            installed.append(
                {
                    "scope": scope, "settings": str(path),
                    "events": sorted({e.event for e in entries}),
                    "commands": sorted({e.command for e in entries}),
                }
            )  # fmt: skip
    directory = state_dir(home)
    files = list(sessions(directory))
    chosen = SessionState(directory, session).path if session else (files[0] if files else None)
    decisions = []
    if chosen is not None:
        data = SessionState(directory, chosen.stem).read()
        decisions = data.get("decisions", [])[-_LATEST:]
    return {
        "cli": cli, "home": str(home), "cli_version": _cli_version(cli),
        "package_version": __version__, "installed": installed,
        "state": str(directory), "sessions": len(files), "archive": _archive_location(home),
        "session": chosen.stem if chosen is not None else None, "decisions": decisions,
    }  # fmt: skip


def _home_variable(cli: str) -> str:
    return "CLAUDE_CONFIG_DIR" if cli == "claude-code" else "CODEX_HOME"


def status(clis: Sequence[str], homes: Mapping[str, Path], session: str | None,
           output: Literal["text", "json"], out: TextIO) -> None:  # fmt: skip
    """Write what is installed where, the state and archive, and the latest decisions."""
    found = [_status_of(cli, homes[cli], session) for cli in clis]
    if output == "json":
        json.dump(found, out, ensure_ascii=False)
        out.write("\n")
        return
    w = out.write
    for s in found:
        w(f"{s['cli']} ({s['cli_version'] or 'not on PATH'}), config {s['home']}\n")
        if not s["installed"]:
            w(f"  hooks:     not installed (otel-compaction hook install {s['cli']})\n")
        for i in s["installed"]:
            w(f"  hooks:     {', '.join(i['events'])} in {i['settings']} ({i['scope']})\n")
            for command in i["commands"]:
                w(f"  runs:      {command}\n")
        w(f"  version:   otel-compaction {s['package_version']}\n")
        w(f"  state:     {s['state']} ({s['sessions']} session(s))\n")
        w(f"  archive:   {s['archive']}\n")
        if s["session"]:
            w(f"  session:   {s['session']}\n")
        for d in s["decisions"]:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(d.get("at", 0)))
            trigger = f" {d['trigger']}" if d.get("trigger") else ""
            w(f"    {when}  {d.get('event', '?')}{trigger}: {d.get('action', '?')}\n")
            for item in d.get("open", []):
                w(f"      - {item}\n")


# -- doctor ----------------------------------------------------------------------------------


def doctor(clis: Sequence[str], homes: Mapping[str, Path], out: TextIO) -> int:
    """Check the installed hooks, what they run, their state and the archive; write each
    check and what to do about a failure; return 0 when nothing failed, else 1."""
    failed = 0
    anything = False
    for cli in clis:
        home = homes[cli]
        problems, notes = _checks(cli, home)
        anything = anything or not any(n.startswith("not installed") for n in notes)
        for note in notes:
            out.write(f"ok    {cli}: {note}\n")
        for problem in problems:
            out.write(f"FAIL  {cli}: {problem}\n")
        failed += len(problems)
    if not anything:
        out.write("FAIL  no hooks installed: otel-compaction hook install claude-code|codex\n")
        failed += 1
    return 0 if failed == 0 else 1


def _checks(cli: str, home: Path) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    notes: list[str] = []
    status_ = _status_of(cli, home, None)
    if not status_["installed"]:
        notes.append(f"not installed (otel-compaction hook install {cli})")
    for installed in status_["installed"]:
        where = installed["settings"]
        missing = [e for e, _ in EVENTS if e not in installed["events"]]
        if missing:
            problems.append(f"{where}: no {', '.join(missing)} hook: install again")
        for command in installed["commands"]:
            problems += _command_problems(where, command)
        if not problems:
            notes.append(f"hooks installed in {where}, running otel-compaction {__version__}")
    problems += _private(state_dir(home))
    if not os.environ.get(ARCHIVE_URL_ENV):
        path = Path(_archive_location(home))
        if path.exists():
            try:
                with Archive(path, readonly=True) as archive:
                    notes.append(f"archive {path}: {len(archive.spans())} span(s)")
            except CompactionError as exc:
                problems.append(f"archive {path}: {exc}")
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o077:
                problems.append(f"archive {path}: mode {mode:03o}, run: chmod 600 {path}")
    return problems, notes


def _command_problems(where: str, command: str) -> list[str]:
    words = shlex.split(command)
    interpreter = words[0] if words else ""
    if not interpreter or not os.access(interpreter, os.X_OK):
        return [f"{where}: the hook runs {interpreter or 'nothing'}, which is not an "
                f"executable: install again from the environment it should run in"]  # fmt: skip
    try:
        done = subprocess.run(
            [interpreter, "-c", "import otel_compaction; print(otel_compaction.__version__)"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return [f"{where}: {interpreter} does not run: {exc}"]
    if done.returncode != 0:
        return [f"{where}: {interpreter} cannot import otel_compaction: install it there, or "
                "install the hooks again from where it is installed"]  # fmt: skip
    version = done.stdout.strip()
    if version != __version__:
        return [f"{where}: the hook runs otel-compaction {version}, this is {__version__}: "
                "install the hooks again to run this one"]  # fmt: skip
    if "--policy" in words:
        policy = words[words.index("--policy") + 1]
        from otel_compaction.policy import Policy

        try:
            Policy.load(policy)
        except CompactionError as exc:
            return [f"{where}: the hook's policy does not load: {exc}"]
    return []


def _private(directory: Path) -> list[str]:
    """The state directory and files readable by others, with the command that fixes it."""
    if not directory.exists():
        return []
    problems = []
    mode = stat.S_IMODE(directory.stat().st_mode)
    if mode != DIR_MODE:
        problems.append(f"state {directory}: mode {mode:03o}, run: chmod 700 {directory}")
    loose = [p for p in sessions(directory) if stat.S_IMODE(p.stat().st_mode) & ~FILE_MODE]
    if loose:
        problems.append(
            f"state {directory}: {len(loose)} file(s) readable by others, run: "
            f"chmod 600 {shlex.quote(str(directory))}/*.json"
        )
    return problems


def homes_of(clis: Sequence[str], home: str | None) -> dict[str, Path]:
    """Each CLI's config directory: `home` for one CLI, else its own variable or default."""
    if home is not None and len(clis) != 1:
        raise CompactionError("--home names one CLI's directory: name the CLI too")
    return {cli: Path(home) if home else home_of(cli, os.environ) for cli in clis}
