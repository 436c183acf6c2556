"""Install and remove the hooks in a CLI's settings: Claude Code's ``settings.json`` (the user's
``$CLAUDE_CONFIG_DIR/settings.json`` or a project's ``.claude/settings.json``), Codex's
``$CODEX_HOME/hooks.json`` (or a project's ``.codex/hooks.json``).

Installing is idempotent (an entry already there is not added again), keeps every other hook,
and writes a backup of the file it changes (``<file>.otel-compaction.bak``). Removing takes out
exactly the entries it added. Each entry runs this interpreter (``python -m otel_compaction``),
so the hooks work without the package's script on the CLI's ``PATH``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from otel_compaction.errors import CompactionError
from otel_compaction.hooks.run import home_of

__all__ = ["EVENTS", "Options", "command", "install", "settings_path", "uninstall"]

REISSUE_TOOLS: Final = "Bash|Write|Edit|MultiEdit|NotebookEdit|apply_patch|mcp__.*"
"""The tools the PreToolUse hook runs for (a regular expression on the tool's name, as both
CLIs match it): those that can have side effects, so that a read costs no hook process. The
policy's ``side_effects`` table decides, call by call, which of their calls do."""
EVENTS: Final = (
    ("PreCompact", ""), ("PostCompact", ""), ("SessionStart", "compact"),
    ("PreToolUse", REISSUE_TOOLS),
)  # fmt: skip
"""The events hooked, each with its matcher (SessionStart only after a compaction)."""
_MARK: Final = "otel_compaction hook "


def settings_path(cli: str, scope: str, environ: Mapping[str, str], cwd: Path) -> Path:
    """The settings file of `cli` for `scope` (``user`` or ``project``)."""
    name = "settings.json" if cli == "claude-code" else "hooks.json"
    if scope == "project":
        return cwd / (".claude" if cli == "claude-code" else ".codex") / name
    return home_of(cli, environ) / name


@dataclass(frozen=True, slots=True)
class Options:
    """What the hooks run with. The CLIs pass a hook only variables of their own, so these
    travel on its command line."""

    policy: str | None = None
    otlp_endpoint: str | None = None


def command(cli: str, options: Options | None = None) -> str:
    """The command line an entry runs."""
    line = f"{shlex.quote(sys.executable)} -m {_MARK}{cli}"
    if options is not None and options.policy:
        line += f" --policy {shlex.quote(options.policy)}"
    if options is not None and options.otlp_endpoint:
        line += f" --otlp-endpoint {shlex.quote(options.otlp_endpoint)}"
    return line


_BACKUP: Final = ".otel-compaction.bak"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} overflows a double")
    return value


def _check_text(path: Path, value: Any) -> None:
    """Refuse strings a UTF-8 file cannot hold (lone surrogates) and `null` hook groups."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise CompactionError(f"{path}: holds a lone surrogate (\\u escape)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(path, key)
            _check_text(path, item)
    elif isinstance(value, list):
        for item in value:
            _check_text(path, item)


def _target(path: Path) -> Path:
    """The file written: a symlinked settings file (a dotfile manager's) is written through."""
    return path.resolve() if path.is_symlink() else path


def _read(path: Path) -> tuple[dict[str, Any], str | None]:
    """The settings at `path` and their text (None when the file does not exist yet)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        raise CompactionError(f"{path}: cannot read the settings file: {exc}") from None
    if not stat.S_ISREG(mode):
        raise CompactionError(f"{path}: not a regular file")
    try:
        raw = path.read_bytes()
        if raw.startswith(b"\xef\xbb\xbf"):
            raise ValueError("starts with a byte-order mark")
        text = raw.decode("utf-8")
        data = json.loads(text or "{}", parse_constant=_reject_constant, parse_float=_parse_float)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CompactionError(f"{path}: cannot read the settings file: {exc}") from None
    if not isinstance(data, dict):
        raise CompactionError(f"{path}: expected a JSON object, got {type(data).__name__}")
    _check_text(path, data)
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict):
        raise CompactionError(f"{path}: 'hooks' must be an object")
    for event, groups in hooks.items():
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise CompactionError(f"{path}: hooks.{event} must be a list of objects")
        for group in groups:
            if not isinstance(group.get("hooks", []), list):
                raise CompactionError(f"{path}: hooks.{event}[].hooks must be a list")
    return data, text


def _indent(text: str | None) -> int | str:
    """The indentation the file already uses (two spaces for a new file)."""
    for line in (text or "").splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            lead = line[: len(line) - len(stripped)]
            return lead if "\t" in lead else len(lead)
    return 2


def _dump(data: dict[str, Any], text: str | None) -> str:
    ending = "\n" if text is None or text.endswith("\n") else ""
    return json.dumps(data, indent=_indent(text), ensure_ascii=False) + ending


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialize changes to the settings files of one directory (a lock on the directory, so
    nothing is left beside the user's file)."""
    try:
        handle = os.open(path.parent, os.O_RDONLY)
    except OSError as exc:
        raise CompactionError(f"{path}: cannot read the settings directory: {exc}") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def _writable(path: Path) -> bool:
    mode = path.stat().st_mode
    return bool(mode & stat.S_IWUSR) and os.access(path, os.W_OK)


def _write(path: Path, data: dict[str, Any], text: str | None) -> None:
    """Replace the file at `path` atomically (a temporary in its directory, renamed over it),
    keeping its mode and owner and, the first time, a backup of the user's original."""
    backup = path.with_name(path.name + _BACKUP)
    body = _dump(data, text).encode("utf-8")
    with suppress(OSError, ValueError):
        original = backup.read_bytes()
        if json.loads(original or b"{}") == data:
            body = original  # back to the user's own bytes, formatting and all
    old = path.stat() if text is not None else None
    if old is not None and not _writable(path):
        raise CompactionError(f"{path}: the settings file is read-only")
    if not _writable(path.parent):
        raise CompactionError(f"{path}: the settings directory is read-only")
    try:
        if old is not None and not backup.exists():
            shutil.copy2(path, backup)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise CompactionError(f"{path}: cannot write the settings file: {exc}") from None
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(body)
            file.flush()
            os.fsync(file.fileno())
        if old is not None:
            os.chmod(temporary, stat.S_IMODE(old.st_mode))
            if (old.st_uid, old.st_gid) != (os.getuid(), os.getgid()):
                with suppress(OSError):
                    os.chown(temporary, old.st_uid, old.st_gid)
        os.replace(temporary, path)
    except OSError as exc:
        with suppress(OSError):
            os.unlink(temporary)
        raise CompactionError(f"{path}: cannot write the settings file: {exc}") from None


def _ours(entry: Any) -> bool:
    """Whether `entry` is one `command` wrote (a user's own hook that calls ours is not)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return False
    try:
        words = shlex.split(entry["command"])
    except ValueError:
        return False
    if words[1:4] != ["-m", *_MARK.split()] or len(words) < 5:
        return False
    options = words[5:]
    return words[4] in ("claude-code", "codex") and all(
        option in ("--policy", "--otlp-endpoint") for option in options[::2]
    )


def install(cli: str, path: Path, options: Options | None = None) -> list[str]:
    """Add the hooks of `cli` to the settings file at `path`; return the events added (an
    entry of ours already there is updated to `options`)."""
    target = _target(path)
    if not target.exists():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CompactionError(f"{path}: cannot write the settings file: {exc}") from None
    with _locked(target):
        return _install(cli, target, options)


def _install(cli: str, path: Path, options: Options | None) -> list[str]:
    data, text = _read(path)
    hooks: dict[str, Any] = data.setdefault("hooks", {})
    added: list[str] = []
    for event, matcher in EVENTS:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise CompactionError(f"{path}: hooks.{event} must be a list")
        wanted = command(cli, options)
        ours = [
            entry
            for group in groups
            if isinstance(group, dict)
            for entry in group.get("hooks", [])
            if _ours(entry)
        ]
        if ours:
            for entry in ours:
                if entry.get("command") != wanted:
                    entry["command"] = wanted
                    added.append(event)
            continue
        groups.append({"matcher": matcher, "hooks": [{"type": "command", "command": wanted}]})
        added.append(event)
    if added:
        _write(path, data, text)
    return added


def uninstall(path: Path) -> list[str]:
    """Remove the entries `install` added from the settings file at `path`; return the events
    they were removed from."""
    target = _target(path)
    if not target.exists():
        return []
    with _locked(target):
        return _uninstall(target)


def _uninstall(path: Path) -> list[str]:
    data, text = _read(path)
    hooks: dict[str, Any] = data.get("hooks", {})
    had = _original_hooks(path)
    removed: list[str] = []
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                entries = [e for e in group["hooks"] if not _ours(e)]
                if len(entries) != len(group["hooks"]):
                    removed.append(event)
                    if entries:
                        kept.append({**group, "hooks": entries})
                    continue
            kept.append(group)
        hooks[event] = kept
        if not kept and event in removed and (had is None or event not in had):
            del hooks[event]  # install added it
    if removed and not hooks and had is None:
        del data["hooks"]  # install added it
    if removed:
        _write(path, data, text)
    return list(dict.fromkeys(removed))


def _original_hooks(path: Path) -> dict[str, Any] | None:
    """The ``hooks`` of the user's original file (its first backup), None when it had none:
    what uninstall leaves in place even when it ends up empty."""
    backup = path.with_name(path.name + _BACKUP)
    try:
        original = json.loads(backup.read_bytes() or b"{}")
    except (OSError, ValueError):
        return None
    hooks = original.get("hooks") if isinstance(original, dict) else None
    return hooks if isinstance(hooks, dict) else None
