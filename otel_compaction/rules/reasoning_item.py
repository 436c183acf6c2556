"""``reasoning_item``: an OpenAI Responses ``reasoning`` item and the items of the same
response it produced (the assistant ``message`` and the function calls after it).

What the provider requires (OpenAI, "Reasoning models", section "Keeping reasoning items in
context", https://platform.openai.com/docs/guides/reasoning; the cookbooks "Better performance
from reasoning models using the Responses API",
https://cookbook.openai.com/examples/responses_api/reasoning_items, and "Handling Function
Calls with Reasoning Models", https://cookbook.openai.com/examples/reasoning_function_calls):
with function calling, the reasoning items returned with the last function call are passed
back with the call and its output; a replayed output item the API generated after a reasoning
item needs that item before it. Parting them is rejected: 400, "Item 'fc_...' of type
'function_call' was provided without its required 'reasoning' item: 'rs_...'" (and the same
for a ``message`` item), or "Item 'rs_...' of type 'reasoning' was provided without its
required following item" when what it preceded was cut away.

A ``web_search_call`` (or another hosted tool call) is not bound here: the provider resolves
it inside the response and its documentation does not tie it to a reasoning item or a message,
so a cut next to it is constrained only by the items around it.
"""

from __future__ import annotations

from otel_compaction.rules._atomic import atomicity_rule

RULE = atomicity_rule(
    "reasoning_item",
    "a reasoning item and what it produced",
    "a cut between a Responses reasoning item and the call or message it produced",
)
