"""The summary-verifier evaluation (`benchmarks/_verifier_eval.py`) counts exactly.

A stub verifier stands in for `verify_summary`, so these tests pin the evaluator's counting
(planted, caught, false flags, precision, recall; spans resolved from anchors; items matched by
what they are), not the verifier's figures.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from otel_compaction.analysis import Negative
from otel_compaction.rules.base import ObligationRef
from otel_compaction.verification import Verification

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "_verifier_eval", BENCHMARKS / "_verifier_eval.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ev = _load()

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user", "content": "Find booking ABC123 and flights from JFK."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "search_flights", "arguments": '{"origin": "JFK"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "[]"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c2", "type": "function",
         "function": {"name": "get_reservation", "arguments": '{"reservation_id": "ABC123"}'}}]},
    {"role": "tool", "tool_call_id": "c2", "content": '{"reservation_id": "ABC123"}'},
    {"role": "assistant", "content": "I will check the refund next.", "tool_calls": [
        {"id": "c3", "type": "function", "function": {"name": "check_refund", "arguments": "{}"}}]},
]  # fmt: skip

CUT_C1 = {"cut_after_call": {"call_id": "c1", "occurrence": 0}}


def _case(name: str, span: dict[str, Any], **missing: list[Any]) -> dict[str, Any]:
    labels = {"identifiers": [], "negatives": [], "pending": []} | missing
    return {"name": name, "source": "handmade/tiny.json", "span": span, "summary": name,
            "missing": labels, "reason": "test"}  # fmt: skip


def _write(tmp_path: Path, cases: list[dict[str, Any]]) -> Path:
    (tmp_path / "handmade").mkdir()
    (tmp_path / "handmade" / "tiny.json").write_text(json.dumps(MESSAGES), encoding="utf-8")
    labels = tmp_path / "summaries.jsonl"
    labels.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return labels


class Stub:
    """Reports, per summary, what the test says; records the spans it was given."""

    def __init__(self, reports: dict[str, Verification]) -> None:
        self.reports = reports
        self.spans: dict[str, tuple[int, int]] = {}

    def __call__(
        self, messages: Sequence[Mapping[str, Any]], span: tuple[int, int], summary: str
    ) -> Verification:
        self.spans[summary] = span
        return self.reports[summary]


def _negative(index: int, call_id: str) -> Negative:
    return Negative(index, call_id, "search_flights", "[]")


def test_counts_caught_and_false_flags_per_kind(tmp_path: Path) -> None:
    labels = _write(
        tmp_path,
        [
            _case("complete", {"end": CUT_C1}),
            _case(
                "planted",
                {"end": "end"},
                identifiers=["ABC123"],
                negatives=[{"call_id": "c1", "occurrence": 0}],
                pending=[{"call_id": "c3", "occurrence": 0}],
            ),
        ],
    )
    stub = Stub(
        {
            # A complete summary rejected for an identifier: one false flag.
            "complete": Verification(missing_identifiers=("ABC123",)),
            # Every planted item caught, plus an identifier nobody planted.
            "planted": Verification(
                missing_identifiers=("ABC123", "ZZZ999"),
                missing_negatives=(_negative(3, "c1"),),
                # The open call named twice (as a call and as a retry): caught once.
                missing_pending=(
                    ObligationRef("tool_call", "c3", 6, "check_refund"),
                    ObligationRef("retry", "c3", 6, "check_refund"),
                ),
            ),
        }
    )
    rows = ev.evaluate(tmp_path, labels, verifier=stub)
    assert stub.spans == {"complete": (1, 4), "planted": (1, 7)}  # head = the system prompt
    assert rows == [
        ev.Row("identifiers", planted=1, caught=1, flagged_false=2, precision=1 / 3, recall=1.0),
        ev.Row("negatives", planted=1, caught=1, flagged_false=0, precision=1.0, recall=1.0),
        ev.Row("pending", planted=1, caught=1, flagged_false=0, precision=1.0, recall=1.0),
    ]


def test_items_match_by_what_they_are(tmp_path: Path) -> None:
    labels = _write(
        tmp_path,
        [
            _case(
                "tail",
                {"start": CUT_C1, "end": "end"},
                identifiers=["src/mix.exs"],
                negatives=[{"call_id": "c1", "occurrence": 0}],
                pending=[{"quote": "I will check the refund next"}],
            )
        ],
    )
    stub = Stub(
        {
            "tail": Verification(
                # The same path written from a root: caught once, though reported twice.
                missing_identifiers=("/app/src/mix.exs", "./src/mix.exs"),
                # The right call id at the wrong message is another negative: a false flag.
                missing_negatives=(_negative(5, "c1"),),
                # The promise matched by its message; a call the labels do not hold is false.
                missing_pending=(
                    ObligationRef("commitment", "promise-1", 6),
                    ObligationRef("tool_call", "c9", 6),
                ),
            )
        }
    )
    rows = ev.evaluate(tmp_path, labels, verifier=stub)
    assert stub.spans == {"tail": (4, 7)}
    assert rows == [
        ev.Row("identifiers", planted=1, caught=1, flagged_false=0, precision=1.0, recall=1.0),
        ev.Row("negatives", planted=1, caught=0, flagged_false=1, precision=0.0, recall=0.0),
        ev.Row("pending", planted=1, caught=1, flagged_false=1, precision=0.5, recall=1.0),
    ]


def test_nothing_flagged_and_nothing_planted_has_no_ratios(tmp_path: Path) -> None:
    labels = _write(tmp_path, [_case("complete", {"end": CUT_C1})])
    rows = ev.evaluate(tmp_path, labels, verifier=Stub({"complete": Verification()}))
    assert [(r.planted, r.caught, r.flagged_false, r.precision, r.recall) for r in rows] == [
        (0, 0, 0, None, None)
    ] * 3
    assert ev.format_table(rows).splitlines() == [
        "kind         planted  caught  flagged_false  precision  recall",
        "identifiers        0       0              0        n/a     n/a",
        "negatives          0       0              0        n/a     n/a",
        "pending            0       0              0        n/a     n/a",
    ]


@pytest.mark.skipif(
    not ev.DATA_ROOT.is_dir(), reason="the real session data is not beside the repo"
)
def test_every_labelled_case_resolves() -> None:
    """Each anchor of the labelled set points at a real call or a unique quote, and the set
    is as large as it claims."""
    rows = ev.evaluate(ev.DATA_ROOT, verifier=lambda messages, span, summary: Verification())
    planted = {r.kind: r.planted for r in rows}
    assert planted["identifiers"] >= 12 and planted["negatives"] >= 20 and planted["pending"] >= 4
    lines = ev.LABELS.read_text(encoding="utf-8").splitlines()
    cases = [json.loads(line) for line in lines if line.strip()]
    complete = [c for c in cases if not any(c["missing"].values())]
    assert len(cases) >= 40 and len(complete) >= 15
    assert all(c["reason"] == "complete" for c in complete)
