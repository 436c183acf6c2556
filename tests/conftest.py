"""Shared fixtures: those of the helper modules (`pytest_plugins`), and the real agent
transcript corpus.

The full corpus lives in ``shared/data/transcripts`` next to the repository root
(``<repo>/../shared/data/transcripts``); set ``OTEL_COMPACTION_CORPUS`` to use another
directory. Without either, the tests read the slice of it kept in the repository
(``tests/data/corpus``: 21 transcripts, with their licenses), so a fresh clone runs every corpus
test. Each ``*/transcripts.jsonl`` file holds one record per line:
``{"source", "id", "format", "messages": [...], ...}``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

pytest_plugins = [
    "archive_harness",  # archive: a SQLite archive in the test's directory
    "fake_llm_server",  # fake_llm_server: the fake model server on loopback
    "llm_clients",  # sdks: the openai and anthropic SDKs, or a skip
    "otlp_receiver",  # otlp_receiver, otlp_http_receiver, otlp_grpc_receiver: OTLP on loopback
    "telemetry_harness",  # pipeline: in-memory telemetry
    "instrumentation_harness",  # instrumented: the SDKs instrumented into in-memory pipelines
    "postgres_server",  # postgres, postgres_url: a PostgreSQL server on loopback, a database a test
]
"""The helper modules whose fixtures every test module may use without importing them. Each
comes after those it imports, so that pytest rewrites the asserts of every one of them."""

_TEST_PROCESS = os.getpid()
_real_exit = os._exit


def _guarded_exit(status: int) -> NoReturn:
    """`os._exit`, refused in the test process itself: code that ends the process it runs in
    would end the test run silently, with the status it passes (0 reads as a pass)."""
    if os.getpid() == _TEST_PROCESS:
        raise RuntimeError(f"os._exit({status}) called in the test process")
    _real_exit(status)


os._exit = _guarded_exit

CORPUS_ENV = "OTEL_COMPACTION_CORPUS"
"""Environment variable that overrides the corpus directory."""

REPO_ROOT = Path(__file__).resolve().parents[1]
"""Root of this repository (the directory holding ``pyproject.toml``)."""

DEFAULT_CORPUS_DIR = REPO_ROOT.parent / "shared" / "data" / "transcripts"
"""The full corpus, used when ``OTEL_COMPACTION_CORPUS`` is not set and it is there."""

CORPUS_SLICE_DIR = REPO_ROOT / "tests" / "data" / "corpus"
"""The slice of the corpus kept in the repository, used when the full corpus is absent."""


@dataclass(frozen=True)
class Transcript:
    """One transcript record from the corpus."""

    source: str
    id: str
    format: str
    messages: list[dict[str, Any]]

    @property
    def label(self) -> str:
        """Human-readable name used in assertion messages."""
        return f"{self.source}:{self.id}"


def corpus_dir() -> Path:
    """The corpus directory: ``OTEL_COMPACTION_CORPUS``, else the full corpus beside the
    repository when it is there, else the slice in the repository."""
    override = os.environ.get(CORPUS_ENV)
    if override:
        return Path(override)
    return DEFAULT_CORPUS_DIR if DEFAULT_CORPUS_DIR.is_dir() else CORPUS_SLICE_DIR


def running_in_ci() -> bool:
    """Return True when the ``CI`` environment variable is ``true``."""
    return os.environ.get("CI", "").strip().lower() == "true"


def load_corpus(directory: Path) -> list[Transcript]:
    """Read every ``*/transcripts.jsonl`` under *directory*, sorted by file name."""
    transcripts: list[Transcript] = []
    for path in sorted(directory.glob("*/transcripts.jsonl")):
        with path.open(encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                record = json.loads(line)
                where = f"{path.name} line {line_no} in {path.parent.name}"
                assert isinstance(record, dict), f"{where}: record is not an object"
                source, ident = record.get("source"), record.get("id")
                fmt, messages = record.get("format"), record.get("messages")
                assert isinstance(source, str), f"{where}: bad 'source'"
                assert isinstance(ident, str), f"{where}: bad 'id'"
                assert isinstance(fmt, str), f"{where}: bad 'format'"
                assert isinstance(messages, list), f"{where}: bad 'messages'"
                assert all(isinstance(m, dict) for m in messages), f"{where}: non-object message"
                transcripts.append(Transcript(source, ident, fmt, messages))
    return transcripts


def unavailable(reason: str) -> NoReturn:
    """Skip the test (or, called while a module is imported, the module) whose requirement is
    missing, with `reason`; fail instead under ``CI=true``, which must never skip silently. The
    report names the caller's line."""
    __tracebackhide__ = True
    if running_in_ci():
        pytest.fail(f"{reason} (CI=true, so this is an error, not a skip)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


@pytest.fixture(scope="session")
def corpus() -> list[Transcript]:
    """All transcripts of the corpus; skips (or fails under CI) when it is absent."""
    directory = corpus_dir()
    hint = f"{CORPUS_ENV} names a directory of */transcripts.jsonl files"
    if not directory.is_dir():
        unavailable(f"transcript corpus not found at {directory}; {hint}")
    transcripts = load_corpus(directory)
    if not transcripts:
        unavailable(f"no */transcripts.jsonl records under {directory}; {hint}")
    return transcripts
