"""How well the summary verifier finds what a summary leaves out, on labelled summaries.

`labels/summaries.jsonl` holds summaries of spans of real conversations (Claude Code and Codex
session logs, tau-bench transcripts), written the way those agents' compactions write them; each
is labelled with exactly the identifiers, negative results and pending obligations it misses
(`labels/SUMMARIES.md` gives the definitions the labels were written from). `evaluate` runs
`verify_summary` on every case and counts, per item kind:

* ``planted``: items labelled missing;
* ``caught``: planted items the verifier reports missing;
* ``flagged_false``: items the verifier reports missing that are not labelled missing (a
  complete summary rejected, or an item the summary does carry);
* ``precision`` = caught / (caught + flagged_false), ``recall`` = caught / planted (None when
  the denominator is 0).

A reported item is matched to a label by what it is, not by its wording: an identifier by its
value (a path also by the same path written relative to a root, ``mix.exs`` for
``/app/mix.exs``); a negative by the call that returned it and the message of its result; a
pending call by its call id, a pending promise by the assistant message that made it.

``python benchmarks/_verifier_eval.py [DATA_ROOT]`` prints the table alone. DATA_ROOT (default
``shared/data`` beside the repository) holds the ``sessions/`` and ``transcripts/`` the cases
point into; sources under ``tests/`` are read from the repository, ``handmade/`` ones from
beside the labels file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from otel_compaction.identifiers import canonical
from otel_compaction.policy import Policy
from otel_compaction.sessions import read_session
from otel_compaction.transcript import ToolCall, Transcript
from otel_compaction.verification import Verification, verify_summary

__all__ = ["KINDS", "LABELS", "Row", "evaluate", "format_table", "main"]

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
LABELS: Final = Path(__file__).resolve().parent / "labels" / "summaries.jsonl"
"""The labelled cases."""
DATA_ROOT: Final = REPO_ROOT.parent / "shared" / "data"
KINDS: Final = ("identifiers", "negatives", "pending")

Verifier = Callable[[Sequence[Mapping[str, Any]], tuple[int, int], str], Verification]
"""What is evaluated: messages, span and summary in, what the summary misses out."""


@dataclass(frozen=True, slots=True)
class Row:
    """The verifier's figures for one item kind."""

    kind: str
    planted: int
    caught: int
    flagged_false: int
    precision: float | None
    recall: float | None


@dataclass(frozen=True, slots=True)
class _Labelled:
    """One case resolved against its conversation: the span and the keys of what it misses."""

    name: str
    messages: Sequence[Mapping[str, Any]]
    span: tuple[int, int]
    summary: str
    identifiers: tuple[str, ...]
    negatives: frozenset[tuple[str, int]]
    pending_calls: frozenset[str]
    pending_promises: frozenset[int]


def _default_verifier(
    messages: Sequence[Mapping[str, Any]], span: tuple[int, int], summary: str
) -> Verification:
    return verify_summary(messages, span, summary)


def evaluate(
    data_root: Path,
    labels: Path = LABELS,
    *,
    verifier: Verifier = _default_verifier,
) -> list[Row]:
    """One `Row` per item kind (`KINDS` order): `verifier` run on every case of `labels`, its
    reports counted against the labels (see the module docstring)."""
    planted = dict.fromkeys(KINDS, 0)
    caught = dict.fromkeys(KINDS, 0)
    false = dict.fromkeys(KINDS, 0)
    conversations: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for raw in _read_cases(labels):
        case = _resolve(raw, data_root, labels.parent, conversations)
        check = verifier(case.messages, case.span, case.summary)
        planted["identifiers"] += len(case.identifiers)
        planted["negatives"] += len(case.negatives)
        planted["pending"] += len(case.pending_calls) + len(case.pending_promises)
        hit_ids = {
            label
            for value in check.missing_identifiers
            for label in case.identifiers
            if _same_value(value, label)
        }
        caught["identifiers"] += len(hit_ids)
        false["identifiers"] += sum(
            not any(_same_value(value, label) for label in case.identifiers)
            for value in check.missing_identifiers
        )
        reported = {(n.call_id, n.message_index) for n in check.missing_negatives}
        caught["negatives"] += len(reported & case.negatives)
        false["negatives"] += len(reported - case.negatives)
        hit_pending: set[str | int | None] = set()
        for ref in check.missing_pending:
            if ref.id in case.pending_calls:
                hit_pending.add(ref.id)
            elif ref.kind == "commitment" and ref.message_index in case.pending_promises:
                hit_pending.add(ref.message_index)
            else:
                false["pending"] += 1
        caught["pending"] += len(hit_pending)
    return [_row(kind, planted[kind], caught[kind], false[kind]) for kind in KINDS]


def _row(kind: str, planted: int, caught: int, flagged_false: int) -> Row:
    flagged = caught + flagged_false
    return Row(
        kind,
        planted,
        caught,
        flagged_false,
        caught / flagged if flagged else None,
        caught / planted if planted else None,
    )


def _same_value(reported: str, label: str) -> bool:
    """One identifier: equal once canonical, or one path the other written from a root."""
    a, b = canonical(reported).replace("\\", "/"), canonical(label).replace("\\", "/")
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def format_table(rows: Sequence[Row]) -> str:
    """The rows as an aligned text table, one line per kind under a header."""
    header = ("kind", "planted", "caught", "flagged_false", "precision", "recall")
    lines = [header] + [
        (
            r.kind,
            str(r.planted),
            str(r.caught),
            str(r.flagged_false),
            _ratio(r.precision),
            _ratio(r.recall),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


# -- reading the cases ------------------------------------------------------------------------


def _read_cases(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _resolve(
    raw: Mapping[str, Any],
    data_root: Path,
    handmade_root: Path,
    cache: dict[tuple[str, str | None], list[dict[str, Any]]],
) -> _Labelled:
    key = (raw["source"], raw.get("record"))
    if key not in cache:
        cache[key] = _conversation(raw["source"], raw.get("record"), data_root, handmade_root)
    messages = cache[key]
    transcript = Transcript.parse(messages)
    span = raw["span"]
    start = (
        _cut_after(transcript, span["start"]["cut_after_call"])
        if "start" in span
        else _head(transcript)
    )
    end = (
        len(messages)
        if span["end"] == "end"
        else _cut_after(transcript, span["end"]["cut_after_call"])
    )
    missing = raw["missing"]
    negatives = set()
    for anchor in missing["negatives"]:
        call = _call(transcript, anchor)
        result = transcript.result_of(call)
        if result is None:
            raise ValueError(f"{raw['name']}: negative {anchor} has no result")
        negatives.add((call.id, result.message_index))
    calls, promises = set(), set()
    for anchor in missing["pending"]:
        if "quote" in anchor:
            promises.add(_quoted(transcript, anchor["quote"], raw["name"]))
        else:
            calls.add(_call(transcript, anchor).id)
    return _Labelled(
        raw["name"],
        messages,
        (start, end),
        raw["summary"],
        tuple(missing["identifiers"]),
        frozenset(negatives),
        frozenset(calls),
        frozenset(promises),
    )


def _conversation(
    source: str, record: str | None, data_root: Path, handmade_root: Path
) -> list[dict[str, Any]]:
    """The messages a case's span points into. A session's own compaction summaries are left
    out: the summary under test takes their place."""
    if source.startswith("handmade/"):
        loaded: list[dict[str, Any]] = json.loads((handmade_root / source).read_text("utf-8"))
        return loaded
    path = (REPO_ROOT if source.startswith("tests/") else data_root) / source
    if record is not None:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    raw = json.loads(line)
                    if raw["id"] == record:
                        found: list[dict[str, Any]] = raw["messages"]
                        return found
        raise ValueError(f"{source}: no record {record!r}")
    session = read_session(path)
    summaries = {c.message_index for c in session.compactions}
    return [dict(m) for i, m in enumerate(session.messages) if i not in summaries]


def _call(transcript: Transcript, anchor: Mapping[str, Any]) -> ToolCall:
    """The `occurrence`-th call carrying `call_id`."""
    matching = [c for c in transcript.calls if c.id == anchor["call_id"]]
    occurrence: int = anchor.get("occurrence", 0)
    return matching[occurrence]


def _cut_after(transcript: Transcript, anchor: Mapping[str, Any]) -> int:
    call = _call(transcript, anchor)
    result = transcript.result_of(call)
    if result is None:
        raise ValueError(f"cut after {anchor}: the call has no result")
    return int(result.message_index) + 1


def _head(transcript: Transcript) -> int:
    """The protected head of the default policy: its leading system/developer messages."""
    roles = set(Policy.load("default").protected_head.roles)
    head = 0
    for entry in transcript.entries:
        if entry.role not in roles:
            break
        head += 1
    return head


def _quoted(transcript: Transcript, quote: str, name: str) -> int:
    found = [e.index for e in transcript.entries if e.role == "assistant" and quote in e.text]
    if len(found) != 1:
        raise ValueError(f"{name}: quote {quote!r} is in {len(found)} assistant messages")
    return found[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table for the data root named in `argv` (or the default one)."""
    args = list(sys.argv[1:] if argv is None else argv)
    root = Path(args[0]) if args else DATA_ROOT
    print(format_table(evaluate(root)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
