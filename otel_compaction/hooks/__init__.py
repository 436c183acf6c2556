"""Compaction hooks for Claude Code and Codex: guard the compactions the CLIs already make.

``otel-compaction hook claude-code`` and ``otel-compaction hook codex`` read the hook's JSON on
standard input and act on its ``hook_event_name``:

* ``PreCompact``: the gate over what the CLI is about to compact. Open obligations block it
  (under the policy's choice for the trigger, ``manual`` or ``auto``); otherwise the span is
  archived verbatim and the must-carry table goes to the summarizer (Claude Code appends a
  PreCompact hook's standard output to the summarizer's prompt).
* ``PostCompact``: the summary (Claude Code's ``compact_summary``, Codex's ``compacted``
  record) is verified against the must-carry table.
* ``SessionStart`` with ``source: "compact"``: what the summary lost is handed to the model
  as additional context: the repair.

A hook never blocks by accident: unreadable input or an internal error lets the CLI go on
(exit 0) with one line on standard error; only a deliberate refusal blocks.
"""

from __future__ import annotations

from otel_compaction.hooks.run import HookResult, run_hook

__all__ = ["HookResult", "run_hook"]
