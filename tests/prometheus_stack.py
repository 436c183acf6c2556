"""The end-to-end alerting stack's first half: the instrumented agent process
(``e2e_agent.py``), whose obligations accumulate, serving its metrics on loopback, and a real
Prometheus scraping it every second with the shipped alert rules, every duration scaled from
minutes to seconds (`SCALE`), their logic unchanged.

    with scraped_agent(tmp_path, alertmanagers=[alertmanager.address]) as stack:
        stack.prometheus.alerts()

Needs Debian's ``prometheus`` package: skips without it, fails under ``CI=true``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from e2e_servers import (
    LOOPBACK,
    ManagedProcess,
    PrometheusServer,
    loopback_environment,
    require_executable,
    wait_until,
)
from observability_files import scaled_rules

__all__ = ["JOB", "SCALE", "ScrapedAgent", "scraped_agent"]

JOB = "e2e-agent"
"""The scrape job, named after the agent's ``service.name``."""

SCALE = 1 / 60
"""Minutes become seconds: a 10m window is 10s."""

AGENT = Path(__file__).with_name("e2e_agent.py")


@dataclass(frozen=True)
class ScrapedAgent:
    """The running agent, the Prometheus scraping it, and the agent's target
    (``host:port``, the ``instance`` label of its series)."""

    agent: ManagedProcess
    prometheus: PrometheusServer
    target: str


@contextmanager
def scraped_agent(
    workdir: Path, *, alertmanagers: Sequence[str] = (), duration: float = 90.0
) -> Iterator[ScrapedAgent]:
    """Start the agent (one step every half second, for at most `duration` seconds), then
    Prometheus with the scaled rules, sending alerts to `alertmanagers`; both stopped on
    exit."""
    binary = require_executable("prometheus", "install Debian's prometheus package")
    rules = workdir / "alerts.yml"
    rules.write_text(yaml.safe_dump(scaled_rules(SCALE), sort_keys=False), encoding="utf-8")
    ready = workdir / "agent-ready.json"
    agent = ManagedProcess(
        [
            sys.executable,
            str(AGENT),
            "--prometheus-port=0",
            f"--ready-file={ready}",
            "--interval=0.5",
            f"--duration={duration:g}",
        ],
        log_path=workdir / "agent.log",
        env=loopback_environment(
            {
                "OTEL_TRACES_EXPORTER": "none",
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_SERVICE_NAME": JOB,
            }
        ),
    )
    prometheus: PrometheusServer | None = None
    try:
        wait_until(
            lambda: ready.exists() or not agent.alive(),
            timeout=20,
            message="the agent did not start serving its metrics",
            describe=agent.describe,
        )
        assert agent.alive(), agent.describe()
        port = json.loads(ready.read_text(encoding="utf-8"))["prometheus_port"]
        target = f"{LOOPBACK}:{port}"
        prometheus = PrometheusServer(
            workdir / "prometheus",
            binary=binary,
            targets={JOB: [target]},
            rule_files=[rules],
            alertmanagers=alertmanagers,
        )
        prometheus.start()
        yield ScrapedAgent(agent, prometheus, target)
    finally:
        if prometheus is not None:
            prometheus.stop()
        agent.stop()
