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

The report fits an 80-column terminal: a table, a legend, the budget and any overrun, the cost
of safety and next steps. The gate's spans print as lines only when asked (`run_demo`'s
telemetry; the CLI's ``--verbose``). `plot` draws one seed's two runs, step by step, with
matplotlib (the ``plot`` extra), imported only when a picture is asked for.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from otel_compaction.archive import Archive
from otel_compaction.compactor import GuardedCompactor, char_estimate
from otel_compaction.context import conversation
from otel_compaction.errors import CompactionError, CompactionRefused
from otel_compaction.telemetry import semconv
from otel_compaction.telemetry.configuration import Telemetry, configure
from otel_compaction.tokens import message_text
from otel_compaction.transcript import Transcript

__all__ = [
    "ConsoleDecisionExporter",
    "DemoConfig",
    "RunStats",
    "demo_telemetry",
    "otlp_endpoint_set",
    "plot",
    "plot_format",
    "require_matplotlib",
    "run_demo",
]

STAGES = ("read_file", "write_file", "search_logs", "restart_service")
SIDE_EFFECTS = frozenset({"write_file", "restart_service"})
SERVICES = (
    "svc-payments", "svc-orders", "svc-search", "svc-auth", "svc-mail", "svc-media",
    "svc-billing", "svc-geo", "svc-cart", "svc-ledger",
)  # fmt: skip
TRIGGER = 0.7
"""Both compactors start above this fraction of the budget (the default policy's trigger)."""
_SUMMARY_MARK = "[Summary of compacted messages"
_NARRATIVE_MARK = "[Earlier conversation, summarized]"
DEMO_AGENT = "deployment-agent"
"""``gen_ai.agent.name`` of the simulated agent: each guarded run is one ``invoke_agent`` trace."""


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
    """What one run of one compactor did, counted as it happened.

    ``compactions`` counts the compactions applied, deferrals among them; ``held`` counts the
    compactions the guarded compactor worked out and did not apply (``hold_reasons`` says
    why), so they changed nothing. ``tokens`` is the context's size after each step, and
    ``marks`` the steps at which a compaction, deferral, refusal or duplicate side effect
    happened, for `plot`.
    """

    compactor: str
    seed: int
    compactions: int = 0
    severed: int = 0
    deferrals: int = 0
    refusals: int = 0
    held: int = 0
    hold_reasons: Counter[str] = field(default_factory=Counter)
    peak_tokens: int = 0
    steps: int = 0
    finished: bool = False
    holding: bool = False
    held_steps: int = 0
    side_effects: Counter[tuple[str, str]] = field(default_factory=Counter)
    tokens: list[int] = field(default_factory=list)
    marks: list[tuple[int, str]] = field(default_factory=list)

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


def _tokens(message: dict[str, Any]) -> int:
    """A message's tokens, counted as the guarded compactor counts them."""
    return char_estimate(message_text(message))


# -- the naive compactor --------------------------------------------------------------------------


def _naive_compact(messages: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], int]:
    """Cut at the token fraction, summarize as narrative; return the transcript and how many
    calls the cut severed from their results."""
    tokens = [_tokens(m) for m in messages]
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
    conversation_id = f"demo-{kind}-{seed}"
    # A guarded run is one trace: its tool calls and decisions under its agent span.
    run = (
        telemetry.agent_run(DEMO_AGENT, conversation_id=conversation_id)
        if telemetry is not None
        else conversation(conversation_id)
    )
    with run:
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
                    if stats.side_effects[(tool, service)] > 1:
                        stats.marks.append((step, "duplicate"))
                if telemetry is not None and compactor is not None:
                    handles[call_id] = telemetry.recorder.call(
                        tool, call_id, arguments={"service": service}
                    )
            messages = _compact(step, kind, messages, config, compactor, stats)
            stats.tokens.append(sum(map(_tokens, messages)))
            stats.peak_tokens = max(stats.peak_tokens, stats.tokens[-1])
    for handle in handles.values():
        handle.abandon("simulation ended")
    if compactor is not None and compactor.archive is not None:
        compactor.archive.close()
    return stats


def _compact(
    step: int,
    kind: str,
    messages: list[dict[str, Any]],
    config: DemoConfig,
    compactor: GuardedCompactor | None,
    stats: RunStats,
) -> list[dict[str, Any]]:
    if sum(map(_tokens, messages)) <= TRIGGER * config.budget:
        stats.holding = False
        return messages
    if compactor is None:
        compacted, severed = _naive_compact(messages, config.budget)
        if compacted is not messages:
            stats.compactions += 1
            stats.severed += severed
            stats.marks.append((step, "compaction"))
        return compacted
    try:
        result = compactor.compact(messages)
    except CompactionRefused:
        stats.refusals += 1
        stats.holding = True
        stats.held_steps += 1
        stats.marks.append((step, "refusal"))
        return messages
    if not result.compacted or result.decision is None or result.span is None:
        # Worked out and not applied (a summary no smaller than its span, say): the
        # transcript is as it was, so this is no compaction.
        stats.held += 1
        stats.hold_reasons[result.reason] += 1
        return messages
    stats.holding = False
    stats.compactions += 1
    if result.decision.action == "defer":
        stats.deferrals += 1
    stats.marks.append((step, "deferral" if result.decision.action == "defer" else "compaction"))
    start, end = result.span
    stats.severed += len(Transcript.parse(messages[start:end]).open_calls())
    return result.messages


# -- telemetry for the demo -----------------------------------------------------------------------


class ConsoleDecisionExporter(SpanExporter):
    """Prints the gate's and the compactor's spans as lines of at most 80 columns; tool spans
    are counted. A compaction that was held prints as held, with its reason."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.tool_spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            attributes = dict(span.attributes or {})
            conversation_id = attributes.get(semconv.GEN_AI_CONVERSATION_ID, "")
            if span.name == semconv.EVALUATE_SPAN:
                extended = any(e.name == semconv.EVENT_EXTENDED for e in span.events)
                line = (
                    f"{span.name} {conversation_id} action={attributes.get(semconv.ACTION)} "
                    f"span={attributes.get(semconv.SPAN_START)}:{attributes.get(semconv.SPAN_END)}"
                    + (" extended" if extended else "")
                )
            elif span.name == semconv.APPLY_SPAN:
                before = attributes.get(semconv.TOKENS_BEFORE)
                if attributes.get(semconv.COMPACTED):
                    change = f"tokens={before}->{attributes.get(semconv.TOKENS_AFTER)}"
                else:  # nothing changed: the tokens are as they were
                    change = f"held: {attributes.get(semconv.HOLD_REASON)}"
                line = f"{span.name} {conversation_id} {change}"
            else:
                self.tool_spans += 1
                continue
            self._stream.write(textwrap.fill(line, _WIDTH, subsequent_indent="    ") + "\n")
        self._stream.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release: every export is flushed, and the stream is the caller's."""


def demo_telemetry(stream: TextIO | None) -> tuple[Telemetry, ConsoleDecisionExporter | None]:
    """OTLP as the ``OTEL_*`` variables say when an endpoint is set; otherwise decision spans
    as lines on `stream` (None: recorded, not printed)."""
    if otlp_endpoint_set():
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


def otlp_endpoint_set() -> bool:
    """True when the ``OTEL_EXPORTER_OTLP_*`` variables send traces somewhere."""
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


# -- the report -----------------------------------------------------------------------------------

_WIDTH = 80
"""Every line the demo prints fits a terminal this wide."""


def run_demo(
    config: DemoConfig,
    *,
    telemetry: Telemetry | None = None,
    out: TextIO = sys.stdout,
    progress: TextIO | None = sys.stderr,
    in_place: bool = False,
    as_json: bool = False,
) -> list[tuple[RunStats, RunStats]]:
    """Run every seed with both compactors, print the report (`report_json`'s data with
    `as_json`), and return the stats.

    Progress goes to `progress` as one line a seed, or with `in_place` (for a terminal that
    shows nothing else meanwhile) as one line rewritten and erased before the report.
    """
    pairs: list[tuple[RunStats, RunStats]] = []
    with tempfile.TemporaryDirectory(prefix="otel-compaction-demo-") as directory:
        for number in range(config.runs):
            seed = config.seed + number
            if in_place and progress is not None:
                progress.write(f"\rrunning seed {seed} ({number + 1} of {config.runs})")
                progress.flush()
            naive = _run("naive", seed, config, None, Path(directory))
            guarded = _run("guarded", seed, config, telemetry, Path(directory))
            pairs.append((naive, guarded))
            if progress is not None and not in_place:
                progress.write(
                    f"[{number + 1}/{config.runs}] seed {seed}: naive {naive.steps} steps, "
                    f"guarded {guarded.steps} steps\n"
                )
                progress.flush()
    if in_place and progress is not None:
        progress.write("\r" + " " * (_WIDTH - 1) + "\r")
        progress.flush()
    if as_json:
        out.write(json.dumps(report_json(config, pairs), indent=2) + "\n")
    else:
        _report(out, config, pairs)
    return pairs


def report_json(config: DemoConfig, pairs: list[tuple[RunStats, RunStats]]) -> dict[str, Any]:
    """The report as data (``demo --format json``): the configuration, every run's counts,
    and each compactor's totals over the runs, as the text report's table has them."""

    def counts(runs: list[RunStats]) -> dict[str, Any]:
        return {
            "compacted": sum(r.compactions for r in runs),
            "deferred": sum(r.deferrals for r in runs),
            "refused": sum(r.refusals for r in runs),
            "held": sum(r.held for r in runs),
            "severed": sum(r.severed for r in runs),
            "duplicates": sum(r.duplicates for r in runs),
            "peak_tokens": max(r.peak_tokens for r in runs),
            "finished": sum(r.finished for r in runs),
        }

    return {
        "simulation": True,
        "config": {
            "runs": config.runs, "seed": config.seed, "services": config.services,
            "budget": config.budget, "trigger": TRIGGER,
        },
        "runs": [
            {"seed": r.seed, "compactor": r.compactor, "steps": r.steps, **counts([r])}
            for pair in pairs
            for r in pair
        ],
        "totals": {
            name: {"runs": len(pairs), **counts([pair[i] for pair in pairs])}
            for i, name in enumerate(("naive", "guarded"))
        },
    }  # fmt: skip


def _report(out: TextIO, config: DemoConfig, pairs: list[tuple[RunStats, RunStats]]) -> None:
    out.write(
        _paragraph(
            "otel-compaction demo (a simulation: a scripted agent, no model). The agent "
            f"reconfigures {config.services} services through tools whose results arrive 1-4 "
            "steps after the call; each seed runs twice, with a naive token-threshold "
            "compactor and with the guarded one."
        )
        + "\n"
    )
    _table(out, config, pairs)
    out.write(_LEGEND)
    out.write("\n" + _budget(config, pairs))
    out.write("\n" + _cost_of_safety(pairs) + "\n")
    out.write("\n" + _NEXT_STEPS)


_COLUMNS = (("compacted", 9), ("deferred", 8), ("refused", 7), ("severed", 7),
            ("duplicates", 10), ("peak", 6), ("done", 4))  # fmt: skip
"""Each column's header and width: 78 columns with the seed and the run."""


def _table(out: TextIO, config: DemoConfig, pairs: list[tuple[RunStats, RunStats]]) -> None:
    # The peak's header leaves room for the "!" after a peak over the budget.
    header = _line("seed", "run", [f"{name} " if name == "peak" else name for name, _ in _COLUMNS])
    rule = "-" * len(header)
    lines = [header, rule]
    for naive, guarded in pairs:
        for stats in (naive, guarded):
            seed = str(stats.seed) if stats is naive else ""
            lines.append(_line(seed, stats.compactor, _cells([stats], config)))
    lines.append(rule)
    for index, name in enumerate(("naive", "guarded")):
        lines.append(_line("all", name, _cells([pair[index] for pair in pairs], config)))
    out.write("\n" + "\n".join(lines) + "\n")


def _line(seed: str, name: str, cells: Sequence[str]) -> str:
    columns = "".join(
        f"  {cell:>{width}}" for cell, (_, width) in zip(cells, _COLUMNS, strict=True)
    )
    return f"{seed:>4}  {name:7}{columns}"


def _cells(runs: list[RunStats], config: DemoConfig) -> list[str]:
    """`runs` summed (their peak is the highest; one run is done or not, of several those done
    are counted); "-" where the naive compactor has no such step; "!" after a peak over the
    budget."""
    guarded = runs[0].compactor == "guarded"
    peak = max(r.peak_tokens for r in runs)
    finished = sum(r.finished for r in runs)
    return [
        str(sum(r.compactions for r in runs)),
        str(sum(r.deferrals for r in runs)) if guarded else "-",
        str(sum(r.refusals for r in runs)) if guarded else "-",
        str(sum(r.severed for r in runs)),
        str(sum(r.duplicates for r in runs)),
        f"{peak:,}" + ("!" if peak > config.budget else " "),
        str(finished) if len(runs) > 1 else ("yes" if finished else "no"),
    ]


_LEGEND = """
compacted   compactions applied: older messages replaced by a shorter summary
deferred    of those, compactions of an older span ending at a closed cut (a
            point where every call before it has its result) while the newer
            messages, with a call still waiting, were kept word for word
refused     times the gate refused to compact: any cut would have severed a
            call, so nothing was cut and the agent waited for its results
severed     severed calls: calls compacted away while their results were still
            to come, so a result arrived for a call the agent no longer saw
duplicates  duplicate side effects: a write or restart done again because the
            agent could no longer see that it had been done
peak        most context tokens after any step; ! marks a peak over the budget
done        the agent finished every service (all: in how many runs)
-           the naive compactor never defers or refuses
"""


def _budget(config: DemoConfig, pairs: list[tuple[RunStats, RunStats]]) -> str:
    lines = [
        f"Budget {config.budget:,} tokens; both compactors start above "
        f"{int(TRIGGER * config.budget):,} ({TRIGGER:.0%}). Peak context:"
    ]
    for index, name in enumerate(("naive", "guarded")):
        runs = [pair[index] for pair in pairs]
        peak = max(runs, key=lambda r: r.peak_tokens)
        over = [r for r in runs if r.peak_tokens > config.budget]
        if over:
            verdict = (
                f"over budget by {peak.peak_tokens - config.budget:,} tokens (seed "
                f"{peak.seed}); {len(over)} of {len(runs)} runs over budget"
            )
        else:
            verdict = "within budget in every run"
        lines.append(f"  {name:8} {peak.peak_tokens:>6,}  {verdict}")
    guarded = [pair[1] for pair in pairs]
    held = Counter[str]()
    for run in guarded:
        held.update(run.hold_reasons)
    if held:
        reasons = "; ".join(f"{reason} ({count})" for reason, count in held.most_common())
        lines.append(
            _paragraph(
                f"Held, not counted as compactions: {held.total()} times the guarded "
                f"compactor kept the transcript as it was, because {reasons}."
            )
        )
    return "\n".join(lines) + "\n"


def _cost_of_safety(pairs: list[tuple[RunStats, RunStats]]) -> str:
    naive = [pair[0] for pair in pairs]
    guarded = [pair[1] for pair in pairs]
    naive_peak = max(r.peak_tokens for r in naive)
    guarded_peak = max(r.peak_tokens for r in guarded)
    difference = guarded_peak - naive_peak
    direction = "above" if difference >= 0 else "below"
    naive_runs = sum(1 for r in naive if r.duplicates)
    guarded_severed = sum(r.severed for r in guarded)
    guarded_duplicates = sum(r.duplicates for r in guarded)
    guarded_broke = (
        "none"
        if guarded_severed == guarded_duplicates == 0
        else f"{guarded_severed} and {guarded_duplicates}"
    )
    return _paragraph(
        f"Cost of safety: the guarded runs peaked at {guarded_peak:,} tokens, "
        f"{abs(difference):,} ({abs(difference) / naive_peak:.0%}) {direction} the naive "
        f"runs' {naive_peak:,}. The naive runs severed {sum(r.severed for r in naive)} "
        f"calls and repeated {sum(r.duplicates for r in naive)} side effects, in "
        f"{naive_runs} of {len(pairs)} runs; the guarded runs severed and repeated "
        f"{guarded_broke}."
    )


_NEXT_STEPS = """Next steps:
  decisions as lines, a chart:  otel-compaction demo --verbose --plot demo.svg
  the report as data:           otel-compaction demo --format json
  the spans in Jaeger: start collector-config/ (docs/observability.md),
    then OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 otel-compaction demo
  your own transcript:  otel-compaction check transcript.json
  Claude Code, Codex:   otel-compaction hook install claude-code   (or codex)
"""


def _paragraph(text: str) -> str:
    return textwrap.fill(text, _WIDTH - 2)


# -- the picture ----------------------------------------------------------------------------------

PLOT_FORMATS = {".svg": "svg", ".png": "png"}
_STYLE = {"naive": "#d62728", "guarded": "#1f77b4"}
_MARKERS = {
    "compaction": ("v", "compaction"),
    "deferral": ("s", "deferral"),
    "refusal": ("X", "refusal"),
    "duplicate": ("*", "duplicate side effect"),
}


def plot_format(path: Path) -> str:
    """``svg`` or ``png``, from `path`'s suffix; a `CompactionError` for any other."""
    fmt = PLOT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise CompactionError(f"{path}: a plot is written as .svg or .png, not {path.suffix!r}")
    return fmt


def require_matplotlib() -> None:
    """Raise a `CompactionError` naming the ``plot`` extra when matplotlib is missing."""
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError as exc:
        raise CompactionError(
            "drawing a plot needs matplotlib: pip install matplotlib (the plot extra: "
            "pip install '.[plot]' in a clone)"
        ) from exc


def plot(naive: RunStats, guarded: RunStats, config: DemoConfig, path: Path) -> None:
    """Draw one seed's two runs: context tokens after each step, the budget and the trigger,
    and a marker at each compaction, deferral, refusal and duplicate side effect.

    SVG or PNG by `path`'s suffix (an SVG keeps its text as text). matplotlib (the ``plot``
    extra) is imported here, without pyplot: a `Figure` of its own, rendered by Agg for PNG.
    """
    fmt = plot_format(path)
    require_matplotlib()
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "otel-compaction"}):
        figure = Figure(figsize=(10, 5.5), layout="constrained")
        axes = figure.subplots()
        for stats in (naive, guarded):
            color = _STYLE[stats.compactor]
            steps = range(len(stats.tokens))
            # The naive line is drawn wider, so that it shows around the guarded one where
            # the two runs are the same (until the first compaction).
            width = 3.2 if stats.compactor == "naive" else 1.6
            label = f"{stats.compactor} compactor (peak {stats.peak_tokens:,})"
            axes.plot(steps, stats.tokens, color=color, linewidth=width, label=label)
            for kind, (marker, name) in _MARKERS.items():
                at = [step for step, mark in stats.marks if mark == kind]
                if at:
                    axes.scatter(
                        at,
                        [stats.tokens[step] for step in at],
                        marker=marker,
                        s=70,
                        color=color,
                        edgecolors="black",
                        linewidths=0.6,
                        zorder=3,
                        label=f"{stats.compactor}: {name} ({len(at)})",
                    )
        budget = f"budget ({config.budget:,} tokens)"
        axes.axhline(config.budget, color="black", linestyle="--", linewidth=1, label=budget)
        trigger = f"compaction trigger ({TRIGGER:.0%} of the budget)"
        axes.axhline(
            TRIGGER * config.budget, color="grey", linestyle=":", linewidth=1, label=trigger
        )
        top = max(config.budget, naive.peak_tokens, guarded.peak_tokens)
        axes.set_ylim(0, top * 1.08)
        axes.set_xlim(0, max(len(naive.tokens), len(guarded.tokens)))
        axes.set_xlabel("step (one tool call a step)")
        axes.set_ylabel("context tokens after the step")
        axes.set_title(
            f"otel-compaction demo, seed {naive.seed}: naive and guarded compaction "
            "(a simulation: scripted agent, no model)"
        )
        axes.grid(True, alpha=0.3)
        figure.legend(loc="outside lower center", ncol=3, fontsize="small", frameon=False)
        figure.savefig(path, format=fmt, dpi=110, metadata={"Date": None} if fmt == "svg" else {})
