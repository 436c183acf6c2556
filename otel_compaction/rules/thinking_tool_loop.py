"""``thinking_tool_loop``: an Anthropic assistant turn that opens with a ``thinking`` block
continues through its ``tool_use``/``tool_result`` rounds up to the next user message that is
not only tool results.

A cut inside it leaves the continued turn without its thinking block, and Anthropic rejects
the next request: 400, "Expected `thinking` or `redacted_thinking`, but found `tool_use`"
(OpenHands keeps the same loop atomic).
"""

from __future__ import annotations

from otel_compaction.rules._atomic import atomicity_rule

RULE = atomicity_rule(
    "thinking_tool_loop",
    "an extended-thinking tool loop",
    "a cut inside an Anthropic extended-thinking tool loop",
)
