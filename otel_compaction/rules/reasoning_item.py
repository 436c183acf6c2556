"""``reasoning_item``: an OpenAI Responses ``reasoning`` item and the items it produced (the
function calls and messages that follow it in the same response).

Keeping a produced item without its reasoning item is rejected: 400, "Item 'fc_...' of type
'function_call' was provided without its required 'reasoning' item: 'rs_...'".
"""

from __future__ import annotations

from otel_compaction.rules._atomic import atomicity_rule

RULE = atomicity_rule(
    "reasoning_item",
    "a reasoning item and what it produced",
    "a cut between a Responses reasoning item and the call or message it produced",
)
