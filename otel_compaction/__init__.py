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
    from otel_compaction.archive import Archive
    from otel_compaction.compactor import CompactionResult, GuardedCompactor, SummaryRejected
    from otel_compaction.context import conversation
    from otel_compaction.errors import (
        CompactionError,
        CompactionRefused,
        LiveSpanCompactionError,
        OpenObligationError,
        PolicyError,
        TranscriptError,
    )
    from otel_compaction.gate import CompactionGate, Decision
    from otel_compaction.policy import Policy
    from otel_compaction.recorder import ToolCallRecorder
    from otel_compaction.summarizers import ExtractiveSummarizer, ModelSummarizer
    from otel_compaction.telemetry.configuration import Telemetry, configure
    from otel_compaction.verification import verify_summary

__all__ = [
    "Archive",
    "CompactionError",
    "CompactionGate",
    "CompactionRefused",
    "CompactionResult",
    "Decision",
    "ExtractiveSummarizer",
    "GuardedCompactor",
    "LiveSpanCompactionError",
    "ModelSummarizer",
    "OpenObligationError",
    "Policy",
    "PolicyError",
    "SummaryRejected",
    "Telemetry",
    "ToolCallRecorder",
    "TranscriptError",
    "configure",
    "conversation",
    "verify_summary",
]

from otel_compaction._version import __version__ as __version__

_HOMES: Final = {
    "otel_compaction.archive": ("Archive",),
    "otel_compaction.compactor": (
        "CompactionResult",
        "GuardedCompactor",
        "SummaryRejected",
    ),
    "otel_compaction.context": ("conversation",),
    "otel_compaction.errors": (
        "CompactionError",
        "CompactionRefused",
        "LiveSpanCompactionError",
        "OpenObligationError",
        "PolicyError",
        "TranscriptError",
    ),
    "otel_compaction.gate": (
        "CompactionGate",
        "Decision",
    ),
    "otel_compaction.policy": ("Policy",),
    "otel_compaction.summarizers": (
        "ExtractiveSummarizer",
        "ModelSummarizer",
    ),
    "otel_compaction.recorder": ("ToolCallRecorder",),
    "otel_compaction.telemetry.configuration": (
        "Telemetry",
        "configure",
    ),
    "otel_compaction.verification": ("verify_summary",),
}
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
