"""Memory held by tool calls that are never answered: flat once the ledger's bound is reached.

What it measures: 100,000 tool calls (``--calls``) spread round-robin over 1,000 conversations
(``--conversations``), none of them ever resolved, through the recorder `configure()` builds on
SDK tracer and meter providers (no exporter, so that what is held is the instrumentation's), its
ledger with the default bounds: at most 10,000 open obligations, 1,000 conversations and 1,000
records per conversation. Past the bound the ledger drops the oldest open call and the recorder
ends its span as abandoned (``evicted``) and lets it go.

After 10,000, 50,000 and 100,000 calls (a tenth, half and all of ``--calls``, and the bound
itself when a tenth is below it) it reads the memory held, in two ways, each in a fresh
process of its own so that neither disturbs the other: the bytes Python allocated and still
holds (tracemalloc), and the growth of the resident set (``/proc/self/statm``) since just
before the first call. The same runs are made with the ledger alone (its records, no spans),
and, as the yardstick of what the bound saves, with bounds above the number of calls: that run
also gives the bytes one open call holds.

Memory is judged flat when what is held after the last call is within 1.05x of what was held
halfway, both measured past the bound in the same run. (Between the bound and halfway it still
grows a little, a few percent for the recorder and more for the ledger alone, whose figures are
small: the hash tables that drop a record for each new one settle at their working size, slack
included, and then keep it.) The exit status is 0 whatever the result: this is a report.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

from _report import verdict
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from otel_compaction import configure
from otel_compaction.ledger import ObligationLedger

FLAT_AIM = 1.05
DEFAULTS = ObligationLedger()  # whose bounds are the defaults
TOOL = "search"
MB = 1e6


@dataclass(frozen=True)
class Run:
    """One measured run: what records the calls, under which bounds, measured how."""

    stage: str  # "recorder" or "ledger"
    bounded: bool  # the default bounds, or bounds above the number of calls
    traced: bool  # tracemalloc, or the resident set
    calls: int
    conversations: int
    checkpoints: tuple[int, ...]

    @property
    def label(self) -> str:
        bounds = "default bounds" if self.bounded else "unbounded"
        return f"{self.stage} ({bounds})"


def _ledger(run: Run) -> ObligationLedger:
    if run.bounded:
        return ObligationLedger()
    return ObligationLedger(
        max_conversations=max(run.conversations, DEFAULTS.max_conversations),
        max_records_per_conversation=run.calls,
        max_open=run.calls,
    )


def _opener(run: Run) -> Callable[[str, str], object]:
    """What one never-answered call does: the recorder's `call`, or the ledger's `open`."""
    ledger = _ledger(run)
    if run.stage == "ledger":

        def ledger_open(conversation: str, call_id: str) -> object:
            return ledger.open(conversation, "tool_call", call_id, name=TOOL)

        return ledger_open
    telemetry = configure(
        ledger=ledger,
        tracer_provider=TracerProvider(),
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
        capture_content=False,
        set_global=False,
    )
    recorder = telemetry.recorder

    def recorder_call(conversation: str, call_id: str) -> object:
        return recorder.call(TOOL, call_id, conversation_id=conversation)

    return recorder_call


def _resident_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _held(traced: bool) -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] if traced else _resident_bytes()


def measure(run: Run) -> list[int]:
    """Bytes held at each checkpoint of `run` beyond what was held before its first call."""
    open_one = _opener(run)
    conversations = [f"conv-{n}" for n in range(run.conversations)]
    open_one("warm-up", "call_warm_up")  # lazy imports and first-use caches, not the calls
    if run.traced:
        tracemalloc.start()
    try:
        before = _held(run.traced)
        held: list[int] = []
        made = 0
        for checkpoint in run.checkpoints:
            for number in range(made, checkpoint):
                open_one(conversations[number % run.conversations], f"call_{number}")
            made = checkpoint
            held.append(_held(run.traced) - before)
    finally:
        if run.traced:
            tracemalloc.stop()
    return held


def _in_fresh_process(run: Run) -> list[int]:
    """`measure(run)` in a process of its own: the resident set never shrinks back, so each
    run starts from a clean interpreter."""
    how = "tracemalloc" if run.traced else "resident set"
    print(f"  {run.label}, {how}: {run.calls:,} calls", file=sys.stderr, flush=True)
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(measure, run).result()


def _checkpoints(calls: int) -> tuple[int, ...]:
    return tuple(sorted({calls // 10, min(DEFAULTS.max_open, calls), calls // 2, calls} - {0}))


def _ratio(held: Sequence[int], later: int, earlier: int) -> str:
    """What is held at checkpoint `later` over what is held at `earlier`, as text."""
    if held[earlier] <= 0:
        return "n/a"
    return f"{held[later] / held[earlier]:.2f}x"


def _flat_ratio(checkpoints: Sequence[int], held: Sequence[int]) -> float | None:
    """What is held after the last call over what was held halfway, when both are past the
    bound; None when they are not."""
    if len(held) < 2 or checkpoints[-2] < DEFAULTS.max_open or held[-2] <= 0:
        return None
    return held[-1] / held[-2]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the report; always returns 0."""
    parser = argparse.ArgumentParser(
        description="Memory held by tool calls that are never answered, through the recorder "
        "and the ledger with their default bounds, against the same calls unbounded; judged "
        "flat when the last measure is within 1.05x of the one halfway, both past the bound "
        "(measured in one run; the exit status is always 0).",
    )
    parser.add_argument("--quick", action="store_true", help="30,000 calls, 300 conversations")
    parser.add_argument("--calls", type=int, help="never-answered calls (default 100,000)")
    parser.add_argument("--conversations", type=int, help="conversations (default 1,000)")
    args = parser.parse_args(argv)
    calls = args.calls or (30_000 if args.quick else 100_000)
    conversations = args.conversations or (300 if args.quick else 1_000)
    checkpoints = _checkpoints(calls)

    held: dict[tuple[str, bool, bool], list[int]] = {}
    for stage in ("recorder", "ledger"):
        for bounded in (True, False):
            for traced in (True, False):
                run = Run(stage, bounded, traced, calls, conversations, checkpoints)
                held[stage, bounded, traced] = _in_fresh_process(run)

    print()
    print(
        f"Memory held by {calls:,} tool calls never answered, across {conversations:,} "
        "conversations"
    )
    print(
        f"default bounds: {DEFAULTS.max_open:,} open, {DEFAULTS.max_conversations:,} "
        f"conversations x {DEFAULTS.max_records_per_conversation:,} records; "
        "unbounded: bounds above the number of calls"
    )
    print("recorder: configure() on SDK providers without an exporter; MB = 10^6 bytes")
    first = checkpoints.index(min(DEFAULTS.max_open, calls))
    for traced, what in ((True, "tracemalloc (MB held)"), (False, "resident set (MB added)")):
        print()
        header = (
            f"{what:<28}"
            + "".join(f"{c:>10,}" for c in checkpoints)
            + f"{'half/bound':>12}{'last/half':>11}"
        )
        print(header)
        print("-" * len(header))
        for stage in ("recorder", "ledger"):
            for bounded in (True, False):
                figures = held[stage, bounded, traced]
                label = Run(stage, bounded, traced, calls, conversations, checkpoints).label
                row = "".join(f"{h / MB:>10.1f}" for h in figures)
                settled = _ratio(figures, -2, first)
                flat = _ratio(figures, -1, -2)
                print(f"{label:<28}{row}{settled:>12}{flat:>11}")
    print()
    for stage in ("recorder", "ledger"):
        per_call = held[stage, False, True][first] / checkpoints[first]
        print(f"Bytes per open call, {stage} (tracemalloc, unbounded): {per_call:,.0f}")
    print()
    for stage in ("recorder", "ledger"):
        for traced, what in ((True, "tracemalloc"), (False, "resident set")):
            ratio = _flat_ratio(checkpoints, held[stage, True, traced])
            if ratio is None:
                print(f"{stage}, {what}: the bound was not reached by halfway; nothing to judge")
                continue
            print(
                f"{stage} with the default bounds, {what}: last/half {ratio:.2f}x "
                f"(aim <={FLAT_AIM:g}x, flat)  {verdict(ratio <= FLAT_AIM)}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
