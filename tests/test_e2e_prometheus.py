"""End to end with a real Prometheus server: it scrapes an instrumented agent process whose
obligations accumulate, through the optional scrape endpoint (``configure(prometheus_port=)``).

Shown against that server: the metrics are queryable by PromQL under the names the rules and
the dashboard use; every query of the provisioned Grafana dashboard (panels and variables)
evaluates without error and the core panels show the agent's data; every alert rule evaluates
without error, and the accumulating-obligations alert reaches ``firing``. The rules are loaded
with every duration scaled from minutes to seconds (``scaled_rules``), their logic unchanged.

Needs Debian's ``prometheus`` package (``.ci/run`` installs it): skips without it, fails under
``CI=true``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_servers import ManagedProcess, PrometheusServer, wait_until
from observability_files import (
    dashboard_queries,
    metric_names,
    scaled_rules,
    substitute_variables,
    variable_queries,
)
from prometheus_stack import JOB, SCALE, scraped_agent

EXPOSED = {
    "compaction_obligations_open",
    "compaction_obligation_oldest_age_seconds",
    "compaction_obligation_age_seconds_bucket",
    "compaction_obligation_age_seconds_count",
    "compaction_obligation_age_seconds_sum",
    "compaction_decisions_total",
    "compaction_deferral_held_tokens_total",
    "compaction_obligations_severed_total",
}
"""What this agent's run produces, as Prometheus names."""
NOT_PRODUCED_HERE = {
    "compaction_tool_calls_duplicate_total": "detected by auto-instrumentation, not the recorder",
    "compaction_ledger_overflow_total": "the agent stays far below the ledger's bounds",
    "compaction_tool_calls_reissued_total": "the agent repeats no side effect after compacting",
    "compaction_hook_exports_dropped_total": "reported by the CLI hooks, not by a Python agent",
    "traces_span_metrics_calls_total": "made by the Collector's spanmetrics connector",
    "compaction_obligations_orphaned": "a shared ledger's (PostgreSQL); this agent's is in memory",
    "compaction_sources_disagreements_total": "counted when a gate reads obligation sources",
}
"""Names the rules or the dashboard use that this scenario does not produce, and why."""


@pytest.fixture(name="stack")
def stack_fixture(tmp_path: Path) -> Iterator[tuple[ManagedProcess, PrometheusServer]]:
    """The agent process serving its metrics, and Prometheus scraping it every second with
    the scaled alert rules loaded; both stopped afterwards."""
    with scraped_agent(tmp_path) as stack:
        yield stack.agent, stack.prometheus


def _firing(prometheus: PrometheusServer, name: str) -> dict[str, Any] | None:
    for alert in prometheus.alerts():
        if alert["labels"]["alertname"] == name and alert["state"] == "firing":
            return alert
    return None


def test_prometheus_scrapes_the_agent_and_the_accumulation_alert_fires(
    stack: tuple[ManagedProcess, PrometheusServer],
) -> None:
    agent, prometheus = stack
    started = time.monotonic()

    # Scraped: the target is up and the package's metrics are stored under their names.
    wait_until(
        lambda: prometheus.value(f'up{{job="{JOB}"}}') == 1,
        timeout=15,
        message="Prometheus never scraped the agent",
        describe=agent.describe,
    )

    def all_stored() -> set[str] | None:
        stored = prometheus.metric_names()
        return stored if stored >= EXPOSED else None

    names = wait_until(
        all_stored,
        timeout=15,
        message="the agent's metrics did not all reach Prometheus",
        describe=lambda: f"stored: {sorted(prometheus.metric_names())}",
    )
    ours = {name for name in names if name.startswith(("compaction_", "gen_ai_"))}
    assert ours == EXPOSED

    # The rules and the dashboard use exactly these names (or say why one is absent here).
    referenced = {name for query in dashboard_queries() for name in metric_names(query.expr)}
    for group in scaled_rules(SCALE)["groups"]:
        for rule in group["rules"]:
            referenced |= metric_names(rule["expr"])
    unknown = referenced - names - set(NOT_PRODUCED_HERE) - {"ALERTS"}
    assert not unknown, f"names that nothing exposes: {sorted(unknown)}"

    # Queryable by PromQL, with the agent's values.
    open_by_kind = {
        r["metric"]["compaction_obligation_kind"]: float(r["value"][1])
        for r in prometheus.query(
            f'sum by (compaction_obligation_kind) (compaction_obligations_open{{job="{JOB}"}})'
        )
    }
    assert open_by_kind.get("retry") == 1
    assert open_by_kind.get("tool_call", 0) >= 2
    refused = prometheus.value(
        f'sum(compaction_decisions_total{{job="{JOB}", compaction_action="refuse"}})'
    )
    deferred = prometheus.value(
        f'sum(compaction_decisions_total{{job="{JOB}", compaction_action="defer"}})'
    )
    assert refused is not None and refused >= 1
    assert deferred is not None and deferred >= refused
    assert (
        prometheus.value(f'max(compaction_obligation_oldest_age_seconds{{job="{JOB}"}})') or 0
    ) > 0
    assert (prometheus.value(f'sum(compaction_obligations_severed_total{{job="{JOB}"}})') or 0) >= 1
    assert (prometheus.value(f'sum(compaction_deferral_held_tokens_total{{job="{JOB}"}})') or 0) > 0
    resolved = f'job="{JOB}", compaction_obligation_status="result"'
    histogram = prometheus.value(f"sum(compaction_obligation_age_seconds_count{{{resolved}}})")
    assert histogram is not None and histogram >= 2

    # The accumulating-obligations alert fires (windows of seconds instead of minutes).
    alert = wait_until(
        lambda: _firing(prometheus, "CompactionObligationsAccumulating"),
        timeout=max(5.0, 55 - (time.monotonic() - started)),
        interval=0.5,
        message="CompactionObligationsAccumulating never fired",
        describe=lambda: json.dumps(prometheus.alerts(), indent=1)[:4000],
    )
    assert alert["labels"]["job"] == JOB
    assert alert["labels"]["severity"] == "warning"
    assert float(alert["value"]) > 0
    assert f"accumulating in {JOB}" in alert["annotations"]["summary"]
    for name in ("CompactionRefused", "CompactionSeveredObligation"):
        assert _firing(prometheus, name), f"{name} is not firing: {prometheus.alerts()}"
    assert not _firing(prometheus, "CompactionObligationTooOld")  # a threshold, not a window

    # Every rule evaluated without error.
    for rule in prometheus.rules():
        assert rule["health"] == "ok", rule

    # Every dashboard query evaluates, and the core panels show this agent.
    for query in dashboard_queries():
        assert query.datasource.get("uid") == "prometheus", query
        prometheus.query(substitute_variables(query.expr))  # raises unless "success"
    panels = {
        q.panel: prometheus.query(substitute_variables(q.expr, {"job": JOB}))
        for q in dashboard_queries()
    }
    assert {
        r["metric"]["compaction_obligation_kind"] for r in panels["Open obligations by kind"]
    } == {
        "retry",
        "tool_call",
    }
    decided = {
        (r["metric"]["compaction_action"], r["metric"]["compaction_rule"])
        for r in panels["Decisions in the time range, by action and rule"]
    }
    assert ("refuse", "open_tool_call") in decided
    assert ("defer", "open_tool_call") in decided
    for title in ("Refusals in the time range", "Severed calls (time range)"):
        assert float(panels[title][0]["value"][1]) >= 1, title
    assert float(panels["Duplicate tool calls (time range)"][0]["value"][1]) == 0
    firing = {r["metric"]["alertname"] for r in panels["Firing alerts"]}
    assert "CompactionObligationsAccumulating" in firing
    for variable, (label, selector) in variable_queries().items():
        values = prometheus.label_values(label, selector)
        if variable == "job":
            assert values == [JOB]
