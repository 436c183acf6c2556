"""Running the ``otel-compaction`` command line in-process, and writing its input files."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_compaction.cli import main


def write_file(directory: Path, name: str, text: str) -> Path:
    """Write `text` (UTF-8) to `name` in `directory`; return its path."""
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI with `argv`; return its exit code and what it wrote to stdout and stderr."""
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err
