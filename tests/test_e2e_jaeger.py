"""End to end from ``otel-compaction demo`` to Jaeger: the demo, as a user runs it with
``OTEL_EXPORTER_OTLP_ENDPOINT`` set, sends its telemetry to the project's Collector
(``collector-config/otel-collector.yaml``), which exports the traces to a real Jaeger v2 and
serves the metrics, its span metrics among them, for Prometheus (``jaeger_stack``).

Shown in Jaeger's HTTP API, as its UI shows it: one trace per guarded run of the demo, whose
only root is the run's ``invoke_agent`` span, the ancestor of every other span of the run (its
``execute_tool`` calls and ``compaction.evaluate`` decisions among them); the refusals and the
deferrals are ``compaction.refused`` and ``compaction.deferred`` events on the decision spans,
as many refusals in each trace as the demo's own report counts for that run, and a decision
span for every compaction it applied, held or refused. Shown at the Collector's
Prometheus exporter: the refusals as the package's decision counter and as span metrics.

Needs ``.tools/bin/jaeger`` and ``.tools/bin/otelcol-compaction``
(``collector-config/build/build.sh``, which ``.ci/run`` runs): skips without them, fails
under ``CI=true``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT
from e2e_servers import loopback_environment, wait_until
from jaeger_stack import CollectorServer, JaegerServer, collector_binary, jaeger_binary

from otel_compaction.demo import DEMO_AGENT
from otel_compaction.telemetry import semconv

DECISION_EVENTS = {"refuse": semconv.EVENT_REFUSED, "defer": semconv.EVENT_DEFERRED}
"""The event a decision span carries for each action that holds something back."""


@dataclass(frozen=True)
class Stack:
    """Jaeger and the Collector exporting to it."""

    jaeger: JaegerServer
    collector: CollectorServer

    def describe(self) -> str:
        """Both servers' output tails, for failure messages."""
        return f"{self.collector.describe()}\n{self.jaeger.describe()}"


@pytest.fixture(name="stack")
def stack_fixture(tmp_path: Path) -> Iterator[Stack]:
    """Jaeger, then the Collector sending it the traces; both stopped afterwards."""
    jaeger_path, collector_path = jaeger_binary(), collector_binary()  # skip before starting
    jaeger = JaegerServer(tmp_path / "jaeger", binary=jaeger_path).start()
    try:
        collector = CollectorServer(
            tmp_path / "collector", jaeger_otlp=jaeger.otlp_grpc, binary=collector_path
        ).start()
        try:
            yield Stack(jaeger, collector)
        finally:
            collector.stop()
    finally:
        jaeger.stop()


def _run_demo(stack: Stack, service: str) -> dict[str, Any]:
    """``otel-compaction demo --format json`` sending OTLP to the Collector; its report."""
    result = subprocess.run(
        [sys.executable, "-m", "otel_compaction", "demo", "--format", "json", "--quiet"],
        env=loopback_environment(
            {
                "OTEL_SERVICE_NAME": service,
                "OTEL_EXPORTER_OTLP_ENDPOINT": stack.collector.otlp_http_url,
            }
        ),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _arrived(stack: Stack, service: str, runs: int) -> list[dict[str, Any]]:
    """The service's traces once `runs` of them have arrived and their spans stopped
    coming (two polls alike), waited for."""
    seen: list[int] = []

    def settled() -> list[dict[str, Any]] | None:
        traces = stack.jaeger.traces(service)
        seen.append(sum(len(trace["spans"]) for trace in traces))
        done = len(traces) >= runs and len(seen) >= 2 and seen[-1] == seen[-2]
        return traces if done else None

    return wait_until(
        settled,
        timeout=30,
        interval=1.0,
        message=f"the demo's {runs} traces did not all reach Jaeger as service {service!r}",
        describe=lambda: (
            f"services in Jaeger: {stack.jaeger.services()}; spans seen: {seen}\n{stack.describe()}"
        ),
    )


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span["tags"]}


def _parent(span: dict[str, Any]) -> str | None:
    for reference in span["references"]:
        if reference["refType"] == "CHILD_OF":
            return str(reference["spanID"])
    return None


def _events(span: dict[str, Any]) -> list[str]:
    """The names of the span's events (Jaeger's logs, each with an ``event`` field)."""
    return [
        str(field["value"])
        for log in span["logs"]
        for field in log["fields"]
        if field["key"] == "event"
    ]


def _ancestors(span: dict[str, Any], spans: dict[str, dict[str, Any]]) -> list[str]:
    """The operation names from the span's parent up to its root."""
    names: list[str] = []
    parent = _parent(span)
    while parent is not None and len(names) <= len(spans):
        names.append(spans[parent]["operationName"])
        parent = _parent(spans[parent])
    return names


def _metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`, in a Prometheus text
    exposition."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}\{{(.*)\}} (\S+)", line)
        if match is None:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(1)))
        if all(have.get(key) == value for key, value in labels.items()):
            total += float(match.group(2))
    return total


def test_one_demo_run_is_one_trace_per_agent_run_in_jaeger_with_its_decisions(
    stack: Stack,
) -> None:
    service = f"otel-compaction-e2e-{uuid.uuid4().hex[:8]}"
    report = _run_demo(stack, service)
    guarded = {run["seed"]: run for run in report["runs"] if run["compactor"] == "guarded"}
    runs = report["config"]["runs"]
    assert len(guarded) == runs

    traces = _arrived(stack, service, runs)
    assert service in stack.jaeger.services()

    # One trace per guarded run (the naive compactor records nothing), each rooted at the
    # run's invoke_agent span alone: no span of the run is a trace of its own.
    roots = {
        trace["traceID"]: [s["operationName"] for s in trace["spans"] if _parent(s) is None]
        for trace in traces
    }
    assert len(traces) == runs, roots
    assert all(names == [f"{semconv.INVOKE_AGENT} {DEMO_AGENT}"] for names in roots.values()), roots

    refused = deferred = 0
    for trace in traces:
        spans = {span["spanID"]: span for span in trace["spans"]}
        (root,) = (span for span in spans.values() if _parent(span) is None)
        tags = _tags(root)
        assert tags[semconv.GEN_AI_OPERATION_NAME] == semconv.INVOKE_AGENT
        assert tags[semconv.GEN_AI_AGENT_NAME] == DEMO_AGENT
        conversation = tags[semconv.GEN_AI_CONVERSATION_ID]
        run = guarded[int(conversation.removeprefix("demo-guarded-"))]

        # The run's tool calls and the gate's decisions all sit under its agent span.
        names = Counter(span["operationName"].split(" ")[0] for span in spans.values())
        assert names[semconv.EXECUTE_TOOL] >= 1, names
        assert names[semconv.EVALUATE_SPAN] >= 1, names
        for span in spans.values():
            if span is not root:
                assert _ancestors(span, spans)[-1] == root["operationName"], span
        for span in spans.values():
            if span["operationName"].startswith(semconv.EXECUTE_TOOL):
                assert _tags(span)[semconv.GEN_AI_OPERATION_NAME] == semconv.EXECUTE_TOOL

        # Refusals and deferrals are events of the decision spans, as many as the run had.
        counted: Counter[str] = Counter()
        for span in spans.values():
            for event in _events(span):
                if event in DECISION_EVENTS.values():
                    assert span["operationName"] == semconv.EVALUATE_SPAN, span
                    action = _tags(span)[semconv.ACTION]
                    assert DECISION_EVENTS[action] == event, span
                    counted[event] += 1
        # Every compaction attempt is one decision: applied, held (worked out, not applied)
        # or refused. A deferral is a decision; the report counts the applied ones.
        decided = run["compacted"] + run["held"] + run["refused"]
        assert names[semconv.EVALUATE_SPAN] == decided, (conversation, names, run)
        assert counted[semconv.EVENT_REFUSED] == run["refused"], (conversation, counted, run)
        assert run["deferred"] <= counted[semconv.EVENT_DEFERRED], (conversation, counted, run)
        assert counted[semconv.EVENT_DEFERRED] <= run["deferred"] + run["held"], (counted, run)
        refused += counted[semconv.EVENT_REFUSED]
        deferred += counted[semconv.EVENT_DEFERRED]
    assert refused == report["totals"]["guarded"]["refused"] >= 1
    assert deferred >= report["totals"]["guarded"]["deferred"] >= 1

    # The Collector serves the package's decision counter and the span metrics it made from
    # the decision spans, for Prometheus; span metrics are flushed every 15 seconds.
    def metrics_arrived() -> str | None:
        text = stack.collector.metrics()
        decisions = _metric(
            text, "compaction_decisions_total", job=service, compaction_action="refuse"
        )
        spans = _metric(
            text,
            "traces_span_metrics_calls_total",
            service_name=service,
            span_name=semconv.EVALUATE_SPAN,
            compaction_action="refuse",
        )
        return text if decisions == refused and spans == refused else None

    wait_until(
        metrics_arrived,
        timeout=30,
        interval=1.0,
        message=f"the Collector does not serve {refused} refusals of {service} at "
        f"{stack.collector.metrics_url}",
        describe=lambda: (
            "\n".join(
                line
                for line in stack.collector.metrics().splitlines()
                if "refuse" in line or line.startswith("# TYPE")
            )
            + f"\n{stack.describe()}"
        ),
    )
