"""The observability stack's files, read the way the tests need them.

Paths of ``collector-config/``; the Grafana dashboard's PromQL (every panel target and
variable query) with Grafana's variables substituted so that Prometheus can evaluate it; the
metric names a PromQL expression uses; a copy of the alert rules with every duration
scaled down, for end-to-end tests that cannot wait minutes; the Alertmanager route with the
receiver's URL and the grouping timings replaced, for a test Alertmanager; and an alert's
annotation template as the pattern its rendered text must match.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from conftest import REPO_ROOT

__all__ = [
    "ALERTMANAGER_CONFIG",
    "ALERTS",
    "ALERT_TESTS",
    "COLLECTOR",
    "COMPOSE",
    "CONFIG_DIR",
    "DASHBOARD",
    "DASHBOARD_PROVIDERS",
    "DATASOURCES",
    "PROMETHEUS_CONFIG",
    "DashboardQuery",
    "alertmanager_config",
    "annotation_pattern",
    "dashboard",
    "dashboard_queries",
    "load_yaml",
    "metric_names",
    "scale_durations",
    "scaled_rules",
    "substitute_variables",
    "variable_queries",
]

CONFIG_DIR = REPO_ROOT / "collector-config"
COLLECTOR = CONFIG_DIR / "otel-collector.yaml"
COMPOSE = CONFIG_DIR / "compose.yaml"
PROMETHEUS_CONFIG = CONFIG_DIR / "prometheus" / "prometheus.yml"
ALERTS = CONFIG_DIR / "prometheus" / "alerts.yml"
ALERT_TESTS = CONFIG_DIR / "prometheus" / "tests" / "alerts_test.yml"
ALERTMANAGER_CONFIG = CONFIG_DIR / "alertmanager" / "alertmanager.yml"
DASHBOARD = CONFIG_DIR / "grafana" / "dashboards" / "otel-compaction.json"
DATASOURCES = CONFIG_DIR / "grafana" / "provisioning" / "datasources" / "datasources.yaml"
DASHBOARD_PROVIDERS = CONFIG_DIR / "grafana" / "provisioning" / "dashboards" / "dashboards.yaml"

# Values for Grafana's variables when a test evaluates the dashboard's queries itself.
DEFAULT_VARIABLES: Mapping[str, str] = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
    "job": ".*",
    "service": "otel-compaction",
}

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
# A range or subquery selector ("[10m]", "[10m:1m]") or an offset ("offset 10m").
_DURATION_SITE = re.compile(r"\[[^\]]+\]|offset\s+\d+(?:\.\d+)?(?:ms|s|m|h|d|w|y)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
# The template actions the alert annotations use: a label, and the value as an integer.
_TEMPLATE_ACTION = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_LABEL_ACTION = re.compile(r"\$labels\.(\w+)")
_INTEGER_VALUE_ACTION = 'printf "%.0f" $value'
_METRIC = re.compile(r"\b(ALERTS|(?:compaction|gen_ai|traces_span_metrics)_[a-zA-Z0-9_]+)\b")


def load_yaml(path: Path) -> Any:
    """Parse one YAML file."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def dashboard() -> dict[str, Any]:
    """The provisioned Grafana dashboard."""
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # rows may nest their panels


@dataclass(frozen=True)
class DashboardQuery:
    """One PromQL target of a dashboard panel."""

    panel: str
    ref_id: str
    expr: str
    datasource: Mapping[str, Any]
    instant: bool


def dashboard_queries(board: Mapping[str, Any] | None = None) -> list[DashboardQuery]:
    """Every target of every panel, rows included."""
    board = board if board is not None else dashboard()
    queries = []
    for panel in _panels(board["panels"]):
        for target in panel.get("targets", []):
            queries.append(
                DashboardQuery(
                    panel=panel["title"],
                    ref_id=target["refId"],
                    expr=target["expr"],
                    datasource=target.get("datasource") or panel.get("datasource") or {},
                    instant=bool(target.get("instant")),
                )
            )
    return queries


def variable_queries(board: Mapping[str, Any] | None = None) -> dict[str, tuple[str, str]]:
    """The query variables as ``name: (label, series selector)``, from their
    ``label_values(selector, label)`` definitions."""
    board = board if board is not None else dashboard()
    found = {}
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", text.strip())
        if match is None:
            raise ValueError(f"variable {variable['name']}: not label_values(...): {text}")
        found[variable["name"]] = (match.group(2), match.group(1).strip())
    return found


def substitute_variables(expr: str, values: Mapping[str, str] | None = None) -> str:
    """`expr` with Grafana's ``$name`` and ``${name}`` replaced; an unknown variable raises."""
    table = {**DEFAULT_VARIABLES, **(values or {})}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in table:
            raise KeyError(f"no value for Grafana variable ${name} in: {expr}")
        return table[name]

    return _VARIABLE.sub(replace, expr)


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects (this package's, span metrics and ``ALERTS``): label
    matchers, grouping clauses and strings set aside."""
    stripped = _STRING.sub('""', expr)
    stripped = _MATCHERS.sub("{}", stripped)
    stripped = _GROUPING.sub(" ", stripped)
    return set(_METRIC.findall(stripped))


def _scaled(duration: str, factor: float) -> str:
    value, unit = _DURATION.fullmatch(duration).groups()  # type: ignore[union-attr]
    milliseconds = max(1, round(float(value) * _SECONDS[unit] * factor * 1000))
    return f"{milliseconds}ms"


def scale_durations(expr: str, factor: float) -> str:
    """`expr` with every range, subquery and offset duration multiplied by `factor`."""

    def scale_site(site: re.Match[str]) -> str:
        return _DURATION.sub(lambda d: _scaled(d.group(0), factor), site.group(0))

    return _DURATION_SITE.sub(scale_site, expr)


def scaled_rules(factor: float, source: Path = ALERTS) -> dict[str, Any]:
    """The alert rules of `source` with their ``for`` and PromQL durations times `factor`."""
    rules: dict[str, Any] = load_yaml(source)
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["expr"] = scale_durations(rule["expr"], factor)
            if "for" in rule:
                rule["for"] = _scaled(rule["for"], factor)
    return rules


def alertmanager_config(
    webhook_url: str, *, group_wait: str, group_interval: str, source: Path = ALERTMANAGER_CONFIG
) -> dict[str, Any]:
    """The Alertmanager configuration of `source` with every webhook posting to `webhook_url`
    and every route that sets them waiting `group_wait` and `group_interval`; all else as
    shipped."""
    config: dict[str, Any] = load_yaml(source)
    webhooks = [
        webhook
        for receiver in config["receivers"]
        for webhook in receiver.get("webhook_configs", [])
    ]
    if not webhooks:
        raise ValueError(f"{source}: no webhook receiver to point at the test's")
    for webhook in webhooks:
        webhook["url"] = webhook_url
    routes = [config["route"]]
    while routes:
        route = routes.pop()
        for key, value in (("group_wait", group_wait), ("group_interval", group_interval)):
            if key in route:
                route[key] = value
        routes.extend(route.get("routes", []))
    return config


def annotation_pattern(template: str, labels: Mapping[str, str]) -> re.Pattern[str]:
    """What an annotation `template` renders to for an alert with `labels`: a label's action
    as that label's value, ``printf "%.0f" $value`` as one whole number (group ``value``). Any
    other action raises, so that a new one is taught here rather than matched loosely."""
    parts: list[str] = []
    position = 0
    seen_value = False
    for action in _TEMPLATE_ACTION.finditer(template):
        parts.append(re.escape(template[position : action.start()]))
        text = action.group(1)
        label = _LABEL_ACTION.fullmatch(text)
        if label is not None:
            parts.append(re.escape(labels[label.group(1)]))
        elif text == _INTEGER_VALUE_ACTION:
            # The same value wherever the template prints it.
            parts.append(r"(?P=value)" if seen_value else r"(?P<value>-?\d+)")
            seen_value = True
        else:
            raise ValueError(f"no pattern for the template action {action.group(0)}")
        position = action.end()
    parts.append(re.escape(template[position:]))
    return re.compile("".join(parts), re.DOTALL)
