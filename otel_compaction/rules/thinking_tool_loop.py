"""``thinking_tool_loop``: a cut Anthropic rejects inside an extended-thinking tool loop.

What the provider requires (Anthropic, "Building with extended thinking", sections "Extended
thinking with tool use" and "Preserving thinking blocks",
https://platform.claude.com/docs/en/build-with-claude/thinking#thinking-with-tool-use and
https://platform.claude.com/docs/en/build-with-claude/thinking#preserving-thinking-blocks;
"Thinking in tool and multi-turn workflows",
https://platform.claude.com/docs/en/build-with-claude/thinking-tool-workflows):

* a tool-use loop is one assistant turn: when a tool result is sent back, the assistant
  message before it comes back exactly as received, its thinking blocks unmodified and with
  the ``tool_use`` blocks they precede (pairing itself, each ``tool_use`` answered by its
  ``tool_result`` in the next user message, is the gate's exact pairing, not this rule);
* with extended thinking on, the assistant message that opens the loop in progress (the last
  run of ``tool_use`` / ``tool_result`` messages) must start with a thinking block, else the
  request fails: 400, "Expected `thinking` or `redacted_thinking`, but found `tool_use`. When
  `thinking` is enabled, a final `assistant` message must start with a thinking block";
* thinking blocks of earlier turns may be omitted; only the loop in progress needs its own.

So a summary may replace the start of a tool loop, between two complete call/result rounds,
once the loop has ended; it may cut the loop still in progress only where the first message
kept is an assistant message with a thinking block of its own (with interleaved thinking,
each response of the loop has one). The units are those of the loop in progress
(`otel_compaction.transcript.final_loop_units`). Claude Code itself compacts inside tool
loops (an automatic compaction mid-turn), and the next request opens the loop anew after the
summary.

Thinking blocks kept after a summary written by the client fail the prefix check of models
with preserved thinking: the API rejects the request (400) unless the request sets
``thinking.block_binding.prefix_mismatch_behavior`` to ``"drop_block"``, or the client removes
the thinking from the kept turns ("Prefix checks on thinking blocks",
https://platform.claude.com/docs/en/build-with-claude/preserved-thinking/prefix-checks;
"Compaction and preserved thinking",
https://platform.claude.com/docs/en/build-with-claude/compaction-thinking-blocks). That is
the compactor's ``kept_thinking`` setting, not a cut constraint.

Keeping the whole extended-thinking turn together, as OpenHands does, is the stricter
``whole_thinking_loop`` rule, off unless a policy turns it on.
"""

from __future__ import annotations

from otel_compaction.rules._atomic import atomicity_rule

RULE = atomicity_rule(
    "thinking_tool_loop",
    "an extended-thinking tool loop in progress",
    "a cut Anthropic rejects inside the extended-thinking tool loop in progress",
)
