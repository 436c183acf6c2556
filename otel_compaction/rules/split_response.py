"""``split_response``: one model response split over several messages.

Anthropic answers a request with one assistant message; a log that writes it block by block
(Claude Code writes one record per content block, all with the response's ``message.id``, and
may write the tool results of its first calls, or progress records, between them) has to be
joined back into it, as Claude Code itself does before sending it (``normalizeMessagesForAPI``;
`otel_compaction.sessions.claude_code`). A transcript may still hold the parts apart: assistant
messages sharing one ``id`` with only assistant messages and tool results between them, or
consecutive assistant messages (of which not both carry an ``id``).

Keeping part of a response and summarizing the rest hands the model half of what it said: the
thinking block of an Anthropic response belongs with the ``tool_use`` blocks it precedes
("Preserving thinking blocks",
https://platform.claude.com/docs/en/build-with-claude/thinking#preserving-thinking-blocks),
and the assistant message is to be echoed exactly as received.
"""

from __future__ import annotations

from otel_compaction.rules._atomic import atomicity_rule

RULE = atomicity_rule(
    "split_response",
    "one model response over several messages",
    "a cut inside one model response split over several messages",
)
