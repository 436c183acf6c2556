"""The traces half of the observability stack as real programs on loopback: Jaeger v2 (its
built-in all-in-one configuration, in-memory storage) and the project's Collector
(``collector-config/otel-collector.yaml``) exporting to it, each on ephemeral ports.

* `JaegerServer`: ``jaeger`` with every listener it keeps moved to a free port of
  ``127.0.0.1`` by ``--set`` overrides, and the rest of its all-in-one setup (the Jaeger and
  Zipkin receivers, remote sampling, expvar, zpages, its own metrics and traces) left off, so
  that nothing it opens can clash with another server; traces read back through its HTTP API.
* `CollectorServer`: ``otelcol-compaction`` with the project's config, its addresses from the
  environment (as ``docs/stack.md`` starts it), its traces sent to a `JaegerServer`; what its
  Prometheus exporter serves.
* `jaeger_binary`, `collector_binary`: the programs ``collector-config/build/build.sh`` builds
  into ``.tools/bin`` (or those ``OTEL_COMPACTION_JAEGER`` and ``OTEL_COMPACTION_OTELCOL``
  name); a missing one skips its test, or fails it under ``CI=true``.
"""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conftest import REPO_ROOT, unavailable
from e2e_servers import (
    LOOPBACK,
    ManagedProcess,
    _await_ready,
    free_port,
    get_json,
    loopback_environment,
)

__all__ = [
    "COLLECTOR_CONFIG",
    "CollectorServer",
    "JaegerServer",
    "collector_binary",
    "jaeger_binary",
]

COLLECTOR_CONFIG = REPO_ROOT / "collector-config" / "otel-collector.yaml"
"""The project's Collector configuration, as Compose runs it."""

COLLECTOR_ENV = "OTEL_COMPACTION_OTELCOL"
"""Names a Collector binary other than ``.tools/bin/otelcol-compaction``."""
JAEGER_ENV = "OTEL_COMPACTION_JAEGER"
"""Names a Jaeger binary other than ``.tools/bin/jaeger``."""
_BUILD_HINT = "run: bash collector-config/build/build.sh"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _built(variable: str, name: str) -> Path:
    path = Path(os.environ.get(variable) or REPO_ROOT / ".tools" / "bin" / name)
    if not path.is_file():
        unavailable(f"{path} not built; {_BUILD_HINT}")
    return path


def collector_binary() -> Path:
    """The built Collector: ``OTEL_COMPACTION_OTELCOL``, else ``.tools/bin/otelcol-compaction``;
    skips (fails under CI) when there is none."""
    return _built(COLLECTOR_ENV, "otelcol-compaction")


def jaeger_binary() -> Path:
    """The built Jaeger v2: ``OTEL_COMPACTION_JAEGER``, else ``.tools/bin/jaeger``; skips
    (fails under CI) when there is none."""
    return _built(JAEGER_ENV, "jaeger")


def _environment(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without proxies and without any ``OTEL_*`` variable (a
    server's own telemetry goes nowhere), plus `extra`."""
    environment = {k: v for k, v in loopback_environment().items() if not k.startswith("OTEL_")}
    environment.update(extra)
    return environment


class JaegerServer:
    """Jaeger v2 all-in-one (in-memory storage) on loopback: OTLP gRPC at `otlp_grpc`, OTLP
    HTTP at `otlp_http` (``host:port``), its query API and UI at `url`."""

    def __init__(
        self, workdir: Path, *, binary: Path | None = None, ui_assets: Path | None = None
    ) -> None:
        """Pick its ports; its log goes to ``<workdir>/jaeger.log``. `ui_assets` is a built
        Jaeger UI (the directory holding its ``index.html``) to serve instead of the one in
        the binary: ``go build`` embeds none, and serves a placeholder page."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.binary = binary or jaeger_binary()
        self.ui_assets = ui_assets
        self.otlp_grpc = f"{LOOPBACK}:{free_port()}"
        self.otlp_http = f"{LOOPBACK}:{free_port()}"
        self.query_port = free_port()
        self.url = f"http://{LOOPBACK}:{self.query_port}"
        self.health_url = f"http://{LOOPBACK}:{free_port()}"
        self._query_grpc = f"{LOOPBACK}:{free_port()}"
        self._health_grpc = f"{LOOPBACK}:{free_port()}"
        self.process: ManagedProcess | None = None

    def argv(self) -> list[str]:
        """Its command line: the built-in all-in-one configuration with these overrides."""
        health = self.health_url.removeprefix("http://")
        settings = {
            # Only the OTLP receivers: no Jaeger (UDP too) or Zipkin listeners.
            "service.pipelines.traces.receivers": "[otlp]",
            "receivers.otlp.protocols.grpc.endpoint": self.otlp_grpc,
            "receivers.otlp.protocols.http.endpoint": self.otlp_http,
            # Storage, query and health only: no remote sampling, expvar or zpages ports.
            "service.extensions": "[jaeger_storage,jaeger_query,healthcheckv2]",
            "extensions.jaeger_query.http.endpoint": f"{LOOPBACK}:{self.query_port}",
            "extensions.jaeger_query.grpc.endpoint": self._query_grpc,
            "extensions.jaeger_query.enable_tracing": "false",  # else it exports to :4317
            "extensions.healthcheckv2.http.endpoint": health,
            "extensions.healthcheckv2.grpc.endpoint": self._health_grpc,
            "service.telemetry.metrics.level": "none",  # else it serves them on :8888
        }
        if self.ui_assets is not None:
            settings["extensions.jaeger_query.ui.assets_path"] = str(self.ui_assets)
        return [str(self.binary), *(f"--set={key}={value}" for key, value in settings.items())]

    def start(self, timeout: float = 30.0) -> JaegerServer:
        """Start it and wait until its health check and its query API answer."""
        self.process = ManagedProcess(
            self.argv(),
            log_path=self.workdir / "jaeger.log",
            env=_environment({}),
            cwd=self.workdir,
        )
        _await_ready(self.process, f"{self.health_url}/status", "Jaeger", timeout, self.stop)
        _await_ready(self.process, f"{self.url}/api/services", "Jaeger", timeout, self.stop)
        return self

    def stop(self) -> None:
        """Stop it (idempotent)."""
        if self.process is not None:
            self.process.stop()

    def services(self) -> list[str]:
        """The services it has spans of."""
        services: list[str] = get_json(f"{self.url}/api/services")["data"] or []
        return services

    def traces(self, service: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The traces of `service` (at most `limit`), as its HTTP API returns them: each with
        its ``traceID``, ``spans`` (``operationName``, ``references``, ``logs``, ``tags``)
        and ``processes``."""
        query = urllib.parse.urlencode({"service": service, "limit": str(limit)})
        traces: list[dict[str, Any]] = get_json(f"{self.url}/api/traces?{query}")["data"] or []
        return traces

    def describe(self) -> str:
        """Its output tail, for failure messages."""
        return self.process.describe() if self.process is not None else "(Jaeger not started)"


class CollectorServer:
    """The project's Collector on loopback: OTLP gRPC at `otlp_grpc`, OTLP HTTP at
    `otlp_http_url`, the metrics for Prometheus at `metrics_url`, its traces sent to
    `jaeger_otlp` (``host:port`` of an OTLP gRPC receiver)."""

    def __init__(
        self,
        workdir: Path,
        *,
        jaeger_otlp: str,
        binary: Path | None = None,
        config: Path = COLLECTOR_CONFIG,
    ) -> None:
        """Pick its ports; its log goes to ``<workdir>/collector.log``."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.binary = binary or collector_binary()
        self.config = config
        self.otlp_grpc = f"{LOOPBACK}:{free_port()}"
        self.otlp_http = f"{LOOPBACK}:{free_port()}"
        self.otlp_http_url = f"http://{self.otlp_http}"
        self.health = f"{LOOPBACK}:{free_port()}"
        self.prometheus = f"{LOOPBACK}:{free_port()}"
        self.metrics_url = f"http://{self.prometheus}/metrics"
        self.addresses = {
            "OTLP_GRPC_ENDPOINT": self.otlp_grpc,
            "OTLP_HTTP_ENDPOINT": self.otlp_http,
            "HEALTH_CHECK_ENDPOINT": self.health,
            "PROMETHEUS_EXPORTER_ENDPOINT": self.prometheus,
            "JAEGER_OTLP_ENDPOINT": jaeger_otlp,
        }
        """The environment the config reads its addresses from."""
        self.process: ManagedProcess | None = None

    def start(self, timeout: float = 30.0) -> CollectorServer:
        """Start it and wait until its health check answers."""
        self.process = ManagedProcess(
            [
                str(self.binary),
                f"--config={self.config}",
                "--set=service.telemetry.metrics.level=none",  # its own metrics: no :8888
            ],
            log_path=self.workdir / "collector.log",
            env=_environment(self.addresses),
            cwd=self.workdir,
        )
        _await_ready(self.process, f"http://{self.health}/", "the Collector", timeout, self.stop)
        return self

    def stop(self) -> None:
        """Stop it (idempotent): it flushes what it holds first."""
        if self.process is not None:
            self.process.stop()

    def metrics(self) -> str:
        """What its Prometheus exporter serves now (the text exposition format)."""
        with _OPENER.open(self.metrics_url, timeout=10) as response:
            text: str = response.read().decode("utf-8")
        return text

    def describe(self) -> str:
        """Its output tail, for failure messages."""
        return self.process.describe() if self.process is not None else "(not started)"
