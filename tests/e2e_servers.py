"""Real servers for the end-to-end tests, each started as a subprocess on loopback.

* `PrometheusServer`: the ``prometheus`` binary (Debian's package), with a generated config,
  its database in a temporary directory, on an ephemeral port of ``127.0.0.1``; PromQL
  queries, alerts, rules and label values through its HTTP API; optionally sending its alerts
  to Alertmanagers.
* `AlertmanagerServer`: ``prometheus-alertmanager`` (Debian's package) with a given config,
  its state in a temporary directory, without cluster gossip; its alerts through its API.
* `PhoenixServer`: Arize Phoenix (``phoenix serve``, through ``phoenix_launcher.py`` so that
  its gRPC listener stays on loopback too), from the environment `phoenix_python` finds; spans
  read back through its REST API.
* `ManagedProcess`: a subprocess whose output goes to a log file (quoted in failures) and
  which `stop` ends, politely first.

A missing server program skips its test, or fails it when ``CI=true`` (CI must never skip).
All HTTP requests bypass proxies; every wait is bounded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import yaml
from conftest import REPO_ROOT, unavailable
from loopback import LoopbackService

__all__ = [
    "LOOPBACK",
    "AlertmanagerServer",
    "ManagedProcess",
    "PhoenixServer",
    "PrometheusServer",
    "environment_python",
    "free_port",
    "get_json",
    "phoenix_python",
    "require_executable",
    "unavailable",
    "wait_until",
]

LOOPBACK = "127.0.0.1"
"""The only address the servers listen on."""

PHOENIX_PYTHON_ENV = "OTEL_COMPACTION_PHOENIX_PYTHON"
"""The Python of an environment with Arize Phoenix; default ``.venv-phoenix/bin/python``."""

_T = TypeVar("_T")
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy")


def require_executable(name: str, hint: str) -> str:
    """The path of program `name` on PATH; skips (fails under CI) when it is missing."""
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} not found on PATH; {hint}")
    return path


def free_port() -> int:
    """A TCP port of loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def loopback_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without proxies, plus `extra`."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key.lower() not in _PROXY_VARIABLES and key.lower() != "no_proxy"
    }
    environment["NO_PROXY"] = environment["no_proxy"] = f"{LOOPBACK},localhost"
    environment.update(extra or {})
    return environment


def get_json(url: str, timeout: float = 10.0, *, missing_ok: bool = False) -> Any:
    """GET `url` (no proxy) and decode its JSON body; HTTP errors raise with the body, but a
    404 returns None when `missing_ok`."""
    try:
        with _OPENER.open(url, timeout=timeout) as response:
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as error:
        if missing_ok and error.code == 404:
            return None
        body = error.read().decode("utf-8", "replace")
        raise AssertionError(f"GET {url}: HTTP {error.code}: {body[:2000]}") from error


def _reachable(url: str) -> bool:
    try:
        with _OPENER.open(url, timeout=2) as response:
            return 200 <= int(response.status) < 300
    except (OSError, urllib.error.URLError):
        return False


def wait_until(
    predicate: Callable[[], _T | None],
    *,
    timeout: float,
    interval: float = 0.25,
    message: str,
    describe: Callable[[], str] | None = None,
) -> _T:
    """Poll `predicate` until it returns something truthy, and return that; after `timeout`
    seconds fail with `message` and, when given, what `describe` says. A poll that times out
    (a server slow to answer on a loaded machine) counts as "not yet"."""
    deadline = time.monotonic() + timeout
    slow: OSError | None = None
    while True:
        try:
            result = predicate()
        except (TimeoutError, urllib.error.URLError) as error:
            if isinstance(error, urllib.error.URLError) and not isinstance(
                error.reason, TimeoutError
            ):
                raise
            result, slow = None, error
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f"\n{describe()}" if describe is not None else ""
            if slow is not None:
                detail += f"\nlast poll timed out: {slow}"
            raise AssertionError(f"{message} (waited {timeout:g}s){detail}")
        time.sleep(interval)


class ManagedProcess:
    """A subprocess with its output in `log_path`; `stop` terminates it, then kills it."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self._log = log_path.open("wb")
        try:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
        except BaseException:
            self._log.close()
            raise

    def alive(self) -> bool:
        """True while the process runs."""
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of its output."""
        if not self._log.closed:
            self._log.flush()
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def describe(self) -> str:
        """Its command, state and output tail, for failure messages."""
        state = "running" if self.alive() else f"exited with {self.process.returncode}"
        return f"$ {' '.join(self.argv)}\n({state}) output:\n{self.log_tail()}"

    def wait(self, timeout: float) -> int:
        """Wait at most `timeout` seconds for it to exit; its exit status."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired as expired:
            raise AssertionError(f"still running after {timeout:g}s\n{self.describe()}") from (
                expired
            )

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate (SIGTERM), then kill after `timeout` seconds; idempotent."""
        try:
            if self.alive():
                self.process.terminate()
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout)
        finally:
            self._log.close()

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class _ServerProcess(LoopbackService):
    """A server program run as a `ManagedProcess` in its work directory, on loopback only,
    its output in ``<workdir>/<program>.log``."""

    name = "server"
    workdir: Path
    process: ManagedProcess | None = None

    def _launch(self, argv: Sequence[str], *, ready_url: str, timeout: float) -> None:
        """Run `argv` and wait until `ready_url` answers (stopped and raised otherwise)."""
        self.process = ManagedProcess(
            argv,
            log_path=self.workdir / f"{self.name.lower()}.log",
            env=loopback_environment(),
            cwd=self.workdir,
        )
        _await_ready(self.process, ready_url, self.name, timeout, self.stop)

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        if self.process is not None:
            self.process.stop()


class PrometheusServer(_ServerProcess):
    """A real Prometheus server on loopback, scraping `targets` every second and evaluating
    `rule_files` every second."""

    name = "Prometheus"

    def __init__(
        self,
        workdir: Path,
        *,
        binary: str,
        targets: Mapping[str, Sequence[str]],
        rule_files: Sequence[Path] = (),
        alertmanagers: Sequence[str] = (),
        interval: str = "1s",
    ) -> None:
        """Write the configuration into `workdir`; `targets` maps job names to
        ``host:port`` targets; firing alerts go to the `alertmanagers` (``host:port``)."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.binary = binary
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.config_path = workdir / "prometheus.yml"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": list(hosts)}]}
                for job, hosts in targets.items()
            ],
        }
        if alertmanagers:
            config["alerting"] = {
                "alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]
            }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")

    def start(self, timeout: float = 30.0) -> PrometheusServer:
        """Start it and wait until it is ready."""
        self._launch(
            [
                self.binary,
                f"--config.file={self.config_path}",
                f"--web.listen-address={LOOPBACK}:{self.port}",
                f"--web.external-url={self.url}",  # alerts link back here (generatorURL)
                f"--storage.tsdb.path={self.workdir / 'data'}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            ready_url=f"{self.url}/-/ready",
            timeout=timeout,
        )
        return self

    def api(self, path: str, **params: str | Sequence[str]) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data``; a non-success status raises."""
        query = urllib.parse.urlencode(params, doseq=True)
        body = get_json(f"{self.url}/api/v1/{path}" + (f"?{query}" if query else ""))
        if body.get("status") != "success":
            raise AssertionError(f"/api/v1/{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant PromQL query: the result vector (or matrix/scalar as a list)."""
        data = self.api("query", query=expr)
        result = data["result"]
        return result if isinstance(result, list) else [{"value": result}]

    def value(self, expr: str) -> float | None:
        """The single value of an instant query, or None when it returns nothing."""
        result = self.query(expr)
        if not result:
            return None
        if len(result) != 1:
            raise AssertionError(f"{expr}: {len(result)} series, expected one: {result}")
        return float(result[0]["value"][1])

    def alerts(self) -> list[dict[str, Any]]:
        """The active (pending or firing) alerts."""
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return alerts

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule, with its health and last error."""
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    def metric_names(self) -> set[str]:
        """Every metric name Prometheus has stored."""
        return set(self.api("label/__name__/values"))

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        """Values of `label`, of the series that `match` selects when given."""
        params: dict[str, str | Sequence[str]] = {"match[]": [match]} if match else {}
        values: list[str] = self.api(f"label/{label}/values", **params)
        return values


class AlertmanagerServer(_ServerProcess):
    """A real Alertmanager on loopback with the configuration `config`, alone (no cluster)."""

    name = "Alertmanager"

    def __init__(self, workdir: Path, *, binary: str, config: Mapping[str, Any]) -> None:
        """Write `config` into `workdir`, where its notification state will live too."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.binary = binary
        self.port = free_port()
        self.address = f"{LOOPBACK}:{self.port}"
        self.url = f"http://{self.address}"
        self.config_path = workdir / "alertmanager.yml"
        self.config_path.write_text(yaml.safe_dump(dict(config), sort_keys=False), "utf-8")

    def start(self, timeout: float = 30.0) -> AlertmanagerServer:
        """Start it and wait until it is ready."""
        self._launch(
            [
                self.binary,
                f"--config.file={self.config_path}",
                f"--storage.path={self.workdir / 'data'}",
                f"--web.listen-address={self.address}",
                f"--web.external-url={self.url}",  # the notifications' externalURL
                "--cluster.listen-address=",  # empty: no gossip port, no peers
                "--log.level=warn",
            ],
            ready_url=f"{self.url}/-/ready",
            timeout=timeout,
        )
        return self

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts it holds (API v2), with their labels, annotations and status."""
        alerts: list[dict[str, Any]] = get_json(f"{self.url}/api/v2/alerts")
        return alerts

    def describe(self) -> str:
        """Its alerts and its output tail, for failure messages."""
        try:
            alerts = json.dumps(self.alerts(), indent=1)[:3000]
        except (AssertionError, OSError) as error:
            alerts = f"(cannot list its alerts: {error})"
        log = self.process.describe() if self.process is not None else "(not started)"
        return f"Alertmanager's alerts: {alerts}\n{log}"


def phoenix_python() -> str:
    """The Python that runs Phoenix: ``OTEL_COMPACTION_PHOENIX_PYTHON``, else the repository's
    ``.venv-phoenix``, else this interpreter when it has Phoenix. Skips (fails under CI) when
    none exists."""
    hint = (
        "make its environment with: python3 -m venv .venv-phoenix && "
        ".venv-phoenix/bin/pip install -r tests/phoenix-requirements.txt "
        f"(or set {PHOENIX_PYTHON_ENV})"
    )
    local = REPO_ROOT / ".venv-phoenix" / "bin" / "python"
    if (
        os.environ.get(PHOENIX_PYTHON_ENV)
        or local.is_file()
        or not importlib.util.find_spec("phoenix")
    ):
        missing = f"Arize Phoenix is not installed; {hint}"
        return environment_python(PHOENIX_PYTHON_ENV, ".venv-phoenix", missing)
    return sys.executable  # this interpreter has Phoenix


def environment_python(variable: str, environment: str, missing: str) -> str:
    """The Python of a virtual environment the tests keep apart from this one: the one the
    environment variable `variable` names, else the repository's `environment` (such as
    ``.venv-phoenix``). Skips (fails under CI) with `missing` when there is neither, or with
    what is wrong when `variable` names no file."""
    configured = os.environ.get(variable)
    if configured:
        if not Path(configured).is_file():
            unavailable(f"{variable}={configured} is not a file")
        return configured
    local = REPO_ROOT / environment / "bin" / "python"
    if local.is_file():
        return str(local)
    return unavailable(missing)


class PhoenixServer:
    """Arize Phoenix on loopback: OTLP/HTTP at `traces_endpoint`, REST API at `url`."""

    def __init__(self, workdir: Path, *, python: str) -> None:
        """Prepare a server whose database lives in `workdir`."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.python = python
        self.port = free_port()
        self.grpc_port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.traces_endpoint = f"{self.url}/v1/traces"
        self.process: ManagedProcess | None = None

    def start(self, timeout: float = 45.0) -> PhoenixServer:
        """Start it and wait until it serves its health check."""
        environment = loopback_environment(
            {
                "PHOENIX_HOST": LOOPBACK,
                "PHOENIX_PORT": str(self.port),
                "PHOENIX_GRPC_PORT": str(self.grpc_port),
                "PHOENIX_WORKING_DIR": str(self.workdir),
                "PHOENIX_TELEMETRY_ENABLED": "false",
                "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
                "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
                "PHOENIX_LOG_MIGRATIONS": "false",
            }
        )
        self.process = ManagedProcess(
            [self.python, str(Path(__file__).with_name("phoenix_launcher.py"))],
            log_path=self.workdir / "phoenix.log",
            env=environment,
            cwd=self.workdir,
        )
        _await_ready(self.process, f"{self.url}/healthz", "Phoenix", timeout, self.stop)
        return self

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        if self.process is not None:
            self.process.stop(timeout=15)

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span of `project`, as OTLP JSON objects, following the pagination; none
        while the project does not exist yet."""
        spans: list[dict[str, Any]] = []
        cursor: str | None = None
        name = urllib.parse.quote(project, safe="")
        for _ in range(100):
            query = {"limit": "1000", **({"cursor": cursor} if cursor else {})}
            body = get_json(
                f"{self.url}/v1/projects/{name}/spans/otlpv1?{urllib.parse.urlencode(query)}",
                missing_ok=True,
            )
            if body is None:
                break
            spans.extend(body["data"])
            cursor = body.get("next_cursor")
            if not cursor:
                break
        return spans

    def __enter__(self) -> PhoenixServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _await_ready(
    process: ManagedProcess, url: str, name: str, timeout: float, stop: Callable[[], None]
) -> None:
    """Wait until `url` answers while `process` lives; on failure stop the server and raise,
    with the process's log in the message."""
    try:
        wait_until(
            lambda: _reachable(url) or not process.alive(),
            timeout=timeout,
            message=f"{name} did not become ready at {url}",
            describe=process.describe,
        )
        if not process.alive():
            raise AssertionError(f"{name} exited\n{process.describe()}")
    except BaseException:
        stop()
        raise
