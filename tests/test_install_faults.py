"""`hook install` / `uninstall` under bad settings files and concurrent runs: the user's file
keeps its mode, owner, symlink, indentation and key order; anything the installer cannot
rewrite faithfully is refused with exit 2, one line, and the file left byte-identical."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from otel_compaction.cli import main
from otel_compaction.hooks import install as installer

ORIGINAL = (  # a user's own layout: four spaces, keys out of order, inline objects
    '{\n    "model": "opus",\n    "env": {"B": "1", "A": "2"},\n    "hooks": {\n'
    '        "Stop": [\n            {\n                "matcher": "",\n'
    '                "hooks": [{"type": "command", "command": "notify"}]\n'
    "            }\n        ]\n    }\n}\n"
)
PLAIN = json.dumps(json.loads(ORIGINAL), indent=4) + "\n"


def _cli(action: str, home: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    os.environ["CLAUDE_CONFIG_DIR"] = str(home)
    code = main(["hook", action, "claude-code"])
    return code, capsys.readouterr().err


@pytest.fixture(autouse=True)
def _environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", "")


def test_mode_is_kept(tmp_path: Path) -> None:  # settings hold tokens: 0600 stays 0600
    path = tmp_path / "settings.json"
    path.write_text(PLAIN)
    path.chmod(0o600)
    installer.install("claude-code", path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_owner_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(PLAIN)
    if os.getuid() == 0:
        os.chown(path, 1234, 1234)
    before = path.stat()
    installer.install("claude-code", path)
    assert (path.stat().st_uid, path.stat().st_gid) == (before.st_uid, before.st_gid)


def test_symlink_is_written_through(tmp_path: Path) -> None:  # a dotfile manager's link
    target = tmp_path / "dotfiles" / "settings.json"
    target.parent.mkdir()
    target.write_text(PLAIN)
    link = tmp_path / "settings.json"
    link.symlink_to(target)
    installer.install("claude-code", link)
    assert link.is_symlink() and "otel_compaction hook" in target.read_text()
    installer.uninstall(link)
    assert link.is_symlink() and target.read_text() == PLAIN


@pytest.mark.parametrize(
    "text",
    [
        ORIGINAL, PLAIN, PLAIN.replace("    ", "\t"), '{"a": 1}', "{}\n", "",
        '{"hooks": {}}', '{"hooks": {"PreCompact": []}}\n',
        '{"hooks": {"Stop": [], "PreCompact": []}}',
    ],
)  # fmt: skip
def test_round_trip_gives_back_the_same_bytes(tmp_path: Path, text: str) -> None:
    path = tmp_path / "settings.json"
    path.write_text(text)
    installer.install("claude-code", path)
    installer.uninstall(path)
    assert path.read_text() == text


def test_empty_groups_the_user_had_stay_after_an_edit(tmp_path: Path) -> None:
    """Edited between install and uninstall, the file is rewritten, not restored: the empty
    lists the user had are still theirs, the ones install added go."""
    path = tmp_path / "settings.json"
    path.write_text('{"hooks": {"Stop": [], "PreCompact": []}}')
    installer.install("claude-code", path)
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data | {"model": "opus"}))
    installer.uninstall(path)
    assert json.loads(path.read_text()) == {
        "hooks": {"Stop": [], "PreCompact": []},
        "model": "opus",
    }


def test_first_backup_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(PLAIN)
    installer.install("claude-code", path)
    installer.install("claude-code", path, installer.Options(policy="strict"))
    installer.uninstall(path)
    assert (tmp_path / "settings.json.otel-compaction.bak").read_text() == PLAIN


def test_no_file_is_left_beside_the_settings(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(PLAIN)
    installer.install("claude-code", path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "settings.json",
        "settings.json.otel-compaction.bak",
    ]


REFUSED = {
    "invalid json": b'{"hooks": {',
    "jsonc comment": b'{\n  // mine\n  "hooks": {}\n}\n',
    "trailing comma": b'{"hooks": {},}',
    "byte-order mark": b'\xef\xbb\xbf{"hooks": {}}',
    "nan": b'{"x": NaN}',
    "infinity": b'{"x": -Infinity}',
    "overflowing number": b'{"x": 1e400}',
    "null groups": b'{"hooks": {"PreCompact": null}}',
    "null group": b'{"hooks": {"PreCompact": [null]}}',
    "null entries": b'{"hooks": {"PreCompact": [{"hooks": null}]}}',
    "lone surrogate": b'{"x": "\\ud800"}',
    "surrogate key": b'{"\\udfff": 1}',
    "not utf-8": b'{"x": "\xff"}',
    "array": b"[]",
    "hooks not an object": b'{"hooks": []}',
}


@pytest.mark.parametrize("content", REFUSED.values(), ids=REFUSED.keys())
@pytest.mark.parametrize("action", ["install", "uninstall"])
def test_bad_content_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, action: str
) -> None:
    path = tmp_path / "settings.json"
    path.write_bytes(content)
    code, err = _cli(action, tmp_path, capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]


def test_read_only_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "settings.json"
    path.write_text(PLAIN)
    path.chmod(0o444)
    code, err = _cli("install", tmp_path, capsys)
    assert code == 2 and "read-only" in err and err.count("\n") == 1
    assert path.read_text() == PLAIN


def test_read_only_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "settings.json"
    path.write_text(PLAIN)
    tmp_path.chmod(0o555)
    try:
        code, err = _cli("install", tmp_path, capsys)
    finally:
        tmp_path.chmod(0o755)
    assert code == 2 and "read-only" in err and err.count("\n") == 1
    assert path.read_text() == PLAIN


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_special_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path = tmp_path / "settings.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/null")
    code, err = _cli("install", tmp_path, capsys)
    assert code == 2 and "not a regular file" in err and err.count("\n") == 1


def test_user_wrapper_that_calls_ours_stays(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    wrapper = f"log-it && {installer.command('claude-code')}"
    path.write_text(
        json.dumps(
            {"hooks": {"PreCompact": [{"hooks": [{"type": "command", "command": wrapper}]}]}},
            indent=2,
        )
    )
    installer.install("claude-code", path)
    installer.uninstall(path)
    assert wrapper in path.read_text()


def test_events_are_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(installer, "EVENTS", (*installer.EVENTS, ("PreToolUse", "Bash")))
    path = tmp_path / "settings.json"
    assert "PreToolUse" in installer.install("claude-code", path)
    assert "PreToolUse" in installer.uninstall(path)


_RACE = """
import sys
from pathlib import Path
from otel_compaction.hooks import install as installer
path = Path(sys.argv[1])
for _ in range(int(sys.argv[2])):
    installer.install("claude-code", path)
    installer.uninstall(path)
"""


def test_concurrent_installs(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(PLAIN)
    runs = [
        subprocess.Popen([sys.executable, "-c", _RACE, str(path), "100"], stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    assert [run.wait() for run in runs] == [0, 0, 0, 0], [
        run.stderr.read() for run in runs if run.stderr
    ]
    assert path.read_text() == PLAIN


def test_concurrent_installs_in_threads(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(PLAIN)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: installer.install("claude-code", path), range(100)))
    assert sum(1 for added in results if added) == 1
    assert json.loads(path.read_text())["hooks"]["PreCompact"][0]["hooks"][0]["command"]
