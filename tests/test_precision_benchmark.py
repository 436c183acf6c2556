"""The precision benchmark's loader and matcher on a tiny handmade labelled file: exact counts,
so that the script cannot silently rot."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from otel_compaction.policy import Policy

_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "precision.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("precision_benchmark", _SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


precision = _load()


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


CONVERSATION = [
    {"role": "user", "content": "Please book flight HAT136 for me."},
    _call("c1", "book_reservation", {"flight": "HAT136"}),
    {"role": "tool", "tool_call_id": "c1", "content": "Error: payment gift_card_4471 declined"},
    _call("c3", "book_reservation", {"flight": "HAT136"}),  # the same call again
    {"role": "tool", "tool_call_id": "c3", "content": "Error: payment gift_card_4471 declined"},
    {"role": "assistant", "content": "Let me check the flights again."},
    {"role": "user", "content": "Sure."},
    {
        **_call("c2", "search_direct_flight", {"origin": "JFK", "destination": "SEA"}),
        "content": "I will search for direct flights.",
    },
    {"role": "tool", "tool_call_id": "c2", "content": "[]"},
    _call("c1", "get_user_details", {"user_id": "mia_li_3668"}),  # the id reused
    {"role": "tool", "tool_call_id": "c1", "content": '{"user_id": "mia_li_3668"}'},
    {
        "role": "assistant",
        "content": "No direct flights. Shall I try another date, paid with gift_card_4471?",
    },
]

SOURCE = "handmade/tiny.json"


def _item(kind: str, anchor: dict[str, Any], label: bool, reason: str) -> dict[str, Any]:
    return {"source": SOURCE, "kind": kind, "anchor": anchor, "label": label, "reason": reason}


CUT = {"call_id": "c3", "occurrence": 0}
ITEMS = [
    # the declined booking opens a retry the rule holds open: TP
    _item("retry", {"call_id": "c1", "occurrence": 0}, True, "a booking still owed"),
    # the same call failing again is held by the chain the first failure opened: TP
    _item("retry", {"call_id": "c3", "occurrence": 0}, True, "still owed"),
    # an empty search opens no retry chain; labelled true here to get an FN
    _item("retry", {"call_id": "c2", "occurrence": 0}, True, "a label the rule misses"),
    # the reused id's second call succeeded: nothing to retry (TN)
    _item("retry", {"call_id": "c1", "occurrence": 1}, False, "a success"),
    # the promise stays open over the user's turn; labelled false here to get an FP
    _item("commitment", {"quote": "Let me check the flights again."}, False, "contradicted"),
    # kept by the call in its own message: open at no cut (TN)
    _item("commitment", {"quote": "I will search for direct flights."}, False, "kept at once"),
    _item("negative", {"call_id": "c2", "occurrence": 0}, True, "no flights"),
    _item("negative", {"call_id": "c1", "occurrence": 1}, False, "a success"),
    # the payment id only the failed result gave is quoted after the cut: owed (TP)
    _item("reference", {"cut_after_call": CUT, "identifier": "gift_card_4471"}, True, "used later"),
    # the flight is never named after the cut: not owed (TN)
    _item("reference", {"cut_after_call": CUT, "identifier": "HAT136"}, False, "not used later"),
]  # fmt: skip


def _write(tmp_path: Path, items: list[dict[str, Any]]) -> Path:
    (tmp_path / "handmade").mkdir()
    (tmp_path / "handmade" / "tiny.json").write_text(json.dumps(CONVERSATION))
    labels = tmp_path / "tiny.jsonl"
    labels.write_text("".join(json.dumps(i) + "\n" for i in items))
    return labels


def _evaluate(tmp_path: Path, items: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
    labels = _write(tmp_path, items)
    loader = precision.Loader(tmp_path, Policy.load("default").compile(), tmp_path / "handmade")
    evaluation = precision.evaluate(precision.load_items([labels]), loader)
    return {r.kind: r for r in evaluation.rows}, evaluation.verdicts


def test_exact_counts_per_kind(tmp_path: Path) -> None:
    rows, verdicts = _evaluate(tmp_path, ITEMS)
    counts = {k: (r.labelled_true, r.labelled_false, r.tp, r.fp, r.fn) for k, r in rows.items()}
    assert counts == {
        "retry": (3, 1, 2, 0, 1),
        "commitment": (0, 2, 0, 1, 0),
        "negative": (1, 1, 1, 0, 0),
        "reference": (1, 1, 1, 0, 0),
    }
    outcomes = ["tp", "tp", "fn", "tn", "fp", "tn", "tp", "tn", "tp", "tn"]
    assert [v.outcome for v in verdicts] == outcomes
    assert rows["retry"].precision == 1.0 and rows["retry"].recall == pytest.approx(2 / 3)


def test_unlabelled_detections_are_counted_not_scored(tmp_path: Path) -> None:
    # Only the success is labelled: the three negatives (the two declined bookings, the first
    # held by its repeat, and the empty search) are counted as unlabelled, score nothing, and
    # are listed.
    labels = _write(tmp_path, ITEMS[7:8])
    loader = precision.Loader(tmp_path, Policy.load("default").compile(), tmp_path / "handmade")
    evaluation = precision.evaluate(precision.load_items([labels]), loader)
    (negative,) = evaluation.rows
    assert (negative.tp, negative.fp, negative.fn, negative.unlabelled_fired) == (0, 0, 0, 3)
    listed = precision.listing(evaluation, "all").splitlines()
    assert [line.split(":")[0] for line in listed] == [f"NEW negative {SOURCE}"] * 3


def test_an_unresolvable_anchor_names_the_label_file_and_line(tmp_path: Path) -> None:
    broken = [*ITEMS[:2], _item("negative", {"call_id": "c9", "occurrence": 0}, True, "none")]
    with pytest.raises(precision.LabelError, match=r"tiny\.jsonl:3: .*'c9'"):
        _evaluate(tmp_path, broken)


def test_a_quote_must_be_unique(tmp_path: Path) -> None:
    with pytest.raises(precision.LabelError, match=r"tiny\.jsonl:1: .*not one"):
        _evaluate(tmp_path, [_item("commitment", {"quote": "flights"}, True, "ambiguous")])


def test_a_sidechain_thread_is_the_records_leading_back_to_its_first(tmp_path: Path) -> None:
    records = [
        {"uuid": "m1", "parentUuid": None, "isSidechain": False},
        {"uuid": "a1", "parentUuid": None, "isSidechain": True},
        {"uuid": "b1", "parentUuid": None, "isSidechain": True},
        {"uuid": "a2", "parentUuid": "a1", "isSidechain": True},
        {"uuid": "b2", "parentUuid": "b1", "isSidechain": True},
        {"uuid": "a3", "parentUuid": "a2", "isSidechain": True},
        {"uuid": "m2", "parentUuid": "m1", "isSidechain": False},
    ]
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert [r["uuid"] for r in precision._thread(path, "a1")] == ["a1", "a2", "a3"]
    with pytest.raises(precision.LabelError, match="no sidechain thread"):
        precision._thread(path, "m1")


def test_a_background_task_is_keyed_by_the_call_that_launched_it() -> None:
    # The rule names a task by its handle and its tool; the item anchors on the launching call.
    from otel_compaction.analysis import Analysis
    from otel_compaction.transcript import Transcript

    messages = [
        {"role": "user", "content": "Start the dev server."},
        _call("b1", "Bash", {"command": "npm run dev", "run_in_background": True}),
        {"role": "tool", "tool_call_id": "b1", "content": "Running in background with ID: bash_1"},
    ]
    t = Transcript.parse(messages)
    (task,) = Analysis.build(t, Policy.load("default").compile()).facts["open_background_task"]
    assert precision.tracked_key(t, task) == ("background", ("call", 0))


def test_a_call_discharged_abandoned_counts_as_open_at_the_end() -> None:
    # The user stopped the run; the next run's call was answered: the first call never will be.
    from otel_compaction.analysis import Analysis
    from otel_compaction.transcript import Transcript

    messages = [
        {"role": "user", "content": "Export the invoices."},
        _call("e1", "export_invoices", {"month": "2025-09"}),
        {"role": "user", "content": "Stop. How many are unpaid?"},
        _call("c1", "count_invoices", {"status": "unpaid"}),
        {"role": "tool", "tool_call_id": "c1", "content": '{"count": 7}'},
    ]
    t = Transcript.parse(messages)
    conversation = precision.Conversation(
        "ended", t, Analysis.build(t, Policy.load("default").compile())
    )
    assert list(precision.detections(conversation)["open_call"]) == [("call", 0)]


def test_a_negative_repeated_by_the_same_call_is_held_by_its_latest(tmp_path: Path) -> None:
    # null_result keeps only the second declined booking; the first is held by it.
    first = _item("negative", {"call_id": "c1", "occurrence": 0}, True, "declined")
    rows, _ = _evaluate(tmp_path, [first])
    assert (rows["negative"].tp, rows["negative"].fn) == (1, 0)


def test_a_commitment_quote_may_be_a_part_of_the_sentence_that_names_it() -> None:
    name = "Next I'm checking the state and then I'll export the session transcript."
    assert precision.same_words(name, "then I\u2019ll export the session transcript")
    assert precision.same_words("Let me check.", "Sure.  Let me check.")
    assert not precision.same_words(name, "I will book the flight")


def test_a_promise_kept_by_the_calls_of_its_own_split_response_is_open_at_no_cut() -> None:
    from otel_compaction.analysis import Analysis
    from otel_compaction.transcript import Transcript

    said = "I'm exporting the session log into the project root now."

    def text(role: str, part: str, body: str) -> dict[str, Any]:
        return {"type": "message", "role": role, "content": [{"type": part, "text": body}]}

    messages = [
        text("user", "input_text", "Go."),
        text("assistant", "output_text", said),
        {"type": "function_call", "call_id": "x1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "x1", "output": "done"},
    ]
    t = Transcript.parse(messages)
    conv = precision.Conversation("r", t, Analysis.build(t, Policy.load("default")))
    assert precision.response_end(t, 1) == 2
    assert precision.detections(conv)["commitment"] == {}
