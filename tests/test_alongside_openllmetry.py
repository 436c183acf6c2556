"""otel-compaction beside OpenLLMetry's OpenAI and Anthropic instrumentations: the tests of
``openllmetry_cases.py``, run where OpenLLMetry is installed.

That is this interpreter when it has OpenLLMetry, else the environment of its own the tests
keep it in (``.venv-openllmetry``, made by ``tests/openllmetry-env.sh``; ``OTEL_COMPACTION_
OPENLLMETRY_PYTHON`` names another), where they run under pytest in a subprocess and must all
pass. Without either they skip, and fail under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

from e2e_servers import environment_python

PYTHON_ENV = "OTEL_COMPACTION_OPENLLMETRY_PYTHON"
MODULES = ("opentelemetry.instrumentation.openai", "opentelemetry.instrumentation.anthropic")


def _installed_here() -> bool:
    return all(importlib.util.find_spec(module) is not None for module in MODULES)


if _installed_here():
    from openllmetry_cases import (  # noqa: F401 - collected here
        both_fixture,
        test_one_chat_span_per_request_carries_the_bookkeeping,
        test_openllmetry_chat_spans_open_no_obligations,
        test_taking_either_out_leaves_the_sdk_working,
    )
else:

    def test_beside_openllmetry_in_its_environment() -> None:
        python = environment_python(
            PYTHON_ENV,
            ".venv-openllmetry",
            "OpenLLMetry (opentelemetry-instrumentation-openai, -anthropic) is not installed;"
            " make its environment with: bash tests/openllmetry-env.sh",
        )
        run = subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "openllmetry_cases.py"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        report = run.stdout + run.stderr
        assert run.returncode == 0, report
        # Every case ran and passed: none skipped (an SDK missing there), none failed.
        [summary] = [line for line in run.stdout.splitlines() if " passed" in line]
        assert re.fullmatch(r"\d+ passed(, \d+ warnings?)? in .+", summary), report
