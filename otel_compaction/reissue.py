"""The side-effect ledger and the re-issue guard: a side effect done before a compaction is
not to be done again after it.

Each completed call with side effects (`otel_compaction.side_effects`) is a `SideEffectRecord`:
a fingerprint of its tool and normalized arguments, its outcome, when it completed and whether
its call and result are still in the model's context. The records live in the same store as
the archive (`Archive.record_side_effects`), so they survive the compaction that removes the
call from context.

A call *re-issues* a side effect (`repeat_of`) when its fingerprint equals that of an earlier
record that

* succeeded (a repeat of a failure is a retry),
* is no longer in context (the model can see a repeat it makes of a call in context: that is
  its choice, not a loss), and
* was not followed by a side effect of the same scope with another fingerprint (a ``git
  push`` after a new commit pushes the new commit; a write after another write to the same
  file restores it).

Two calls have the same fingerprint when they run the same tool (namespace aside) with the
same arguments, leaving out what does not change the effect: a description or a timeout; a
shell call is its command line (whichever shell tool runs it), without the stages that only
read (``cd repo && git status && git push`` is ``cd repo && git push``). A shell tool's
working-directory argument is not part of it (the hooks are not handed it); a ``cd`` stage
is. The audit (`otel_compaction.audit`), the CLI hooks and the recorder judge re-issues by
this one function.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final

from otel_compaction.side_effects import SideEffect, SideEffectTable, result_line
from otel_compaction.transcript import ToolCall

if TYPE_CHECKING:
    from otel_compaction.outcomes import Outcome
    from otel_compaction.transcript import Transcript

__all__ = [
    "SideEffectLog",
    "SideEffectRecord",
    "earlier_call",
    "fingerprint",
    "records_of",
    "reissues",
    "repeat_of",
]

_SUCCEEDED: Final = ("success", "silent")
# Arguments that describe or schedule a call without changing what it does.
_INCIDENTAL: Final = frozenset(
    {"description", "timeout", "timeout_ms", "run_in_background", "yield_time_ms", "justification"}
)
_COMMAND_KEYS: Final = ("command", "cmd", "script")


@dataclass(frozen=True, slots=True)
class SideEffectRecord:
    """One completed call with side effects, as the ledger keeps it.

    ``sequence`` orders the records of a conversation (the call's position in it);
    ``scope`` is what a later side effect must share to supersede it (a file's path, a kind of
    command, a tool); ``completed_at`` is when its result came back (seconds since the epoch),
    when known; ``asked`` is True once a re-issue of it was put to the user.
    """

    conversation_id: str
    sequence: int
    call_id: str
    fingerprint: str
    scope: str
    kind: str
    tool: str
    target: str
    outcome: str
    result: str
    completed_at: float | None
    in_context: bool
    asked: bool = False

    @property
    def succeeded(self) -> bool:
        """True when its result says it worked."""
        return self.outcome in _SUCCEEDED

    def describe(self) -> str:
        """The call as the CLI shows it, with its outcome: ``Bash: git push (success: ...)``."""
        return f"{self.tool}: {self.target} ({self.outcome}: {self.result})"


def earlier_call(original: SideEffectRecord) -> str:
    """The call a re-issue repeats, as a reason names it: its tool and target, its call id,
    when it ran (UTC) and its outcome (``Bash `git push` (call c1), which already ran at ...
    before the last compaction, with outcome success: ...``)."""
    when = ""
    if original.completed_at is not None:
        stamp = datetime.fromtimestamp(original.completed_at, timezone.utc)
        when = f" at {stamp:%Y-%m-%d %H:%M:%S} UTC"
    return (
        f"{original.tool} `{original.target}` (call {original.call_id}), which already "
        f"ran{when} before the last compaction, with outcome {original.outcome}: "
        f"{original.result}"
    )


def fingerprint(call: ToolCall, table: SideEffectTable) -> tuple[SideEffect, str, str] | None:
    """What `call` changes, its fingerprint (its tool and normalized arguments) and its
    scope (what a later side effect must share to supersede it: the file written, the kind of
    command run, the tool called); None when it has no side effects."""
    effect = table.classify(call)
    if effect is None:
        return None
    arguments = _arguments(call.arguments)
    normalized: Any = " ".join(call.arguments.split())
    shell = False
    if isinstance(arguments, Mapping):
        normalized = {k: v for k, v in arguments.items() if k not in _INCIDENTAL}
        for key in _COMMAND_KEYS:
            command = normalized.get(key)
            if isinstance(command, list) and all(isinstance(p, str) for p in command):
                command = _argv_command(command)
            if isinstance(command, str) and effect.kind != "tool":
                # A shell call is its command, whatever the tool names the argument (Codex
                # logs exec_command's ``cmd`` and hands its hooks Bash's ``command``).
                normalized = table.effective_command(command)
                shell = True
                break
    if effect.kind == "tool":
        tool, scope = _bare(call.name), f"tool:{_bare(call.name)}"
    else:
        # A shell's or a file tool's own name does not change the effect; an MCP tool's does.
        tool = "shell" if shell else "file"
        scope = f"shell:{effect.kind}" if shell else f"file:{effect.target}"
    text = json.dumps([tool, normalized], sort_keys=True, ensure_ascii=False)
    return effect, hashlib.sha256(text.encode("utf-8")).hexdigest()[:32], scope


def records_of(
    transcript: Transcript,
    outcomes: Sequence[Outcome],
    table: SideEffectTable,
    *,
    conversation_id: str = "",
    context_start: int = 0,
    offset: int = 0,
    completed_at: Mapping[int, float] | None = None,
) -> list[SideEffectRecord]:
    """The ledger records of `transcript`: every call with side effects whose result came
    back, in the order of the calls; one whose call or result is before message
    `context_start` is out of context. A record's ``sequence`` is its call's message index
    plus `offset` (where `transcript` starts in the whole conversation), so that the records
    of successive contexts of one conversation keep their order. `completed_at` maps a
    message index of `transcript` to when it was written, where known."""
    return [record for record, _ in _records(
        transcript, outcomes, table, conversation_id, context_start, offset, completed_at or {}
    )]  # fmt: skip


def _records(
    transcript: Transcript,
    outcomes: Sequence[Outcome],
    table: SideEffectTable,
    conversation_id: str,
    context_start: int,
    offset: int,
    times: Mapping[int, float],
) -> list[tuple[SideEffectRecord, int]]:
    """`records_of`, each with the message index its result came back at."""
    records: list[tuple[SideEffectRecord, int]] = []
    for call in transcript.calls:
        if call.result is None:
            continue
        result = transcript.results[call.result]
        if result.interim:
            continue
        described = fingerprint(call, table)
        if described is None:
            continue
        effect, print_, scope = described
        record = SideEffectRecord(
            conversation_id=conversation_id,
            sequence=offset + call.message_index,
            call_id=call.id,
            fingerprint=print_,
            scope=scope,
            kind=effect.kind,
            tool=call.name,
            target=effect.target,
            outcome=outcomes[result.ordinal],
            result=result_line(result.text),
            completed_at=times.get(result.message_index),
            in_context=call.message_index >= context_start
            and result.message_index >= context_start,
        )
        records.append((record, result.message_index))
    return records


def repeat_of(
    records: Iterable[SideEffectRecord], call: ToolCall, table: SideEffectTable
) -> SideEffectRecord | None:
    """The record `call` re-issues (see the module docstring), or None. `records` are the
    conversation's, oldest first, all completed before `call` was made."""
    described = fingerprint(call, table)
    if described is None:
        return None
    _, print_, scope = described
    latest: SideEffectRecord | None = None
    for record in records:
        if record.fingerprint == print_:
            latest = record
        elif latest is not None and record.scope == scope:
            latest = None  # superseded: the same file, or the same kind of change, since
    if latest is None or latest.in_context or not latest.succeeded:
        return None
    return latest


def reissues(
    transcript: Transcript,
    outcomes: Sequence[Outcome],
    table: SideEffectTable,
    cut: int,
) -> list[tuple[ToolCall, SideEffectRecord]]:
    """The calls from message `cut` on that re-issue a side effect of the messages before it
    (the span a compaction removed), each with the record it repeats."""
    records = _records(transcript, outcomes, table, "", cut, 0, {})
    found: list[tuple[ToolCall, SideEffectRecord]] = []
    for call in transcript.calls:
        if call.message_index < cut:
            continue
        done = [record for record, back in records if back < call.message_index]
        original = repeat_of(done, call, table)
        if original is not None:
            found.append((call, original))
    return found


class SideEffectLog:
    """The side-effect ledger of one process, per conversation, as the recorder keeps it: each
    completed call with side effects (`completed`), taken out of context when a compaction
    removes it (`compacted`), and the record a new call repeats (`repeat`). Thread-safe and
    bounded: `max_conversations` conversations (the least recently touched go first), each
    keeping its `max_records` newest records."""

    def __init__(
        self,
        table: SideEffectTable | None = None,
        *,
        max_conversations: int = 1_000,
        max_records: int = 1_000,
    ) -> None:
        self.table = table if table is not None else SideEffectTable()
        self._max_conversations = max_conversations
        self._max_records = max_records
        self._records: OrderedDict[str, list[SideEffectRecord]] = OrderedDict()
        self._sequence = 0
        self._lock = threading.Lock()

    def completed(self, conversation_id: str, call: ToolCall, outcome: str, result: str) -> None:
        """`call` completed with `outcome` (``success`` or ``failure``) and `result` (one
        line); kept when it has side effects."""
        described = fingerprint(call, self.table)
        if described is None:
            return
        effect, print_, scope = described
        with self._lock:
            self._sequence += 1
            record = SideEffectRecord(
                conversation_id, self._sequence, call.id, print_, scope, effect.kind,
                call.name, effect.target, outcome, result_line(result), time.time(), True,
            )  # fmt: skip
            records = self._records.setdefault(conversation_id, [])
            self._records.move_to_end(conversation_id)
            records.append(record)
            del records[: -self._max_records]
            while len(self._records) > self._max_conversations:
                self._records.popitem(last=False)

    def compacted(self, conversation_id: str, call_ids: Iterable[str]) -> None:
        """A compaction removed the calls `call_ids` (their results with them) from context."""
        gone = set(call_ids)
        with self._lock:
            records = self._records.get(conversation_id)
            if records:
                records[:] = [
                    replace(r, in_context=False) if r.call_id in gone else r for r in records
                ]

    def compacted_except(self, conversation_id: str, kept: Iterable[str]) -> None:
        """A compaction removed every call recorded so far in the conversation from context,
        except the calls `kept` (those the compacted history still shows)."""
        still = set(kept)
        with self._lock:
            records = self._records.get(conversation_id)
            if records:
                records[:] = [
                    r if r.call_id in still else replace(r, in_context=False) for r in records
                ]

    def repeat(self, conversation_id: str, call: ToolCall) -> SideEffectRecord | None:
        """The compacted-away side effect `call` re-issues, or None (see `repeat_of`)."""
        with self._lock:
            records = list(self._records.get(conversation_id, ()))
        return repeat_of(records, call, self.table) if records else None


def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return None


def _argv_command(argv: Sequence[str]) -> str:
    if len(argv) >= 3 and argv[-2] in ("-c", "-lc", "-Command", "/c"):
        return str(argv[-1])
    return " ".join(argv)


def _bare(name: str) -> str:
    return name.lower().rsplit("__", 1)[-1].removeprefix("functions.")
