"""Precision of the re-issues `audit` (and the PreToolUse hook) report, against hand labels.

``labels/reissues.jsonl`` holds one item a line: where a compaction was (a real one, or one
made by hand at a closed boundary of a real session: ``cut``), the call after it and the
earlier call it may repeat, ``label`` (true: a real repeat of a side effect the compaction
removed from context) and a one-line ``reason``. A session is named by ``source`` (relative
to the repository, or to the data root for ``sessions/...``); a hand-made case carries its
``messages`` inline. Every closed boundary of every labelled source is tried as a compaction,
so the items cover what either the current logic or the former one (same tool and target,
the audit's rule before the ledger) reports; a report no item labels is listed as unlabelled.

Usage: ``python benchmarks/reissue_precision.py [--data DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from otel_compaction.analysis import Analysis, call_target
from otel_compaction.policy import Policy
from otel_compaction.reissue import reissues
from otel_compaction.sessions import read_session
from otel_compaction.transcript import Transcript

LABELS = Path(__file__).resolve().parent / "labels" / "reissues.jsonl"
_ROOT = Path(__file__).resolve().parents[1]

Report = tuple[str, int | None, str, str]
"""(source, cut (None: any closed boundary), call id, id of the call it repeats)."""


def _former(transcript: Transcript, cut: int) -> set[tuple[str, str]]:
    """The former audit rule: any call after `cut` with the tool and target of one resolved
    before it."""
    resolved: dict[tuple[str, str], str] = {}
    for call in transcript.calls:
        result = transcript.result_of(call)
        if call.message_index < cut and result is not None and result.message_index < cut:
            resolved[(call.name, call_target(call))] = call.id
    return {
        (call.id, resolved[(call.name, call_target(call))])
        for call in transcript.calls
        if call.message_index >= cut and (call.name, call_target(call)) in resolved
    }


def _reports(
    name: str, messages: list[dict[str, Any]], cuts: list[int] | None
) -> tuple[set[Report], set[Report]]:
    policy = Policy.load("default")
    transcript = Transcript.parse(messages)
    analysis = Analysis.build(transcript, policy)
    points = (
        cuts
        if cuts is not None
        else [c for c in range(1, len(messages)) if analysis.pair_closed[c]]
    )
    current: set[Report] = set()
    former: set[Report] = set()
    for cut in points:
        # A boundary made by hand at every closed point is named by none: one report a pair.
        where = cut if cuts is not None else None
        for call, original in reissues(transcript, analysis.outcomes, policy.side_effects, cut):
            current.add((name, where, call.id, original.call_id))
        former |= {(name, where, a, b) for a, b in _former(transcript, cut)}
    return current, former


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        default=os.environ.get("OTEL_COMPACTION_DATA", str(_ROOT.parent / "shared" / "data")),
    )
    args = parser.parse_args()
    items = [
        json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    labels = {
        (i["source"], i["cut"], i["call_id"], i["duplicate_of"]): bool(i["label"]) for i in items
    }
    sources: dict[str, list[dict[str, Any]]] = {}
    cuts: dict[str, list[int] | None] = {}
    for item in items:
        name = item["source"]
        if "messages" in item:
            sources[name], cuts[name] = item["messages"], [item["cut"]]
        elif name not in sources:
            base = Path(args.data) if name.startswith("sessions/") else _ROOT
            sources[name], cuts[name] = read_session(base / name).messages, None
    for extra in sorted((Path(args.data) / "sessions").rglob("*.jsonl")):
        name = "sessions/" + str(extra.relative_to(Path(args.data) / "sessions"))
        if name not in sources:
            sources[name], cuts[name] = read_session(extra).messages, None
    for which in ("current", "former"):
        tp = fp = unlabelled = 0
        for name, messages in sources.items():
            current, former = _reports(name, messages, cuts[name])
            for report in sorted(current if which == "current" else former):
                label = labels.get(report)
                if label is None:
                    unlabelled += 1
                    print(f"  unlabelled ({which}): {report}")
                elif label:
                    tp += 1
                else:
                    fp += 1
        true = sum(labels.values())
        precision = f"{tp / (tp + fp):.0%}" if tp + fp else "n/a"
        recall = f"{tp / true:.0%}" if true else "n/a"
        print(
            f"{which:8} reported={tp + fp + unlabelled} TP={tp} FP={fp} "
            f"unlabelled={unlabelled} precision={precision} recall={recall} "
            f"(labelled true {true}, false {len(labels) - true})"
        )


if __name__ == "__main__":
    main()
