"""What the obligation-source tests share: worker processes and the disagreement counter.

A source test that needs "a fresh process" runs its own module as a script (`run_worker`),
which prints one JSON object as its last line; `disagreement_metrics` gives the instruments a
worker counts into and `disagreement_points` reads ``compaction.sources.disagreements`` back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_compaction.telemetry.metrics import CompactionMetrics

ROOT = Path(__file__).resolve().parent.parent


def run_worker(script: str, *args: str, timeout: float = 120) -> dict[str, Any]:
    """Run `script` with `args` in a new interpreter; its last stdout line, parsed."""
    done = subprocess.run(
        [sys.executable, script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def disagreement_metrics() -> tuple[CompactionMetrics, InMemoryMetricReader]:
    """Instruments on a meter provider of their own, and the reader that collects them."""
    reader = InMemoryMetricReader()
    return CompactionMetrics(MeterProvider(metric_readers=[reader])), reader


def disagreement_points(reader: InMemoryMetricReader) -> list[list[Any]]:
    """``compaction.sources.disagreements``: [attributes, value] per point, sorted."""
    out: list[list[Any]] = []
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "compaction.sources.disagreements":
                    out.extend(
                        [dict(point.attributes or {}), getattr(point, "value", None)]
                        for point in metric.data.data_points
                    )
    return sorted(out, key=lambda point: sorted(point[0].items()))
