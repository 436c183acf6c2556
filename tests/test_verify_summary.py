"""`verify_summary` against summaries written the way a careful model writes them.

`tests/data/summaries/cases.json` holds summaries of spans of real transcripts (and of a
coding-agent session), each labelled with exactly what it fails to carry: relative paths for
absolute ones, "searched X, nothing found", no call ids, and some deliberately missing an
identifier or a negative, or stating a negative without a negation. The verifier must report
exactly the labels: no good summary rejected, no miss let through.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from otel_compaction import verify_summary
from otel_compaction.analysis import Negative
from otel_compaction.rules.base import ObligationRef
from otel_compaction.verification import verify

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


# --------------------------------------------------------------------------------------------
# Verification by binding, on a Claude Code-style session (Anthropic Messages blocks)
# --------------------------------------------------------------------------------------------


def _use(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
    return {"role": "assistant", "content": [block]}


def _result(call_id: str, text: str) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": True}
    return {"role": "user", "content": [block]}


DEMO: list[dict[str, Any]] = [
    {"role": "user", "content": "Fix the failing tests in /path/to/Demo."},
    _use("c1", "Bash", command="mix test test/foo_test.exs", description="Run", timeout=120000),
    _result("c1", "3 tests, 1 failure\n  1) test greets (FooTest)\n     test/foo_test.exs:12"),
    _use("c2", "Grep", pattern="legacy_greeting", path="/path/to/Demo/lib", output_mode="content"),
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "c2", "content": "No matches found"}],
    },
    _use("c3", "Bash", command="git push origin main"),
    _result("c3", "! [rejected] main -> main (fetch first)\nerror: failed to push some refs"),
    _use("c4", "Read", file_path="/path/to/Demo/lib/missing.ex"),
    _result("c4", "File does not exist."),
    {"role": "assistant", "content": "Looked around."},
    {"role": "user", "content": "ok"},
]
CLOSING = (
    "If you need specific details from before compaction (like exact code snippets, error "
    "messages, or content you generated), read the full transcript at: /root/s.jsonl\n"
    "Please continue the conversation from where we left it off without asking the user any "
    "further questions. Continue with the last task that you were asked to work on."
)


@pytest.mark.parametrize(
    ("summary", "negative", "carried"),
    [
        # Not carried: generic words share a sentence with a negation.
        ("We ran mix and git here; no changes needed.", 2, False),  # a program name alone
        ("We ran mix and git here; no changes needed.", 6, False),
        ("Output in content mode showed nothing new.", 4, False),  # an output_mode value
        ("Commands ran with a 120000 ms timeout and none hung.", 2, False),  # a timeout value
        (CLOSING, 8, False),  # Claude Code's closing boilerplate ("read", "error")
        ("4. Errors and fixes:\n   - None.", 8, False),  # the section header
        # the call named under the heading, how it failed left out
        ("4. Errors and fixes:\n   - `mix test test/foo_test.exs`: the greeting is off.", 2, False),
        # Carried: the subject bound with a failure, in other words.
        ("`mix test` failed with 3 failures in test/foo_test.exs.", 2, True),
        ("4. Errors and fixes:\n   - `mix test test/foo_test.exs`: 1 failure (greets).", 2, True),
        ("- Grep for `legacy_greeting` in /path/to/Demo/lib:\n  - came back empty", 4, True),
        ("git push origin main was rejected (fetch first).", 6, True),
        ("Reading lib/missing.ex failed: the file does not exist.", 8, True),
    ],
    ids=[
        "program-name-mix", "program-name-git", "output-mode", "timeout", "closing-boilerplate",
        "errors-header", "named-under-errors-heading", "mix-test-failed", "under-errors-heading",
        "bullet-and-sub-bullet", "git-push", "relative-path",
    ],
)  # fmt: skip
def test_a_negative_is_carried_only_where_its_subject_is_bound(
    summary: str, negative: int, carried: bool
) -> None:
    check = verify_summary(DEMO, (1, 9), summary)
    assert {n.message_index for n in check.missing_negatives} >= {2, 4, 6, 8} - {negative}
    assert (negative not in {n.message_index for n in check.missing_negatives}) is carried


@dataclass(frozen=True)
class _Owed:
    identifiers: tuple[str, ...] = ()
    negatives: tuple[Negative, ...] = ()
    pending: tuple[ObligationRef, ...] = ()


@pytest.mark.parametrize(
    ("summary", "owed", "missing"),
    [
        ("Edited mix.exs and lib/demo.ex.", ("/path/to/Demo/mix.exs", "/path/to/Demo/lib/demo.ex"),
         ()),  # a root file by its bare name
        ("Added .dialyzerignore; lib/demo.ex unchanged.",
         ("/path/to/Demo/.dialyzerignore", "/path/to/Demo/lib/demo.ex"), ()),
        ("- in `lib/foo/`: `bar.ex`, `baz.ex`",
         ("/path/to/Demo/lib/foo/bar.ex", "/path/to/Demo/lib/foo/baz.ex"), ()),
        ("- Files in `lib/foo/`:\n  - `bar.ex`: the greeter\n  - `baz.ex`",
         ("/path/to/Demo/lib/foo/bar.ex", "/path/to/Demo/lib/foo/baz.ex"), ()),
        ("Edited qux.ex.", ("/path/to/Demo/lib/deep/qux.ex",),
         ("/path/to/Demo/lib/deep/qux.ex",)),  # one path alone has no root
        ("Edited bar.ex and mix.exs.", ("/path/to/Demo/lib/foo/bar.ex", "/path/to/Demo/mix.exs"),
         ("/path/to/Demo/lib/foo/bar.ex",)),  # bar.ex is not a root file
    ],
    ids=["root-file", "dotfile", "listed-inline", "listed-under", "no-root", "not-root"],
)  # fmt: skip
def test_a_path_is_carried_by_its_name_at_its_root_or_under_its_folder(
    summary: str, owed: tuple[str, ...], missing: tuple[str, ...]
) -> None:
    assert verify(summary, _Owed(identifiers=owed)).missing_identifiers == missing


RETRY = ObligationRef("retry", "c1", 1, "Bash", ("mix test test/foo_test.exs",))


@pytest.mark.parametrize(
    ("summary", "carried"),
    [
        ("7. Pending Tasks:\n   - Re-run `mix test test/foo_test.exs` after fixing it.", True),
        ("8. Current Work:\n   Fixing lib/foo.ex, then `mix test test/foo_test.exs` again.", True),
        ("9. Optional Next Step:\n   Re-run `mix test` on test/foo_test.exs.", True),
        ("5. Problem Solving:\n   - Ran `mix test test/foo_test.exs`.", False),
    ],
    ids=["pending-tasks", "current-work", "next-step", "problem-solving-is-not-pending"],
)
def test_a_pending_item_is_carried_under_a_pending_heading(summary: str, carried: bool) -> None:
    assert verify(summary, _Owed(pending=(RETRY,))).ok is carried
