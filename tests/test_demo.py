"""The demo reproduces the severed-call failure with the naive compactor and not with the
guarded one, and every number it prints comes from the runs."""

from __future__ import annotations

import io
import json
import re

import pytest
from telemetry_harness import make_pipeline

from otel_compaction.cli import main
from otel_compaction.demo import DemoConfig, RunStats, _read_progress, run_demo


@pytest.fixture(scope="module")
def twelve_runs() -> tuple[list[tuple[RunStats, RunStats]], str]:
    out = io.StringIO()
    pairs = run_demo(DemoConfig(runs=12, seed=1), out=out, progress=None)
    return pairs, out.getvalue()


def test_naive_compactor_repeats_side_effects_and_guarded_never_does(
    twelve_runs: tuple[list[tuple[RunStats, RunStats]], str],
) -> None:
    pairs, _ = twelve_runs
    assert len(pairs) == 12
    naive = [n for n, _ in pairs]
    guarded = [g for _, g in pairs]
    assert sum(r.duplicates for r in naive) > 0
    assert sum(1 for r in naive if r.duplicates) >= 6
    assert sum(r.severed for r in naive) > 0
    assert [r.duplicates for r in guarded] == [0] * 12
    assert [r.severed for r in guarded] == [0] * 12
    assert all(r.finished for r in guarded)
    assert sum(r.compactions for r in guarded) > 0
    # Each side effect happened exactly once under the guarded compactor.
    for run in guarded:
        assert set(run.side_effects.values()) == {1}
        assert len(run.side_effects) == 2 * 6


def test_every_printed_number_comes_from_the_runs(
    twelve_runs: tuple[list[tuple[RunStats, RunStats]], str],
) -> None:
    pairs, text = twelve_runs
    rows = [
        line.split()
        for line in text.splitlines()
        if re.match(r"^\s+(\d+\s+)?(naive|guarded)\s", line)
    ]
    assert len(rows) == 24
    paired_rows = list(zip(rows[::2], rows[1::2], strict=True))
    for (naive, guarded), (naive_row, guarded_row) in zip(pairs, paired_rows, strict=True):
        assert naive_row[0] == str(naive.seed)
        for stats, row in ((naive, naive_row[1:]), (guarded, guarded_row)):
            assert row[0] == stats.compactor
            expected = [stats.compactions, stats.severed, stats.duplicates, stats.deferrals,
                        stats.refusals, stats.peak_tokens]  # fmt: skip
            assert [int(v) for v in row[1:7]] == expected
    totals = {m.group(1): m.group(2) for m in re.finditer(r"all\s+(naive|guarded)\s+(.*)", text)}
    naive_dup = sum(n.duplicates for n, _ in pairs)
    assert totals["naive"].split()[2] == str(naive_dup)
    assert f"duplicate side effects: naive {naive_dup} in" in text
    assert "guarded 0 in 0 of 12 runs" in text
    assert "simulation" in text


def test_seeds_change_the_numbers() -> None:
    first = run_demo(DemoConfig(runs=3, seed=1), out=io.StringIO(), progress=None)
    second = run_demo(DemoConfig(runs=3, seed=40), out=io.StringIO(), progress=None)
    again = run_demo(DemoConfig(runs=3, seed=1), out=io.StringIO(), progress=None)
    summary = [(n.duplicates, n.severed, g.peak_tokens) for n, g in first]
    assert summary == [(n.duplicates, n.severed, g.peak_tokens) for n, g in again]
    assert summary != [(n.duplicates, n.severed, g.peak_tokens) for n, g in second]


def test_agent_cannot_bind_a_result_whose_call_is_gone() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "write_file", "arguments": json.dumps({"service": "svc-a"})},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": "call_1", "content": "wrote"}
    assert _read_progress([call, result]) == ({("write_file", "svc-a")}, set())
    assert _read_progress([call]) == (set(), {("write_file", "svc-a")})
    # The call was compacted away: the result binds to nothing, the write looks undone.
    assert _read_progress([result]) == (set(), set())


def test_guarded_runs_record_decisions_and_tool_calls_as_spans() -> None:
    pipeline = make_pipeline()
    pairs = run_demo(
        DemoConfig(runs=1, seed=2), telemetry=pipeline.telemetry, out=io.StringIO(), progress=None
    )
    guarded = pairs[0][1]
    spans = pipeline.spans()
    pipeline.shutdown()
    names = [s.name for s in spans]
    applied = [s for s in spans if s.name == "compaction.apply"]
    evaluations = [s for s in spans if s.name == "compaction.evaluate"]
    # Every evaluation that was not a refusal was applied; some applications held the span
    # (a summary no smaller than the span), and only the rest count as compactions.
    assert len(evaluations) == len(applied) + guarded.refusals
    compacted = [s for s in applied if s.attributes and s.attributes["compaction.compacted"]]
    assert len(compacted) == guarded.compactions
    side_effect_calls = sum(guarded.side_effects.values())
    assert (
        sum(
            1
            for n in names
            if n.startswith(("execute_tool write_file", "execute_tool restart_service"))
        )
        == side_effect_calls
    )
    assert all(
        s.attributes and s.attributes["gen_ai.conversation.id"] == "demo-guarded-2"
        for s in evaluations
    )


def test_cli_demo_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--runs", "2", "--quiet"]) == 0
    out = capsys.readouterr()
    assert "duplicate side effects: naive" in out.out
    assert out.err == ""
    assert main(["demo", "--runs", "0"]) == 2
    assert "--runs" in capsys.readouterr().err
