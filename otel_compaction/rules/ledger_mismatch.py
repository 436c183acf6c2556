"""``ledger_mismatch``: the live ledger holds open an obligation that the transcript resolved
or no longer has. The ledger is never silently trusted, nor the transcript."""

from __future__ import annotations

from otel_compaction.rules._ledger import ledger_rule

RULE = ledger_rule(
    "ledger_mismatch", "the live ledger holds open an obligation the transcript resolved or lost"
)
