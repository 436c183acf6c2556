"""Install and remove the hooks in a CLI's settings: Claude Code's ``settings.json`` (the user's
``$CLAUDE_CONFIG_DIR/settings.json`` or a project's ``.claude/settings.json``), Codex's
``$CODEX_HOME/hooks.json`` (or a project's ``.codex/hooks.json``).

Installing is idempotent (an entry already there is not added again), keeps every other hook,
and writes a backup of the file it changes (``<file>.otel-compaction.bak``). Removing takes out
exactly the entries it added. Each entry runs this interpreter (``python -m otel_compaction``),
so the hooks work without the package's script on the CLI's ``PATH``.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections.abc import Mapping
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


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CompactionError(f"{path}: cannot read the settings file: {exc}") from None
    if not isinstance(data, dict):
        raise CompactionError(f"{path}: expected a JSON object, got {type(data).__name__}")
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict):
        raise CompactionError(f"{path}: 'hooks' must be an object")
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        shutil.copy2(path, path.with_name(path.name + ".otel-compaction.bak"))
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    temporary.replace(path)


def _ours(entry: Any) -> bool:
    return isinstance(entry, dict) and _MARK in str(entry.get("command", ""))


def install(cli: str, path: Path, options: Options | None = None) -> list[str]:
    """Add the hooks of `cli` to the settings file at `path`; return the events added (an
    entry of ours already there is updated to `options`)."""
    data = _read(path)
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
        _write(path, data)
    return added


def uninstall(path: Path) -> list[str]:
    """Remove the entries `install` added from the settings file at `path`; return the events
    they were removed from."""
    if not path.exists():
        return []
    data = _read(path)
    hooks: dict[str, Any] = data.get("hooks", {})
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
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if removed:
        _write(path, data)
    return list(dict.fromkeys(removed))
