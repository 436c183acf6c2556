"""``split_response``: one model response split over several messages (consecutive assistant
messages, or messages sharing one ``id``).

Keeping part of a response and summarizing the rest hands the model half of what it said.
"""

from __future__ import annotations

from otel_compaction.rules._atomic import atomicity_rule

RULE = atomicity_rule(
    "split_response",
    "one model response over several messages",
    "a cut inside one model response split over several messages",
)
