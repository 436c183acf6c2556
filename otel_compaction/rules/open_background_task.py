"""``open_background_task``: work the agent started in the background (a shell command run
with ``run_in_background``, a background subagent) that the transcript has not seen finish.

Background work is an obligation in its own right: its tool call is answered at once ("running
in background with ID ..."), so pairing sees nothing open, yet the work goes on, and a summary
that drops it makes the agent start it again (Claude Code once lost background subagents at
compaction and spawned them again). The task closes when a later result that names its id
shows it done (a terminal status), when a kill tool names it, or through `force_terminal`
(recorded abandoned). The launch arguments, the id shapes, the terminal statuses and the kill
tools are the policy's (``patterns.background``).
"""

from __future__ import annotations

import bisect
import json
import operator
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from otel_compaction.rules.base import Discharge, Finding, Rule, SpanView, Tracked, unclosed

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis


def _launched(arguments: str, flags: list[str]) -> bool:
    if not any(flag in arguments for flag in flags):
        return False  # most calls: no flag named at all, nothing to parse
    try:
        value: Any = json.loads(arguments)
    except (TypeError, ValueError):
        return False
    return isinstance(value, dict) and any(value.get(flag) is True for flag in flags)


@dataclass(slots=True)
class _Task:
    """One background task: where a result names it done (final once found) and, failing
    that, the first notice of the runtime's that does."""

    ordinal: int  # of the launching call: tasks are kept in call order
    call: str
    task: str
    named: re.Pattern[str]
    started: int  # the message of the launching call's result
    next_result: int  # the result ordinal to read from
    next_entry: int  # the message to read from
    by_result: tuple[int, str] | None = None
    by_entry: int | None = None


_ORDINAL = operator.attrgetter("ordinal")


class _Tasks:
    __slots__ = ("tasks", "upto", "waiting")

    def __init__(self) -> None:
        self.upto = 0  # calls read
        self.waiting: list[int] = []  # launching calls whose result has not come yet
        self.tasks: list[_Task] = []


def scan(analysis: Analysis) -> list[Tracked]:
    """Every background task with where it is seen finished (None while it runs)."""
    settings = analysis.policy.patterns.background
    ids = analysis.policy.background_id_regex
    done = analysis.policy.background_done_regex
    if not settings.launch_arguments or ids is None:
        return []
    transcript = analysis.transcript
    calls, results, entries = transcript.calls, transcript.results, transcript.entries
    fold = analysis.scans.fold("open_background_task", _Tasks, len(calls))
    fold.waiting += [
        c.ordinal for c in calls[fold.upto :] if _launched(c.arguments, settings.launch_arguments)
    ]
    fold.upto = len(calls)
    still: list[int] = []
    for ordinal in fold.waiting:
        call = calls[ordinal]
        if call.result is None:
            still.append(ordinal)
            continue
        started = results[call.result]
        match = ids.search(started.text)
        if match is None:
            continue
        task = next((g for g in match.groups() if g), match.group(0))
        named = re.compile(rf"(?<![\w-]){re.escape(task)}(?![\w-])")
        bisect.insort(
            fold.tasks,
            _Task(
                ordinal,
                call.name,
                task,
                named,
                started.message_index,
                started.ordinal + 1,
                started.message_index + 1,
            ),
            key=_ORDINAL,
        )
    fold.waiting = still
    kill_tools = set(settings.kill_tools)
    out: list[Tracked] = []
    for task in fold.tasks:
        if task.by_result is None:
            for later in results[task.next_result :]:
                asked = transcript.call_of(later)
                about = task.named.search(later.text) or (
                    asked is not None and task.named.search(asked.arguments)
                )
                if not about:
                    continue
                if asked is not None and asked.name in kill_tools:
                    task.by_result = (later.message_index, "stopped")
                    break
                if done is not None and done.search(later.text):
                    task.by_result = (later.message_index, "finished")
                    break
            task.next_result = len(results)
        if task.by_result is None and task.by_entry is None and done is not None:
            # The runtime may also report it in its own message (a notification).
            for entry in entries[task.next_entry :]:
                if entry.text and task.named.search(entry.text) and done.search(entry.text):
                    task.by_entry = entry.index
                    break
            task.next_entry = len(entries)
        resolved: int | None
        if task.by_result is not None:
            resolved, status = task.by_result
        elif task.by_entry is not None:
            resolved, status = task.by_entry, "finished"
        else:
            resolved, status = None, "open"
        out.append(
            Tracked(
                "open_background_task", "background_task", task.task, task.call,
                task.started, resolved, status, (task.task,),
            )
        )  # fmt: skip
    return out


def check(view: SpanView) -> list[Finding]:
    """Background tasks started in the span and not seen finished in it."""
    return unclosed(view, "open_background_task", "background task", "background_task")


RULE = Rule(
    name="open_background_task",
    kind="obligation",
    summary="background work started in the span and not seen finished",
    severities={"default": "block", "strict": "block", "lenient": "warn"},
    check=check,
    scan=scan,
    discharge=Discharge(
        "background_task",
        "abandoned",
        "wait for it to finish or stop it, or force_terminal() records it abandoned",
    ),
)
