"""What a session's hooks keep between runs: one small JSON file per session.

The file holds what the last PreCompact found (what the summary must carry, the work that
was open, the side effects done), the obligations a user resolved with ``hook resolve``, and
the latest decisions (for ``hook status``). It holds content from the session (commands,
paths, identifiers), so it is written like the archive: the directory mode 0700, the file
mode 0600 whatever the umask, replaced atomically so that a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

__all__ = ["DIR_MODE", "FILE_MODE", "SessionState", "sessions", "state_dir"]

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
_SAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")
_DECISIONS: Final = 20
"""The decisions kept per session (the newest)."""


def state_dir(home: Path) -> Path:
    """Where a CLI's hooks keep their per-session state (in its config directory)."""
    return home / "otel-compaction" / "hooks"


class SessionState:
    """The state file of one session in `directory`."""

    def __init__(self, directory: Path, session_id: str | None) -> None:
        self.session_id = session_id or "default"
        self.path = directory / f"{_SAFE.sub('_', self.session_id)[:128]}.json"

    def read(self) -> dict[str, Any]:
        """The stored state; empty when there is none (or it cannot be read)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def write(self, data: dict[str, Any]) -> None:
        """Replace the stored state with `data`."""
        _private_dir(self.path.parent)
        temporary = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, FILE_MODE)  # exactly 0600, whatever the umask
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                fd = -1
                json.dump(data, file, ensure_ascii=False)
        finally:
            if fd != -1:
                os.close(fd)
        temporary.replace(self.path)

    def update(self, **changes: Any) -> dict[str, Any]:
        """Store `changes` over what is stored; return the new state."""
        data = self.read() | changes
        self.write(data)
        return data

    def record_decision(self, decision: dict[str, Any]) -> None:
        """Add one decision to the newest kept."""
        data = self.read()
        decisions = [*data.get("decisions", []), decision][-_DECISIONS:]
        self.write(data | {"decisions": decisions})


def sessions(directory: Path) -> Iterator[Path]:
    """The state files in `directory`, newest first."""
    try:
        files = [p for p in directory.iterdir() if p.suffix == ".json" and p.is_file()]
    except OSError:
        return iter(())
    return iter(sorted(files, key=lambda p: p.stat().st_mtime, reverse=True))


def _private_dir(directory: Path) -> None:
    """`directory` created with mode 0700, or restricted to it when it exists with more."""
    directory.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    mode = stat.S_IMODE(directory.stat().st_mode)
    if mode != DIR_MODE:
        directory.chmod(DIR_MODE)
