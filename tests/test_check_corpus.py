"""Check ``otel-compaction check --format json`` against the real transcript corpus.

Every transcript is run through the CLI and its ``closed_cuts``, ``open_calls``,
``orphan_results``, ``messages`` and ``tool_calls`` are compared with a small
reference implementation written here, independently of ``otel_compaction``.

Definitions the reference follows:

* Cut ``i`` (``0 <= i <= len(messages)``) is the boundary before message ``i``.
* A result pairs with the latest still-unanswered call that has the same id
  and sits in an earlier message: the call it follows, as the providers pair
  them (ids are reused within a transcript).
* Cut ``i`` is closed when every call in a message before ``i`` has its paired
  result in a message before ``i``, and it does not fall between two consecutive
  assistant messages (one model response split over two messages, which the
  default policy keeps whole). Orphan results do not affect closedness. (The
  corpus has no Anthropic thinking blocks or Responses reasoning items, the other
  units a cut may not fall inside.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS_SLICE_DIR, REPO_ROOT, Transcript, corpus_dir

# --------------------------------------------------------------------------
# Reference implementation (deliberately naive; shares no code with the CLI)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RefCall:
    """A tool call: the message it sits in, its id and its tool name."""

    message_index: int
    id: str
    name: str


@dataclass(frozen=True)
class RefResult:
    """A tool result: the message it sits in and the call id it answers."""

    message_index: int
    id: str


@dataclass(frozen=True)
class Reference:
    """Everything the reference derives from one transcript."""

    message_count: int
    calls: list[RefCall]
    results: list[RefResult]
    resolved_at: list[int | None]
    """For each entry of ``calls``: message index of its paired result, or None."""
    orphan_results: list[RefResult]
    closed_cuts: list[int]

    @property
    def open_calls(self) -> list[RefCall]:
        """Calls that never receive a result, in transcript order."""
        return [c for c, at in zip(self.calls, self.resolved_at, strict=True) if at is None]

    def expected_report(self) -> dict[str, Any]:
        """The values the CLI's JSON report must contain for this transcript."""
        return {
            "messages": self.message_count,
            "tool_calls": len(self.calls),
            "closed_cuts": self.closed_cuts,
            "open_calls": [
                {"id": c.id, "name": c.name, "message_index": c.message_index}
                for c in self.open_calls
            ],
            "orphan_results": [
                {"id": r.id, "message_index": r.message_index} for r in self.orphan_results
            ],
        }


def extract(
    fmt: str, messages: Sequence[Mapping[str, Any]]
) -> tuple[list[RefCall], list[RefResult]]:
    """List the calls and results of a transcript, in transcript order.

    ``openai``: ``tool_calls: [{id, type, function: {name, arguments}}]`` and
    results ``{role: "tool", tool_call_id, ...}``.
    ``tau2``: ``tool_calls: [{id, name, arguments, requestor}]`` and results
    ``{role: "tool", id, ...}``. ``tool_calls`` may be missing or null.
    """
    if fmt not in ("openai", "tau2"):
        raise ValueError(f"reference does not know format {fmt!r}")
    calls: list[RefCall] = []
    results: list[RefResult] = []
    for index, message in enumerate(messages):
        for call in message.get("tool_calls") or []:
            name = call["function"]["name"] if fmt == "openai" else call["name"]
            calls.append(RefCall(index, call["id"], name))
        if message.get("role") == "tool":
            key = "tool_call_id" if fmt == "openai" else "id"
            results.append(RefResult(index, message[key]))
    return calls, results


def pair(
    message_count: int, calls: Sequence[RefCall], results: Sequence[RefResult]
) -> tuple[list[int | None], list[RefResult]]:
    """Pair results with calls using one FIFO queue of unanswered calls per id.

    Returns the result message index for each call (None if unanswered) and
    the orphan results. Messages are walked in order; a result only sees calls
    from earlier messages, so results of a message are handled before its calls.
    """
    calls_in: dict[int, list[int]] = defaultdict(list)
    for position, call in enumerate(calls):
        calls_in[call.message_index].append(position)
    results_in: dict[int, list[RefResult]] = defaultdict(list)
    for result in results:
        results_in[result.message_index].append(result)

    resolved_at: list[int | None] = [None] * len(calls)
    waiting: dict[str, list[int]] = defaultdict(list)
    orphans: list[RefResult] = []
    for index in range(message_count):
        for result in results_in[index]:
            queue = waiting[result.id]
            if queue:
                resolved_at[queue.pop()] = index
            else:
                orphans.append(result)
        for position in calls_in[index]:
            waiting[calls[position].id].append(position)
    return resolved_at, orphans


def closed_cuts(
    message_count: int,
    calls: Sequence[RefCall],
    resolved_at: Sequence[int | None],
    roles: Sequence[object] = (),
) -> list[int]:
    """Closed cuts straight from the definition (quadratic on purpose)."""
    return [
        cut
        for cut in range(message_count + 1)
        if all(
            at is not None and at < cut
            for call, at in zip(calls, resolved_at, strict=True)
            if call.message_index < cut
        )
        and not (0 < cut < len(roles) and roles[cut - 1] == roles[cut] == "assistant")
    ]


def closed_cuts_by_id_alone(
    message_count: int, calls: Sequence[RefCall], results: Sequence[RefResult]
) -> list[int]:
    """A deliberately wrong variant: a cut counts as closed when every call id
    seen before it also has some result with that id before it."""
    return [
        cut
        for cut in range(message_count + 1)
        if {c.id for c in calls if c.message_index < cut}
        <= {r.id for r in results if r.message_index < cut}
    ]


def reference(transcript: Transcript) -> Reference:
    """Run the whole reference computation on one transcript."""
    count = len(transcript.messages)
    calls, results = extract(transcript.format, transcript.messages)
    resolved_at, orphans = pair(count, calls, results)
    return Reference(
        message_count=count,
        calls=calls,
        results=results,
        resolved_at=resolved_at,
        orphan_results=orphans,
        closed_cuts=closed_cuts(
            count, calls, resolved_at, [m.get("role") for m in transcript.messages]
        ),
    )


# --------------------------------------------------------------------------
# Helpers for running the CLI and comparing its output
# --------------------------------------------------------------------------

LIST_FIELDS: dict[str, tuple[str, ...]] = {
    "closed_cuts": (),
    "open_calls": ("id", "name", "message_index"),
    "orphan_results": ("id", "message_index"),
}
"""Report lists to compare; entries of object lists are compared on these keys."""


def first_difference(expected: Sequence[object], actual: Sequence[object]) -> str | None:
    """Describe the first position where two lists differ, or None if equal."""
    for position, (want, got) in enumerate(zip(expected, actual, strict=False)):
        if want != got:
            return f"first difference at [{position}]: expected {want!r}, got {got!r}"
    if len(expected) != len(actual):
        shorter = min(len(expected), len(actual))
        extra = (expected if len(expected) > shorter else actual)[shorter]
        side = "missing" if len(expected) > shorter else "unexpected"
        return (
            f"length {len(actual)} != expected {len(expected)}; "
            f"first {side} entry at [{shorter}]: {extra!r}"
        )
    return None


def compare_report(label: str, expected: Mapping[str, Any], report: object) -> list[str]:
    """Return one line per disagreement between a CLI report and the reference."""
    if not isinstance(report, dict):
        return [f"{label}: report is not a JSON object: {report!r:.200}"]
    problems: list[str] = []
    if not isinstance(report.get("format"), str) or not report["format"]:
        problems.append(
            f"{label}: 'format' should be a non-empty string, got {report.get('format')!r}"
        )
    for key in ("messages", "tool_calls"):
        if report.get(key) != expected[key]:
            problems.append(f"{label}: {key}: expected {expected[key]!r}, got {report.get(key)!r}")
    for key, fields in LIST_FIELDS.items():
        got = report.get(key)
        if not isinstance(got, list):
            problems.append(f"{label}: {key}: expected a list, got {got!r:.200}")
            continue
        if fields:
            got = [
                {f: entry.get(f) for f in fields} if isinstance(entry, dict) else entry
                for entry in got
            ]
        difference = first_difference(expected[key], got)
        if difference:
            problems.append(f"{label}: {key}: {difference}")
    return problems


def run_check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run ``check PATH --format json`` in-process; return (exit code, stdout)."""
    from otel_compaction.cli import main

    capsys.readouterr()
    code = main(["check", str(path), "--format", "json"])
    return code, capsys.readouterr().out


def parse_report(label: str, code: int, out: str) -> tuple[object, list[str]]:
    """Check the exit code and decode stdout; return (report, problems)."""
    if code not in (0, 1):
        return None, [f"{label}: exit code {code!r}, expected 0 or 1; stdout: {out!r:.300}"]
    try:
        return json.loads(out), []
    except json.JSONDecodeError as error:
        return None, [f"{label}: stdout is not one JSON object ({error}): {out!r:.300}"]


def showcase(corpus: Sequence[Transcript], fmt: str) -> Transcript:
    """Pick the transcript of *fmt* with the most parallel calls and reused ids."""

    def score(transcript: Transcript) -> tuple[int, int, int]:
        ref = reference(transcript)
        reused = len(ref.calls) - len({c.id for c in ref.calls})
        widest = max((len(m.get("tool_calls") or []) for m in transcript.messages), default=0)
        return widest, reused, len(ref.calls)

    candidates = [t for t in corpus if t.format == fmt]
    if not candidates:
        pytest.skip(f"corpus has no {fmt!r} transcripts")
    return max(candidates, key=score)


def without_message(transcript: Transcript, index: int, what: str) -> Transcript:
    """A copy of *transcript* with message *index* removed, labelled accordingly."""
    messages = transcript.messages[:index] + transcript.messages[index + 1 :]
    tag = f"{transcript.id} (without message {index}, {what})"
    return Transcript(transcript.source, tag, transcript.format, messages)


def damaged_variants(transcript: Transcript) -> list[tuple[int, Transcript]]:
    """Two damaged copies built around the first call whose id is used again later.

    The real corpus has no open calls and no orphan results, so these copies are
    what exercises those lists. Dropping that call's result leaves it unanswered
    while the next call with the same id arrives: the next result pairs with that
    next call (the one it follows), so the *first* call stays open.
    Dropping the call's message instead makes its result (and the results of any
    sibling calls in the same turn) orphans. Returns (removed index, copy) pairs.
    """
    ref = reference(transcript)
    uses = Counter(call.id for call in ref.calls)
    first = next((p for p, call in enumerate(ref.calls) if uses[call.id] > 1), None)
    if first is None:
        return []
    call, answered_at = ref.calls[first], ref.resolved_at[first]
    dropped = [(call.message_index, f"call {call.id}")]
    if answered_at is not None:
        dropped.append((answered_at, f"result of {call.id}"))
    return [(index, without_message(transcript, index, what)) for index, what in dropped]


# --------------------------------------------------------------------------
# Sanity checks of the reference against the facts documented in SOURCES.md
# --------------------------------------------------------------------------

DOCUMENTED_FACTS: dict[str, dict[str, dict[str, int]]] = {
    "full": {
        "tau_bench_gpt4o_airline": {
            "transcripts": 200,
            "duplicate_ids": 73,
            "transcripts_with_reuse": 49,
            "parallel_turns": 0,
        },
        "tau2_whissle_airline_pr448": {
            "transcripts": 50,
            "duplicate_ids": 91,
            "transcripts_with_reuse": 34,
            "parallel_turns": 4,
            "widest_turn": 3,
        },
    },
    "slice": {
        "tau_bench_gpt4o_airline": {
            "transcripts": 11,
            "duplicate_ids": 10,
            "transcripts_with_reuse": 5,
            "parallel_turns": 0,
        },
        "tau2_whissle_airline_pr448": {
            "transcripts": 10,
            "duplicate_ids": 36,
            "transcripts_with_reuse": 10,
            "parallel_turns": 3,
            "widest_turn": 2,
        },
    },
}
"""Per-source counts stated in the SOURCES.md of the full corpus and of the repository's slice."""


def source_facts(transcripts: Sequence[Transcript]) -> dict[str, int]:
    """Count the documented quirks of one source with the reference extractor."""
    facts = dict.fromkeys(
        ("transcripts", "duplicate_ids", "transcripts_with_reuse", "parallel_turns", "widest_turn"),
        0,
    )
    for transcript in transcripts:
        calls, _ = extract(transcript.format, transcript.messages)
        duplicates = len(calls) - len({c.id for c in calls})
        facts["transcripts"] += 1
        facts["duplicate_ids"] += duplicates
        facts["transcripts_with_reuse"] += duplicates > 0
        for message in transcript.messages:
            width = len(message.get("tool_calls") or [])
            facts["parallel_turns"] += width > 1
            facts["widest_turn"] = max(facts["widest_turn"], width)
    return facts


def test_reference_reproduces_documented_corpus_facts(corpus: list[Transcript]) -> None:
    """Id reuse and parallel turns are present, so the comparison exercises them."""
    by_source: dict[str, list[Transcript]] = defaultdict(list)
    for transcript in corpus:
        by_source[transcript.source].append(transcript)
    kind = "slice" if corpus_dir().resolve() == CORPUS_SLICE_DIR.resolve() else "full"
    for source, documented in DOCUMENTED_FACTS[kind].items():
        if source in by_source:
            facts = source_facts(by_source[source])
            counted = {key: facts[key] for key in documented}
            assert counted == documented, (
                f"{source}: counted {counted}, SOURCES.md says {documented}"
            )

    totals = source_facts(corpus)
    assert totals["transcripts_with_reuse"] > 0, "corpus should contain reused call ids"
    assert totals["widest_turn"] > 1, "corpus should contain turns with several calls"


def test_reference_pairing_is_sound(corpus: list[Transcript]) -> None:
    """Cross-check the reference's pairing with signals it does not use."""
    differs_from_id_alone = 0
    open_inside_parallel_turns = 0
    for transcript in corpus:
        ref = reference(transcript)
        closed = set(ref.closed_cuts)
        messages = transcript.messages
        for call in ref.calls:
            assert messages[call.message_index].get("role") == "assistant", transcript.label
        for call, at in zip(ref.calls, ref.resolved_at, strict=True):
            if at is None:
                continue
            assert at > call.message_index, transcript.label
            # openai results repeat the tool name: FIFO pairing must agree with it.
            if transcript.format == "openai":
                assert messages[at].get("name") == call.name, (
                    f"{transcript.label}: call {call} paired with a result named "
                    f"{messages[at].get('name')!r}"
                )
        # The cut right after a call is open until its result has arrived.
        for call, at in zip(ref.calls, ref.resolved_at, strict=True):
            end = ref.message_count if at is None else at
            for cut in range(call.message_index + 1, end + 1):
                assert cut not in closed, f"{transcript.label}: cut {cut} should be open"
        # Parallel turns: a cut between two results of one turn stays open.
        for index in range(ref.message_count):
            group = [
                at
                for c, at in zip(ref.calls, ref.resolved_at, strict=True)
                if c.message_index == index
            ]
            answered = [at for at in group if at is not None]
            if len(group) > 1 and len(answered) == len(group) and max(answered) > min(answered):
                assert min(answered) + 1 not in closed, transcript.label
                open_inside_parallel_turns += 1
        assert 0 in closed, f"{transcript.label}: cut 0 is always closed"
        naive = closed_cuts_by_id_alone(ref.message_count, ref.calls, ref.results)
        differs_from_id_alone += naive != ref.closed_cuts
    # Reused ids make id-only pairing wrong somewhere in this corpus.
    assert differs_from_id_alone > 0, "expected id reuse to defeat id-only pairing"
    if source_facts(corpus)["widest_turn"] > 1:
        assert open_inside_parallel_turns > 0, "expected cuts inside parallel turns"


def test_reference_on_damaged_transcripts(corpus: list[Transcript]) -> None:
    """The damaged copies produce exactly the open calls and orphans predicted."""
    checked = 0
    for transcript in corpus:
        calls, _ = extract(transcript.format, transcript.messages)
        for dropped, variant in damaged_variants(transcript):
            ref = reference(variant)
            dropped_calls = [c for c in calls if c.message_index == dropped]
            if dropped_calls:
                # The call's turn is gone: each of its results is an orphan.
                assert ref.open_calls == [], variant.label
                orphan_ids = sorted(r.id for r in ref.orphan_results)
                assert orphan_ids == sorted(c.id for c in dropped_calls), variant.label
            else:
                # A result is gone: the next result with that id answers the call it
                # follows, so the call that lost its result is the open one.
                assert ref.orphan_results == [], variant.label
                assert len(ref.open_calls) == 1, variant.label
                (still_open,) = ref.open_calls
                same_id = [c for c in ref.calls if c.id == still_open.id]
                assert len(same_id) > 1, variant.label
                assert still_open.message_index < dropped, f"{variant.label}: {still_open}"
                assert still_open == [c for c in same_id if c.message_index < dropped][-1]
                assert ref.message_count not in ref.closed_cuts, variant.label
            checked += 1
    assert checked > 0, "expected transcripts with reused ids to damage"


# --------------------------------------------------------------------------
# The CLI against the reference
# --------------------------------------------------------------------------


def check_against_reference(
    transcripts: Sequence[Transcript], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run ``check`` on each transcript in-process and compare with the reference."""
    problems: list[str] = []
    failing: set[str] = set()
    for number, transcript in enumerate(transcripts):
        label = transcript.label
        path = tmp_path / f"transcript_{number:04d}.json"
        path.write_text(json.dumps(transcript.messages), encoding="utf-8")
        try:
            code, out = run_check(path, capsys)
        except (Exception, SystemExit) as error:
            failing.add(label)
            problems.append(f"{label}: check raised {error!r}")
            continue
        report, found = parse_report(label, code, out)
        if not found:
            found = compare_report(label, reference(transcript).expected_report(), report)
        if found:
            failing.add(label)
            problems.extend(found)
    assert not problems, (
        f"{len(failing)} of {len(transcripts)} transcripts disagree with the reference:\n"
        + "\n".join(problems[:20])
    )


def test_check_matches_reference_on_every_transcript(
    corpus: list[Transcript], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``check --format json`` agrees with the reference on all transcripts."""
    check_against_reference(corpus, tmp_path, capsys)


def test_check_matches_reference_on_damaged_transcripts(
    corpus: list[Transcript], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Open calls and orphan results, from real transcripts with one message removed."""
    variants = [variant for t in corpus for _, variant in damaged_variants(t)]
    assert variants, "expected transcripts with reused ids to damage"
    check_against_reference(variants, tmp_path, capsys)


def test_check_console_entry_point(corpus: list[Transcript], tmp_path: Path) -> None:
    """``python -m otel_compaction check`` works as a real process."""
    transcript = showcase(corpus, "tau2" if any(t.format == "tau2" for t in corpus) else "openai")
    path = tmp_path / "transcript.json"
    path.write_text(json.dumps(transcript.messages), encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, "-m", "otel_compaction", "check", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO_ROOT,
    )
    label = transcript.label
    report, problems = parse_report(label, completed.returncode, completed.stdout)
    assert not problems, "\n".join([*problems, f"stderr: {completed.stderr[-2000:]}"])
    problems = compare_report(label, reference(transcript).expected_report(), report)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("fmt", ["openai", "tau2"])
def test_jsonl_and_wrapped_object_agree(
    fmt: str, corpus: list[Transcript], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JSONL file and a ``{"messages": [...]}`` file give the same closed cuts."""
    transcript = showcase(corpus, fmt)
    label = transcript.label
    jsonl = tmp_path / "transcript.jsonl"
    jsonl.write_text(
        "".join(json.dumps(message) + "\n" for message in transcript.messages), encoding="utf-8"
    )
    wrapped = tmp_path / "transcript.json"
    wrapped.write_text(json.dumps({"messages": transcript.messages}), encoding="utf-8")

    cuts: dict[str, object] = {}
    for path in (jsonl, wrapped):
        code, out = run_check(path, capsys)
        report, problems = parse_report(f"{label} ({path.name})", code, out)
        assert not problems, "\n".join(problems)
        assert isinstance(report, dict), f"{label} ({path.name}): report is not an object"
        cuts[path.name] = report.get("closed_cuts")

    expected = reference(transcript).closed_cuts
    from_jsonl, from_wrapped = cuts[jsonl.name], cuts[wrapped.name]
    assert isinstance(from_jsonl, list), f"{label}: JSONL closed_cuts is {from_jsonl!r:.200}"
    assert isinstance(from_wrapped, list), f"{label}: wrapped closed_cuts is {from_wrapped!r:.200}"
    assert from_jsonl == from_wrapped, (
        f"{label}: JSONL vs wrapped object: {first_difference(from_jsonl, from_wrapped)}"
    )
    assert from_jsonl == expected, f"{label}: {first_difference(expected, from_jsonl)}"
