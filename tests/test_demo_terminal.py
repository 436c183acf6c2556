"""The demo in a real 80x24 terminal: tmux runs it in a pane of that size, and the pane,
captured row by row, shows the whole report with no line wrapped.

tmux (Debian's ``tmux``) is required: without it the test skips on a laptop and fails when
``CI=true``. The server is the test's own (a socket in the test's directory, no config file),
and the test ends it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_servers import require_executable

from otel_compaction.cli import main


def _tmux(tmux: str, socket: Path, *args: str) -> str:
    done = subprocess.run(
        [tmux, "-S", str(socket), "-f", os.devnull, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,  # a hung server fails the test instead of hanging it
    )
    return done.stdout


def _rows(captured: str) -> list[str]:
    """The pane's rows without trailing blanks, and without the empty rows below the end."""
    rows = [row.rstrip() for row in captured.splitlines()]
    while rows and not rows[-1]:
        rows.pop()
    return rows


@pytest.mark.parametrize("arguments", [[], ["--budget", "1500"]], ids=["default", "budget-1500"])
def test_demo_in_an_80x24_terminal_wraps_no_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str]
) -> None:
    tmux = require_executable("tmux", "install Debian's tmux (apt-get install tmux)")
    socket = tmp_path / "tmux.sock"
    status = tmp_path / "status"
    demo = shlex.join([sys.executable, "-m", "otel_compaction", "demo", *arguments])
    signal = shlex.join([tmux, "-S", str(socket), "wait-for", "-S", "demo-done"])
    script = (
        "unset OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; "
        f"{demo}; echo $? > {shlex.quote(str(status))}; {signal}; exec sleep 600"
    )
    _tmux(tmux, socket, "new-session", "-d", "-x", "80", "-y", "24", "-c", str(tmp_path),
          "sh", "-c", script)  # fmt: skip
    try:
        _tmux(tmux, socket, "wait-for", "demo-done")
        size = _tmux(tmux, socket, "display-message", "-p", "#{window_width}x#{window_height}")
        rows = _rows(_tmux(tmux, socket, "capture-pane", "-p", "-S", "-", "-E", "-"))
        joined = _rows(_tmux(tmux, socket, "capture-pane", "-p", "-J", "-S", "-", "-E", "-"))
    finally:
        _tmux(tmux, socket, "kill-server")
    assert size.strip() == "80x24"
    assert status.read_text().strip() == "0"
    # Joining the rows tmux wrapped changes nothing: no line was wider than the pane.
    assert rows == joined
    # And the pane showed the report, all of it, as the command line prints it: the progress
    # line drawn on the terminal meanwhile was erased.
    assert main(["demo", *arguments]) == 0
    assert rows == _rows(capsys.readouterr().out)
    assert len(rows) > 24 and rows[-1].startswith("  Claude Code, Codex:")
