"""Cost of recording one tool call and its result, as a ratio to two bare SDK spans.

What it measures: `ToolCallRecorder.call(...)` followed by `ToolCallHandle.result(...)`: the
ledger's open and resolve, the ``execute_tool`` span living from call to result, the
``tool_result`` span linked to it, with content capture off (the default). The yardstick is
creating and ending two bare SDK spans carrying the same attributes, in the same run, on tracer
providers configured alike (default sampler, no exporter, so that what is measured is the
instrumentation and not an exporter). The recorder is also timed as `configure()` wires it,
with the metrics on: one SDK histogram record per call, the ``compaction.obligation.age`` of
its resolution (a tool call's age is its duration; the ledger's subscription records it, with
the obligation's kind and status and the tool's name); the open obligations are observed at
collection time and cost nothing per call. The yardstick is also timed with the span link,
and with the link and that histogram record (same attributes, on a meter provider configured
alike), to show where the cost goes: the latter is the SDK's own price for what the recorder
emits, and the recorder's own work (ledger, handles, guards) is what it costs beyond it.

Memory per open obligation is measured with tracemalloc: the bytes held while many calls are
open, divided by their number, for the ledger alone and for the recorder (ledger record,
handle, open span and the recorder's index).

Every time is the process's CPU time (`time.process_time`, so that a neighbour taking the CPU
does not count), the minimum over several rounds, and only ratios between numbers of one run are
judged. Aim: a recorded call plus its result within 1.5x of the two bare spans; both the
recorder alone and the recorder with metrics are judged. The exit status is 0 whatever the
result: this is a report.

Times on a shared machine swing by half; ``--instructions`` counts instructions instead, which
repeat to a few parts in ten thousand: each stage runs under valgrind's callgrind twice, with a
fixed ``PYTHONHASHSEED``, after one warm-up pass, once with one measured pass and once with
three, and the difference divided by the calls of two passes is the count per call (the start
of the interpreter and the warm-up cancel out). It needs ``valgrind`` and takes a few minutes.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from time import process_time, time_ns

from _report import each_round, keep_best, verdict
from opentelemetry.metrics import Histogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Link, SpanKind

from otel_compaction import ToolCallRecorder
from otel_compaction.ledger import ObligationLedger
from otel_compaction.recorder import ToolCallHandle
from otel_compaction.telemetry import semconv as sc
from otel_compaction.telemetry.metrics import CompactionMetrics

RATIO_AIM = 1.5
_CALLGRIND = ("--tool=callgrind", "--callgrind-out-file=/dev/null")
CONVERSATION = "conv-bench"
TOOL = "search"
RESULT = "2 flights found"


def _ids(count: int) -> list[str]:
    return [f"call_{i}" for i in range(count)]


def _tool_attributes(call_id: str, key: str, value: str) -> dict[str, str]:
    """The attributes the recorder puts on the spans of call `call_id`, with `key` set to
    `value`."""
    return {
        sc.GEN_AI_OPERATION_NAME: sc.EXECUTE_TOOL,
        sc.GEN_AI_TOOL_NAME: TOOL,
        sc.GEN_AI_TOOL_CALL_ID: call_id,
        key: value,
        sc.GEN_AI_CONVERSATION_ID: CONVERSATION,
    }


def _bare_spans(
    provider: TracerProvider, *, link: bool, age: Histogram | None = None
) -> Callable[[Sequence[str]], None]:
    """Two spans per id with the attributes the recorder puts on its call and result spans;
    with `age`, also the one histogram record the recorder's metrics make per call, with the
    same attributes."""
    tracer = provider.get_tracer("bare-sdk")
    call_name = f"{sc.EXECUTE_TOOL} {TOOL}"
    result_name = f"{sc.TOOL_RESULT_SPAN} {TOOL}"
    internal = SpanKind.INTERNAL
    age_attributes = {
        sc.OBLIGATION_KIND: "tool_call",
        sc.OBLIGATION_STATUS: "result",
        sc.GEN_AI_TOOL_NAME: TOOL,
    }

    def run(ids: Sequence[str]) -> None:
        for call_id in ids:
            opened = time_ns()
            call = tracer.start_span(
                call_name,
                kind=internal,
                attributes=_tool_attributes(call_id, sc.GEN_AI_TOOL_TYPE, "function"),
            )
            links = (
                [Link(call.get_span_context(), {sc.GEN_AI_TOOL_CALL_ID: call_id})] if link else None
            )
            result = tracer.start_span(
                result_name,
                kind=internal,
                attributes=_tool_attributes(call_id, sc.OBLIGATION_STATUS, "result"),
                links=links,
            )
            call.set_attribute(sc.OBLIGATION_STATUS, "result")
            if age is not None:
                age.record((time_ns() - opened) / 1e9, age_attributes)
            result.end()
            call.end()

    return run


def _recorder(*, with_metrics: bool) -> tuple[ToolCallRecorder, MeterProvider]:
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    metrics = CompactionMetrics(meter_provider) if with_metrics else None
    recorder = ToolCallRecorder(
        ledger=ObligationLedger(),
        tracer_provider=TracerProvider(),
        metrics=metrics,
        capture_content=False,
    )
    return recorder, meter_provider


def _recorded(recorder: ToolCallRecorder) -> Callable[[Sequence[str]], None]:
    def run(ids: Sequence[str]) -> None:
        call = recorder.call
        for call_id in ids:
            call(TOOL, call_id, conversation_id=CONVERSATION).result(RESULT)

    return run


def _stages() -> tuple[dict[str, Callable[[Sequence[str]], None]], list[MeterProvider]]:
    """Every stage by name, and the meter providers to shut down after them."""
    full, full_meters = _recorder(with_metrics=True)
    spans_only, spans_meters = _recorder(with_metrics=False)
    bare_meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    bare_age = CompactionMetrics(bare_meters).obligation_age
    stages: dict[str, Callable[[Sequence[str]], None]] = {
        "bare": _bare_spans(TracerProvider(), link=False),
        "bare + link": _bare_spans(TracerProvider(), link=True),
        "bare + link + histogram": _bare_spans(TracerProvider(), link=True, age=bare_age),
        "recorder": _recorded(spans_only),
        "recorder + metrics": _recorded(full),
    }
    return stages, [full_meters, spans_meters, bare_meters]


def _time(stage: Callable[[Sequence[str]], None], ids: Sequence[str]) -> float:
    """CPU seconds per call of one pass of `stage` over `ids`."""
    gc.collect()
    start = process_time()
    stage(ids)
    return (process_time() - start) / len(ids)


def _run_passes(name: str, passes: int, calls: int) -> None:
    """One warm-up pass of stage `name`, then `passes` passes: what callgrind counts."""
    stages, _ = _stages()
    ids = _ids(calls)
    stages[name](ids)
    gc.collect()
    for _ in range(passes):
        stages[name](ids)


def _instructions(names: Sequence[str], calls: int) -> dict[str, float] | None:
    """Instructions per call of each stage (see the module's docstring); None without
    valgrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    counted: dict[str, float] = {}
    for name in names:
        totals = []
        for passes in (1, 3):
            print(f"  counting {name}, {passes} pass(es)", file=sys.stderr, flush=True)
            stage = ["--count", name, "--passes", str(passes), "--calls", str(calls)]
            completed = subprocess.run(
                [valgrind, *_CALLGRIND, sys.executable, __file__, *stage],
                env=environment,
                capture_output=True,
                text=True,
                check=True,
            )
            found = re.search(r"Collected : (\d+)", completed.stderr)
            if found is None:
                raise RuntimeError(f"callgrind printed no count for {name}: {completed.stderr}")
            totals.append(int(found[1]))
        counted[name] = (totals[1] - totals[0]) / (2 * calls)
    return counted


def _ratio_table(
    title: str, unit: str, figures: dict[str, float], scale: float, digits: int
) -> None:
    """A table of `figures` in `unit` (each times `scale`, with `digits` decimals) and their
    ratio to ``bare``."""
    bare = figures["bare"]
    print()
    print(title)
    print()
    header = f"{'stage':<24}{unit:>14}{'ratio to bare':>15}"
    print(header)
    print("-" * len(header))
    for name, figure in figures.items():
        print(f"{name:<24}{figure * scale:>14,.{digits}f}{figure / bare:>14.2f}x")
    print()
    for name, what in (
        ("recorder", "Recorder (ledger, call span, linked result span)"),
        ("recorder + metrics", "Recorder with metrics (as configure() wires it)"),
    ):
        ratio = figures[name] / bare
        print(
            f"{what} vs two bare spans: {ratio:.2f}x  "
            f"(aim <={RATIO_AIM:g}x)  {verdict(ratio <= RATIO_AIM)}"
        )
    metric_cost = figures["recorder + metrics"] - figures["recorder"]
    print(f"  the histogram record with metrics on adds {metric_cost * scale:,.{digits}f} {unit}")
    own = figures["recorder + metrics"] - figures["bare + link + histogram"]
    print(
        f"  beyond what the SDK itself costs for the same spans, link and histogram record: "
        f"{own * scale:,.{digits}f} {unit}"
    )


def _bytes_per_open(count: int, open_one: Callable[[str], object]) -> float:
    """Bytes held per open obligation while `count` of them are open."""
    ids = _ids(count)
    held: list[object] = []
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        held.extend(open_one(call_id) for call_id in ids)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The list holding the handles is the caller's, not the obligation's.
    per_open = (after - before - sys.getsizeof(held)) / count
    for item in held:
        if isinstance(item, ToolCallHandle):
            item.result()
    return per_open


def _memory(count: int) -> dict[str, float]:
    ledger = ObligationLedger(max_records_per_conversation=count + 1, max_open=count + 1)

    def ledger_open(call_id: str) -> object:
        return ledger.open(CONVERSATION, "tool_call", call_id, name=TOOL)

    recorder = ToolCallRecorder(
        ledger=ObligationLedger(max_records_per_conversation=count + 1, max_open=count + 1),
        tracer_provider=TracerProvider(),
        capture_content=False,
    )

    def recorder_open(call_id: str) -> object:
        return recorder.call(TOOL, call_id, conversation_id=CONVERSATION)

    tracer = TracerProvider().get_tracer("bare-sdk")

    def bare_open(call_id: str) -> object:
        return tracer.start_span(
            f"{sc.EXECUTE_TOOL} {TOOL}",
            attributes=_tool_attributes(call_id, sc.GEN_AI_TOOL_TYPE, "function"),
        )

    return {
        "ledger record": _bytes_per_open(count, ledger_open),
        "recorder call": _bytes_per_open(count, recorder_open),
        "bare open span": _bytes_per_open(count, bare_open),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the report; always returns 0."""
    parser = argparse.ArgumentParser(
        description="Time recording a tool call plus its result against two bare SDK spans "
        "with the same attributes, and measure memory per open obligation (ratios measured "
        "in one run; the exit status is always 0).",
    )
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    parser.add_argument("--calls", type=int, help="calls per round (default 20,000, quick 3,000)")
    parser.add_argument("--rounds", type=int, help="rounds per measurement (default 7, quick 3)")
    parser.add_argument(
        "--open", type=int, help="open obligations for the memory measure (default 10,000)"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per call under callgrind instead of timing (needs valgrind; "
        "calls default to 1,000)",
    )
    parser.add_argument("--count", help=argparse.SUPPRESS)  # one stage, run under callgrind
    parser.add_argument("--passes", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.count:
        _run_passes(args.count, args.passes, args.calls)
        return 0
    if args.instructions:
        calls = args.calls or 1_000
        names = list(_stages()[0])
        counted = _instructions(names, calls)
        if counted is None:
            print("valgrind is not installed: no instruction counts (apt-get install valgrind)")
        else:
            _ratio_table(
                f"Recording one tool call plus its result: instructions per call "
                f"(callgrind, three passes less one of {calls:,} calls)",
                "instructions",
                counted,
                1,
                0,
            )
        return 0
    calls = args.calls or (3_000 if args.quick else 20_000)
    rounds = args.rounds or (3 if args.quick else 7)
    open_count = args.open or (2_000 if args.quick else 10_000)

    stages, meter_providers = _stages()
    best: dict[str, float] = {}
    for _ in each_round(rounds):
        ids = _ids(calls)
        for name, stage in stages.items():
            keep_best(best, name, _time(stage, ids))
    for provider in meter_providers:
        provider.shutdown()
    memory = _memory(open_count)

    _ratio_table(
        f"Recording one tool call plus its result, min of {rounds} rounds of {calls:,} calls "
        "(CPU time)\nbare = two SDK spans (start + end) with the same attributes; no exporter "
        "anywhere",
        "us per call",
        best,
        1e6,
        2,
    )
    print()
    print(f"Memory per open obligation (tracemalloc, {open_count:,} open at once)")
    for name, size in memory.items():
        print(f"  {name:<18}{size:>9,.0f} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
