"""The re-issue logic the audit, the CLI hooks and the ledger share: labelled cases (which calls
after a compaction repeat a side effect it removed from context, and which do not), and the
ledger's store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_compaction.analysis import Analysis
from otel_compaction.archive import Archive
from otel_compaction.policy import Policy
from otel_compaction.reissue import records_of, reissues, repeat_of
from otel_compaction.transcript import ToolCall, Transcript

POLICY = Policy.load("default")


def _call(n: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"c{n}",
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(arguments)},
    }


def _turn(n: int, tool: str, arguments: dict[str, Any], result: str) -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": None, "tool_calls": [_call(n, tool, arguments)]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": result},
    ]


PUSH = (
    "Bash",
    {"command": "git push origin main"},
    "To github.com:o/r.git\n   1a..2b  main -> main",
)
COMMIT = ("Bash", {"command": "git commit -am 'fix totals'"}, "[main 2b] fix totals")
READ = ("Read", {"file_path": "/repo/shop.py"}, "def total(): ...")
EDIT = ("Edit", {"file_path": "/repo/shop.py", "old_string": "a", "new_string": "b"}, "ok")
INSTALL_FAILED = (
    "Bash",
    {"command": "pip install shopkit"},
    "Exit code 1\nERROR: No matching distribution",
)
STATUS = ("Bash", {"command": "git status"}, "nothing to commit")

CASES = {
    # before the cut, after it, expected re-issues (indices into `after`)
    "push re-issued after compaction: a true repeat": ([PUSH], [PUSH], [0]),
    "push with a read-only stage before it: the same push": (
        [PUSH],
        [("Bash", {"command": "git status && git push origin main"}, "ok")],
        [0],
    ),
    "same push, another description: the same push": (
        [PUSH],
        [("Bash", {"command": "git push  origin main", "description": "x"}, "ok")],
        [0],
    ),
    "re-read of a file: a read is no side effect": ([READ, EDIT], [READ], []),
    "read-only command repeated: no side effect": ([STATUS], [STATUS], []),
    "push after a new commit pushes the new commit": ([PUSH], [COMMIT, PUSH], []),
    "install retried after it failed: a retry, not a repeat": (
        [INSTALL_FAILED],
        [INSTALL_FAILED],
        [],
    ),
    "edit with other strings: other work on the file": (
        [EDIT],
        [("Edit", {**EDIT[1], "old_string": "b", "new_string": "c"}, "ok")],
        [],
    ),
    "second re-issue: the first one is in context": ([PUSH], [PUSH, PUSH], [0]),
}


def _transcript(before: list[Any], after: list[Any]) -> tuple[Transcript, int]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "ship it"}]
    for n, (tool, arguments, result) in enumerate(before):
        messages += _turn(n, tool, arguments, result)
    cut = len(messages)
    for n, (tool, arguments, result) in enumerate(after, start=len(before)):
        messages += _turn(n, tool, arguments, result)
    return Transcript.parse(messages), cut


@pytest.mark.parametrize("case", list(CASES))
def test_reissues(case: str) -> None:
    before, after, expected = CASES[case]
    transcript, cut = _transcript(before, after)
    analysis = Analysis.build(transcript, POLICY)
    found = reissues(transcript, analysis.outcomes, POLICY.side_effects, cut)
    assert [int(call.id[1:]) - len(before) for call, _ in found] == expected


def test_a_call_still_in_context_is_no_reissue() -> None:
    transcript, _ = _transcript([PUSH], [])
    analysis = Analysis.build(transcript, POLICY)
    records = records_of(transcript, analysis.outcomes, POLICY.side_effects)
    again = ToolCall("c9", "Bash", 0, json.dumps(PUSH[1]), 0)
    assert records[0].in_context and repeat_of(records, again, POLICY.side_effects) is None


def test_the_ledger_lives_in_the_archive(tmp_path: Path) -> None:
    transcript, _ = _transcript([PUSH, READ], [])
    analysis = Analysis.build(transcript, POLICY)
    records = records_of(
        transcript, analysis.outcomes, POLICY.side_effects, conversation_id="s1",
        context_start=len(transcript), offset=10,
    )  # fmt: skip
    with Archive(tmp_path / "a.sqlite3") as archive:
        archive.record_side_effects(records)
        archive.record_side_effects(records)  # recorded again: one row
        [stored] = archive.side_effects("s1")
        archive.mark_asked(stored)
        [asked] = archive.side_effects("s1")
    assert (stored.tool, stored.target, stored.outcome, stored.sequence) == (
        "Bash", "git push origin main", "success", 11,
    )  # fmt: skip
    assert not stored.in_context and asked.asked and not stored.asked
    again = ToolCall("c9", "Bash", 0, json.dumps(PUSH[1]), 0)
    assert repeat_of([stored], again, POLICY.side_effects) == stored


def test_the_recorder_reports_a_reissue_after_a_compaction() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_compaction.recorder import ToolCallRecorder
    from otel_compaction.telemetry.metrics import CompactionMetrics

    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    recorder = ToolCallRecorder(
        tracer_provider=tracing, metrics=CompactionMetrics(MeterProvider([reader]))
    )
    push = {"command": "git push origin main"}
    recorder.call("Bash", "p1", arguments=push, conversation_id="s").result("main -> main")
    recorder.call("Read", "r1", arguments={"file_path": "a.py"}, conversation_id="s").result("x")
    recorder.call("Bash", "p2", arguments=push, conversation_id="s").result("up to date")
    recorder.compacted("s", ["p1", "p2", "r1"])
    recorder.call("Read", "r2", arguments={"file_path": "a.py"}, conversation_id="s").result("x")
    recorder.call("Bash", "p3", arguments=push, conversation_id="s").result("up to date")
    events = [
        (s.attributes["gen_ai.tool.call.id"], dict(e.attributes or {}))
        for s in spans.get_finished_spans()
        if s.attributes
        for e in s.events
        if e.name == "compaction.reissue"
    ]
    # p2 repeated p1 in context (no re-issue); after the compaction p3 repeats p2; r2 reads.
    assert [(call, event["compaction.reissue.of"]) for call, event in events] == [("p3", "p2")]
    data = reader.get_metrics_data()
    assert data is not None
    points: list[Any] = [
        p
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "compaction.tool_calls.reissued"
        for p in m.data.data_points
    ]
    assert [(p.value, dict(p.attributes)) for p in points] == [
        (1, {"gen_ai.tool.name": "Bash", "compaction.reissue.kind": "vcs"})
    ]


# -- the recorder judges side effects by the policy's table -----------------------------------

SLACK_READS = "side_effects:\n  read_only_tools: [mcp__slack__post_message]\n"
SHIP_DEPLOYS = "side_effects:\n  commands: {deploy: ['^make\\s+ship\\b']}\n"
POST = ("mcp__slack__post_message", {"channel": "ops", "text": "deployed"})
SHIP = ("Bash", {"command": "make ship"})


def _reissued(recorder: Any, spans: Any, tool: str, arguments: dict[str, Any]) -> list[Any]:
    """The call ids with a ``compaction.reissue`` event (and what they repeat) after `tool`
    ran once, was compacted away, and ran again."""
    recorder.call(tool, "x1", arguments=arguments, conversation_id="s").result("ok")
    recorder.compacted("s", ["x1"])
    recorder.call(tool, "x2", arguments=arguments, conversation_id="s").result("ok")
    return [
        (s.attributes["gen_ai.tool.call.id"], e.attributes["compaction.reissue.of"])
        for s in spans.get_finished_spans()
        if s.attributes
        for e in s.events
        if e.name == "compaction.reissue" and e.attributes
    ]


def _pipeline() -> tuple[Any, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    return tracing, spans


POLICY_CASES = {
    "default: a message post is a side effect": (None, POST, [("x2", "x1")]),
    "the policy marks the post read-only": (SLACK_READS, POST, []),
    "default: `make ship` only builds": (None, SHIP, []),
    "the policy makes `make ship` a deploy": (SHIP_DEPLOYS, SHIP, [("x2", "x1")]),
}


@pytest.mark.parametrize("case", list(POLICY_CASES))
def test_configure_gives_the_recorder_the_policys_table(case: str) -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    from otel_compaction.ledger import ObligationLedger
    from otel_compaction.telemetry.configuration import configure

    text, (tool, arguments), expected = POLICY_CASES[case]
    policy = None if text is None else Policy.from_yaml(text)
    tracing, spans = _pipeline()
    telemetry = configure(
        ledger=ObligationLedger(), tracer_provider=tracing, meter_provider=MeterProvider(),
        set_global=False, policy=policy,
    )  # fmt: skip
    assert _reissued(telemetry.recorder, spans, tool, arguments) == expected
    assert telemetry.gate().policy.side_effects == (policy or POLICY).side_effects


@pytest.mark.parametrize("case", list(POLICY_CASES))
def test_a_compactor_with_a_policy_makes_the_recorder_judge_by_it(case: str) -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    from otel_compaction.compactor import GuardedCompactor
    from otel_compaction.ledger import ObligationLedger
    from otel_compaction.telemetry.configuration import configure

    text, (tool, arguments), expected = POLICY_CASES[case]
    tracing, spans = _pipeline()
    telemetry = configure(
        ledger=ObligationLedger(), tracer_provider=tracing, meter_provider=MeterProvider(),
        set_global=False, policy=SHIP_DEPLOYS_AND_SLACK_READS,
    )  # fmt: skip
    policy = "default" if text is None else Policy.from_yaml(text)
    GuardedCompactor(budget=1_000, policy=policy, telemetry=telemetry)
    assert _reissued(telemetry.recorder, spans, tool, arguments) == expected


def test_a_compactor_without_a_policy_keeps_the_telemetrys() -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    from otel_compaction.compactor import GuardedCompactor
    from otel_compaction.ledger import ObligationLedger
    from otel_compaction.telemetry.configuration import configure

    tracing, spans = _pipeline()
    telemetry = configure(
        ledger=ObligationLedger(), tracer_provider=tracing, meter_provider=MeterProvider(),
        set_global=False, policy=Policy.from_yaml(SHIP_DEPLOYS),
    )  # fmt: skip
    compactor = GuardedCompactor(budget=1_000, telemetry=telemetry)
    assert compactor.policy.side_effects.command_kind("make ship") == "deploy"
    assert _reissued(telemetry.recorder, spans, *SHIP) == [("x2", "x1")]


@pytest.mark.parametrize("case", list(POLICY_CASES))
def test_the_instrumentation_judges_by_its_policy(
    case: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    from otel_compaction.instrumentation import CompactionInstrumentor

    text, (tool, arguments), expected = POLICY_CASES[case]
    monkeypatch.delenv("OTEL_COMPACTION_POLICY", raising=False)
    if text is not None:  # as a deployment sets it: a policy file named in the environment
        (tmp_path / "policy.yaml").write_text(text)
        monkeypatch.setenv("OTEL_COMPACTION_POLICY", str(tmp_path / "policy.yaml"))
    tracing, spans = _pipeline()
    instrumentor = CompactionInstrumentor()
    instrumentor.instrument(tracer_provider=tracing, meter_provider=MeterProvider())
    try:
        assert instrumentor.telemetry is not None
        assert _reissued(instrumentor.telemetry.recorder, spans, tool, arguments) == expected
    finally:
        instrumentor.uninstrument()


SHIP_DEPLOYS_AND_SLACK_READS = Policy.from_yaml(
    "side_effects:\n  read_only_tools: [mcp__slack__post_message]\n"
    "  commands: {deploy: ['^make\\s+ship\\b']}\n"
)
"""A telemetry's own policy that a compactor's policy replaces: every verdict is the
compactor's (the post is a side effect and `make ship` builds under ``default``)."""


def test_a_whole_history_compaction_keeps_in_context_only_what_it_shows() -> None:
    from otel_compaction.recorder import ToolCallRecorder

    recorder = ToolCallRecorder()
    post = {"channel": "ops", "text": "deployed"}
    for call_id in ("m1", "m2"):
        recorder.call("post_message", call_id, arguments=post, conversation_id="s").result("ok")
    recorder.compacted_except("s", ["m2"])
    assert recorder.reissue_of("post_message", post, conversation_id="s") is None  # m2 shows
    recorder.compacted_except("s", [])
    repeated = recorder.reissue_of("post_message", post, conversation_id="s")
    assert repeated is not None and repeated.call_id == "m2"
    assert recorder.reissue_of("post_message", {**post, "text": "x"}, conversation_id="s") is None
    assert recorder.reissue_of("post_message", post, conversation_id="other") is None
