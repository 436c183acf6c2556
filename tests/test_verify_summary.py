"""`verify_summary` against summaries written the way a careful model writes them.

`tests/data/summaries/cases.json` holds summaries of spans of real transcripts (and of a
coding-agent session), each labelled with exactly what it fails to carry: relative paths for
absolute ones, "searched X, nothing found", no call ids, and some deliberately missing an
identifier or a negative, or stating a negative without a negation. The verifier must report
exactly the labels: no good summary rejected, no miss let through.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_compaction import verify_summary

DATA = Path(__file__).parent / "data"
CASES: list[dict[str, Any]] = json.loads(
    (DATA / "summaries" / "cases.json").read_text(encoding="utf-8")
)


def _transcripts() -> dict[tuple[str, str | None], list[Any]]:
    found: dict[tuple[str, str | None], list[Any]] = {}
    for path in sorted((DATA / "corpus").glob("*/transcripts.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            found[(record["source"], record["id"])] = record["messages"]
    session = json.loads((DATA / "summaries" / "coding_session.json").read_text("utf-8"))
    found[("coding_session", None)] = session
    return found


TRANSCRIPTS = _transcripts()


def _label(case: dict[str, Any]) -> str:
    return f"{case['source']}:{case['id']}:{case['span'][0]}-{case['span'][1]}"


def test_the_cases_cover_what_the_issue_asks() -> None:
    complete = [c for c in CASES if c["why"] == "complete"]
    missing = [c for c in CASES if c["why"] != "complete"]
    assert len(CASES) >= 20
    assert len(complete) >= 10 and len(missing) >= 5
    assert {c["source"] for c in CASES} >= {
        "tau_bench_gpt4o_airline",
        "tau2_whissle_airline_pr448",
        "coding_session",
    }
    for case in missing:
        labels = case["missing"]
        assert labels["identifiers"] or labels["negatives"] or labels["pending"], _label(case)


@pytest.mark.parametrize("case", CASES, ids=[_label(c) for c in CASES])
def test_verify_summary_reports_exactly_the_labels(case: dict[str, Any]) -> None:
    messages = TRANSCRIPTS[(case["source"], case["id"])]
    start, end = case["span"]
    check = verify_summary(messages, (start, end), case["summary"])
    assert sorted(check.missing_identifiers) == sorted(case["missing"]["identifiers"])
    assert sorted(n.message_index for n in check.missing_negatives) == sorted(
        case["missing"]["negatives"]
    )
    assert [p.id for p in check.missing_pending] == case["missing"]["pending"]
    assert check.ok is (case["why"] == "complete")
    # What is not missing was found in the summary.
    for value in check.carried_identifiers:
        assert value not in check.missing_identifiers


def test_the_labelled_misses_are_owed_in_the_first_place() -> None:
    """Each deliberately missing item is something the span really owes: the same summary
    with the item added verbatim passes (so the verifier's miss is the summary's, not a
    false obligation)."""
    for case in CASES:
        labels = case["missing"]
        if not labels["identifiers"]:
            continue
        messages = TRANSCRIPTS[(case["source"], case["id"])]
        patched = case["summary"] + "\nAlso: " + ", ".join(labels["identifiers"]) + "."
        check = verify_summary(messages, tuple(case["span"]), patched)
        assert check.missing_identifiers == (), _label(case)
