"""How practical the gate is on real transcripts: how often it lets a compaction happen, and
how much of what was asked it compacts, against the naive cut it replaces.

For every transcript of the corpus the script requests what a framework does when the context
fills: compact the oldest half of the characters after the protected head (the system prompt,
never compacted), cut at the first message boundary where the running total reaches half.
Characters (``Entry.chars``) stand in for tokens. It then records:

* the gate's action: ``compact``, ``extend`` (compact, with the end moved forward to close a
  pairing break), ``defer`` (an older closed span is compacted instead) or ``refuse``;
* coverage: the requested characters inside the span the gate lets compact, as a fraction of
  the requested characters (0 for a refusal);
* whether the naive cut (the requested end, taken as is) severs a call from its result, i.e.
  the cut is not closed, and whether any span the gate allowed does (it never should).

Tables: the default policy by source with the aims (>= 95% of requests allowed, median
coverage >= 80%), every built-in policy (strict evaluated as archived, ``addressable=True``),
and a sweep over other fractions for the naive baseline. Exit status 0, or 2 without a corpus.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from _corpus import Record, corpus_dir, coverage, load_corpus, request
from _report import verdict

from otel_compaction import CompactionGate, Decision
from otel_compaction.analysis import Analysis
from otel_compaction.transcript import Transcript

ALLOWED_AIM = 0.95
COVERAGE_AIM = 0.80
ACTIONS = ("compact", "extend", "defer", "refuse")
POLICIES: tuple[tuple[str, str, bool, bool], ...] = (
    # label, policy, addressable, critical
    ("default", "default", False, False),
    ("default, critical", "default", False, True),
    ("strict (addressable=True)", "strict", True, False),
    ("lenient", "lenient", False, False),
)
CRITICAL_COVERAGE_AIM = 0.95
FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request and what became of it."""

    source: str
    action: str
    coverage: float
    naive_severed: bool
    gate_severed: bool

    @property
    def allowed(self) -> bool:
        """The gate let some span be compacted."""
        return self.action != "refuse"


def action_of(decision: Decision) -> str:
    """``extend`` for a compaction whose span was extended, the decision's action otherwise."""
    return "extend" if decision.action == "compact" and decision.extended else decision.action


def outcome(
    source: str,
    analysis: Analysis,
    gate: CompactionGate,
    fraction: float,
    addressable: bool,
    critical: bool = False,
) -> Outcome | None:
    """Request the oldest `fraction` of `analysis`'s transcript from `gate`."""
    transcript = analysis.transcript
    chars = [entry.chars for entry in transcript.entries]
    span = request(chars, analysis.head, fraction)
    if span is None:
        return None
    decision = gate.evaluate(
        analysis, *span, critical=critical, addressable=addressable, raise_on_refuse=False
    )
    allowed = decision.action != "refuse"
    start, end = decision.span
    return Outcome(
        source=source,
        action=action_of(decision),
        coverage=coverage(chars, decision.span, span) if allowed else 0.0,
        naive_severed=not transcript.is_closed(span[1]),
        gate_severed=allowed and not (transcript.is_closed(start) and transcript.is_closed(end)),
    )


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _summary(outcomes: Sequence[Outcome]) -> tuple[Counter[str], float, float, float]:
    counts = Counter(o.action for o in outcomes)
    allowed = sum(o.allowed for o in outcomes) / len(outcomes)
    median = statistics.median(o.coverage for o in outcomes)
    mean = statistics.fmean(o.coverage for o in outcomes)
    return counts, allowed, median, mean


def _table(title: str, rows: Sequence[tuple[str, Sequence[Outcome]]]) -> None:
    print(title)
    header = (
        f"{'':<32}{'requests':>9}"
        + "".join(f"{a:>9}" for a in ACTIONS)
        + f"{'allowed':>9}{'median cov':>12}{'mean cov':>10}{'naive severed':>15}"
        + f"{'gate severed':>14}"
    )
    print(header)
    print("-" * len(header))
    for label, outcomes in rows:
        counts, allowed, median, mean = _summary(outcomes)
        naive = sum(o.naive_severed for o in outcomes)
        severed = sum(o.gate_severed for o in outcomes)
        print(
            f"{label:<32}{len(outcomes):>9}"
            + "".join(f"{counts[a]:>9}" for a in ACTIONS)
            + f"{_pct(allowed, 1):>9}{_pct(median, 1):>12}{_pct(mean, 1):>10}"
            + f"{_pct(naive, len(outcomes)):>15}{severed:>14}"
        )
    print()


def report(records: Sequence[Record]) -> None:
    """Evaluate every request and print the tables."""
    gates = {name: CompactionGate(name) for _, name, _, _ in POLICIES}
    by_policy: dict[str, list[Outcome]] = {label: [] for label, _, _, _ in POLICIES}
    by_fraction: dict[float, list[Outcome]] = {f: [] for f in FRACTIONS}
    for record in records:
        transcript = Transcript.parse(record.messages)
        for label, name, addressable, critical in POLICIES:
            analysis = gates[name].analyse(transcript)
            sweep = label == "default"
            for fraction in FRACTIONS if sweep else (0.5,):
                found = outcome(
                    record.source, analysis, gates[name], fraction, addressable, critical
                )
                if found is None:
                    continue
                if fraction == 0.5:
                    by_policy[label].append(found)
                if sweep:
                    by_fraction[fraction].append(found)

    default = by_policy["default"]
    messages = sum(len(r.messages) for r in records)
    print(
        f"Gate practicality on the real corpus: {len(records)} transcripts, {messages:,} messages"
    )
    print(
        "Request: compact the oldest half of the characters after the protected head. "
        "allowed = compact, extend or defer;"
    )
    print(
        "coverage = requested characters inside the span compacted (0 when refused); "
        "naive severed = the plain cut at the same"
    )
    print(
        "point leaves a call without its result; gate severed = allowed spans that are not "
        "pairing-closed."
    )
    print()
    sources = sorted({o.source for o in default})
    _table(
        "Default policy, by source",
        [(s, [o for o in default if o.source == s]) for s in sources] + [("all", default)],
    )
    _, allowed, median, _ = _summary(default)
    print(
        f"Aims (default policy): allowed >= {ALLOWED_AIM:.0%}: {_pct(allowed, 1)} "
        f"{verdict(allowed >= ALLOWED_AIM)};  median coverage >= {COVERAGE_AIM:.0%}: "
        f"{_pct(median, 1)} {verdict(median >= COVERAGE_AIM)}"
    )
    _, critical_allowed, critical_median, _ = _summary(by_policy["default, critical"])
    print(
        f"Aims at a critical budget (no deferral): allowed 100%: {_pct(critical_allowed, 1)} "
        f"{verdict(critical_allowed == 1)};  median coverage >= {CRITICAL_COVERAGE_AIM:.0%}: "
        f"{_pct(critical_median, 1)} {verdict(critical_median >= CRITICAL_COVERAGE_AIM)}"
    )
    print()
    _table("Every policy, all transcripts (the oldest half)", list(by_policy.items()))
    _table(
        "Default policy at other fractions: the naive baseline and the gate",
        [(f"oldest {f:.0%}", by_fraction[f]) for f in FRACTIONS],
    )
    swept = [o for f in FRACTIONS for o in by_fraction[f]]
    print(
        f"Naive severing across all {len(swept)} requests of the sweep: "
        f"{_pct(sum(o.naive_severed for o in swept), len(swept))}; at the oldest half: "
        f"{_pct(sum(o.naive_severed for o in default), len(default))}; "
        f"spans the gate allowed that sever a call: {sum(o.gate_severed for o in swept)}"
    )
    print("(the design cites 8-28% of compactions severing a call on real transcripts)")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report; exit 2 when there is no corpus."""
    parser = argparse.ArgumentParser(
        description="Report how often the gate lets the oldest half of each real transcript "
        "be compacted, how much of it, and how often the naive cut severs a call."
    )
    parser.add_argument("--corpus", help="corpus directory (default: the tests' corpus)")
    args = parser.parse_args(argv)
    directory = corpus_dir(args.corpus)
    records = load_corpus(directory) if directory.is_dir() else []
    if not records:
        print(f"no transcript corpus at {directory}", file=sys.stderr)
        return 2
    report(records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
