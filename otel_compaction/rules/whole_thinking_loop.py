"""``whole_thinking_loop``: a whole Anthropic extended-thinking turn (its first assistant
message with a ``thinking`` block, through its ``tool_use``/``tool_result`` rounds, up to the
next user message that is not only tool results) kept together.

Stricter than the provider: Anthropic rejects only a cut that leaves the loop in progress
without its opening thinking block (``thinking_tool_loop``, where the documentation is cited),
and a loop that ended may be cut between two complete rounds. This rule is off under the
``default`` and ``lenient`` policies and blocks under ``strict`` (which blocks everything); a
policy that wants the model to keep the reasoning of the whole turn it is in (as OpenHands
keeps it) sets ``rules: {whole_thinking_loop: block}``.
"""

from __future__ import annotations

from otel_compaction.rules._atomic import atomicity_rule

RULE = atomicity_rule(
    "whole_thinking_loop",
    "a whole extended-thinking turn",
    "a cut inside an extended-thinking turn with its tool rounds (stricter than the provider)",
    {"default": "off", "strict": "block", "lenient": "off"},
)
