"""The ledger and the engines' readings combined conservatively: open in either means open.

`combine` returns the ledger snapshot the gate analyses: the ledger's own records, and an open
record for each obligation an engine holds open that the ledger does not. Tool calls are paired
by `otel_compaction.reconcile` (same id, newest with newest) between the ledger and the
engine's stored calls:

* the ledger open, the engine showing the result: the ledger's record stays open (the gate
  reads it as a ``ledger_mismatch``), counted as a ``ledger_open`` disagreement;
* the engine showing the call without its result, the ledger holding it resolved with a result
  or an error, or not holding it at all (another worker recorded it, or none did): an open
  record is added, counted as a ``source_open`` disagreement;
* the ledger recording it abandoned (``force_terminal``): discharged, as the ledger says; the
  engine will never show a result for it.

Other work the engine holds open (interrupts, pending tasks, activities) is added as an open
record of its kind unless the ledger holds its latest record open (they agree) or discharged
(``force_terminal`` recorded it); the ledger holding it done (a result or an error) while the
engine still runs it is a ``source_open`` disagreement, and it is added. A source that cannot
be read adds one open record for itself (``background_task`` ``<source>:unreadable``).

The gate judges an added record as it judges the ledger's own: one that pairs with a call in the
transcript makes the span live there; one with no place in the transcript (an interrupt, an
activity, an unreadable engine) cannot be severed by a cut, so it is reported (a ``warn``
finding) and handed to the summarizer as still pending (``must_carry.pending``).

`ObligationSources` reads the sources, combines, and counts each disagreement once (per
conversation, source, obligation and direction, within a bound) on
``compaction.sources.disagreements``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from otel_compaction.ledger import LedgerSnapshot, Obligation, ObligationKind
from otel_compaction.reconcile import reconcile_calls, unpaired_calls
from otel_compaction.sources.base import ObligationSource, SourceReading

if TYPE_CHECKING:
    from otel_compaction.telemetry.metrics import CompactionMetrics

__all__ = ["Combined", "Disagreement", "ObligationSources", "combine", "unreadable"]

_log = logging.getLogger(__name__)

Direction = Literal["ledger_open", "source_open"]

_ANSWERED = frozenset({"result", "error"})  # resolved as done, not discharged by force
_REMEMBERED = 4_096  # disagreements remembered so that each is counted once


@dataclass(frozen=True, slots=True)
class Disagreement:
    """The ledger and one source disagree about one obligation: ``ledger_open`` (the ledger
    holds it open, the engine shows it closed) or ``source_open`` (the engine holds it open,
    the ledger holds it closed or not at all)."""

    source: str
    direction: Direction
    kind: str
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Combined:
    """The snapshot the gate analyses, and the disagreements found building it."""

    snapshot: LedgerSnapshot
    disagreements: tuple[Disagreement, ...]
    added: tuple[Obligation, ...]
    """The open records the sources added to the ledger's."""


def _failed(source: ObligationSource, conversation_id: str, error: Exception) -> SourceReading:
    _log.warning(
        "otel-compaction: obligation source %s unreadable (%s)", source.name, type(error).__name__
    )
    return unreadable(source.name, conversation_id, error)


def unreadable(source: str, conversation_id: str, error: BaseException) -> SourceReading:
    """The reading of a source that failed: its error's type, no message (it may quote
    content)."""
    return SourceReading(source, conversation_id, error=type(error).__name__)


def combine(snapshot: LedgerSnapshot, readings: Iterable[SourceReading]) -> Combined:
    """The ledger's records and every obligation a reading holds open that the ledger does
    not (see the module), with the disagreements."""
    records = snapshot.obligations
    conversation = snapshot.conversation_id
    added: list[Obligation] = []
    disagreements: list[Disagreement] = []
    now = time.time_ns()

    def add(kind: ObligationKind, obligation_id: str, name: str, opened: int | None) -> None:
        sequence = -1 - len(added)  # never a ledger sequence
        added.append(Obligation(kind, obligation_id, name, conversation, sequence, opened or now))

    latest: dict[tuple[str, str], Obligation] = {(r.kind, r.id): r for r in records}
    for reading in readings:
        source = reading.source
        if reading.error is not None:
            add("background_task", f"{source}:unreadable", f"{source} (unreadable)", None)
            continue
        calls = reading.calls
        if calls is not None:
            for pair in reconcile_calls(calls, records, only=("answered", "severed")):
                record = pair.record
                if pair.state == "answered":
                    disagreements.append(
                        Disagreement(source, "ledger_open", record.kind, record.id, record.name)
                    )
                elif pair.state == "severed":
                    disagreements.append(
                        Disagreement(source, "source_open", record.kind, record.id, record.name)
                    )
                    add("tool_call", record.id, record.name, None)
            for call in unpaired_calls(calls, records):
                if call.result is None:
                    disagreements.append(
                        Disagreement(source, "source_open", "tool_call", call.id, call.name)
                    )
                    add("tool_call", call.id, call.name, None)
        for pending in reading.pending:
            known = latest.get((pending.kind, pending.id))
            if known is not None and known.status not in _ANSWERED:
                continue  # open in the ledger too, or discharged there
            disagreements.append(
                Disagreement(source, "source_open", pending.kind, pending.id, pending.name)
            )
            add(pending.kind, pending.id, pending.name, pending.opened_at_ns)
    if not added:
        return Combined(snapshot, tuple(disagreements), ())
    combined = replace(snapshot, obligations=records + tuple(added))
    return Combined(combined, tuple(disagreements), tuple(added))


class ObligationSources:
    """The sources a gate consults, read just before each decision and combined with the
    ledger; each disagreement counted once on `metrics` (the global meter provider's
    instruments when None)."""

    def __init__(
        self,
        sources: Iterable[ObligationSource],
        *,
        metrics: CompactionMetrics | None = None,
    ) -> None:
        """Consult `sources` in order.

        Raises:
            TypeError: one of `sources` does not keep the `ObligationSource` protocol.
        """
        self.sources: tuple[ObligationSource, ...] = tuple(sources)
        for position, source in enumerate(self.sources):
            if not isinstance(source, ObligationSource):
                raise TypeError(
                    f"sources[{position}]: {type(source).__name__} is not an obligation "
                    "source (it needs a name, read() and aread())"
                )
        self._metrics = metrics
        self._counted: OrderedDict[tuple[str, str, str, str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.sources)

    def read(self, conversation_id: str) -> list[SourceReading]:
        """Every source's reading for `conversation_id`; a failure is a reading with
        ``error`` (logged, never raised)."""
        readings: list[SourceReading] = []
        for source in self.sources:
            try:
                readings.append(source.read(conversation_id))
            except Exception as exc:
                readings.append(_failed(source, conversation_id, exc))
        return readings

    async def aread(self, conversation_id: str) -> list[SourceReading]:
        """`read` on the running event loop."""
        readings: list[SourceReading] = []
        for source in self.sources:
            try:
                readings.append(await source.aread(conversation_id))
            except Exception as exc:
                readings.append(_failed(source, conversation_id, exc))
        return readings

    def combine(self, snapshot: LedgerSnapshot, readings: Sequence[SourceReading]) -> Combined:
        """`combine`, counting the disagreements not counted before."""
        combined = combine(snapshot, readings)
        if combined.disagreements:
            self._count(snapshot.conversation_id, combined.disagreements)
        return combined

    def _count(self, conversation: str, disagreements: Sequence[Disagreement]) -> None:
        fresh: list[Disagreement] = []
        with self._lock:
            for d in disagreements:
                key = (conversation, d.source, d.direction, d.kind, d.id)
                if key in self._counted:
                    continue
                self._counted[key] = None
                if len(self._counted) > _REMEMBERED:
                    self._counted.popitem(last=False)
                fresh.append(d)
        if not fresh:
            return
        try:
            metrics = self._metrics
            if metrics is None:
                from otel_compaction.telemetry.metrics import CompactionMetrics

                metrics = self._metrics = CompactionMetrics()
            for d in fresh:
                metrics.record_disagreement(d.source, d.direction, d.kind)
        except Exception:
            _log.exception("otel-compaction: counting source disagreements failed")
