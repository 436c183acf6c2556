"""``severed_obligation``: the ledger recorded a resolution the transcript does not have (a
result was cut away from its call)."""

from __future__ import annotations

from otel_compaction.rules._ledger import ledger_rule

RULE = ledger_rule(
    "severed_obligation", "the ledger recorded a result that the transcript does not have"
)
