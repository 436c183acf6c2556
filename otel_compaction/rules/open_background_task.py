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

import json
import re
from typing import TYPE_CHECKING, Any

from otel_compaction.rules.base import Finding, Rule, SpanView, Tracked, unclosed

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


def scan(analysis: Analysis) -> list[Tracked]:
    """Every background task with where it is seen finished (None while it runs)."""
    settings = analysis.policy.patterns.background
    ids = analysis.policy.background_id_regex
    done = analysis.policy.background_done_regex
    if not settings.launch_arguments or ids is None:
        return []
    transcript = analysis.transcript
    calls, results = transcript.calls, transcript.results
    kill_tools = set(settings.kill_tools)
    out: list[Tracked] = []
    for call in calls:
        if call.result is None or not _launched(call.arguments, settings.launch_arguments):
            continue
        started = results[call.result]
        match = ids.search(started.text)
        if match is None:
            continue
        task = next((g for g in match.groups() if g), match.group(0))
        named = re.compile(rf"(?<![\w-]){re.escape(task)}(?![\w-])")
        resolved: int | None = None
        status = "open"
        for later in results[started.ordinal + 1 :]:
            asked = transcript.call_of(later)
            about = named.search(later.text) or (
                asked is not None and named.search(asked.arguments)
            )
            if not about:
                continue
            if asked is not None and asked.name in kill_tools:
                resolved, status = later.message_index, "stopped"
                break
            if done is not None and done.search(later.text):
                resolved, status = later.message_index, "finished"
                break
        if resolved is None and done is not None:
            # The runtime may also report it in its own message (a notification).
            for entry in transcript.entries[started.message_index + 1 :]:
                if entry.text and named.search(entry.text) and done.search(entry.text):
                    resolved, status = entry.index, "finished"
                    break
        out.append(
            Tracked(
                "open_background_task", "background_task", task, call.name,
                started.message_index, resolved, status, (task,),
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
)
