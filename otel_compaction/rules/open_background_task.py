"""``open_background_task``: work the agent started in the background (a shell command run
with ``run_in_background``, a background subagent, a Codex ``exec_command`` session still
alive) that the transcript has not seen finish.

Background work is an obligation in its own right: its tool call is answered at once ("running
in background with ID ...", "Process running with session ID 7"), so pairing sees nothing
open, yet the work goes on, and a summary that drops it makes the agent start it again (Claude
Code once lost background subagents at compaction and spawned them again). It is carried, not
blocking: the task may run for the rest of the session, so holding every span over it would
stop compaction until the budget is critical; the summary must name it by its handle instead.
The task closes when a later result that names its id shows it done (a terminal status, and
no "still running" status), when a kill tool names it, or through `force_terminal` (recorded
abandoned). A Codex session is named by the ``session_id`` of the later ``write_stdin`` calls
and is done when one says the process exited. The launch arguments, the id shapes, the
terminal statuses and the kill tools are the policy's (``patterns.background``); Codex's
session shapes and the "still running" statuses are this rule's.
"""

from __future__ import annotations

import bisect
import json
import operator
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from otel_compaction.rules.base import Discharge, Finding, Rule, SpanView, Tracked, unclosed

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis


# A command that outlived its call (Codex's unified exec): its session id, polled later by
# `write_stdin` with ``session_id``, until a poll says the process exited.
_SESSION_RUNNING: Final = re.compile(r"(?m)^Process running with session ID (\d+)")
_SESSION_EXITED: Final = re.compile(r"(?m)^Process exited with code -?\d+")
# Statuses that say the task still runs, whatever its output says ("build completed" in the
# output of a dev server still running is not its end).
_STILL_RUNNING: Final = re.compile(
    r"(?i)<status>\s*running\s*</status>|^Process running with session ID", re.MULTILINE
)


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
    """One background task: where a result first names it done and where a notice of the
    runtime's first does (the earlier of them is its end, final once found). A session
    (``session``) is named only by the arguments of the calls that poll it, and done only when
    one says it exited."""

    ordinal: int  # of the launching call: tasks are kept in call order
    call: str
    task: str
    named: re.Pattern[str]
    started: int  # the message of the launching call's result
    next_result: int  # the result ordinal to read from
    next_entry: int  # the message to read from
    session: bool = False
    by_result: tuple[int, str] | None = None
    by_entry: int | None = None


_ORDINAL = operator.attrgetter("ordinal")


class _Tasks:
    __slots__ = ("results", "sessions", "tasks", "upto", "waiting")

    def __init__(self) -> None:
        self.upto = 0  # calls read
        self.results = 0  # results read for sessions still running
        self.waiting: list[int] = []  # launching calls whose result has not come yet
        self.tasks: list[_Task] = []
        self.sessions: set[str] = set()  # the sessions found (a poll names one again)


def _sessions(fold: _Tasks, analysis: Analysis) -> None:
    """The sessions that calls left running, from the results read since last time."""
    transcript = analysis.transcript
    results = transcript.results
    for result in results[fold.results :]:
        call = transcript.call_of(result)
        match = _SESSION_RUNNING.search(result.text) if call is not None else None
        if call is None or match is None or match.group(1) in fold.sessions:
            continue
        task = match.group(1)
        fold.sessions.add(task)
        named = re.compile(rf'"session_id"\s*:\s*"?{task}(?![\d"])')
        bisect.insort(
            fold.tasks,
            _Task(
                call.ordinal, call.name, task, named, result.message_index, result.ordinal + 1,
                result.message_index + 1, session=True,
            ),
            key=_ORDINAL,
        )  # fmt: skip
    fold.results = len(results)


def _flagged(fold: _Tasks, analysis: Analysis) -> None:
    """The tasks of the calls launched with a background flag whose result names their id."""
    ids = analysis.policy.background_id_regex
    flags = analysis.policy.patterns.background.launch_arguments
    calls, results = analysis.transcript.calls, analysis.transcript.results
    if flags and ids is not None:
        fold.waiting += [c.ordinal for c in calls[fold.upto :] if _launched(c.arguments, flags)]
    fold.upto = len(calls)
    still: list[int] = []
    for ordinal in fold.waiting:
        call = calls[ordinal]
        if call.result is None:
            still.append(ordinal)
            continue
        started = results[call.result]
        match = ids.search(started.text) if ids is not None else None
        if match is None:
            continue
        task = next((g for g in match.groups() if g), match.group(0))
        named = re.compile(rf"(?<![\w-]){re.escape(task)}(?![\w-])")
        bisect.insort(
            fold.tasks,
            _Task(
                ordinal, call.name, task, named, started.message_index, started.ordinal + 1,
                started.message_index + 1,
            ),
            key=_ORDINAL,
        )  # fmt: skip
    fold.waiting = still


def _follow(task: _Task, analysis: Analysis) -> None:
    """Read the results and the runtime's notices since last time for the task's end (the
    first of each: both are read over the same messages, so the earlier of them is its end)."""
    if task.by_result is not None or task.by_entry is not None:
        return
    transcript = analysis.transcript
    results, entries = transcript.results, transcript.entries
    done = analysis.policy.background_done_regex
    kill_tools = analysis.policy.patterns.background.kill_tools
    ended = _SESSION_EXITED if task.session else done
    for later in results[task.next_result :]:
        asked = transcript.call_of(later)
        about = (not task.session and task.named.search(later.text)) or (
            asked is not None and task.named.search(asked.arguments)
        )
        if not about:
            continue
        if asked is not None and asked.name in kill_tools:
            task.by_result = (later.message_index, "stopped")
            break
        text = later.text
        if ended is not None and ended.search(text) and not _STILL_RUNNING.search(text):
            task.by_result = (later.message_index, "finished")
            break
    task.next_result = len(results)
    if done is not None and not task.session:
        # The runtime may also report it in its own message (a notification).
        for entry in entries[task.next_entry :]:
            if entry.text and task.named.search(entry.text) and done.search(entry.text):
                task.by_entry = entry.index
                break
        task.next_entry = len(entries)


def scan(analysis: Analysis) -> list[Tracked]:
    """Every background task with where it is seen finished (None while it runs)."""
    transcript = analysis.transcript
    fold = analysis.scans.fold("open_background_task", _Tasks, len(transcript.calls))
    if fold.results > len(transcript.results):  # a rewrite with fewer results: read afresh
        fold = analysis.scans.fold("open_background_task", _Tasks, -1)
    _sessions(fold, analysis)
    _flagged(fold, analysis)
    out: list[Tracked] = []
    for task in fold.tasks:
        _follow(task, analysis)
        resolved: int | None
        resolved, status = task.by_result or (None, "open")
        if task.by_entry is not None and (resolved is None or task.by_entry < resolved):
            resolved, status = task.by_entry, "finished"
        out.append(
            Tracked(
                "open_background_task", "background_task", task.task, task.call,
                task.started, resolved, status, (task.task,),
            )
        )  # fmt: skip
    return out


def check(view: SpanView) -> list[Finding]:
    """Background tasks started in the span and not seen finished in it (still running: the
    summary must carry each by its handle)."""
    return unclosed(view, "open_background_task", "background task", "background_task")


RULE = Rule(
    name="open_background_task",
    kind="obligation",
    summary="background work started in the span and not seen finished",
    severities={"default": "carry", "strict": "carry", "lenient": "warn"},
    check=check,
    scan=scan,
    discharge=Discharge(
        "background_task",
        "abandoned",
        "wait for it to finish or stop it, or force_terminal() records it abandoned",
    ),
)
