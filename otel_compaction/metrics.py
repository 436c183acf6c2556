"""The instruments: open obligations, their age, decisions, deferral pressure, severed and
duplicate calls, ledger overflow, and the semantic-convention tool duration.

`CompactionMetrics.watch` subscribes the instruments to a ledger, so every way an obligation
is opened or resolved (recorder, span processor, auto-instrumentation) is counted once, where
it happens. Attributes are low-cardinality only: kinds, statuses, actions, rules, tool names.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from otel_compaction import semconv
from otel_compaction.ledger import Obligation, ObligationLedger

__all__ = ["CompactionMetrics"]

# Seconds; tool calls run from milliseconds to many minutes.
_AGE_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class CompactionMetrics:
    """Every metric this package records, created once per meter provider."""

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        from otel_compaction import __version__

        meter = (meter_provider or metrics.get_meter_provider()).get_meter(
            semconv.SCOPE, __version__
        )
        self._ledgers: list[ObligationLedger] = []
        self.open_obligations = meter.create_up_down_counter(
            semconv.METRIC_OPEN_OBLIGATIONS,
            unit="{obligation}",
            description="Obligations (tool calls, transactions, retries, commitments) still open.",
        )
        self.obligation_age = meter.create_histogram(
            semconv.METRIC_OBLIGATION_AGE,
            unit="s",
            description="Time from an obligation's opening to its terminal resolution.",
            explicit_bucket_boundaries_advisory=_AGE_BUCKETS,
        )
        self.decisions = meter.create_counter(
            semconv.METRIC_DECISIONS,
            unit="{decision}",
            description="Compaction gate decisions by action and first blocking rule.",
        )
        self.held_tokens = meter.create_counter(
            semconv.METRIC_HELD_TOKENS,
            unit="{token}",
            description="Estimated tokens held verbatim because their compaction was deferred.",
        )
        self.duplicate_calls = meter.create_counter(
            semconv.METRIC_DUPLICATE_CALLS,
            unit="{call}",
            description="Tool calls emitted again after an identical call had already resolved.",
        )
        self.severed = meter.create_counter(
            semconv.METRIC_SEVERED,
            unit="{obligation}",
            description="Obligations whose call and resolution were separated in the transcript.",
        )
        self.ledger_overflow = meter.create_counter(
            semconv.METRIC_LEDGER_OVERFLOW,
            unit="{obligation}",
            description="Open obligations dropped because the ledger reached its bound.",
        )
        self.tool_duration = meter.create_histogram(
            semconv.METRIC_EXECUTE_TOOL_DURATION,
            unit="s",
            description="Duration of tool executions.",
            explicit_bucket_boundaries_advisory=_AGE_BUCKETS,
        )
        meter.create_observable_gauge(
            semconv.METRIC_OLDEST_OBLIGATION_AGE,
            callbacks=[self._oldest_age],
            unit="s",
            description="Age of the oldest obligation still open.",
        )

    def watch(self, ledger: ObligationLedger) -> None:
        """Count what happens in `ledger` from now on."""
        if any(known is ledger for known in self._ledgers):
            return
        self._ledgers.append(ledger)
        ledger.subscribe(on_change=self._changed, on_overflow=self._overflowed)

    def _changed(self, record: Obligation, before: Obligation | None) -> None:
        kind = {semconv.OBLIGATION_KIND: record.kind}
        if before is None:
            self.open_obligations.add(1, kind)
        elif before.is_open and not record.is_open:
            self.open_obligations.add(-1, kind)
            self.obligation_age.record(
                record.age_seconds,
                {semconv.OBLIGATION_KIND: record.kind, semconv.OBLIGATION_STATUS: record.status},
            )

    def _overflowed(self, record: Obligation) -> None:
        kind = {semconv.OBLIGATION_KIND: record.kind}
        self.open_obligations.add(-1, kind)
        self.ledger_overflow.add(1, kind)

    def _oldest_age(self, _options: CallbackOptions) -> Iterable[Observation]:
        now = time.time_ns()
        oldest = [o for o in (ledger.oldest_open() for ledger in self._ledgers) if o is not None]
        if not oldest:
            return [Observation(0.0)]
        return [Observation((now - min(o.opened_at_ns for o in oldest)) / 1e9)]
