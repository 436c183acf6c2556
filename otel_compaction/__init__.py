"""otel-compaction: OpenTelemetry instrumentation and a policy gate for agent compaction.

Compaction replaces old transcript spans with a model-written summary. This package makes it a
guarded state transition: tool calls and their results are tracked as obligations, and
`CompactionGate.evaluate` decides, before any compaction, to compact (possibly extending the
span to close a pairing break), defer to an older closed span, or refuse by raising
`CompactionRefused` naming the open obligations.

Example:
    >>> from otel_compaction import CompactionGate
    >>> gate = CompactionGate("default")
    >>> gate.evaluate([{"role": "user", "content": "hi"}], 0, 1).action
    'compact'

The names are imported when first used (``import otel_compaction`` alone imports none of the
OpenTelemetry SDK), so a command that needs a few of them, such as a CLI hook, pays only for
those.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis
    from otel_compaction.archive import Archive, ArchivedSpan
    from otel_compaction.compactor import CompactionResult, GuardedCompactor, SummaryRejected
    from otel_compaction.context import conversation, current_conversation_id
    from otel_compaction.errors import (
        ArchiveError,
        CompactionError,
        CompactionRefused,
        LiveSpanCompactionError,
        OpenObligationError,
        PolicyError,
        TranscriptError,
    )
    from otel_compaction.gate import CompactionGate, Decision, MustCarry, SpanError
    from otel_compaction.ledger import LedgerSnapshot, Obligation, ObligationLedger
    from otel_compaction.metrics import CompactionMetrics
    from otel_compaction.policy import Policy
    from otel_compaction.rules import Finding, ObligationRef
    from otel_compaction.summarizers import (
        ExtractiveSummarizer,
        ModelSummarizer,
        Summarizer,
        SummaryRequest,
    )
    from otel_compaction.telemetry import DecisionTelemetry, Telemetry, configure
    from otel_compaction.tracing import (
        LedgerSpanProcessor,
        ObligationSampler,
        RetryChain,
        ToolCallHandle,
        ToolCallRecorder,
    )
    from otel_compaction.transcript import Transcript
    from otel_compaction.verification import Verification, verify, verify_summary

__all__ = [
    "Analysis",
    "Archive",
    "ArchiveError",
    "ArchivedSpan",
    "CompactionError",
    "CompactionGate",
    "CompactionMetrics",
    "CompactionRefused",
    "CompactionResult",
    "Decision",
    "DecisionTelemetry",
    "ExtractiveSummarizer",
    "Finding",
    "GuardedCompactor",
    "LedgerSnapshot",
    "LedgerSpanProcessor",
    "LiveSpanCompactionError",
    "ModelSummarizer",
    "MustCarry",
    "Obligation",
    "ObligationLedger",
    "ObligationRef",
    "ObligationSampler",
    "OpenObligationError",
    "Policy",
    "PolicyError",
    "RetryChain",
    "SpanError",
    "Summarizer",
    "SummaryRejected",
    "SummaryRequest",
    "Telemetry",
    "ToolCallHandle",
    "ToolCallRecorder",
    "Transcript",
    "TranscriptError",
    "Verification",
    "configure",
    "conversation",
    "current_conversation_id",
    "verify",
    "verify_summary",
]

from otel_compaction._version import __version__ as __version__

_HOMES: Final = {
    "otel_compaction.analysis": ("Analysis",),
    "otel_compaction.archive": ("Archive", "ArchivedSpan"),
    "otel_compaction.compactor": ("CompactionResult", "GuardedCompactor", "SummaryRejected"),
    "otel_compaction.context": ("conversation", "current_conversation_id"),
    "otel_compaction.errors": (
        "ArchiveError", "CompactionError", "CompactionRefused", "LiveSpanCompactionError",
        "OpenObligationError", "PolicyError", "TranscriptError",
    ),
    "otel_compaction.gate": ("CompactionGate", "Decision", "MustCarry", "SpanError"),
    "otel_compaction.ledger": ("LedgerSnapshot", "Obligation", "ObligationLedger"),
    "otel_compaction.metrics": ("CompactionMetrics",),
    "otel_compaction.policy": ("Policy",),
    "otel_compaction.rules": ("Finding", "ObligationRef"),
    "otel_compaction.summarizers": (
        "ExtractiveSummarizer", "ModelSummarizer", "Summarizer", "SummaryRequest",
    ),
    "otel_compaction.telemetry": ("DecisionTelemetry", "Telemetry", "configure"),
    "otel_compaction.tracing": (
        "LedgerSpanProcessor", "ObligationSampler", "RetryChain", "ToolCallHandle",
        "ToolCallRecorder",
    ),
    "otel_compaction.transcript": ("Transcript",),
    "otel_compaction.verification": ("Verification", "verify", "verify_summary"),
}  # fmt: skip
_HOME_OF: Final = {name: module for module, names in _HOMES.items() for name in names}


# Hidden from type checkers, which read the imports above: a name not exported stays an
# error for them instead of becoming Any.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """Import a public name from its module the first time it is asked for."""
        module = _HOME_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups find it without coming here
        return value


def __dir__() -> list[str]:
    """The module's names, the public ones not imported yet included."""
    return sorted({*globals(), *__all__})
