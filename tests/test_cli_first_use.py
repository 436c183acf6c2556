"""The command line as a first user meets it: ``--version``, and the inputs that fuzzing found
mishandled, each of which now gives exit 2 and one line on stderr naming what is wrong and where
(or is shown escaped), never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import run_cli, write_file

from otel_compaction.inputs import read_text

REPO_ROOT = Path(__file__).resolve().parents[1]
PREFIX = "otel-compaction: error: "


def error_line(err: str) -> str:
    """The single stderr line, without its prefix."""
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {err!r}"
    assert lines[0].startswith(PREFIX), lines[0]
    return lines[0][len(PREFIX) :]


def cli(
    *argv: str, stdin: bytes = b"", cwd: Path = REPO_ROOT
) -> subprocess.CompletedProcess[bytes]:
    """The command line as a real process (its own stdin bytes and terminal encoding)."""
    return subprocess.run(
        [sys.executable, "-m", "otel_compaction", *argv],
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)},
    )


def test_integer_of_more_than_4300_digits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_file(tmp_path, "t.json", '[{"role": "user", "n": ' + "7" * 5_000 + "}]")
    code, out, err = run_cli(capsys, "check", str(path))
    assert (code, out) == (2, "")
    assert error_line(err) == f"{path}: line 1 column 24: a number of 5,000 digits (at most 4,300)"


def test_integer_of_more_than_4300_digits_in_jsonl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ['{"role": "user", "content": "hi"}', '{"role": "user", "n": ' + "7" * 4_301 + "}"]
    path = write_file(tmp_path, "t.jsonl", "\n".join(lines))
    code, _, err = run_cli(capsys, "check", str(path))
    assert code == 2
    assert error_line(err) == (
        f"{path}: line 2: line 1 column 23: a number of 4,301 digits (at most 4,300)"
    )


def test_lone_surrogate_escape_in_an_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    call = {"id": "c\\ud800", "type": "function", "function": {"name": "x", "arguments": "{}"}}
    text = json.dumps([{"role": "assistant", "content": None, "tool_calls": [call]}])
    path = write_file(tmp_path, "t.json", text.replace("\\\\ud800", "\\ud800"))
    code, _, err = run_cli(capsys, "check", str(path))
    assert code == 2
    assert error_line(err) == (
        f"{path}: [0].tool_calls[0].id: a lone surrogate escape, which is not valid Unicode"
    )


def test_a_surrogate_pair_is_one_character_and_fine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_file(tmp_path, "t.json", '[{"role": "user", "content": "ok \\ud83d\\ude00"}]')
    code, _, err = run_cli(capsys, "check", str(path))
    assert (code, err) == (0, "")


def test_invalid_utf8_is_refused_alike_by_pipe_and_by_path(tmp_path: Path) -> None:
    data = b'[{"role": "user", "content": "caf\xe9"}]'
    path = tmp_path / "latin1.json"
    path.write_bytes(data)
    by_path = cli("check", str(path))
    by_pipe = cli("check", "-", stdin=data)
    assert (by_path.returncode, by_pipe.returncode) == (2, 2)
    assert error_line(by_path.stderr.decode()) == (
        f"{path}: not UTF-8 text: byte 0xe9 at offset 33 (line 1)"
    )
    assert error_line(by_pipe.stderr.decode()) == (
        "<stdin>: not UTF-8 text: byte 0xe9 at offset 33 (line 1)"
    )


def test_input_size_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text('["' + "x" * 100 + '"]', encoding="utf-8")
    with pytest.raises(ValueError, match=r"big\.json: larger than 64 bytes; not read"):
        read_text(path, limit=64)
    assert read_text(path, limit=1_000)[0].startswith('["x')


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero on this system")
def test_dev_zero_is_refused_not_read_forever() -> None:
    completed = cli("check", "/dev/zero")
    assert completed.returncode == 2
    assert error_line(completed.stderr.decode()) == (
        "/dev/zero: larger than 268,435,456 bytes; not read"
    )


def test_control_characters_in_input_are_escaped_on_the_terminal(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text('name: p\n"bad\\e[31mkey": 1\n', encoding="utf-8")
    completed = cli("policy", "validate", str(policy))
    assert completed.returncode == 2
    assert b"\x1b" not in completed.stderr
    assert error_line(completed.stderr.decode()) == (
        f"{policy}: bad\\x1b[31mkey: Extra inputs are not permitted"
    )


def test_control_characters_in_a_finding_are_escaped(tmp_path: Path) -> None:
    call = {
        "id": "c\x1b]0;pwned\x07",
        "type": "function",
        "function": {"name": "x", "arguments": "{}"},
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"role": "assistant", "content": None, "tool_calls": [call]}]))
    completed = cli("check", str(path))
    assert completed.returncode == 1, completed.stderr
    assert b"\x1b" not in completed.stdout and b"\x07" not in completed.stdout
    assert b"c\\x1b]0;pwned\\x07" in completed.stdout


def test_extends_cycle_names_the_cycle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_file(tmp_path, "a.yaml", "name: a\nextends: ./b.yaml\n")
    b = write_file(tmp_path, "b.yaml", "name: b\nextends: ./a.yaml\n")
    code, _, err = run_cli(capsys, "policy", "validate", str(tmp_path / "a.yaml"))
    assert code == 2
    assert error_line(err) == (
        f"{b.resolve()}: extends: ./a.yaml closes a cycle (a.yaml -> b.yaml -> a.yaml)"
    )


def test_a_policy_extending_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_file(tmp_path, "c.yaml", "name: c\nextends: ./c.yaml\n")
    code, _, err = run_cli(capsys, "policy", "validate", str(path))
    assert code == 2
    assert error_line(err) == f"{path}: extends: a policy cannot extend itself"


@pytest.mark.parametrize("builtin", ["default", "strict", "lenient"])
def test_a_builtin_name_in_the_working_directory_stays_builtin(
    builtin: str, tmp_path: Path
) -> None:
    (tmp_path / builtin).write_text("name: mine\nrules:\n  open_tool_call: off\n")
    (tmp_path / f"{builtin}.yaml").mkdir()
    shown = cli("policy", "show", builtin, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.decode().startswith(f"name: {builtin}\n")
    assert "open_tool_call: block" in shown.stdout.decode()
    mine = cli("policy", "show", f"./{builtin}", cwd=tmp_path)
    assert mine.returncode == 0, mine.stderr
    assert mine.stdout.decode().startswith("name: mine\n")


def test_a_policy_file_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    code, _, err = run_cli(capsys, "policy", "validate", str(path))
    assert code == 2
    assert error_line(err).startswith(f"{path}: cannot read the policy file: ")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    code, out, err = run_cli(capsys, "--version")
    assert (code, err) == (0, "")
    assert out == f"otel-compaction {version('otel-compaction')}\n"


def test_help_loads_neither_pydantic_nor_the_sdk() -> None:
    code = (
        "import sys, runpy\n"
        "sys.argv = ['otel-compaction', '--help']\n"
        "try:\n"
        "    runpy.run_module('otel_compaction', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in sys.modules if m in ('pydantic', 'yaml') "
        "or m.startswith('opentelemetry.sdk'))\n"
        "print('loaded:', heavy, file=sys.stderr)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert completed.stdout.startswith("usage: otel-compaction")
    assert completed.stderr.strip() == "loaded: []"
