"""Obligation sources: what the engines that own the work still owe, read just before a
decision and combined with the ledger conservatively (open in either means open).

One module per engine, each imported on its own so that its framework loads only when used:

* `otel_compaction.sources.langgraph.LangGraphSource`: a compiled graph and its checkpointer
  (pending tasks, interrupts, tool calls in the state's messages without their
  ``ToolMessage``);
* `otel_compaction.sources.openai_agents.AgentsSessionSource`: an Agents SDK session (a
  ``function_call`` item without its output);
* `otel_compaction.sources.temporal.TemporalSource`: a Temporal workflow's pending
  activities.

Give them to the gate (``CompactionGate(..., sources=[...])`` or
``Telemetry.gate(..., sources=[...])``) or to the Agents SDK session guard
(``CompactionGuardSession(..., sources=[...])``). `combine` says how a reading and the ledger
are combined; disagreements are counted on ``compaction.sources.disagreements``.
"""

from otel_compaction.sources.base import ObligationSource, SourceObligation, SourceReading
from otel_compaction.sources.combine import Combined, Disagreement, ObligationSources, combine

__all__ = [
    "Combined",
    "Disagreement",
    "ObligationSource",
    "ObligationSources",
    "SourceObligation",
    "SourceReading",
    "combine",
]
