"""Running an agent script under the real ``opentelemetry-instrument``, in a subprocess.

`instrument_command` finds the command beside this interpreter (skipping the test, or failing
it under ``CI=true``, when it or a module the test needs is missing); `environment` is this
process's environment without its ``OTEL_*``, ``OPENAI_*``, ``ANTHROPIC_*`` settings, proxies
and ``PYTHONPATH``, pointing both SDKs at the fake model server and exporting over OTLP/HTTP to
the test's receiver, metrics only at exit.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from fake_llm_server import FakeLLMServer
from instrumentation_harness import unavailable
from otlp_receiver import OtlpReceiver

__all__ = ["environment", "instrument_command"]


def instrument_command(*modules: str) -> Path:
    """The ``opentelemetry-instrument`` command, once `modules` are importable."""
    command = Path(sys.executable).parent / "opentelemetry-instrument"
    if not command.exists():
        unavailable(f"{command} not found; install opentelemetry-instrumentation")
    for module in modules:
        if importlib.util.find_spec(module) is None:
            unavailable(f"{module} is not installed; install the 'test' extra")
    return command


def environment(server: FakeLLMServer, receiver: OtlpReceiver, **settings: str) -> dict[str, str]:
    """The agent's environment, with `settings` (``OTEL_*`` and others) on top."""
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OTEL_", "OPENAI_", "ANTHROPIC_", "PYTHONPATH"))
        and name.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    return {
        **inherited,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": "test-key-not-secret",
        "ANTHROPIC_BASE_URL": server.anthropic_base_url,
        "ANTHROPIC_API_KEY": "test-key-not-secret",
        "OTEL_SERVICE_NAME": "fleet-agent",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint_http,
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",  # only the flush at exit
        **settings,
    }
