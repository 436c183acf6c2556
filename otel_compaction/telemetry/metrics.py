"""The instruments: open obligations, their age, decisions, deferral pressure, severed and
duplicate calls, orphaned results, ledger overflow and disagreements with obligation sources.

`CompactionMetrics.watch` subscribes the instruments to a ledger, so every way an obligation
is opened or resolved (recorder, span processor, auto-instrumentation) is counted once, where
it happens; the open obligations are observed from the ledgers' own counts. A tool call's
duration is its obligation age: one histogram point per resolution, carrying the tool's name
and, for an error, its ``error.type``. Attributes are low-cardinality only: kinds, statuses,
error types, actions, rules, tool names.

The age is recorded in the context current at the resolution. With the SDK's default
(trace-based) exemplar filter its exemplar is the span current there when it is sampled: the
parent of the ``tool_result`` span, in the trace the call resolved in; outside a sampled span
there is none, and the record costs no exemplar. Recording it in the call span's context
instead would name the ``execute_tool`` span itself, at the price of a context and an exemplar
per call (a quarter more than the record itself); the Collector's span metrics already give
tool durations exemplars on that span.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from otel_compaction._internal_errors import internal_errors
from otel_compaction.ledger import Obligation, ObligationKind, ObligationLedger
from otel_compaction.telemetry import semconv

__all__ = ["CompactionMetrics"]

# Seconds; tool calls run from milliseconds to many minutes.
_AGE_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class CompactionMetrics:
    """Every metric this package records, created once per meter provider."""

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        from otel_compaction import __version__

        provider = meter_provider or metrics.get_meter_provider()
        meter: metrics.Meter = metrics.NoOpMeter(semconv.SCOPE, __version__)
        with internal_errors("getting a meter"):
            meter = provider.get_meter(semconv.SCOPE, __version__)
        self._observed = _observed(provider, meter)
        self.obligation_age = meter.create_histogram(
            semconv.METRIC_OBLIGATION_AGE,
            unit="s",
            description="Time from an obligation's opening to its terminal resolution "
            "(a tool call's duration).",
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
        self.reissued_calls = meter.create_counter(
            semconv.METRIC_REISSUED_CALLS,
            unit="{call}",
            description="Tool calls repeating a side effect a compaction removed from context.",
        )
        self.severed = meter.create_counter(
            semconv.METRIC_SEVERED,
            unit="{obligation}",
            description="Obligations whose call and resolution were separated in the transcript.",
        )
        self.orphaned_results = meter.create_counter(
            semconv.METRIC_ORPHANED,
            unit="{result}",
            description="Tool results sent to the model whose call is no longer in the transcript.",
        )
        self.ledger_overflow = meter.create_counter(
            semconv.METRIC_LEDGER_OVERFLOW,
            unit="{obligation}",
            description="Open obligations dropped because the ledger reached its bound.",
        )
        self.source_disagreements = meter.create_counter(
            semconv.METRIC_SOURCE_DISAGREEMENTS,
            unit="{obligation}",
            description="Obligations an engine holds open that the ledger holds closed or not "
            "at all, and the reverse (each counted once).",
        )

    def watch(self, ledger: ObligationLedger) -> None:
        """Observe `ledger`: its open obligations from now on as they are, and the ages and
        overflows of what happens in it from now on."""
        with _OBSERVED_LOCK:
            if any(known is ledger for known in self._observed.ledgers):
                return
            self._observed.ledgers.append(ledger)
        ledger.subscribe(on_resolve=self._resolved, on_overflow=self._overflowed)

    def record_disagreement(self, source: str, direction: str, kind: str) -> None:
        """Count one disagreement between an obligation source and the ledger."""
        self.source_disagreements.add(
            1,
            {
                semconv.SOURCE_NAME: source,
                semconv.SOURCE_DISAGREEMENT: direction,
                semconv.OBLIGATION_KIND: kind,
            },
        )

    def _resolved(self, record: Obligation) -> None:
        status = record.status
        resolved_at = record.resolved_at_ns
        if status is None or resolved_at is None:
            return
        attributes: dict[str, str] = {
            semconv.OBLIGATION_KIND: record.kind,
            semconv.OBLIGATION_STATUS: status,
        }
        if record.kind == "tool_call" and record.name:
            attributes[semconv.GEN_AI_TOOL_NAME] = record.name
        if record.error_type is not None:
            attributes[semconv.ERROR_TYPE] = record.error_type
        elif status == "error":
            attributes[semconv.ERROR_TYPE] = semconv.ERROR_TYPE_OTHER
        self.obligation_age.record((resolved_at - record.opened_at_ns) / 1e9, attributes)

    def _overflowed(self, record: Obligation) -> None:
        self.ledger_overflow.add(1, {semconv.OBLIGATION_KIND: record.kind})


class _Observed:
    """The ledgers one meter provider observes, and its asynchronous instruments' callbacks.

    The open obligations are observed from the ledgers' own counts at collection time: exact
    whenever watching began and whatever took a record out of a ledger (resolution, overflow,
    forget), and free per call. An SDK meter keeps the callbacks of the first registration of
    an instrument name only, so there is one `_Observed` per meter provider, shared by every
    `CompactionMetrics` made on it.
    """

    def __init__(self, meter: metrics.Meter) -> None:
        self.ledgers: list[ObligationLedger] = []
        meter.create_observable_up_down_counter(
            semconv.METRIC_OPEN_OBLIGATIONS,
            callbacks=[self._open_counts],
            unit="{obligation}",
            description="Obligations (tool calls, transactions, retries, commitments) still open.",
        )
        meter.create_observable_gauge(
            semconv.METRIC_OLDEST_OBLIGATION_AGE,
            callbacks=[self._oldest_age],
            unit="s",
            description="Age of the oldest obligation still open.",
        )
        meter.create_observable_gauge(
            semconv.METRIC_ORPHANED_OBLIGATIONS,
            callbacks=[self._orphaned],
            unit="{obligation}",
            description="Open obligations of a shared ledger whose owner stopped heartbeating "
            "(the fleet's count, the same in every worker).",
        )

    def _open_counts(self, _options: CallbackOptions) -> Iterable[Observation]:
        return self._by_kind(lambda ledger: ledger.open_counts())

    def _orphaned(self, _options: CallbackOptions) -> Iterable[Observation]:
        return self._by_kind(lambda ledger: ledger.orphaned_counts())

    def _by_kind(
        self, counts: Callable[[ObligationLedger], Mapping[ObligationKind, int]]
    ) -> list[Observation]:
        """One observation per kind: what `counts` says of each ledger, summed."""
        totals: dict[str, int] = {}
        for ledger in tuple(self.ledgers):
            for kind, count in counts(ledger).items():
                totals[kind] = totals.get(kind, 0) + count
        return [
            Observation(count, {semconv.OBLIGATION_KIND: kind})
            for kind, count in sorted(totals.items())
        ]

    def _oldest_age(self, _options: CallbackOptions) -> Iterable[Observation]:
        now = time.time_ns()
        ledgers = tuple(self.ledgers)
        oldest = [o for o in (ledger.oldest_open() for ledger in ledgers) if o is not None]
        if not oldest:
            return [Observation(0.0)]
        return [Observation((now - min(o.opened_at_ns for o in oldest)) / 1e9)]


_OBSERVED: weakref.WeakKeyDictionary[MeterProvider, _Observed] = weakref.WeakKeyDictionary()
_OBSERVED_LOCK = threading.Lock()


def _observed(provider: MeterProvider, meter: metrics.Meter) -> _Observed:
    with _OBSERVED_LOCK:
        try:
            observed = _OBSERVED.get(provider)
        except TypeError:  # a provider that cannot be weakly referenced: not shared
            observed = None
        if observed is None:
            observed = _Observed(meter)
            with contextlib.suppress(TypeError):
                _OBSERVED[provider] = observed
        return observed
