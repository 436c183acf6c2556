"""The package's public names: each is importable from ``otel_compaction`` as the same object
its module holds, ``dir()`` lists them all, and each is imported only when first used, so the
hook command a CLI runs before every compaction starts without the OpenTelemetry SDK."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from session_builders import ClaudeSession

import otel_compaction

PUBLIC = (
    "Archive", "CompactionError", "CompactionGate", "CompactionRefused", "CompactionResult",
    "Decision", "ExtractiveSummarizer", "GuardedCompactor", "LiveSpanCompactionError",
    "ModelSummarizer", "OpenObligationError", "Policy", "PolicyError", "SummaryRejected",
    "Telemetry", "ToolCallRecorder", "TranscriptError", "configure", "conversation",
    "verify_summary",
)  # fmt: skip
"""What a user needs; everything else is imported from its module."""

API_PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def fresh(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`code` run by a new interpreter, so that nothing is imported yet."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )


def test_the_public_names_are_the_ones_listed() -> None:
    assert sorted(otel_compaction.__all__) == sorted(PUBLIC)
    assert len(PUBLIC) <= 20


def test_the_api_page_lists_exactly_the_public_names() -> None:
    text = API_PAGE.read_text(encoding="utf-8")
    section = text.split("\n## The public API\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([A-Za-z_]+)` \|", section, flags=re.MULTILINE)
    assert sorted(listed) == sorted(PUBLIC)


def test_each_name_is_the_object_its_module_defines() -> None:
    from otel_compaction import CompactionGate, configure, verify_summary
    from otel_compaction.gate import CompactionGate as gate_class
    from otel_compaction.telemetry.configuration import configure as configure_function
    from otel_compaction.verification import verify_summary as verify_function

    assert CompactionGate is gate_class
    assert configure is configure_function
    assert verify_summary is verify_function
    for name in PUBLIC:
        value = getattr(otel_compaction, name)
        assert getattr(sys.modules[value.__module__], name) is value, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"^module 'otel_compaction' has no attribute 'Gate'$"):
        _ = otel_compaction.Gate  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="cannot import name 'Gate' from 'otel_compaction'"):
        from otel_compaction import Gate  # type: ignore[attr-defined]  # noqa: F401


def test_dir_lists_every_name_before_it_is_imported() -> None:
    listed = fresh(
        "import json, sys, otel_compaction; "
        "print(json.dumps([dir(otel_compaction), sorted(sys.modules)]))"
    )
    names, modules = json.loads(listed.stdout)
    assert set(PUBLIC) <= set(names)
    assert "__version__" in names
    loaded = [m for m in modules if m.startswith(("otel_compaction.", "opentelemetry"))]
    assert loaded == ["otel_compaction._version"]


def test_a_name_brings_only_its_own_module() -> None:
    loaded = fresh(
        "import json, sys; from otel_compaction import CompactionGate, TranscriptError; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    modules = set(json.loads(loaded.stdout))
    assert {"otel_compaction.gate", "otel_compaction.errors"} <= modules
    assert not {"otel_compaction.telemetry.configuration", "otel_compaction.recorder"} & modules
    assert not [m for m in modules if m.startswith("opentelemetry.sdk")]


def test_the_hook_command_runs_without_the_sdk(tmp_path: Path) -> None:
    s = ClaudeSession(tmp_path / "quiet.jsonl")
    s.user("Check order 4417730215.")
    s.call("toolu_1", "Grep", pattern="4417730215", path="/home/dev/shop/orders")
    s.result("toolu_1", "No matches found")
    s.say("Order 4417730215 is not in the orders directory.")
    payload = json.dumps(
        {
            "session_id": "sess-1",
            "transcript_path": str(s.write()),
            "hook_event_name": "PreCompact",
            "trigger": "auto",
        }
    )
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "otel_compaction", "hook", "claude-code"],
        input=payload, capture_output=True, text=True, check=False,
        env={"CLAUDE_CONFIG_DIR": str(tmp_path / "claude"), "HOME": str(tmp_path)},
    )  # fmt: skip
    assert run.returncode == 0
    assert "Grep: No matches found" in run.stdout
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in run.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert {"otel_compaction.gate", "otel_compaction.sessions.claude_code"} <= imported
    assert not {"otel_compaction.telemetry.configuration", "otel_compaction.recorder"} & imported
    assert not {"otel_compaction.compactor", "otel_compaction.hooks.install"} & imported
    assert not [m for m in imported if m.startswith("opentelemetry.sdk")]
