"""The observability stack's files hold together: the Collector's pipelines reference only
defined components, the compose file, the Collector, Prometheus, Alertmanager and Grafana agree
on hosts and ports, the dashboard's data sources are the provisioned ones, promtool accepts the
rules, the Prometheus config and the rule unit tests, and amtool accepts the Alertmanager
config and routes every alert to its receiver.

The promtool tests need Debian's ``prometheus`` package, the amtool tests its
``prometheus-alertmanager``: they skip without them, and fail when ``CI=true``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from conftest import REPO_ROOT
from e2e_servers import require_executable
from observability_files import (
    ALERT_TESTS,
    ALERTMANAGER_CONFIG,
    ALERTS,
    COLLECTOR,
    COMPOSE,
    CONFIG_DIR,
    DASHBOARD,
    DASHBOARD_PROVIDERS,
    DATASOURCES,
    PROMETHEUS_CONFIG,
    dashboard,
    dashboard_queries,
    load_yaml,
    variable_queries,
)

from otel_compaction.telemetry import semconv

SECTIONS = ("receivers", "processors", "exporters", "connectors", "extensions")
REQUIRED_ALERTS = {
    "CompactionObligationsAccumulating",
    "CompactionObligationTooOld",
    "CompactionRefused",
    "CompactionSeveredObligation",
    "CompactionDuplicateToolCall",
    "CompactionSideEffectReissued",
    "CompactionObligationOrphaned",
}


_ENV_DEFAULT = re.compile(r"\$\{env:[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}")
"""The Collector's ``${env:NAME:-default}``: what the config holds where NAME is unset."""


def _collector() -> dict[str, Any]:
    """The Collector config as Compose runs it: every ``${env:NAME:-default}`` at its default."""
    text = _ENV_DEFAULT.sub(lambda match: match[1], COLLECTOR.read_text(encoding="utf-8"))
    config: dict[str, Any] = yaml.safe_load(text)
    return config


def _compose() -> dict[str, Any]:
    services: dict[str, Any] = load_yaml(COMPOSE)["services"]
    return services


def _port(endpoint: str) -> int:
    """The port of ``host:port`` or of a URL."""
    return int(endpoint.rsplit(":", 1)[1].split("/", 1)[0])


def _published(service: dict[str, Any]) -> dict[int, tuple[str, int]]:
    """Container port -> (host address, host port) of a compose service."""
    published = {}
    for mapping in service.get("ports", []):
        host_ip, host_port, container_port = str(mapping).split(":")
        published[int(container_port)] = (host_ip, int(host_port))
    return published


def _set_flags(service: dict[str, Any]) -> dict[str, str]:
    """A service's ``--set=key=value`` and ``--name=value`` command flags."""
    flags = {}
    for argument in service.get("command", []):
        if argument.startswith("--set="):
            key, _, value = argument[len("--set=") :].partition("=")
            flags[key] = value
        elif argument.startswith("--") and "=" in argument:
            key, _, value = argument[2:].partition("=")
            flags[key] = value
    return flags


# -- the Collector ---------------------------------------------------------------------------


def test_every_pipeline_component_is_defined_and_every_definition_used() -> None:
    config = _collector()
    service = config["service"]
    used: dict[str, set[str]] = {section: set() for section in SECTIONS}
    for name, pipeline in service["pipelines"].items():
        assert name.split("/", 1)[0] in ("traces", "metrics", "logs"), name
        assert pipeline.get("receivers") and pipeline.get("exporters"), name
        for role in ("receivers", "processors", "exporters"):
            for component in pipeline.get(role, []):
                if component in config.get("connectors", {}):
                    used["connectors"].add(component)
                    continue
                assert component in config.get(role, {}), f"{name}: {role} {component} undefined"
                used[role].add(component)
    for extension in service.get("extensions", []):
        assert extension in config.get("extensions", {}), f"extension {extension} undefined"
        used["extensions"].add(extension)
    for section in SECTIONS:
        unused = set(config.get(section) or {}) - used[section]
        assert not unused, f"{section} defined but never used: {sorted(unused)}"


def test_connectors_join_a_traces_pipeline_to_a_metrics_pipeline() -> None:
    config = _collector()
    pipelines = config["service"]["pipelines"]
    for connector in config["connectors"]:
        exporting = [n for n, p in pipelines.items() if connector in p.get("exporters", [])]
        receiving = [n for n, p in pipelines.items() if connector in p.get("receivers", [])]
        assert exporting and receiving, connector
    traces = pipelines["traces"]
    metrics = pipelines["metrics"]
    assert "spanmetrics" in traces["exporters"] and "spanmetrics" in metrics["receivers"]
    assert any(e.split("/")[0] in ("otlp", "otlp_grpc") for e in traces["exporters"])
    assert "prometheus" in metrics["exporters"]
    assert "otlp" in traces["receivers"] and "otlp" in metrics["receivers"]
    for pipeline in (traces, metrics):
        assert pipeline["processors"][0] == "memory_limiter"
        assert "batch" in pipeline["processors"]


def test_span_metrics_have_the_tool_and_decision_dimensions() -> None:
    spanmetrics = _collector()["connectors"]["spanmetrics"]
    dimensions = {d["name"] for d in spanmetrics["dimensions"]}
    assert {semconv.GEN_AI_TOOL_NAME, semconv.ACTION} <= dimensions
    known = {value for value in vars(semconv).values() if isinstance(value, str)}
    assert dimensions <= known, sorted(dimensions - known)
    assert spanmetrics["namespace"] == "traces.span.metrics"
    for query in dashboard_queries():
        if "traces_span_metrics_calls_total" in query.expr:
            spans = re.findall(r'span_name=~?"([^"]+)"', query.expr)
            assert spans and all(
                s.startswith((semconv.TOOL_RESULT_SPAN, semconv.EVALUATE_SPAN)) for s in spans
            ), query


# -- ports and hosts across the files ---------------------------------------------------------


def test_every_published_port_is_on_loopback() -> None:
    for name, service in _compose().items():
        for container_port, (host_ip, host_port) in _published(service).items():
            assert host_ip == "127.0.0.1", f"{name}: {container_port} on {host_ip}"
            assert host_port == container_port, name


def test_the_collectors_ports_agree_with_compose_and_prometheus() -> None:
    config = _collector()
    services = _compose()
    published = _published(services["otel-collector"])
    protocols = config["receivers"]["otlp"]["protocols"]
    assert _port(protocols["grpc"]["endpoint"]) == 4317 in published
    assert _port(protocols["http"]["endpoint"]) == 4318 in published
    assert _port(config["extensions"]["health_check"]["endpoint"]) in published
    exporter_port = _port(config["exporters"]["prometheus"]["endpoint"])
    assert exporter_port in published
    scrape = load_yaml(PROMETHEUS_CONFIG)["scrape_configs"]
    targets = [t for job in scrape for c in job["static_configs"] for t in c["targets"]]
    assert f"otel-collector:{exporter_port}" in targets
    [collector_job] = [j for j in scrape if "otel-collector:" in str(j["static_configs"])]
    assert collector_job["honor_labels"] is True  # keep the agents' job and instance


def test_prometheus_sends_alerts_to_the_compose_alertmanager() -> None:
    services = _compose()
    [alertmanagers] = load_yaml(PROMETHEUS_CONFIG)["alerting"]["alertmanagers"]
    [target] = [t for c in alertmanagers["static_configs"] for t in c["targets"]]
    host, port = target.rsplit(":", 1)
    assert host == "alertmanager" and host in services
    flags = _set_flags(services[host])
    assert _port(flags["web.listen-address"]) == int(port)
    assert flags["cluster.listen-address"] == ""  # one Alertmanager, no gossip
    assert int(port) in _published(services[host])
    assert host in services["prometheus"]["depends_on"]


def test_traces_reach_jaeger_where_jaeger_listens() -> None:
    config = _collector()
    services = _compose()
    [jaeger_exporter] = [
        value for key, value in config["exporters"].items() if key.startswith("otlp")
    ]
    host, port = jaeger_exporter["endpoint"].rsplit(":", 1)
    assert host in services
    jaeger = services[host]
    listens = _set_flags(jaeger)["receivers.otlp.protocols.grpc.endpoint"]
    assert _port(listens) == int(port)
    assert str(port) in [str(p) for p in jaeger.get("expose", [])]
    assert int(port) not in _published(jaeger)  # the Collector publishes OTLP, not Jaeger
    assert jaeger_exporter["tls"]["insecure"] is True


def test_grafana_data_sources_point_at_the_compose_services() -> None:
    services = _compose()
    sources = load_yaml(DATASOURCES)["datasources"]
    for source in sources:
        url = urlsplit(source["url"])
        assert url.hostname in services, source
        service = services[url.hostname]
        published = _published(service)
        flags = _set_flags(service)
        listens = flags.get("web.listen-address")
        assert url.port in published or (listens and _port(listens) == url.port), source
    by_uid = {s["uid"]: s for s in sources}
    assert by_uid["prometheus"]["type"] == "prometheus"
    assert by_uid["jaeger"]["type"] == "jaeger"
    exemplars = by_uid["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert {e["datasourceUid"] for e in exemplars} <= set(by_uid)


def test_mounted_files_exist_where_the_services_read_them() -> None:
    services = _compose()
    mounts: dict[str, dict[str, Path]] = {}
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source, target = str(volume).split(":")[:2]
            path = (CONFIG_DIR / source).resolve()
            assert path.exists(), f"{name}: {source} does not exist"
            mounts.setdefault(name, {})[target] = path
    collector_config = _set_flags(services["otel-collector"])["config"]
    assert mounts["otel-collector"][collector_config] == COLLECTOR.resolve()
    prometheus_flags = _set_flags(services["prometheus"])
    config_path = Path(prometheus_flags["config.file"])
    assert mounts["prometheus"][str(config_path.parent)] == PROMETHEUS_CONFIG.parent.resolve()
    for rule_file in load_yaml(PROMETHEUS_CONFIG)["rule_files"]:
        assert (PROMETHEUS_CONFIG.parent / rule_file).resolve() == ALERTS.resolve()
    alertmanager_config = Path(_set_flags(services["alertmanager"])["config.file"])
    alertmanager_mount = mounts["alertmanager"][str(alertmanager_config.parent)]
    assert alertmanager_mount / alertmanager_config.name == ALERTMANAGER_CONFIG.resolve()
    grafana = mounts["grafana"]
    assert grafana["/etc/grafana/provisioning"] == DATASOURCES.parent.parent.resolve()
    [provider] = load_yaml(DASHBOARD_PROVIDERS)["providers"]
    dashboards = grafana[provider["options"]["path"]]
    assert DASHBOARD.resolve().parent == dashboards
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"


def test_the_docs_name_the_ports_compose_publishes() -> None:
    page = (REPO_ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    section = page.split("## Observability stack", 1)[1].split("\n## ", 1)[0]
    section = section.split("**Without a Collector**", 1)[0]  # then: the agent's own port
    mentioned = {int(port) for port in re.findall(r"127\.0\.0\.1:(\d+)", section)}
    published = {
        host_port
        for service in _compose().values()
        for _, host_port in _published(service).values()
    }
    assert mentioned <= published, sorted(mentioned - published)
    assert {3000, 4318, 9090, 9093, 16686} <= mentioned
    assert "docker compose -f collector-config/compose.yaml up" in section


# -- the dashboard ------------------------------------------------------------------------------


def test_dashboard_data_sources_are_the_provisioned_ones() -> None:
    sources = {s["uid"]: s for s in load_yaml(DATASOURCES)["datasources"]}
    board = dashboard()

    def check(reference: Any, where: str) -> None:
        if reference is None:
            return
        assert isinstance(reference, dict), f"{where}: refer to a data source by uid"
        assert reference["uid"] in sources, f"{where}: unknown data source {reference}"
        assert reference["type"] == sources[reference["uid"]]["type"], where

    for panel in board["panels"]:
        check(panel.get("datasource"), panel["title"])
        for target in panel.get("targets", []):
            check(target.get("datasource"), f"{panel['title']} {target['refId']}")
    for variable in board["templating"]["list"]:
        check(variable.get("datasource"), f"variable {variable['name']}")
    assert dashboard_queries(), "the dashboard has no queries"
    assert all(q.datasource["uid"] == "prometheus" for q in dashboard_queries())
    assert set(variable_queries()) == {"job", "service"}


def test_decisions_link_to_their_traces_in_jaeger() -> None:
    board = dashboard()
    jaeger_port = _published(_compose()["jaeger"])[16686][1]
    [jaeger_url] = [v for v in board["templating"]["list"] if v["name"] == "jaeger_url"]
    assert jaeger_url["query"] == f"http://127.0.0.1:{jaeger_port}"
    decision_panels = [
        p for p in board["panels"] if "compaction_decisions_total" in str(p.get("targets"))
    ]
    assert decision_panels
    for panel in decision_panels:
        links = panel["fieldConfig"]["defaults"]["links"]
        assert links, f"{panel['title']} has no link to its traces"
        for link in links:
            url = link["url"]
            assert url.startswith("${jaeger_url}/search?service=${service}")
            assert f"operation={semconv.EVALUATE_SPAN}" in url
            assert "%22" + semconv.ACTION + "%22" in url  # the tag: {"compaction.action": ...}
    assert any("refuse" in link["url"] for link in board["links"])


def test_the_dashboard_has_the_panels_the_issue_asks_for() -> None:
    titles = {q.panel: q.expr for q in dashboard_queries()}
    wanted = {
        "Open obligations by kind": ("compaction_obligations_open", "compaction_obligation_kind"),
        "Oldest open obligation": ("compaction_obligation_oldest_age_seconds",),
        "Decisions in the time range, by action and rule": (
            "compaction_decisions_total",
            "compaction_action, compaction_rule",
        ),
        "Tokens held verbatim by deferral (time range)": ("compaction_deferral_held_tokens_total",),
        "Severed calls (time range)": ("compaction_obligations_severed_total",),
        "Duplicate tool calls (time range)": ("compaction_tool_calls_duplicate_total",),
        "Orphaned obligations now": ("max by", "compaction_obligations_orphaned"),
        "Engine disagreements with the ledger (time range)": (
            "compaction_sources_disagreements_total",
        ),
    }
    for title, fragments in wanted.items():
        assert title in titles, title
        for fragment in fragments:
            assert fragment in titles[title], (title, fragment)


# -- alert rules ---------------------------------------------------------------------------


def test_every_alert_tells_the_person_on_call_what_to_do() -> None:
    rules = [rule for group in load_yaml(ALERTS)["groups"] for rule in group["rules"]]
    names = {rule["alert"] for rule in rules}
    assert names >= REQUIRED_ALERTS
    for rule in rules:
        annotations = rule["annotations"]
        assert annotations["summary"].strip(), rule["alert"]
        assert len(annotations["description"]) > 200, rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
    tested = {
        case["alertname"]
        for test in load_yaml(ALERT_TESTS)["tests"]
        for case in test.get("alert_rule_test", [])
    }
    assert tested == names, f"rules without a promtool test: {sorted(names - tested)}"


@pytest.fixture(name="promtool")
def promtool_fixture() -> str:
    """The promtool program; skips (fails under CI) without Debian's prometheus package."""
    return require_executable("promtool", "install Debian's prometheus package")


def _run(program: str, *arguments: str, cwd: Path = CONFIG_DIR) -> str:
    """Run promtool or amtool; its output, which must come with exit status 0."""
    done = subprocess.run(
        [program, *arguments], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{Path(program).name} {' '.join(arguments)}:\n{output}"
    return output


def test_promtool_check_rules(promtool: str) -> None:
    output = _run(promtool, "check", "rules", str(ALERTS))
    assert "SUCCESS: 8 rules found" in output


def test_promtool_check_config(promtool: str) -> None:
    output = _run(promtool, "check", "config", str(PROMETHEUS_CONFIG))
    assert "is valid prometheus config file syntax" in output


def test_promtool_test_rules(promtool: str) -> None:
    output = _run(promtool, "test", "rules", ALERT_TESTS.name, cwd=ALERT_TESTS.parent)
    assert "SUCCESS" in output and "FAILED" not in output


@pytest.fixture(name="amtool")
def amtool_fixture() -> str:
    """The amtool program; skips (fails under CI) without Debian's prometheus-alertmanager."""
    return require_executable("amtool", "install Debian's prometheus-alertmanager package")


def test_amtool_check_config(amtool: str) -> None:
    output = _run(amtool, "check-config", str(ALERTMANAGER_CONFIG))
    assert "SUCCESS" in output and "1 receivers" in output


def test_every_alert_is_routed_to_the_on_call_receiver(amtool: str) -> None:
    [receiver] = load_yaml(ALERTMANAGER_CONFIG)["receivers"]
    assert receiver["name"] == "otel-compaction-on-call"
    for group in load_yaml(ALERTS)["groups"]:
        for rule in group["rules"]:
            labels = [f"{name}={value}" for name, value in rule["labels"].items()]
            output = _run(
                amtool,
                "config",
                "routes",
                "test",
                f"--config.file={ALERTMANAGER_CONFIG}",
                "--verify.receivers=otel-compaction-on-call",
                f"alertname={rule['alert']}",
                *labels,
            )
            assert output.splitlines()[0] == "otel-compaction-on-call", rule["alert"]
