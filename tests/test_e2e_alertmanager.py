"""End to end from an agent's open tool calls to an on-call webhook: a real Prometheus scrapes
the instrumented agent process (``prometheus_stack``), evaluates the shipped alert rules and
sends what fires to a real Alertmanager, which routes it with the shipped
``collector-config/alertmanager/alertmanager.yml`` (only the receiver's URL and the grouping
timings replaced) and POSTs it to a webhook receiver on loopback.

Shown at that receiver: the accumulating-obligations alert arrives firing, in a group of its
own name, with the rule's labels and its annotations rendered with the agent's job, instance
and value; a critical alert goes through the critical route; and once the agent is gone the
same alert arrives resolved.

Needs Debian's ``prometheus`` and ``prometheus-alertmanager`` packages (``.ci/run`` installs
them): skips without them, fails under ``CI=true``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from e2e_servers import AlertmanagerServer, require_executable, wait_until
from observability_files import ALERTS, alertmanager_config, annotation_pattern, load_yaml
from prometheus_stack import JOB, ScrapedAgent, scraped_agent
from webhook_receiver import WebhookReceiver

ACCUMULATING = "CompactionObligationsAccumulating"
SEVERED = "CompactionSeveredObligation"
RECEIVER = "otel-compaction-on-call"
"""The receiver of the shipped route, as a user's notifications name it."""


@dataclass(frozen=True)
class Alerting:
    """The whole path: agent and Prometheus, Alertmanager, and the webhook receiver."""

    stack: ScrapedAgent
    alertmanager: AlertmanagerServer
    webhook: WebhookReceiver

    def notification(self, alertname: str, status: str, *, timeout: float) -> dict[str, Any]:
        """The first notification of group `alertname` with status `status`, waited for."""

        def arrived() -> dict[str, Any] | None:
            for notification in self.webhook.notifications():
                group = notification["groupLabels"].get("alertname")
                if group == alertname and notification["status"] == status:
                    return notification
            return None

        return wait_until(
            arrived,
            timeout=timeout,
            interval=0.5,
            message=f"{alertname} never reached the webhook {status}",
            describe=self.describe,
        )

    def describe(self) -> str:
        """What each hop holds, for failure messages."""
        try:
            prometheus_alerts = json.dumps(self.stack.prometheus.alerts(), indent=1)[:3000]
        except (AssertionError, OSError) as error:
            prometheus_alerts = f"(cannot list them: {error})"
        return (
            f"{self.webhook.describe()}\n{self.alertmanager.describe()}\n"
            f"Prometheus's alerts: {prometheus_alerts}"
        )


@pytest.fixture(name="alerting")
def alerting_fixture(tmp_path: Path) -> Iterator[Alerting]:
    """The webhook receiver, Alertmanager routing to it, and the agent scraped by Prometheus
    sending to that Alertmanager; all stopped afterwards."""
    binary = require_executable(
        "prometheus-alertmanager", "install Debian's prometheus-alertmanager package"
    )
    with WebhookReceiver() as webhook:
        config = alertmanager_config(webhook.url, group_wait="1s", group_interval="1s")
        with (
            AlertmanagerServer(tmp_path / "alertmanager", binary=binary, config=config) as am,
            scraped_agent(tmp_path, alertmanagers=[am.address]) as stack,
        ):
            yield Alerting(stack, am, webhook)


def _timestamp(text: str) -> datetime:
    """An RFC 3339 time as Alertmanager writes it (nanoseconds, ``Z``), to the microsecond."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z", text)
    assert match, f"not a UTC RFC 3339 time: {text}"
    whole = datetime.strptime(match[1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    return whole.replace(microsecond=int((match[2] or "0")[:6].ljust(6, "0")))


def _description(name: str) -> str:
    """The description template of alert rule `name`, as shipped."""
    rules = [r for g in load_yaml(ALERTS)["groups"] for r in g["rules"] if r["alert"] == name]
    [rule] = rules
    return str(rule["annotations"]["description"])


def test_the_accumulation_alert_reaches_the_webhook_with_its_labels_and_annotations(
    alerting: Alerting,
) -> None:
    stack = alerting.stack

    # Firing: one notification for the alert's group, from the root route.
    firing = alerting.notification(ACCUMULATING, "firing", timeout=75)
    assert firing["version"] == "4"
    assert firing["receiver"] == RECEIVER
    assert firing["groupKey"] == '{}:{alertname="CompactionObligationsAccumulating"}'
    assert firing["groupLabels"] == {"alertname": ACCUMULATING}
    assert firing["externalURL"] == alerting.alertmanager.url
    assert firing["truncatedAlerts"] == 0
    [alert] = firing["alerts"]
    assert alert["status"] == "firing"
    assert alert["labels"] == {
        "alertname": ACCUMULATING,
        "instance": stack.target,
        "job": JOB,
        "severity": "warning",
    }
    assert firing["commonLabels"] == alert["labels"]
    assert firing["commonAnnotations"] == alert["annotations"]
    assert set(alert["annotations"]) == {"summary", "description"}
    assert alert["annotations"]["summary"] == (
        f"Open obligations keep accumulating in e2e-agent ({stack.target})"
    )
    rendered = annotation_pattern(_description(ACCUMULATING), alert["labels"]).fullmatch(
        alert["annotations"]["description"]
    )
    assert rendered, alert["annotations"]["description"]
    assert int(rendered["value"]) >= 1  # calls left open: the floor rose
    assert alert["annotations"]["description"].startswith(
        f"Even at their lowest, {rendered['value']} more obligations (tool calls,"
    )
    link = urlsplit(alert["generatorURL"])
    assert f"{link.scheme}://{link.netloc}{link.path}" == f"{stack.prometheus.url}/graph"
    assert "compaction_obligations_open" in parse_qs(link.query)["g0.expr"][0]

    # A critical alert of the same run takes the critical route, to the same receiver.
    severed = alerting.notification(SEVERED, "firing", timeout=30)
    assert severed["receiver"] == RECEIVER
    critical_group = '{}/{severity="critical"}:{alertname="CompactionSeveredObligation"}'
    assert severed["groupKey"] == critical_group
    assert [a["labels"] for a in severed["alerts"]] == [
        {"alertname": SEVERED, "instance": stack.target, "job": JOB, "severity": "critical"}
    ]

    # Resolved: the agent is gone, its series go stale, and the same alert is sent resolved.
    stack.agent.stop()
    resolved = alerting.notification(ACCUMULATING, "resolved", timeout=60)
    [ended] = resolved["alerts"]
    assert ended["status"] == "resolved"
    assert ended["labels"] == alert["labels"]
    assert ended["fingerprint"] == alert["fingerprint"]
    assert ended["startsAt"] == alert["startsAt"]
    assert _timestamp(ended["endsAt"]) > _timestamp(ended["startsAt"])
    assert not alerting.webhook.rejected()
