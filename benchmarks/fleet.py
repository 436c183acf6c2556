"""The ledger on PostgreSQL against the in-memory ledger: decision latency and throughput.

What it measures, against a real PostgreSQL server it starts on loopback (Debian's
``postgresql`` binaries, as the tests do; ``--url`` uses an existing database instead, whose
``otel_compaction_*`` tables it writes to):

1. **Decision latency.** One gate decision on a synthetic transcript (``--messages``, default
   200, with its tool calls open in the ledger as they are in the transcript): the ledger's
   snapshot, the analysis against it (incremental: the transcript does not change between
   decisions) and the evaluation of the span a framework asks for when its context fills.
   Timed with the in-memory ledger and with the PostgreSQL ledger, in the same run, rounds
   interleaved; and once more on PostgreSQL under the conversation's decision lock (the
   advisory transaction lock a compaction holds, with the check of what was compacted). The
   figures are the median of each round's decisions, the best round kept; only the ratios
   are judged.
2. **Throughput.** Opening and resolving tool calls from 8 worker processes (``--workers``)
   at once, each on a conversation of its own, each operation one round trip: operations per
   second over the wall time of the slowest worker, beside one worker alone and the in-memory
   ledger in one process.

No aim is judged: the figures are reported, the ratios beside them (the PostgreSQL ledger
adds round trips to a local server, a fixed cost per decision, not a cost per message). The
exit status is 0: this is a report.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from _corpus import request, synthetic_messages
from _report import each_round

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fleet_worker import FleetWorker  # the tests' worker process
from postgres_server import PostgresServer  # the tests' loopback server

from otel_compaction import CompactionGate
from otel_compaction.ledger import ObligationLedger
from otel_compaction.stores.postgres import PostgresLedger

CONVERSATION = "bench-conversation"


def _open_calls(ledger: ObligationLedger, messages: Sequence[Mapping[str, Any]]) -> int:
    """Open in `ledger` every call of `messages` and resolve those the transcript answers."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    opened = 0
    for message in messages:
        for call in message.get("tool_calls") or ():
            ledger.open(CONVERSATION, "tool_call", call["id"], name=call["function"]["name"])
            opened += 1
            if call["id"] in answered:
                ledger.resolve(CONVERSATION, call["id"], "result")
    return opened


def _decider(
    ledger: ObligationLedger, messages: list[dict[str, Any]], span: tuple[int, int], locked: bool
) -> Callable[[], str]:
    gate = CompactionGate("default", ledger=ledger)

    def decide() -> str:
        return gate.evaluate(
            messages, *span, conversation_id=CONVERSATION, raise_on_refuse=False
        ).action

    if not locked:
        return decide

    def decide_locked() -> str:
        with ledger.decision_lock(CONVERSATION) as turn:
            turn.compacted("a transcript state")
            return decide()

    return decide_locked


def _median_seconds(decide: Callable[[], str], count: int) -> float:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        decide()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _throughput(url: str, workers: int, calls: int, workdir: Path) -> tuple[float, list[float]]:
    """Operations per second of `workers` processes opening and resolving `calls` tool calls
    each at once, and each worker's own seconds."""
    environment = {"OTEL_COMPACTION_LEDGER_URL": url, "OTEL_COMPACTION_ARCHIVE_URL": url}
    fleet = [
        FleetWorker(workdir / f"w{n}", environment, name=f"worker-{n}") for n in range(workers)
    ]
    try:
        for worker in fleet:  # connections made, tables there: only the churn is timed
            worker.call({"op": "churn", "conversation": f"warm-{worker.name}", "count": 5})
        started = time.perf_counter()
        for n, worker in enumerate(fleet):
            worker.send({"op": "churn", "conversation": f"churn-{n}", "count": calls})
        own = [float(worker.receive()) for worker in fleet]
        wall = time.perf_counter() - started
    finally:
        for worker in fleet:
            worker.stop()
    return 2 * calls * workers / wall, own


def _memory_throughput(calls: int) -> float:
    ledger = ObligationLedger(max_records_per_conversation=calls + 1)
    started = time.perf_counter()
    for n in range(calls):
        ledger.open("churn", "tool_call", f"call_{n}", name="bench")
        ledger.resolve("churn", f"call_{n}", "result")
    return 2 * calls / (time.perf_counter() - started)


def run(url: str, args: argparse.Namespace, workdir: Path) -> None:
    """Measure against the database at `url` and print the report."""
    messages = synthetic_messages(args.messages)
    chars = [len(str(m)) for m in messages]
    span = request(chars, 1) or (1, len(messages))
    memory = ObligationLedger()
    shared = PostgresLedger(url, owner="benchmark")
    try:
        shared.forget(CONVERSATION)
        opened = _open_calls(memory, messages)
        _open_calls(shared, messages)
        deciders = {
            "memory": _decider(memory, messages, span, locked=False),
            "postgres": _decider(shared, messages, span, locked=False),
            "postgres, locked": _decider(shared, messages, span, locked=True),
        }
        actions = {name: decide() for name, decide in deciders.items()}  # warm-up, same answer
        print(f"  decisions: {actions}", file=sys.stderr, flush=True)
        best: dict[str, float] = {}
        for _ in each_round(args.rounds):
            for name, decide in deciders.items():
                seconds = _median_seconds(decide, args.decisions)
                best[name] = min(seconds, best.get(name, seconds))
    finally:
        shared.close()

    print("  throughput: 1 worker", file=sys.stderr, flush=True)
    alone, _ = _throughput(url, 1, args.calls, workdir)
    print(f"  throughput: {args.workers} workers", file=sys.stderr, flush=True)
    together, own = _throughput(url, args.workers, args.calls, workdir)
    in_memory = _memory_throughput(args.calls)

    print()
    print(
        f"Decision latency, {len(messages):,} messages ({opened} tool calls in the ledger), "
        f"span {span[0]}:{span[1]}, action {actions['memory']}; median of "
        f"{args.decisions} decisions, best of {args.rounds} rounds"
    )
    print(f"{'ledger':<20}{'ms':>10}{'ratio':>9}")
    print("-" * 39)
    for name, seconds in best.items():
        print(f"{name:<20}{seconds * 1e3:>10.3f}{seconds / best['memory']:>8.2f}x")
    print()
    print(
        f"Opening and resolving tool calls: {args.calls:,} calls per worker, each on its own "
        "conversation (2 operations a call)"
    )
    print(f"{'':<24}{'operations/s':>14}")
    print("-" * 38)
    print(f"{'in memory, 1 process':<24}{in_memory:>14,.0f}")
    print(f"{'postgres, 1 worker':<24}{alone:>14,.0f}")
    print(f"{f'postgres, {args.workers} workers':<24}{together:>14,.0f}")
    print(
        f"per worker of {args.workers}: {min(own):.2f}-{max(own):.2f} s for "
        f"{2 * args.calls:,} operations"
    )
    print()
    for name in ("postgres", "postgres, locked"):
        added = (best[name] - best["memory"]) * 1e3
        print(
            f"decision, {name} / memory: {best[name] / best['memory']:.2f}x "
            f"({added:+.3f} ms a decision)"
        )
    print(f"throughput, {args.workers} workers / 1 worker: {together / alone:.2f}x")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the report; always returns 0."""
    parser = argparse.ArgumentParser(
        description="Decision latency with the PostgreSQL ledger against the in-memory one "
        "(same run, the ratio judged), and the throughput of opening and resolving "
        "obligations from several worker processes (the exit status is always 0).",
    )
    parser.add_argument("--url", help="an existing PostgreSQL database (default: start one)")
    parser.add_argument("--messages", type=int, default=200, help="transcript length (200)")
    parser.add_argument("--decisions", type=int, default=200, help="decisions a round (200)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (5)")
    parser.add_argument("--workers", type=int, default=8, help="worker processes (8)")
    parser.add_argument("--calls", type=int, default=2_000, help="calls per worker (2,000)")
    parser.add_argument("--quick", action="store_true", help="fewer decisions, rounds, calls")
    args = parser.parse_args(argv)
    if args.quick:
        args.decisions, args.rounds, args.calls = 50, 2, 300
    with TemporaryDirectory(prefix="otel-compaction-fleet-") as scratch:
        if args.url:
            run(args.url, args, Path(scratch))
            return 0
        print("  starting PostgreSQL on loopback", file=sys.stderr, flush=True)
        with PostgresServer() as server:
            run(server.create_database("fleet_benchmark"), args, Path(scratch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
