"""An agent loop asking before every model call: total cost against the incremental floor.

The loop: 2,000 turns, each appending one to three real corpus messages (the corpus's
transcripts one after another, one system prompt at the head) to one growing list, then
asking what an agent asks before each model call: ``compactor.should_compact(messages)`` and
``gate.evaluate(messages, 0, n // 2)`` (may the oldest half go?). The budget is large enough
that nothing is compacted, so the transcript grows to about 4,000 messages.

The yardstick is the floor: pairing only the new messages of each turn with their calls, as
the project pairs them (its transcript builder fed each turn's new messages: entries, calls,
results, reused ids, cut closedness), and nothing else. A bare dict pass over the new
messages is shown beside it for scale. The loop's total time is
reported as a ratio to the floor's, both measured in the same run; the per-turn cost at about
100, 1,000 and 4,000 messages shows whether a turn's cost stays flat as the history grows.
A shorter run of the same loop with the incremental analysis switched off (every evaluation
re-reads the whole transcript) shows what the incremental state saves.

With ``--window``, the same turns go through a sliding window instead: a list of at most that
many messages, rebuilt before every call with the system prompt and the newest messages (the
oldest drop as new ones arrive, as a framework trimming its history does), so no call is an
append to the previous one. Its per-turn cost with the incremental state (each message the
window shares with the previous call keeps its parse and its pattern scans) is shown against
the same loop without it, and against a fresh parse of the window alone, for scale.

Times are the process's CPU time (`time.process_time`), so that the time a busy machine gives
to other processes is in no figure. Aims: the loop within 50x of the floor; the per-turn cost
at 4,000 messages within 2x of the cost at 100. The exit status is 0 whatever the outcome:
this is a report.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import random
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from time import process_time
from typing import Any

from _corpus import corpus_dir, load_corpus
from _report import each_round, keep_best, verdict

from otel_compaction import CompactionGate, GuardedCompactor
from otel_compaction.errors import CompactionError
from otel_compaction.transcript import Transcript, TranscriptBuilder

RATIO_AIM = 50.0
FLAT_AIM = 2.0
CHECKPOINTS = (100, 1_000, 4_000)

Messages = list[Mapping[str, Any]]


def conversation(records: Sequence[Sequence[Mapping[str, Any]]]) -> Messages:
    """The corpus's transcripts one after another, keeping only the first system prompt."""
    out: Messages = []
    for messages in records:
        out.extend(m for m in messages if not (out and m.get("role") == "system"))
    return out


def turns(pool: Messages, count: int, seed: int) -> list[Messages]:
    """`count` turns of one to three messages each, taken in order from `pool`."""
    rng = random.Random(seed)
    out: list[Messages] = []
    at = 0
    for _ in range(count):
        take = rng.choice((1, 2, 3))
        if at + take > len(pool):
            break
        out.append(pool[at : at + take])
        at += take
    return out


def floor(loop: list[Messages]) -> float:
    """The project's pairing fed only each turn's new messages: the least an incremental
    gate must do."""
    builder = TranscriptBuilder()
    messages: Messages = []
    started = process_time()
    for new in loop:
        messages.extend(new)
        builder.feed(messages, len(messages) - len(new))
    return process_time() - started


def bare_floor(loop: list[Messages]) -> float:
    """A bare dict pass pairing each turn's new messages, for scale."""
    waiting: dict[str, list[int]] = {}
    index = 0
    started = process_time()
    for new in loop:
        for message in new:
            if message.get("role") == "tool":
                queue = waiting.get(message.get("tool_call_id") or "")
                if queue:
                    queue.pop()
            for call in message.get("tool_calls") or ():
                waiting.setdefault(call["id"], []).append(index)
            index += 1
    return process_time() - started


@dataclass(slots=True)
class Run:
    """One pass of the loop: total seconds and each turn's (messages, seconds)."""

    total: float = 0.0
    per_turn: list[tuple[int, float]] = field(default_factory=list)


def agent_loop(loop: list[Messages], *, incremental: bool) -> Run:
    """The loop with the gate's incremental state on or off."""
    compactor = GuardedCompactor(budget=10**9)
    if not incremental:
        compactor.gate = CompactionGate(
            compactor.policy, ledger=compactor.ledger, incremental=False
        )
    gate = compactor.gate
    messages: Messages = []
    run = Run()
    for new in loop:
        started = process_time()
        messages.extend(new)
        compactor.should_compact(messages)
        with contextlib.suppress(CompactionError):  # early on, a span inside the head
            gate.evaluate(messages, 0, max(1, len(messages) // 2), raise_on_refuse=False)
        seconds = process_time() - started
        run.total += seconds
        run.per_turn.append((len(messages), seconds))
    return run


def window_loop(loop: list[Messages], size: int, *, incremental: bool) -> Run:
    """The loop through a sliding window of at most `size` messages, rebuilt every turn:
    the first message (the system prompt) and the newest ones."""
    compactor = GuardedCompactor(budget=10**9)
    if not incremental:
        compactor.gate = CompactionGate(
            compactor.policy, ledger=compactor.ledger, incremental=False
        )
    gate = compactor.gate
    head, history = loop[0][:1], list(loop[0][1:])
    run = Run()
    for new in loop[1:]:
        started = process_time()
        history = [*history, *new][-(size - 1) :]
        messages = [*head, *history]
        compactor.should_compact(messages)
        with contextlib.suppress(CompactionError):
            gate.evaluate(messages, 0, max(1, len(messages) // 2), raise_on_refuse=False)
        seconds = process_time() - started
        run.total += seconds
        run.per_turn.append((len(messages), seconds))
    return run


def window_parse(loop: list[Messages], size: int) -> float:
    """Seconds of a fresh parse of each turn's window, and nothing else."""
    head, history = loop[0][:1], list(loop[0][1:])
    total = 0.0
    for new in loop[1:]:
        started = process_time()
        history = [*history, *new][-(size - 1) :]
        Transcript.parse([*head, *history])
        total += process_time() - started
    return total


def sliding_window(loop: list[Messages], size: int, rounds: int) -> None:
    """Measure and print the sliding-window loop: with the incremental state, without it, and
    a fresh parse of each window."""
    best: dict[str, float] = {}
    for _ in range(rounds):
        gc.collect()
        keep_best(best, "parse", window_parse(loop, size))
        keep_best(best, "incremental", window_loop(loop, size, incremental=True).total)
        keep_best(best, "without", window_loop(loop, size, incremental=False).total)
    calls = len(loop) - 1
    each = {name: seconds / calls * 1e6 for name, seconds in best.items()}
    print(
        f"\n  sliding window of {size:,} messages, rebuilt before each of {calls:,} calls "
        f"(no call an append), min of {rounds} rounds:"
    )
    print(f"    per call, incremental state     {each['incremental']:10.0f} us")
    print(
        f"    per call, without it            {each['without']:10.0f} us  "
        f"({each['without'] / each['incremental']:.1f}x more)"
    )
    print(f"    a fresh parse of the window     {each['parse']:10.0f} us  (for scale)")


def at_length(run: Run, messages: int) -> float | None:
    """Median seconds of the turns within 5% of `messages` messages."""
    near = [s for n, s in run.per_turn if abs(n - messages) <= max(3, messages * 0.05)]
    return statistics.median(near) if near else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        description="Time should_compact + evaluate before every model call of a growing "
        "agent loop against incremental pairing (ratios measured in one run; exit status 0)."
    )
    parser.add_argument("--turns", type=int, default=2_000, help="turns (default 2,000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument(
        "--full-turns",
        type=int,
        default=300,
        help="turns of the comparison run without incremental state (default 300; 0: none)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=400,
        help="messages in the sliding-window loop (default 400; 0: none)",
    )
    parser.add_argument(
        "--window-turns",
        type=int,
        default=600,
        help="turns of the sliding-window loop (default 600)",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the turn sizes")
    parser.add_argument("--corpus", help="corpus directory (default: the one the tests read)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    records = load_corpus(corpus_dir(args.corpus))
    loop = turns(conversation([r.messages for r in records]), args.turns, args.seed)
    total_messages = sum(len(t) for t in loop)
    print(
        f"{len(loop):,} turns, {total_messages:,} messages from {len(records)} corpus transcripts",
        file=sys.stderr,
    )
    best: dict[str, float] = {}
    runs: dict[str, Run] = {}
    for _ in each_round(args.rounds):
        gc.collect()
        keep_best(best, "floor", floor(loop))
        keep_best(best, "bare", bare_floor(loop))
        run = agent_loop(loop, incremental=True)
        keep_best(best, "incremental", run.total)
        if run.total == best["incremental"]:
            runs["incremental"] = run
    if args.full_turns:
        short = loop[: args.full_turns]
        keep_best(best, "floor-short", min(floor(short) for _ in range(3)))
        full = agent_loop(short, incremental=False)
        keep_best(best, "full-short", full.total)
        inc_short = agent_loop(short, incremental=True)
        keep_best(best, "incremental-short", inc_short.total)

    ratio = best["incremental"] / best["floor"]
    run = runs["incremental"]
    print(
        f"\nAgent loop: {len(loop):,} turns growing to {total_messages:,} messages, "
        f"min of {args.rounds} rounds"
    )
    print("  should_compact + evaluate(oldest half) before every model call, default policy\n")
    print(f"  bare dict pairing, for scale        {best['bare'] * 1e3:10.2f} ms")
    print(f"  floor (pair only the new messages)  {best['floor'] * 1e3:10.2f} ms")
    print(f"  loop, incremental gate              {best['incremental'] * 1e3:10.2f} ms")
    aim = f"aim <={RATIO_AIM:.0f}x  {verdict(ratio <= RATIO_AIM)}"
    print(f"  ratio to the floor                  {ratio:10.1f}x   {aim}")
    if args.full_turns:
        rereads, inc = best["full-short"], best["incremental-short"]
        print(
            f"\n  first {args.full_turns} turns: without incremental state "
            f"{rereads * 1e3:.1f} ms, incremental {inc * 1e3:.1f} ms ({rereads / inc:.1f}x less), "
            f"floor {best['floor-short'] * 1e3:.2f} ms"
        )
    print("\n  per-turn cost as the history grows (median of the turns near each length)")
    costs = {n: at_length(run, n) for n in CHECKPOINTS}
    for n, cost in costs.items():
        shown = f"{cost * 1e6:10.0f} us" if cost is not None else "   (not reached)"
        print(f"    {n:>6,} messages  {shown}")
    first, last = costs[CHECKPOINTS[0]], costs[CHECKPOINTS[-1]]
    if first and last:
        growth = last / first
        aim = f"aim <={FLAT_AIM:.0f}x  {verdict(growth <= FLAT_AIM)}"
        print(f"  at {CHECKPOINTS[-1]:,} vs {CHECKPOINTS[0]:,} messages: {growth:.1f}x   {aim}")
    if args.window:
        sliding_window(loop[: args.window_turns], args.window, min(args.rounds, 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
