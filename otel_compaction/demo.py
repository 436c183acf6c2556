"""``otel-compaction demo``: a naive token-threshold compactor against the guarded one.

This is a simulation, and says so in its output: a scripted agent (no model) reconfigures a
fleet of services through tools whose results arrive one to four steps after the call, so the
context fills up while calls are in flight. The agent decides only from what its transcript
shows, like a model does: a stage is done when it sees the call and its result (or a summary
that says so), in flight when it sees the call alone. A result whose call it can no longer see
cannot be bound to anything, and the stage looks undone, so the agent emits the call again: the
duplicate side effect of the failure this package exists for.

The naive compactor cuts at a token fraction and writes a past-tense narrative, as a
model-written summary of prose tends to. The guarded compactor asks the gate, summarizes from
structured input, verifies the summary and archives the original. Both runs of a seed see the
same tool latencies and contents. Every number printed is counted from the runs.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from otel_compaction import semconv
from otel_compaction.archive import Archive
from otel_compaction.compactor import GuardedCompactor, char_estimate
from otel_compaction.context import conversation
from otel_compaction.errors import CompactionRefused
from otel_compaction.telemetry import Telemetry, configure
from otel_compaction.transcript import Transcript

__all__ = ["ConsoleDecisionExporter", "DemoConfig", "RunStats", "demo_telemetry", "run_demo"]

STAGES = ("read_file", "write_file", "search_logs", "restart_service")
SIDE_EFFECTS = frozenset({"write_file", "restart_service"})
SERVICES = (
    "svc-payments", "svc-orders", "svc-search", "svc-auth", "svc-mail", "svc-media",
    "svc-billing", "svc-geo", "svc-cart", "svc-ledger",
)  # fmt: skip
_SUMMARY_MARK = "[Summary of compacted messages"
_NARRATIVE_MARK = "[Earlier conversation, summarized]"


@dataclass(frozen=True)
class DemoConfig:
    """How the simulation runs."""

    runs: int = 12
    seed: int = 1
    services: int = 6
    budget: int = 2_400
    max_steps: int = 400


@dataclass
class RunStats:
    """What one run of one compactor did, counted as it happened."""

    compactor: str
    seed: int
    compactions: int = 0
    severed: int = 0
    deferrals: int = 0
    refusals: int = 0
    peak_tokens: int = 0
    steps: int = 0
    finished: bool = False
    holding: bool = False
    held_steps: int = 0
    side_effects: Counter[tuple[str, str]] = field(default_factory=Counter)

    @property
    def duplicates(self) -> int:
        """Side effects performed more than once (the same tool on the same service)."""
        return sum(count - 1 for count in self.side_effects.values() if count > 1)


# -- the environment: tools with latency ----------------------------------------------------------


@dataclass
class _Pending:
    due: int
    order: int
    call_id: str
    content: str


class _Tools:
    """Runs tool calls; results come back after a latency drawn from the run's seed."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._queue: list[_Pending] = []
        self._order = 0

    def call(self, step: int, call_id: str, tool: str, service: str) -> None:
        rng = self._rng
        if tool == "read_file":
            lines = [f"{key}: {rng.randint(1, 9999)}" for key in _CONFIG_KEYS]
            content = f"# /srv/{service}/config.yaml\nport: 8080\ntls: false\n" + "\n".join(lines)
        elif tool == "write_file":
            content = f"wrote {len(_CONFIG_KEYS) + 2} lines to /srv/{service}/config.yaml"
        elif tool == "search_logs":
            if rng.random() < 0.6:
                content = f"no matches for 'TLS handshake error' in {service} logs (24h)"
            else:
                content = "\n".join(
                    f"2026-11-2{rng.randint(0, 8)}T0{rng.randint(0, 9)}:00Z {service} WARN "
                    f"slow TLS handshake {rng.randint(100, 900)}ms"
                    for _ in range(rng.randint(3, 8))
                )
        else:
            content = f"{service} restarted; health check passed ({rng.randint(2, 9)} replicas)"
        self._order += 1
        self._queue.append(_Pending(step + rng.randint(1, 4), self._order, call_id, content))

    def due(self, step: int) -> list[_Pending]:
        ready = sorted((p for p in self._queue if p.due <= step), key=lambda p: (p.due, p.order))
        self._queue = [p for p in self._queue if p.due > step]
        return ready

    def idle(self) -> bool:
        return not self._queue


_CONFIG_KEYS = (
    "max_connections", "pool_size", "read_timeout_ms", "write_timeout_ms", "retry_budget",
    "cache_ttl_s", "log_level_code", "worker_threads", "queue_depth", "shard_count",
)  # fmt: skip


# -- the scripted agent ---------------------------------------------------------------------------


class _Agent:
    """Chooses the next call from the transcript alone; one call a step."""

    def __init__(self, services: Sequence[str]) -> None:
        self.services = list(services)
        self._ids = 0

    def next_call(self, messages: list[dict[str, Any]]) -> tuple[str, str, str] | None:
        done, in_flight = _read_progress(messages)
        for service in self.services:
            for stage in STAGES:
                if (stage, service) in done:
                    continue
                if (stage, service) in in_flight:
                    break
                self._ids += 1
                return f"call_{self._ids}", stage, service
        return None

    def finished(self, messages: list[dict[str, Any]]) -> bool:
        done, _ = _read_progress(messages)
        return all((stage, s) in done for s in self.services for stage in STAGES)


def _read_progress(
    messages: list[dict[str, Any]],
) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """What the transcript shows as done and as in flight, by (stage, service)."""
    visible: dict[str, tuple[str, str]] = {}
    done: set[tuple[str, str]] = set()
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            done |= _summary_says_done(content, visible)
        for call in message.get("tool_calls") or ():
            arguments = json.loads(call["function"]["arguments"])
            visible[call["id"]] = (call["function"]["name"], arguments["service"])
        if message.get("role") == "tool":
            bound = visible.pop(message["tool_call_id"], None)
            if bound is not None:  # a result whose call is gone binds to nothing
                done.add(bound)
    return done, set(visible.values())


def _summary_says_done(text: str, visible: dict[str, tuple[str, str]]) -> set[tuple[str, str]]:
    done: set[tuple[str, str]] = set()
    if text.startswith(_NARRATIVE_MARK):
        for line in text.splitlines()[1:]:
            if line.startswith("- ran "):
                _, _, tool, _, service = line.split(" ", 4)
                done.add((tool, service.rstrip(".")))
    elif text.startswith(_SUMMARY_MARK):
        for line in text.splitlines():
            if line.startswith("- ") and "[call_" in line and "-> result" in line:
                tool = line[2:].split("(", 1)[0]
                service = line.split('"service": "', 1)[1].split('"', 1)[0]
                done.add((tool, service))
            elif line.startswith("- tool_call ") and "(call_" in line:
                # A call still pending: the agent keeps it in flight and can bind its result.
                name = line.split()[1]
                call_id = line.split("(", 1)[1].split(")", 1)[0]
                visible[call_id] = (name, "?")
    return done


def _call_message(call_id: str, tool: str, service: str) -> dict[str, Any]:
    arguments = json.dumps({"service": service, "path": f"/srv/{service}/config.yaml"})
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": tool, "arguments": arguments},
            }
        ],
    }


# -- the naive compactor --------------------------------------------------------------------------


def _naive_compact(messages: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], int]:
    """Cut at the token fraction, summarize as narrative; return the transcript and how many
    calls the cut severed from their results."""
    tokens = [char_estimate(json.dumps(m)) for m in messages]
    head = 2
    excess = sum(tokens) - budget // 2
    cut, covered = head, 0
    while cut < len(messages) - 2 and covered < excess:
        covered += tokens[cut]
        cut += 1
    if cut <= head:
        return messages, 0
    span = messages[head:cut]
    transcript = Transcript.parse(span)
    severed = len(transcript.open_calls())
    lines = [_NARRATIVE_MARK]
    for message in span:  # what an earlier summary said is folded in, as a model would
        content = message.get("content")
        if isinstance(content, str) and content.startswith(_NARRATIVE_MARK):
            lines.extend(line for line in content.splitlines()[1:] if line.startswith("- ran "))
    for call in transcript.calls:
        service = json.loads(call.arguments)["service"]
        if call.result is None:
            lines.append(f"The agent was configuring {service}.")
        else:
            lines.append(f"- ran {call.name} for {service}.")
    summary = {"role": "user", "content": "\n".join(lines)}
    return [*messages[:head], summary, *messages[cut:]], severed


# -- one run --------------------------------------------------------------------------------------


def _run(
    kind: str, seed: int, config: DemoConfig, telemetry: Telemetry | None, archive_dir: Path
) -> RunStats:
    rng = random.Random(seed)
    services = rng.sample(SERVICES, config.services)
    stats = RunStats(kind, seed)
    tools = _Tools(seed)
    agent = _Agent(services)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a deployment agent (simulated)."},
        {"role": "user", "content": f"Move {', '.join(services)} to port 8443 with TLS."},
    ]
    compactor = None
    handles: dict[str, Any] = {}
    if kind == "guarded":
        compactor = GuardedCompactor(
            budget=config.budget,
            archive=Archive(archive_dir / f"run-{seed}.sqlite3"),
            token_counter=char_estimate,
            telemetry=telemetry,
        )
    with conversation(f"demo-{kind}-{seed}"):
        for step in range(config.max_steps):
            stats.steps = step + 1
            for result in tools.due(step):
                messages.append(
                    {"role": "tool", "tool_call_id": result.call_id, "content": result.content}
                )
                handle = handles.pop(result.call_id, None)
                if handle is not None:
                    handle.result(result.content)
            if agent.finished(messages) and tools.idle():
                stats.finished = True
                break
            # After a refusal the orchestrator holds the agent until the open calls resolve
            # and a compaction goes through: new calls would only add to the pressure.
            chosen = None if stats.holding else agent.next_call(messages)
            if chosen is not None:
                call_id, tool, service = chosen
                messages.append(_call_message(call_id, tool, service))
                tools.call(step, call_id, tool, service)
                if tool in SIDE_EFFECTS:
                    stats.side_effects[(tool, service)] += 1
                if telemetry is not None and compactor is not None:
                    handles[call_id] = telemetry.recorder.call(
                        tool, call_id, arguments={"service": service}
                    )
            messages = _compact(kind, messages, config, compactor, stats)
            stats.peak_tokens = max(
                stats.peak_tokens, sum(char_estimate(json.dumps(m)) for m in messages)
            )
    for handle in handles.values():
        handle.abandon("simulation ended")
    if compactor is not None and compactor.archive is not None:
        compactor.archive.close()
    return stats


def _compact(
    kind: str,
    messages: list[dict[str, Any]],
    config: DemoConfig,
    compactor: GuardedCompactor | None,
    stats: RunStats,
) -> list[dict[str, Any]]:
    tokens = sum(char_estimate(json.dumps(m)) for m in messages)
    if tokens <= 0.7 * config.budget:
        stats.holding = False
        return messages
    if compactor is None:
        compacted, severed = _naive_compact(messages, config.budget)
        if compacted is not messages:
            stats.compactions += 1
            stats.severed += severed
        return compacted
    try:
        result = compactor.compact(messages)
    except CompactionRefused:
        stats.refusals += 1
        stats.holding = True
        stats.held_steps += 1
        return messages
    if not result.compacted or result.decision is None or result.span is None:
        return messages
    stats.holding = False
    stats.compactions += 1
    if result.decision.action == "defer":
        stats.deferrals += 1
    start, end = result.span
    stats.severed += len(Transcript.parse(messages[start:end]).open_calls())
    return result.messages


# -- telemetry for the demo -----------------------------------------------------------------------


class ConsoleDecisionExporter(SpanExporter):
    """Prints the gate's and the compactor's spans as one line each; tool spans are counted."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.tool_spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            attributes = dict(span.attributes or {})
            if span.name == semconv.EVALUATE_SPAN:
                events = ",".join(e.name for e in span.events)
                self._stream.write(
                    f"span {span.name} {attributes.get(semconv.GEN_AI_CONVERSATION_ID, '')} "
                    f"action={attributes.get(semconv.ACTION)} "
                    f"span={attributes.get(semconv.SPAN_START)}:{attributes.get(semconv.SPAN_END)} "
                    f"events={events}\n"
                )
            elif span.name == semconv.APPLY_SPAN:
                self._stream.write(
                    f"span {span.name} {attributes.get(semconv.GEN_AI_CONVERSATION_ID, '')} "
                    f"tokens={attributes.get(semconv.TOKENS_BEFORE)}->"
                    f"{attributes.get(semconv.TOKENS_AFTER)} "
                    f"archive={attributes.get(semconv.ARCHIVE_HANDLE)}\n"
                )
            else:
                self.tool_spans += 1
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._stream.flush()


def demo_telemetry(stream: TextIO | None) -> tuple[Telemetry, ConsoleDecisionExporter | None]:
    """OTLP as the ``OTEL_*`` variables say when an endpoint is set; otherwise decision spans
    as lines on `stream` (None: recorded, not printed)."""
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    ):
        return configure(set_global=False), None
    provider = TracerProvider(resource=Resource.create({"service.name": "otel-compaction-demo"}))
    exporter = None
    if stream is not None:
        exporter = ConsoleDecisionExporter(stream)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return (
        configure(tracer_provider=provider, meter_provider=MeterProvider(), set_global=False),
        exporter,
    )


# -- the report -----------------------------------------------------------------------------------


def run_demo(
    config: DemoConfig,
    *,
    telemetry: Telemetry | None = None,
    out: TextIO = sys.stdout,
    progress: TextIO | None = sys.stderr,
) -> list[tuple[RunStats, RunStats]]:
    """Run every seed with both compactors, print the table, and return the stats."""
    pairs: list[tuple[RunStats, RunStats]] = []
    with tempfile.TemporaryDirectory(prefix="otel-compaction-demo-") as directory:
        for number in range(config.runs):
            seed = config.seed + number
            naive = _run("naive", seed, config, None, Path(directory))
            guarded = _run("guarded", seed, config, telemetry, Path(directory))
            pairs.append((naive, guarded))
            if progress is not None:
                progress.write(
                    f"[{number + 1}/{config.runs}] seed {seed}: naive {naive.steps} steps, "
                    f"guarded {guarded.steps} steps\n"
                )
                progress.flush()
    _table(out, config, pairs)
    return pairs


def _table(out: TextIO, config: DemoConfig, pairs: list[tuple[RunStats, RunStats]]) -> None:
    w = out.write
    w(
        "otel-compaction demo (simulation: a scripted agent, no model, reconfigures "
        f"{config.services} services;\ntool results arrive 1-4 steps after the call; budget "
        f"{config.budget} tokens, compaction above 70%)\n\n"
    )
    header = (
        f"{'seed':>4}  {'':7} {'compactions':>11} {'severed':>7} {'duplicates':>10} "
        f"{'deferrals':>9} {'refusals':>8} {'peak tokens':>11} {'done':>5}"
    )
    w(header + "\n" + "-" * len(header) + "\n")
    for naive, guarded in pairs:
        for stats in (naive, guarded):
            seed = f"{stats.seed:>4}" if stats is naive else " " * 4
            w(
                f"{seed}  {stats.compactor:7} {stats.compactions:>11} {stats.severed:>7} "
                f"{stats.duplicates:>10} {stats.deferrals:>9} {stats.refusals:>8} "
                f"{stats.peak_tokens:>11} {'yes' if stats.finished else 'no':>5}\n"
            )
    w("-" * len(header) + "\n")
    for index, name in enumerate(("naive", "guarded")):
        runs = [pair[index] for pair in pairs]
        w(
            f"{'all':>4}  {name:7} {sum(r.compactions for r in runs):>11} "
            f"{sum(r.severed for r in runs):>7} {sum(r.duplicates for r in runs):>10} "
            f"{sum(r.deferrals for r in runs):>9} {sum(r.refusals for r in runs):>8} "
            f"{max(r.peak_tokens for r in runs):>11} "
            f"{sum(r.finished for r in runs):>2}/{len(runs):<2}\n"
        )
    naive_dup = sum(p[0].duplicates for p in pairs)
    guarded_dup = sum(p[1].duplicates for p in pairs)
    w(
        f"\nduplicate side effects: naive {naive_dup} in "
        f"{sum(1 for p in pairs if p[0].duplicates)} of {len(pairs)} runs, guarded {guarded_dup} "
        f"in {sum(1 for p in pairs if p[1].duplicates)} of {len(pairs)} runs\n"
    )
