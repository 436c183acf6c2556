"""``check``'s text output speaks one index convention, says why its span is not the one asked
for, and explains the jargon it used (and only that), as a real process prints it."""

from __future__ import annotations

import subprocess
import sys

TERMS = "terms used above:"


def check(*args: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "otel_compaction", "check", "--example", *args],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.stderr == b"", done.stderr
    return done.returncode, done.stdout.decode().splitlines()


def decision_block(lines: list[str]) -> list[str]:
    """From the decision line up to the findings of the decided span."""
    first = next(i for i, line in enumerate(lines) if line.startswith("decision: "))
    last = next(i for i in range(first, len(lines)) if lines[i].startswith("findings in span "))
    return lines[first : last + 1]


def terms(lines: list[str]) -> list[str]:
    """The names of the terms the legend explains, in order."""
    at = lines.index(TERMS)
    return [line.split(":", 1)[0].strip() for line in lines[at + 1 :]]


def test_a_moved_start_and_an_extended_end_are_explained() -> None:
    code, lines = check("--span", "0:3")
    assert code == 0
    assert decision_block(lines) == [
        "decision: COMPACT span 1:4 (requested 0:3)",
        "start moved from 0 to 1: message 0 is the protected head",
        "extended to 4: message 3 answers the call at 2",
        "findings in span 1:4 (3):",
    ]
    assert terms(lines) == [
        "span",
        "closed cut",
        "protected head",
        "extended",
        "block",
        "carry",
        "must carry",
        "contradiction probe",
    ]


def test_a_deferral_names_the_span_kept_and_why() -> None:
    code, lines = check("--span", "1:12")
    assert code == 1
    assert decision_block(lines) == [
        "decision: DEFER span 1:11 (requested 1:12)",
        "deferred to 1:11: span 1:12 holds open obligations (tool_call restart_service "
        "(call_restart_1) at message 11); span 11:12 stays verbatim",
        "findings in span 1:11 (2):",
    ]
    assert "must carry negative: message 7 search_logs: no matches in the last 24h" in lines
    assert terms(lines) == [
        "span",
        "closed cut",
        "deferral",
        "obligation",
        "block",
        "carry",
        "must carry",
        "contradiction probe",
    ]


def test_a_refusal_names_the_span_as_requested_and_the_remedy() -> None:
    code, lines = check("--span", "1:12", "--critical")
    assert code == 3
    assert decision_block(lines) == [
        "decision: REFUSE span 1:12",
        "refused: open obligations, and how to discharge them: tool_call restart_service "
        "(call_restart_1) at message 11: append its result, or force_terminal() records it "
        "abandoned",
        "findings in span 1:12 (3):",
    ]
    assert "refusal" in terms(lines) and "deferral" not in terms(lines)


def test_without_a_span_only_the_terms_used_are_explained() -> None:
    code, lines = check()
    assert code == 1
    assert lines[1] == "closed cuts (7 of 13): 0 to 2, 4, 6, 8, 11"
    assert not any(line.startswith("decision: ") for line in lines)
    assert terms(lines) == ["span", "closed cut", "block", "carry"]
    assert lines[-4].startswith("  span: START:END is half-open: messages START up to, not ")


def test_no_output_uses_an_inclusive_range() -> None:
    for args in (("--span", "0:3"), ("--span", "1:12"), ("--span", "1:12", "--critical"), ()):
        _, lines = check(*args)
        assert not any(".." in line for line in lines), args


def test_help_states_the_convention() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "otel_compaction", "check", "--help"],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert (
        "indices: messages are numbered from 0. A span START:END is half-open, as in --span:\n"
        "  messages START up to, not including, END (1:12 is messages 1 to 11). Cut i is the\n"
        "  boundary just before message i. Every span in the output is written this way.\n"
    ) in done.stdout.decode()
