"""With the OTLP endpoint down (a loopback port nobody listens on), the agent's calls and the
gate's decisions are exactly those of a healthy pipeline, no call waits for the exporter, and
shutdown returns within a bound derived from the exporters' configured timeout."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
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
