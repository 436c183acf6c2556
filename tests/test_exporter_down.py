"""With the OTLP endpoint down (a loopback port nobody listens on, or a listener that never
answers), the agent's calls and the gate's decisions are exactly those of a healthy pipeline,
no call waits for the exporter, and shutdown returns within a bound derived from the
exporters' timeout: with the default environment, an agent process exits within the documented
8 s."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from exporter_down_agent import CONVERSATION, agent_run
from otlp_receiver import bypass_proxies
from telemetry_harness import FLIGHT_MESSAGES, ledger_rows, make_pipeline, set_otlp_environment

from otel_compaction import Telemetry, configure, conversation

OTLP_TIMEOUT_S = 1.0
"""The exporters' own timeout per export (``OTEL_EXPORTER_OTLP_TIMEOUT``, seconds)."""
SHUTDOWN_BOUND_S = 2 * 2 * OTLP_TIMEOUT_S + 2.0
"""Two providers flush on shutdown; each may wait for an export already in flight and then
for its final export, each bounded by the exporter's timeout; plus two seconds of slack for a
loaded machine. With the default timeouts (10 s per export) one export alone would take longer."""


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that is bound (so nobody else takes it) but never listens: every
    connection to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def _agent_run(telemetry: Telemetry, pause_s: float) -> tuple[dict[str, Any], float]:
    """Calls, results and decisions; returns what must not depend on the exporter and the
    longest any single operation took."""
    recorder = telemetry.recorder
    gate = telemetry.gate()
    slowest = 0.0

    def timed(operation: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal slowest
        started = time.monotonic()
        value = operation(*args, **kwargs)
        slowest = max(slowest, time.monotonic() - started)
        return value

    decisions: list[dict[str, Any]] = []
    with conversation("conv-down"):
        for i in range(300):
            handle = timed(recorder.call, "search", f"call_{i}")
            if i == 150:
                time.sleep(pause_s)  # let the exporters fail in the background meanwhile
            timed(handle.result if i % 3 else handle.error, f"outcome {i}")
        timed(recorder.call, "pay", "c3")
        for start, end, critical in ((0, 2, False), (4, 8, False), (4, 8, True)):
            decision = timed(
                gate.evaluate, FLIGHT_MESSAGES, start, end, critical=critical, raise_on_refuse=False
            )
            decisions.append(decision.to_dict())
    observed = {
        "ledger": ledger_rows(telemetry.ledger, "conv-down"),
        "decisions": decisions,
    }
    return observed, slowest


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_dead_endpoint_changes_nothing_and_shutdown_is_bounded(
    closed_port: int, monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    bypass_proxies(monkeypatch)
    set_otlp_environment(
        monkeypatch,
        protocol=protocol,
        endpoint=f"http://127.0.0.1:{closed_port}",
        timeout=f"{OTLP_TIMEOUT_S:g}",
    )
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # export attempts during the run
    monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "500")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "100")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_TIMEOUT", "500")

    healthy = make_pipeline()
    expected, _ = _agent_run(healthy.telemetry, pause_s=0.0)
    healthy.shutdown()
    assert [d["action"] for d in expected["decisions"]] == ["compact", "defer", "refuse"]
    assert len(expected["ledger"]) == 301

    # The exporters log their failures; keep that out of the test output.
    otel_logger = logging.getLogger("opentelemetry")
    level = otel_logger.level
    otel_logger.setLevel(logging.CRITICAL)
    try:
        telemetry = configure(set_global=False)
        observed, slowest = _agent_run(telemetry, pause_s=0.3)
        assert observed == expected
        # No call and no decision waited for the exporter.
        assert slowest < OTLP_TIMEOUT_S, slowest

        started = time.monotonic()
        telemetry.shutdown()
        elapsed = time.monotonic() - started
    finally:
        otel_logger.setLevel(level)
    assert elapsed < SHUTDOWN_BOUND_S, f"shutdown took {elapsed:.2f}s"
    # The ledger still answers after shutdown.
    assert [o.id for o in telemetry.ledger.open_obligations("conv-down")] == ["c3"]


DOCUMENTED_EXIT_BOUND_S = 8.0
"""`configure`'s documented bound with the default environment: two exports per signal, each
of the 2 s default export timeout."""
EXIT_SLACK_S = 4.0
"""For interpreter teardown on a loaded machine."""
AGENT = Path(__file__).with_name("exporter_down_agent.py")


@pytest.fixture(name="unreachable")
def unreachable_fixture(request: pytest.FixtureRequest) -> Iterator[int]:
    """A loopback port where the OTLP endpoint should be: ``closed`` refuses connections,
    ``silent`` accepts them and never answers, ``backlogged`` listens but never accepts (the
    kernel completes the handshakes, nobody reads)."""
    kind = request.param
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        accepted: list[socket.socket] = []
        if kind != "closed":
            sock.listen(64)
        if kind == "silent":

            def accept() -> None:
                while True:
                    try:
                        accepted.append(sock.accept()[0])
                    except OSError:
                        return

            threading.Thread(target=accept, name="silent-otlp", daemon=True).start()
        try:
            yield int(sock.getsockname()[1])
        finally:
            for connection in accepted:
                connection.close()
            if kind != "closed":
                sock.shutdown(socket.SHUT_RDWR)


def _default_environment(port: int, protocol: str) -> dict[str, str]:
    """The test's environment without any ``OTEL_*`` setting or proxy, then only the endpoint
    and protocol: every timeout and interval is the default."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("OTEL_") and "proxy" not in name.lower()
    }
    env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = protocol
    return env


@pytest.mark.parametrize(
    ("unreachable", "protocol"),
    [
        ("closed", "http/protobuf"),
        ("closed", "grpc"),
        ("silent", "http/protobuf"),
        ("silent", "grpc"),
        ("backlogged", "http/protobuf"),
    ],
    indirect=["unreachable"],
)
def test_an_agent_with_default_settings_exits_within_the_documented_bound(
    unreachable: int, protocol: str
) -> None:
    healthy = make_pipeline()
    expected = json.loads(json.dumps(agent_run(healthy.telemetry)))
    healthy.shutdown()
    expected_after = json.loads(json.dumps(ledger_rows(healthy.telemetry.ledger, CONVERSATION)))
    assert [d["action"] for d in expected["decisions"]] == ["compact", "defer", "refuse"]

    agent = subprocess.Popen(
        [sys.executable, str(AGENT)],
        env=_default_environment(unreachable, protocol),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the exporters' failure logs
        text=True,
    )
    try:
        assert agent.stdout is not None
        recorded = agent.stdout.readline()
        done = time.monotonic()
        after_shutdown = agent.stdout.readline()
        agent.wait(timeout=60)
        exited = time.monotonic() - done
    finally:
        agent.kill()
        agent.wait()
    assert agent.returncode == 0
    assert json.loads(recorded) == expected
    assert json.loads(after_shutdown) == expected_after
    assert exited < DOCUMENTED_EXIT_BOUND_S + EXIT_SLACK_S, f"exit took {exited:.2f}s"


def _no_otel_environment() -> dict[str, str]:
    """The test's environment without any ``OTEL_*`` setting or proxy: a first run."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("OTEL_") and "proxy" not in name.lower()
    }
    env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
    return env


@pytest.mark.parametrize(
    ("protocol", "endpoint"),
    [("http/protobuf", "http://localhost:4318"), ("grpc", "localhost:4317")],
)
def test_a_first_run_with_no_backend_says_so_in_one_line_and_exits_quickly(
    protocol: str, endpoint: str
) -> None:
    """Nothing configured, nothing listening at the SDK's default endpoint: no retries and
    tracebacks on stderr, one line saying where telemetry would have gone, and an exit bounded
    by the short timeout such a run gets."""
    from otel_compaction.telemetry.unreachable import UNREACHABLE_EXPORT_TIMEOUT_S, listening

    if listening(endpoint):
        pytest.skip(f"something listens at {endpoint}, the default OTLP endpoint")
    env = _no_otel_environment() | {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
    agent = subprocess.Popen(
        [sys.executable, str(AGENT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert agent.stdout is not None and agent.stderr is not None
        agent.stdout.readline()
        done = time.monotonic()
        agent.stdout.read()
        stderr = agent.stderr.read()
        agent.wait(timeout=60)
        exited = time.monotonic() - done
    finally:
        agent.kill()
        agent.wait()
    assert agent.returncode == 0
    assert stderr.splitlines() == [
        f"otel-compaction: nothing listens at {endpoint} (the OTLP default; no "
        "OTEL_EXPORTER_OTLP_ENDPOINT is set), so spans and metrics are not exported; point "
        "OTEL_EXPORTER_OTLP_ENDPOINT at a Collector, or set OTEL_TRACES_EXPORTER=console to "
        "print the spans"
    ]
    bound = 2 * 2 * UNREACHABLE_EXPORT_TIMEOUT_S
    assert exited < bound + EXIT_SLACK_S, f"exit took {exited:.2f}s"


def test_a_configured_endpoint_keeps_the_exporters_own_messages(closed_port: int) -> None:
    """Where the user named an endpoint, its failures are news: the SDK's messages stay."""
    env = _no_otel_environment() | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port}"
    }
    agent = subprocess.run(
        [sys.executable, str(AGENT)], env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert agent.returncode == 0
    assert "nothing listens" not in agent.stderr
    assert "Failed to export" in agent.stderr
