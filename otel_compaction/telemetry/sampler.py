"""`ObligationSampler`: a sampler's drop of an obligation span turned into record-only, so the
ledger's span processor still sees the span while exporters do not."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Decision as SamplingDecision
from opentelemetry.sdk.trace.sampling import Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes

from otel_compaction.telemetry.processor import is_obligation_span

__all__ = ["ObligationSampler"]


class ObligationSampler(Sampler):
    """Wraps a sampler: obligation spans it would drop are recorded (not exported) instead,
    so processors that feed the ledger still see them."""

    def __init__(self, delegate: Sampler) -> None:
        self.delegate = delegate

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: trace.TraceState | None = None,
    ) -> SamplingResult:
        result = self.delegate.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )
        if result.decision == SamplingDecision.DROP and is_obligation_span(name, attributes):
            return SamplingResult(SamplingDecision.RECORD_ONLY, attributes, result.trace_state)
        return result

    def get_description(self) -> str:
        return f"ObligationSampler{{{self.delegate.get_description()}}}"
