"""Every framework integration is optional: without the framework, importing works and
instrumenting it is a no-op that says so.

Each check runs in a fresh interpreter whose ``sys.modules`` blocks the frameworks (a ``None``
entry makes their import fail), so it holds whether or not they are installed here.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKED = ("mcp", "agents")

SCRIPT = textwrap.dedent(
    """
    import sys

    for name in {blocked!r}:
        sys.modules[name] = None

    import otel_compaction
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from otel_compaction.instrumentation import mcp
    from otel_compaction.integrations import openai_agents

    telemetry = otel_compaction.configure(
        tracer_provider=TracerProvider(), meter_provider=MeterProvider(), set_global=False
    )
    print("mcp.instrument", mcp.instrument(telemetry), mcp.is_instrumented())
    print("openai_agents.instrument", openai_agents.instrument(telemetry),
          openai_agents.is_instrumented())
    mcp.uninstrument()
    openai_agents.uninstrument()
    for name in ("CompactionGuardSession", "ObligationTracingProcessor"):
        try:
            getattr(openai_agents, name)
        except ImportError:
            print(name, "needs the SDK")
    print("framework modules loaded:", sorted(m for m in {blocked!r} if sys.modules[m]))
    """
)


def test_importing_and_instrumenting_without_the_frameworks() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(blocked=BLOCKED)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "mcp.instrument False False",
        "openai_agents.instrument False False",
        "CompactionGuardSession needs the SDK",
        "ObligationTracingProcessor needs the SDK",
        "framework modules loaded: []",
    ]
    assert done.stderr == ""
