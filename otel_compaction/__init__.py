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
"""

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
