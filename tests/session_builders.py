"""Claude Code session logs written the way Claude Code writes them, for hook and audit tests.

`ClaudeSession` takes API messages (Anthropic Messages format) and writes one JSONL record per
content block, the blocks of one assistant response sharing its ``message.id``; `compact`
appends a ``compact_boundary`` record and the ``isCompactSummary`` user record.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any


class ClaudeSession:
    """A Claude Code session log being written."""

    def __init__(self, path: Path, session_id: str = "sess-1", cwd: str = "/home/dev/shop"):
        self.path = path
        self.session_id = session_id
        self.cwd = cwd
        self.records: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def _record(self, kind: str, **fields: Any) -> None:
        self.records.append(
            {
                "type": kind,
                "uuid": f"u-{next(self._ids)}",
                "sessionId": self.session_id,
                "cwd": self.cwd,
                "timestamp": "2026-12-01T10:00:00.000Z",
                **fields,
            }
        )

    def user(self, content: str | list[dict[str, Any]]) -> ClaudeSession:
        """A user message: text, or tool_result blocks."""
        self._record("user", message={"role": "user", "content": content})
        return self

    def assistant(self, *blocks: dict[str, Any]) -> ClaudeSession:
        """One response: a record per block, sharing its message id."""
        message_id = f"msg_{next(self._ids)}"
        for block in blocks:
            self._record(
                "assistant",
                message={"id": message_id, "role": "assistant", "content": [block]},
                requestId=f"req_{message_id}",
            )
        return self

    def say(self, text: str) -> ClaudeSession:
        return self.assistant({"type": "text", "text": text})

    def call(self, call_id: str, name: str, **arguments: Any) -> ClaudeSession:
        return self.assistant({"type": "tool_use", "id": call_id, "name": name, "input": arguments})

    def result(self, call_id: str, text: str, *, error: bool = False) -> ClaudeSession:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": text}
        if error:
            block["is_error"] = True
        return self.user([block])

    def compact(self, summary: str, trigger: str = "manual") -> ClaudeSession:
        """A compaction: the boundary, then the summary."""
        self._record(
            "system",
            subtype="compact_boundary",
            content="Conversation compacted",
            compactMetadata={"trigger": trigger, "preTokens": 12_000},
        )
        self._record(
            "user",
            message={"role": "user", "content": summary},
            isCompactSummary=True,
        )
        return self

    def write(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(json.dumps(r) + "\n" for r in self.records), encoding="utf-8")
        return self.path
