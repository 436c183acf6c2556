"""The project's Collector config, validated by the real Collector built from
``collector-config/build/otelcol`` (``collector-config/build/build.sh``, which ``.ci/run``
runs): as Compose runs it (every address at its default) and on loopback (the addresses from
the environment, as ``docs/stack.md`` starts it).

Skips when the binary is absent (``OTEL_COMPACTION_OTELCOL`` names another), fails under
``CI=true``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from jaeger_stack import COLLECTOR_CONFIG as CONFIG
from jaeger_stack import collector_binary

LOOPBACK_ADDRESSES = {
    "OTLP_GRPC_ENDPOINT": "127.0.0.1:14317",
    "OTLP_HTTP_ENDPOINT": "127.0.0.1:14318",
    "HEALTH_CHECK_ENDPOINT": "127.0.0.1:13133",
    "PROMETHEUS_EXPORTER_ENDPOINT": "127.0.0.1:18889",
    "JAEGER_OTLP_ENDPOINT": "127.0.0.1:24317",
}


def _validate(config: Path, environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in LOOPBACK_ADDRESSES}
    env.update(environment)
    return subprocess.run(
        [str(collector_binary()), "validate", f"--config={config}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("environment", [{}, LOOPBACK_ADDRESSES], ids=["compose", "loopback"])
def test_the_real_collector_accepts_the_projects_config(environment: dict[str, str]) -> None:
    result = _validate(CONFIG, environment)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_real_collector_rejects_a_component_it_was_not_built_with(tmp_path: Path) -> None:
    text = CONFIG.read_text(encoding="utf-8").replace("otlp_grpc/jaeger", "zipkin/jaeger")
    broken = tmp_path / "otel-collector.yaml"
    broken.write_text(text, encoding="utf-8")
    result = _validate(broken, {})
    assert result.returncode != 0
    assert "zipkin" in result.stdout + result.stderr
