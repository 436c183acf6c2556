"""Policy patterns run in linear time (RE2) or bounded time (the backtracking scan), so no
input and no user pattern can hang the gate; both engines read a pattern as Python does."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from worst_cases import WORST_CASES, conversation, user_policy_yaml

from otel_compaction import CompactionGate, Policy, verify_summary
from otel_compaction.patterns import MATCH_TIMEOUT, MAX_TIMEOUTS, Scan, compile_patterns

# Generous: each case takes milliseconds; a hang would take minutes.
HANG = 60.0


def finishes(work: Callable[[], Any]) -> Any:
    """Run `work` in a thread and fail when it has not finished within `HANG` seconds."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(work()), daemon=True)
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive(), f"still running after {HANG:.0f} s"
    return box[0]


@pytest.mark.parametrize("name", list(WORST_CASES))
def test_worst_case_inputs_complete_under_every_builtin_policy(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each completes, and no built-in pattern even needs its time bound (a list stopped
    three times would be switched off for the process)."""
    text = WORST_CASES[name]
    caplog.set_level(logging.WARNING, logger="otel_compaction.patterns")

    def every_policy() -> None:
        for policy in ("default", "strict", "lenient"):
            gate = CompactionGate(policy)
            gate.evaluate(conversation(text), 1, 4, raise_on_refuse=False)
            verify_summary(conversation(text), (1, 4), text, policy=policy)

    finishes(every_policy)
    assert [r.getMessage() for r in caplog.records] == []


def write_policy(tmp_path: Path, pattern: str) -> Policy:
    path = tmp_path / "policy.yaml"
    path.write_text(user_policy_yaml(pattern), encoding="utf-8")
    return Policy.load(path)


def test_a_catastrophic_user_pattern_runs_in_linear_time_on_re2(tmp_path: Path) -> None:
    """``(a+)+$`` backtracks for minutes in Python's `re` on 40 characters; RE2 runs it."""
    policy = write_policy(tmp_path, "(a+)+$")
    assert policy.null_regex is not None and policy.null_regex.engine == "re2"
    text = "a" * 40 + "!"
    decision = finishes(
        lambda: CompactionGate(policy).evaluate(conversation(text), 1, 4, raise_on_refuse=False)
    )
    assert decision.action == "compact"
    assert policy.null_regex.search("a" * 5_000) is not None  # and still finds what it says


def test_a_backtracking_pattern_is_stopped_and_then_switched_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A pattern RE2 cannot run (a backreference) takes the bounded scan: each match stops
    after MATCH_TIMEOUT, and after MAX_TIMEOUTS the list is switched off, with an error
    naming it."""
    policy = write_policy(tmp_path, "(a|aa)+(?=b)\\\\1")
    scan = policy.null_regex  # what reads each result's statement
    assert scan is not None and scan.engine == "bounded"
    gate = CompactionGate(policy, incremental=False)  # every evaluation reads every result
    caplog.set_level(logging.WARNING, logger="otel_compaction.patterns")
    text = "a" * 60 + "c failed"  # a statement (two words): what a result's patterns read
    for _ in range(MAX_TIMEOUTS + 2):
        finishes(lambda: gate.evaluate(conversation(text), 1, 4, raise_on_refuse=False))
    assert scan.disabled
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "switched off" in errors[0].getMessage()
    assert "(a|aa)+" in errors[0].getMessage()
    assert MATCH_TIMEOUT * MAX_TIMEOUTS < 1.0  # the documented worst case per list


@pytest.mark.parametrize(
    ("patterns", "text", "found"),
    [
        (["(?i)\\bnot found\\b"], "File NOT FOUND.", "NOT FOUND"),
        (["^\\s*null\\s*$"], "null\n", "null\n"),  # Python's $ before a final newline
        (["^\\s*null$"], "null\n", "null"),
        (["^\\s*null\\Z"], "null\n", None),
        (["(?x) \\bI \\s will  # a promise\n \\s check"], "I will check", "I will check"),
        (["with ID:?\\s*([\\w-]+)", "task_id=([\\w-]+)"], "task_id=ab-1", "task_id=ab-1"),
        (["(?<=id )\\d+"], "the id 42", "42"),  # lookbehind: the bounded scan
        (["\\bcafé\\b"], "un café noir", "café"),  # non-ASCII text
        (["\\s+x"], "a\x1cx", "\x1cx"),  # U+001C is white space to Python
    ],
)
def test_both_engines_read_patterns_as_python_does(
    patterns: list[str], text: str, found: str | None
) -> None:
    scan = compile_patterns(patterns)
    assert scan is not None
    match = scan.search(text)
    assert (match.group(0) if match else None) == found


def test_groups_of_a_joined_list_are_every_pattern_s() -> None:
    scan = Scan(["with ID:?\\s*([\\w-]+)", "task_id=([\\w-]+)"])
    match = scan.search("started task_id=ab-1")
    assert match is not None and match.groups() == (None, "ab-1")


def test_the_default_policy_scans_text_on_re2() -> None:
    """Every default list but the identifier shapes (whose lookaheads say "letters and
    digits mixed", and which only ever match one candidate value) runs on RE2."""
    policy = Policy.load("default")
    scans = {
        "null": policy.null_regex,
        "error": policy.error_regex,
        "rejection": policy.rejection_regex,
        "commitment": policy.commitment_regex,
        "conditional": policy.commitment_conditional_regex,
        "background ids": policy.background_id_regex,
        "background done": policy.background_done_regex,
        "transaction begin": policy.transaction_begin_regex,
        "transaction end": policy.transaction_end_regex,
    }
    assert {name: s.engine for name, s in scans.items() if s} == dict.fromkeys(scans, "re2")
    assert policy.identifier_regex is not None
    assert policy.identifier_regex.engine == "bounded"


def test_policy_validate_rejects_a_pattern_neither_engine_compiles(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"item 0: invalid regular expression '\(unclosed'"):
        write_policy(tmp_path, "(unclosed")
