"""The completion script completes what the parser knows, in a real bash."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest

from otel_compaction.cli import main


def _script(shell: str = "bash") -> str:
    out = io.StringIO()
    assert main(["completion", shell], stdout=out) == 0
    return out.getvalue()


def _complete(line: str, cwd: Path) -> list[str]:
    """What bash offers for the last word of `line` (a trailing space: a new word)."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    words = line.split(" ")
    program = f"""{_script()}
COMP_WORDS=({" ".join(repr(w) for w in words)})
COMP_CWORD={len(words) - 1}
_otel_compaction
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program], capture_output=True, text=True,
        cwd=cwd, check=True,
    )  # fmt: skip
    assert done.stderr == ""
    return sorted(filter(None, done.stdout.splitlines()))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("otel-compaction ", ["--help", "--version", "archive", "audit", "check", "completion",
                              "demo", "hook", "policy"]),
        ("otel-compaction ho", ["hook"]),
        ("otel-compaction hook ", None),  # checked below: the hook actions
        ("otel-compaction hook install ", ["--help", "--otlp-endpoint", "--policy", "--project",
                                           "--user", "claude-code", "codex"]),
        ("otel-compaction hook install codex --p", ["--policy", "--project"]),
        ("otel-compaction check --format ", ["json", "text"]),
        ("otel-compaction demo --format j", ["json"]),
        ("otel-compaction policy s", ["schema", "show"]),
        ("otel-compaction completion ", ["--help", "bash", "zsh"]),
    ],
)  # fmt: skip
def test_commands_actions_options_and_choices(
    line: str, expected: list[str] | None, tmp_path: Path
) -> None:
    offered = _complete(line, tmp_path)
    if expected is None:
        assert {
            "claude-code",
            "codex",
            "install",
            "uninstall",
            "resolve",
            "status",
            "doctor",
        } <= set(offered)
    else:
        assert offered == expected


def test_a_path_option_completes_file_names(tmp_path: Path) -> None:
    (tmp_path / "strict-policy.yaml").write_text("")
    (tmp_path / "session.jsonl").write_text("")
    assert _complete("otel-compaction check --policy st", tmp_path) == ["strict-policy.yaml"]


def test_zsh_loads_the_same_script_through_bashcompinit() -> None:
    zsh = _script("zsh")
    assert zsh.startswith("autoload -U +X bashcompinit && bashcompinit\n")
    assert zsh.endswith(_script("bash").split("\n", 1)[1])
