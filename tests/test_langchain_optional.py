"""LangChain is optional: without it ``otel_compaction`` imports, the LangChain integration
imports, `instrument` says False, and its classes name the extra to install.

Each check runs in a fresh interpreter whose ``sys.modules`` blocks the frameworks (a ``None``
entry makes their import fail), so it holds whether or not they are installed here.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import logging
    import sys

    for name in {blocked!r}:
        sys.modules[name] = None
    logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")

    import otel_compaction
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from otel_compaction.integrations import langchain

    telemetry = otel_compaction.configure(
        tracer_provider=TracerProvider(), meter_provider=MeterProvider(), set_global=False
    )
    print("instrument", langchain.instrument(telemetry, guard_summarization=True))
    print("instrumented", langchain.is_instrumented())
    for name in ("ObligationCallbackHandler", "GuardedSummarizationMiddleware"):
        try:
            getattr(langchain, name)
        except ImportError as missing:
            print(name, "ImportError", "pip install 'otel-compaction[langchain]'" in str(missing))
        else:
            print(name, "available")
    langchain.uninstrument()
    print("instrumented", langchain.is_instrumented())
    print("loaded", sorted(m for m in {blocked!r} if sys.modules[m] is not None))
    """
)


def _run(blocked: tuple[str, ...]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(blocked=blocked)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_without_langchain_everything_imports_and_instrument_says_false() -> None:
    assert _run(("langchain", "langchain_core", "langgraph")) == [
        "instrument False",
        "instrumented False",
        "ObligationCallbackHandler ImportError True",
        "GuardedSummarizationMiddleware ImportError True",
        "instrumented False",
        "loaded []",
    ]


def test_langgraph_without_langchain_agents_still_records_tool_calls() -> None:
    """The callback handler needs only langchain-core and LangGraph; the middleware and the
    guard need ``langchain``'s agents, and asking to guard without them says so."""
    lines = _run(("langchain",))
    assert lines == [
        "otel-compaction: langchain>=1.0 is not installed; nothing to guard",
        "instrument True",
        "instrumented True",
        "ObligationCallbackHandler available",
        "GuardedSummarizationMiddleware ImportError True",
        "instrumented False",
        "loaded []",
    ]


def test_importing_otel_compaction_imports_no_framework() -> None:
    script = (
        "import sys, otel_compaction, otel_compaction.integrations.langchain; "
        "print(sorted(m.split('.')[0] for m in sys.modules if m.startswith('lang')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
