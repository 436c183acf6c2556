"""The CLI side of the re-issue guard (`otel_compaction.reissue`).

Before a compaction (`record_compaction`), the side effects completed in the context about to
be compacted go to the ledger, in the archive's store, marked out of context when the
compaction proceeds. Before each tool call (`check_call`, the ``PreToolUse`` hook), a call
that repeats one of them, with nothing of the same scope done since, is stopped: the user is
asked (``ask``, the default) or it is refused (``deny``), by the policy's ``hooks.reissue``.

The pinned CLIs differ here: Claude Code's PreToolUse answers ``allow``, ``ask`` or ``deny``;
Codex 0.171.0 runs PreToolUse hooks but accepts only ``deny`` (it rejects ``ask`` and
``allow``), so on Codex ``ask`` refuses the first re-issue with the reason and lets a second,
deliberate one run. Either way a re-issue that was put to the user once is not stopped again.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from otel_compaction.hooks.guard import Guard, context_of
from otel_compaction.reissue import SideEffectRecord, earlier_call, records_of, repeat_of
from otel_compaction.sessions import Session, read_session
from otel_compaction.transcript import ToolCall

__all__ = ["check_call", "record_compaction"]


def record_compaction(guard: Guard, session: Session, *, proceeds: bool) -> int:
    """Record the side effects of the context the CLI is about to compact, out of context
    when the compaction `proceeds`; return how many."""
    start = session.compactions[-1].message_index if session.compactions else 0
    messages = context_of(session)
    if not messages:
        return 0
    analysis = guard.gate.analyse(messages, conversation_id=session.session_id)
    records = records_of(
        analysis.transcript,
        analysis.outcomes,
        guard.gate.policy.side_effects,
        conversation_id=session.session_id or "",
        context_start=len(messages) if proceeds else 0,
        offset=start,
        completed_at=_times(session, start),
    )
    if records:
        with guard.archive() as store:
            store.record_side_effects(records)
    return len(records)


def check_call(guard: Guard, payload: dict[str, Any]) -> tuple[SideEffectRecord, str] | None:
    """The side effect the call of a ``PreToolUse`` payload re-issues and the reason to give,
    or None when it goes ahead. Reads the session log only when the ledger holds a match."""
    mode = guard.gate.policy.hooks.reissue
    session_id = payload.get("session_id")
    tool = payload.get("tool_name")
    if mode == "off" or not isinstance(session_id, str) or not isinstance(tool, str):
        return None
    table = guard.gate.policy.side_effects
    call = ToolCall(
        str(payload.get("tool_use_id") or ""),
        tool,
        0,
        json.dumps(payload.get("tool_input") or {}, ensure_ascii=False),
        0,
    )
    if table.classify(call) is None:
        return None
    with guard.archive() as store:
        stored = store.side_effects(session_id)
        if repeat_of(stored, call, table) is None:
            return None
        # What the model did since the compaction may have superseded it: read the context.
        records = {(r.sequence, r.call_id): r for r in stored}
        path = payload.get("transcript_path")
        if isinstance(path, str) and Path(path).exists():
            session = read_session(path)
            start = session.compactions[-1].message_index if session.compactions else 0
            analysis = guard.gate.analyse(context_of(session), conversation_id=session_id)
            current = records_of(
                analysis.transcript, analysis.outcomes, table,
                conversation_id=session_id, offset=start,
            )  # fmt: skip
            records.update({(r.sequence, r.call_id): r for r in current})
        ordered = sorted(records.values(), key=lambda r: r.sequence)
        original = repeat_of(ordered, call, table)
        if original is None or (original.asked and mode == "ask"):
            return None
        if mode == "ask":
            store.mark_asked(original)
    return original, reason(original)


def reason(original: SideEffectRecord) -> str:
    """Why a re-issue of `original` is stopped: the earlier call, its outcome and when."""
    return (
        f"otel-compaction: this repeats {earlier_call(original)}. The compaction removed it "
        "from context. Do not run it again unless the user asks for it to be repeated."
    )


def _times(session: Session, start: int) -> dict[int, float]:
    """When each message of the context from `start` on was written (its record's
    ``timestamp``), by its index in the context."""
    stamps = session.stamps(session.lines[start:])
    times: dict[int, float] = {}
    for index in range(start, len(session.messages)):
        stamp = stamps.get(session.line_of(index))
        if stamp is None:
            continue
        try:
            times[index - start] = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
    return times
