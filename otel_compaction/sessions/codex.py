"""Codex CLI rollouts: the OpenAI Responses items of the conversation, in order.

A rollout line is ``{"timestamp", "type", "payload"}``. The messages are the ``response_item``
payloads, kept as written (``message``, ``reasoning``, ``function_call`` /
``function_call_output`` joined by ``call_id``, ``custom_tool_call`` /
``custom_tool_call_output``, ``local_shell_call``, ``web_search_call``, and item types this
reader does not know), except those Codex never sends the model: ``ghost_snapshot`` (its undo
bookkeeping), ``message`` items of role ``system``, and the summarizer's own answer (a line whose
``metadata`` says ``compaction_output``: it reaches the model as the summary). ``session_meta``
gives the session's ``id`` and ``cwd``; ``turn_context``, ``event_msg`` and line types unknown
here (``world_state``, ``token_usage_record``, ...) are skipped.

A compaction is a ``compacted`` line: ``payload.message`` is the summary, put in the messages
where the line stands as the user message Codex builds from it
(``{"type": "message", "role": "user", "content": [{"type": "input_text", "text": ...}]}``);
its trigger is ``unknown`` unless the payload names one, and its context size unknown. The
``replacement_history`` Codex keeps beside it (the kept user messages and the summary, or with
remote compaction the encrypted ``compaction`` item) is not inserted: the messages stay the log
itself. A remote compaction's summary is encrypted, so its text is empty.

A ``response_item`` or ``compacted`` line whose payload is not an object, or a response item
without a string ``type``, is an error naming its line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from otel_compaction.errors import TranscriptError
from otel_compaction.sessions import CODEX, Compaction, Record, Session, _trigger

__all__ = ["is_record", "read"]

LINE_TYPES: Final = frozenset(
    {"session_meta", "response_item", "compacted", "turn_context", "event_msg"}
)
"""The line types that make a file a Codex rollout (newer ones are skipped when read)."""
_NOT_SENT: Final = frozenset({"ghost_snapshot"})


def is_record(record: Mapping[str, Any]) -> bool:
    """True for a rollout line: one of Codex's line ``type`` values with a ``payload``."""
    return record.get("type") in LINE_TYPES and "payload" in record


def read(records: Iterable[Record], path: str) -> Session:
    """The `Session` of a Codex rollout's lines (each with its 1-based line), read in one pass."""
    messages: list[dict[str, Any]] = []
    lines: list[int] = []
    compactions: list[Compaction] = []
    session_id: str | None = None
    cwd: str | None = None
    for line, record in records:
        kind = record.get("type")
        payload = record.get("payload")
        if kind == "session_meta" and isinstance(payload, Mapping):
            if session_id is None:
                session_id = _string(payload.get("id"))
            if cwd is None:
                cwd = _string(payload.get("cwd"))
        elif kind == "response_item":
            item = _payload(path, line, kind, payload)
            item_type = item.get("type")
            if not isinstance(item_type, str) or not item_type:
                raise TranscriptError(f"{path}: line {line}: response_item has no 'type'")
            if item_type in _NOT_SENT or (item_type == "message" and item.get("role") == "system"):
                continue
            metadata = record.get("metadata")
            if isinstance(metadata, Mapping) and metadata.get("compaction_output") is True:
                continue  # the summarizer's answer: it reaches the model as the summary
            messages.append(dict(item))
            lines.append(line)
        elif kind == "compacted":
            compacted = _payload(path, line, kind, payload)
            summary = compacted.get("message")
            summary = summary if isinstance(summary, str) else ""
            compactions.append(
                Compaction(len(messages), line, _trigger(compacted.get("trigger")), summary)
            )
            messages.append(
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": summary}],
                }
            )
            lines.append(line)
    return Session(path, CODEX, messages, lines, compactions, session_id=session_id, cwd=cwd)


def _payload(path: str, line: int, kind: str, payload: Any) -> Mapping[str, Any]:
    if not isinstance(payload, Mapping):
        raise TranscriptError(
            f"{path}: line {line}: {kind} payload must be an object, got {type(payload).__name__}"
        )
    return payload


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
