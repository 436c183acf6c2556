"""The demo reproduces the severed-call failure with the naive compactor and not with the
guarded one, every number it prints comes from the runs, its report fits 80 columns, and
`--plot` draws both runs of a seed."""

from __future__ import annotations

import io
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PIL import Image
from telemetry_harness import make_pipeline

from otel_compaction.cli import main
from otel_compaction.demo import DemoConfig, RunStats, _read_progress, plot, run_demo

Pairs = list[tuple[RunStats, RunStats]]


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


def _rows(text: str) -> list[list[str]]:
    return [
        line.split()
        for line in text.splitlines()
        if re.match(r"^\s+(\d+\s+)?(naive|guarded)\s+\d+\s+(-|\d+)\s", line)
    ]


def _cells(stats: RunStats, budget: int) -> list[str]:
    """A row as the table prints it: "-" where the naive compactor has no such step, the peak
    with thousands separators and "!" when it is over the budget."""
    guarded = stats.compactor == "guarded"
    return [
        stats.compactor,
        str(stats.compactions),
        str(stats.deferrals) if guarded else "-",
        str(stats.refusals) if guarded else "-",
        str(stats.severed),
        str(stats.duplicates),
        f"{stats.peak_tokens:,}" + ("!" if stats.peak_tokens > budget else ""),
        "yes" if stats.finished else "no",
    ]


def test_every_printed_number_comes_from_the_runs(twelve_runs: tuple[Pairs, str]) -> None:
    pairs, text = twelve_runs
    rows = _rows(text)
    assert len(rows) == 24
    paired_rows = list(zip(rows[::2], rows[1::2], strict=True))
    for (naive, guarded), (naive_row, guarded_row) in zip(pairs, paired_rows, strict=True):
        assert naive_row[0] == str(naive.seed)
        assert naive_row[1:] == _cells(naive, 2_400)
        assert guarded_row == _cells(guarded, 2_400)
    totals = {
        m.group(1): m.group(2).split() for m in re.finditer(r"all\s+(naive|guarded)\s+(.*)", text)
    }
    naive_runs = [n for n, _ in pairs]
    guarded_runs = [g for _, g in pairs]
    assert totals["naive"] == [
        str(sum(r.compactions for r in naive_runs)),
        "-",
        "-",
        str(sum(r.severed for r in naive_runs)),
        str(sum(r.duplicates for r in naive_runs)),
        f"{max(r.peak_tokens for r in naive_runs):,}",
        "12",
    ]
    assert totals["guarded"] == [
        str(sum(r.compactions for r in guarded_runs)),
        str(sum(r.deferrals for r in guarded_runs)),
        str(sum(r.refusals for r in guarded_runs)),
        "0",
        "0",
        f"{max(r.peak_tokens for r in guarded_runs):,}",
        "12",
    ]
    naive_peak = max(r.peak_tokens for r in naive_runs)
    guarded_peak = max(r.peak_tokens for r in guarded_runs)
    assert f"  naive    {naive_peak:>6,}  within budget in every run\n" in text
    assert f"  guarded  {guarded_peak:>6,}  within budget in every run\n" in text
    held = sum(r.held for r in guarded_runs)
    assert held == sum(sum(r.hold_reasons.values()) for r in guarded_runs) > 0
    assert (
        " ".join(text.split()).count(
            f"Held, not counted as compactions: {held} times the guarded compactor kept the "
            "transcript as it was, because the summary is no smaller than the span "
            f"({held})."
        )
        == 1
    )
    difference = guarded_peak - naive_peak
    assert (
        f"Cost of safety: the guarded runs peaked at {guarded_peak:,} tokens, {difference:,} "
        f"({difference / naive_peak:.0%}) above the naive runs' {naive_peak:,}. The naive runs "
        f"severed {sum(r.severed for r in naive_runs)} calls and repeated "
        f"{sum(r.duplicates for r in naive_runs)} side effects, in "
        f"{sum(1 for r in naive_runs if r.duplicates)} of 12 runs; the guarded runs severed and "
        "repeated none."
    ) in " ".join(text.split())
    assert text.startswith("otel-compaction demo (a simulation: a scripted agent, no model).")


def test_an_overrun_is_named_with_its_size_and_marked_in_the_table() -> None:
    out = io.StringIO()
    pairs = run_demo(DemoConfig(runs=4, seed=1, budget=1_500), out=out, progress=None)
    text = out.getvalue()
    guarded = [g for _, g in pairs]
    over = [r for r in guarded if r.peak_tokens > 1_500]
    worst = max(guarded, key=lambda r: r.peak_tokens)
    assert over, "a 1,500-token budget is too small for the guarded runs' calls in flight"
    assert (
        f"  guarded  {worst.peak_tokens:>6,}  over budget by {worst.peak_tokens - 1_500:,} "
        f"tokens (seed {worst.seed}); {len(over)} of 4 runs over budget\n"
    ) in text
    assert "  naive     1,050  within budget in every run\n" in text  # it cuts at 70%
    marked = [row for row in _rows(text) if row[-2].endswith("!")]
    assert len(marked) == len(over)
    assert re.search(rf"^ all  guarded .* {worst.peak_tokens:,}!     4$", text, re.MULTILINE)
    assert "Budget 1,500 tokens; both compactors start above 1,050 (70%)." in text


@pytest.mark.parametrize("budget", ["2400", "1500"])
def test_every_line_fits_80_columns(capsys: pytest.CaptureFixture[str], budget: str) -> None:
    assert main(["demo", "--budget", budget]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert len(lines) > 40
    assert [line for line in lines if len(line) > 80] == []
    assert out.err == ""  # no spans, and no progress off a terminal
    assert "compaction.evaluate" not in out.out


def test_verbose_prints_spans_and_never_a_compaction_that_saved_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--runs", "3", "--verbose"]) == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert [line for line in lines if len(line) > 80] == []
    # A line too long for 80 columns goes on, indented, on the next.
    spans = err.replace("\n    ", " ").splitlines()
    applied = [line.split(" ", 2)[2] for line in spans if line.startswith("compaction.apply ")]
    changes = [re.fullmatch(r"tokens=(\d+)->(\d+)", a) for a in applied]
    compacted = [(int(m[1]), int(m[2])) for m in changes if m]
    held = [a.removeprefix("held: ") for a in applied if a.startswith("held: ")]
    assert compacted and held
    assert len(compacted) + len(held) == len(applied)
    assert all(after < before for before, after in compacted)
    assert set(held) <= {
        "the summary is no smaller than the span",
        "the summary failed verification; span held verbatim",
    }
    assert sum(1 for line in lines if line.startswith("[")) == 3  # a line a seed


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
    held = [dict(s.attributes or {}) for s in applied if s not in compacted]
    assert len(held) == guarded.held > 0
    assert {a["compaction.hold.reason"] for a in held} == set(guarded.hold_reasons)
    assert all(a["compaction.tokens.before"] == a["compaction.tokens.after"] for a in held)
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


def test_cli_demo_prints_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--runs", "2", "--quiet"]) == 0
    out = capsys.readouterr()
    assert "Cost of safety: " in out.out
    assert "Next steps:\n" in out.out
    assert "  your own transcript:  otel-compaction check transcript.json\n" in out.out
    assert out.err == ""
    assert main(["demo", "--runs", "0"]) == 2
    assert "--runs" in capsys.readouterr().err
    assert main(["demo", "--verbose", "--quiet"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_cli_demo_reports_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """The same runs as data: each run's counts, and totals that are their sums."""
    assert main(["demo", "--runs", "3", "--format", "json"]) == 0
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert out.err == ""
    assert report["config"] == {
        "runs": 3, "seed": 1, "services": 6, "budget": 2400, "trigger": 0.7
    }  # fmt: skip
    assert [(r["seed"], r["compactor"]) for r in report["runs"]] == [
        (seed, name) for seed in (1, 2, 3) for name in ("naive", "guarded")
    ]
    for name, totals in report["totals"].items():
        runs = [r for r in report["runs"] if r["compactor"] == name]
        for key in ("compacted", "deferred", "refused", "held", "severed", "duplicates"):
            assert totals[key] == sum(r[key] for r in runs)
        assert totals["peak_tokens"] == max(r["peak_tokens"] for r in runs)
    assert report["totals"]["guarded"]["severed"] == 0
    assert report["totals"]["guarded"]["duplicates"] == 0
    assert report["totals"]["naive"]["severed"] > 0


# -- --plot -------------------------------------------------------------------------------------


def test_plot_draws_both_runs_of_the_first_seed_as_svg(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "demo.svg"
    assert main(["demo", "--runs", "2", "--seed", "10", "--plot", str(path)]) == 0
    assert capsys.readouterr().out.endswith(f"Seed 10, both runs, drawn in {path}\n")
    pairs = run_demo(DemoConfig(runs=1, seed=10), out=io.StringIO(), progress=None)
    naive, guarded = pairs[0]
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = {"".join(t.itertext()).strip() for t in root.iter("{http://www.w3.org/2000/svg}text")}
    assert {
        f"naive compactor (peak {naive.peak_tokens:,})",
        f"guarded compactor (peak {guarded.peak_tokens:,})",
        f"naive: compaction ({naive.compactions})",
        f"naive: duplicate side effect ({naive.duplicates})",
        f"guarded: compaction ({guarded.compactions})",
        f"guarded: refusal ({guarded.refusals})",
        "budget (2,400 tokens)",
        "compaction trigger (70% of the budget)",
        "step (one tool call a step)",
        "context tokens after the step",
        "otel-compaction demo, seed 10: naive and guarded compaction (a simulation: scripted "
        "agent, no model)",
    } <= texts
    assert guarded.refusals > 0 and "guarded: deferral (0)" not in texts


def test_plot_writes_a_png_by_its_suffix(tmp_path: Path) -> None:
    pairs = run_demo(DemoConfig(runs=1), out=io.StringIO(), progress=None)
    path = tmp_path / "demo.PNG"
    plot(*pairs[0], DemoConfig(), path)
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size == (1100, 605)  # 10 x 5.5 inches at 110 dpi
        image.verify()


def test_plot_needs_a_known_suffix_and_names_the_extra_when_matplotlib_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["demo", "--plot", str(tmp_path / "demo.pdf")]) == 2
    assert capsys.readouterr().err == (
        f"otel-compaction: error: {tmp_path / 'demo.pdf'}: a plot is written as .svg or .png, "
        "not '.pdf'\n"
    )
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert main(["demo", "--plot", str(tmp_path / "demo.svg")]) == 2
    out = capsys.readouterr()
    assert out.err == (
        "otel-compaction: error: drawing a plot needs matplotlib: pip install matplotlib "
        "(the plot extra: pip install '.[plot]' in a clone)\n"
    )
    assert out.out == ""  # refused before running anything
    assert not (tmp_path / "demo.svg").exists()
