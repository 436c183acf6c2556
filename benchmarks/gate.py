"""Cost of one gate decision per message, as a ratio to the pairing floor of the same run.

What is timed, per transcript: parsing the messages into a `Transcript`, analysing it under
the default policy and evaluating one span, the request to compact the oldest half of the
characters after the protected head (what a framework asks for when its context fills). The
yardstick is the floor: a bare single pass over the same messages that pairs each result with
its call through per-id deques and does nothing else.

Workloads: the real transcript corpus (every transcript, timed together) and a deterministic
synthetic transcript of 100,000 messages. Growth with length compares the cost per message of
that transcript in one piece with the cost per message of the same messages cut into
transcripts of 1,000: the data are identical, only the transcript length differs.

Three more columns split the gate's cost: ``parse`` alone; ``read``, the parse plus one pass of
the identifier run pattern over every text (message text, call arguments, result text), with no
verdicts, bindings or rules: what reading the texts once costs in this interpreter, the least any
pattern scan can cost; and ``bare``, the gate under the default policy with its detection
patterns removed (pairing, obligations, closed cuts, the decision). What ``gate`` adds on top of
``bare`` is the policy's pattern scanning.

Every figure is the process's CPU time (`time.process_time`), the minimum over several rounds
(rounds interleave the stages, so a noisy neighbour slows all of them alike), and only ratios
between figures of one run are judged: absolute times on a shared machine mean little. Aims:
the gate within 50x of the floor, and the cost per message at 100,000 messages within 1.5x of
the cost at 1,000. The exit status is 0 whatever the outcome: this is a report.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from time import process_time
from typing import Any

from _corpus import corpus_dir, load_corpus, pair_floor, request, synthetic_messages
from _report import each_round, keep_best, verdict

from otel_compaction import CompactionGate, Policy
from otel_compaction.identifiers import runs
from otel_compaction.transcript import Transcript

RATIO_AIM = 50.0
GROWTH_AIM = 1.5
SHORT = 1_000
STAGES = ("floor", "parse", "read", "bare", "gate")

Messages = Sequence[Mapping[str, Any]]
Stage = Callable[["Job"], object]


@dataclass(frozen=True, slots=True)
class Job:
    """One transcript and the span requested for it."""

    messages: Messages
    span: tuple[int, int]


@dataclass(slots=True)
class Workload:
    """Transcripts timed together, and the best seconds per pass of each stage."""

    name: str
    jobs: list[Job]
    best: dict[str, float] = field(default_factory=dict)

    @property
    def messages(self) -> int:
        """Messages in the workload."""
        return sum(len(job.messages) for job in self.jobs)

    def per_message(self, stage: str) -> float:
        """Best seconds per message of `stage`."""
        return self.best[stage] / self.messages

    def ratio(self, stage: str) -> float:
        """`stage` per message over the floor per message."""
        return self.per_message(stage) / self.per_message("floor")


def jobs_for(transcripts: Sequence[Messages], gate: CompactionGate) -> list[Job]:
    """A job for each transcript with anything to compact after its protected head."""
    jobs: list[Job] = []
    for messages in transcripts:
        analysis = gate.analyse(messages)
        span = request([e.chars for e in analysis.transcript.entries], analysis.head)
        if span is not None:
            jobs.append(Job(messages, span))
    return jobs


def without_patterns(policy: Policy) -> Policy:
    """`policy` with every detection pattern removed (and empty results not negative)."""
    data = policy.model_dump()
    data["name"] = f"{policy.name} without patterns"
    data["patterns"] = {"null_result": {"empty": False}}
    return Policy.model_validate(data)


def stages(default: CompactionGate, bare: CompactionGate) -> dict[str, Stage]:
    """The timed stages, by name."""

    def floor(job: Job) -> object:
        return pair_floor(job.messages)

    def parse(job: Job) -> object:
        return Transcript.parse(job.messages)

    def read(job: Job) -> object:
        transcript = Transcript.parse(job.messages)
        texts = [e.text for e in transcript.entries]
        texts += [c.arguments for c in transcript.calls]
        texts += [r.text for r in transcript.results]
        return [runs(text) for text in texts if text]

    def decide(gate: CompactionGate) -> Stage:
        def run(job: Job) -> object:
            analysis = gate.analyse(job.messages)
            return gate.evaluate(analysis, *job.span, raise_on_refuse=False)

        return run

    return {
        "floor": floor, "parse": parse, "read": read, "bare": decide(bare), "gate": decide(default)
    }  # fmt: skip


def time_pass(jobs: Sequence[Job], stage: Stage, min_seconds: float) -> float:
    """Seconds for one pass of `stage` over `jobs`, repeating passes for at least
    `min_seconds` so that short stages rise above the timer's noise."""
    gc.collect()
    passes = 0
    start = process_time()
    while True:
        for job in jobs:
            stage(job)
        passes += 1
        elapsed = process_time() - start
        if elapsed >= min_seconds:
            return elapsed / passes


def measure(
    workloads: Sequence[Workload],
    timed: Mapping[str, Stage],
    rounds: int,
    min_seconds: float,
) -> None:
    """Fill each workload's best time per stage, over `rounds` interleaved rounds."""
    for _ in each_round(rounds):
        for workload in workloads:
            for name, stage in timed.items():
                keep_best(workload.best, name, time_pass(workload.jobs, stage, min_seconds))


def report(workloads: Sequence[Workload], short: Workload, long: Workload, rounds: int) -> None:
    """Print the table, the aims and the verdicts."""
    print(
        "Gate cost per message: parse + analyse + evaluate the oldest-half request, "
        f"default policy; min of {rounds} rounds"
    )
    print(
        "floor = one bare pass pairing calls with results; bare = the gate with the "
        "policy's detection patterns removed"
    )
    print()
    header = (
        f"{'workload':<28}{'messages':>9}"
        + "".join(f"{s:>8}" for s in STAGES)
        + "".join(f"{s + '/floor':>13}" for s in STAGES[1:])
        + f"{'aim':>8}  result"
    )
    print(f"{'':<37}{'--- us per message ---':^40}{'--- ratio to the floor ---':^52}")
    print(header)
    print("-" * len(header))
    for w in workloads:
        print(
            f"{w.name:<28}{w.messages:>9,}"
            + "".join(f"{w.per_message(s) * 1e6:>8.2f}" for s in STAGES)
            + "".join(f"{w.ratio(s):>12.1f}x" for s in STAGES[1:])
            + f"{'<=' + format(RATIO_AIM, 'g') + 'x':>8}  {verdict(w.ratio('gate') <= RATIO_AIM)}"
        )
    print()
    growth = {s: long.per_message(s) / short.per_message(s) for s in STAGES}
    print(
        f"Growth, gate per message at {long.messages:,} messages in one transcript vs the same "
        f"messages in transcripts of {SHORT:,}: {growth['gate']:.2f}x  "
        f"(aim <={GROWTH_AIM:g}x)  {verdict(growth['gate'] <= GROWTH_AIM)}"
    )
    print(
        "  by stage: " + ", ".join(f"{s} {growth[s]:.2f}x" for s in STAGES) + "  "
        "(one long transcript keeps all its objects alive, so it also pays more for Python's "
        "garbage collector)"
    )
    gate = [w for w in workloads if w is not short]
    worst = max(gate, key=lambda w: w.ratio("gate"))
    share = 1 - worst.per_message("bare") / worst.per_message("gate")
    print(
        f"Pattern scanning (gate - bare) is {share:.0%} of the gate's cost on the {worst.name}; "
        f"the structural work (bare) is {worst.ratio('bare'):.1f}x the floor there."
    )
    for w in gate:
        left = RATIO_AIM * w.per_message("floor") - w.per_message("read")
        print(
            f"On the {w.name}, reading the texts once (read) is {w.ratio('read'):.1f}x the floor: "
            f"the aim leaves {left * 1e6:.2f} us a message for the verdicts, bindings, rules and "
            f"decision, which cost {(w.per_message('gate') - w.per_message('read')) * 1e6:.2f} us."
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the report; always returns 0."""
    parser = argparse.ArgumentParser(
        description="Time the compaction gate per message against the pairing floor "
        "(ratios measured in one run; the exit status is always 0).",
    )
    parser.add_argument(
        "--quick", action="store_true", help="3 rounds and a 10,000-message synthetic transcript"
    )
    parser.add_argument("--rounds", type=int, help="rounds per measurement (default 5; quick 3)")
    parser.add_argument(
        "--messages", type=int, help="synthetic transcript length (default 100,000; quick 10,000)"
    )
    parser.add_argument("--seed", type=int, default=1729, help="synthetic transcript seed")
    parser.add_argument("--corpus", help="corpus directory (default: the one the tests read)")
    args = parser.parse_args(argv)
    rounds = max(1, args.rounds or (3 if args.quick else 5))
    size = max(SHORT, args.messages or (10_000 if args.quick else 100_000))
    min_seconds = 0.05 if args.quick else 0.2

    # One full analysis each time: the incremental state would turn repeats into lookups
    # (benchmarks/agent_loop.py measures that).
    default = CompactionGate("default", incremental=False)
    bare = CompactionGate(without_patterns(default.policy), incremental=False)
    workloads: list[Workload] = []
    directory = corpus_dir(args.corpus)
    records = load_corpus(directory) if directory.is_dir() else []
    if records:
        jobs = jobs_for([r.messages for r in records], default)
        workloads.append(Workload(f"corpus ({len(jobs)} transcripts)", jobs))
    else:
        print(f"note: no transcript corpus at {directory}; synthetic workloads only\n")
    print(f"generating {size:,} synthetic messages (seed {args.seed})", file=sys.stderr)
    synthetic = synthetic_messages(size, args.seed)
    pieces = [synthetic[i : i + SHORT] for i in range(0, size, SHORT)]
    short = Workload(f"synthetic ({len(pieces)} x {SHORT:,})", jobs_for(pieces, default))
    long = Workload(f"synthetic (1 x {size:,})", jobs_for([synthetic], default))
    workloads += [short, long]

    measure(workloads, stages(default, bare), rounds, min_seconds)
    report(workloads, short, long, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
