"""Bad input through `otel-compaction check`: exit 2 and one line on stderr that says what is
wrong and where, never a traceback. Valid but defective transcripts are findings (exit 1), and
large input simply works."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_harness import run_cli, write_file

REPO_ROOT = Path(__file__).resolve().parents[1]

USER: dict[str, Any] = {"role": "user", "content": "hello"}
SYSTEM: dict[str, Any] = {"role": "system", "content": "You are terse."}


def write(tmp_path: Path, text: str, name: str = "transcript.json") -> Path:
    return write_file(tmp_path, name, text)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "check", *argv)


def one_error_line(err: str) -> str:
    """The single stderr line, without its prefix."""
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {err!r}"
    assert "Traceback" not in err
    prefix = "otel-compaction: error: "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0][len(prefix) :]


BAD_DOCUMENTS: list[tuple[str, str, str]] = [
    # (test id, file content, the exact message after "<file>: " or the message index)
    (
        "truncated-json",
        '[{"role": "user", "content": "hi"}',
        "{file}: invalid JSON at line 1 column 35: Expecting ',' delimiter",
    ),
    (
        "truncated-second-line",
        '[\n  {"role": "user", "content": "hi"},\n  {"role": "assi',
        "{file}: invalid JSON at line 3 column 12: Unterminated string starting at",
    ),
    (
        "number",
        "42",
        "{file}: expected a list of messages, an object with 'messages', or JSONL; got int",
    ),
    (
        "string",
        '"hello"',
        "{file}: expected a list of messages, an object with 'messages', or JSONL; got str",
    ),
    (
        "object-without-messages",
        '{"conversation": []}',
        "{file}: expected a list of messages, an object with 'messages', or JSONL; "
        "got an object without 'messages'",
    ),
    (
        "messages-not-a-list",
        '{"messages": {"role": "user"}}',
        "{file}: 'messages' must be a list, got dict",
    ),
    (
        "unknown-shape",
        '[{"role": "user", "content": "a"}, {"speaker": "bot", "text": "b"}]',
        "message 1: unknown message shape: expected a 'role' (Chat Completions, Anthropic) or "
        "a Responses item 'type'; keys present: speaker, text",
    ),
    (
        "message-not-an-object",
        '[{"role": "user", "content": "a"}, ["assistant", "b"]]',
        "message 1: expected a message object, got list",
    ),
    (
        "numeric-call-id",
        json.dumps(
            [
                USER,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": 7, "function": {"name": "a", "arguments": "{}"}}],
                },
            ]
        ),
        "message 1: tool_calls[0] has an id of type int, expected a string",
    ),
    (
        "tool-calls-not-a-list",
        json.dumps(
            [
                USER,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": {"id": "c1", "function": {"name": "a"}},
                },
            ]
        ),
        "message 1: 'tool_calls' must be a list, got dict",
    ),
    (
        "unknown-role",
        json.dumps([USER, {"role": "robot", "content": "beep"}]),
        "message 1: unknown role 'robot'; expected one of assistant, developer, function, "
        "system, tool, user",
    ),
    (
        "content-a-number",
        json.dumps([{"role": "user", "content": 5}]),
        "message 0: 'content' must be a string, a list of parts or null, got int",
    ),
    (
        "unknown-responses-item",
        json.dumps([USER, {"type": "teleport_call", "call_id": "t1"}]),
        "message 1: unknown Responses item type 'teleport_call'",
    ),
    (
        "empty",
        "",
        "{file}: empty input; expected a JSON list of messages",
    ),
    (
        "whitespace-only",
        "  \n\n ",
        "{file}: empty input; expected a JSON list of messages",
    ),
    (
        "malformed-jsonl-line",
        '{"role": "user", "content": "a"}\n{"role": "assistant", "content": "b"}\n{"role": oops}\n',
        "{file}: line 3: invalid JSON at column 10: Expecting value",
    ),
]


@pytest.mark.parametrize(
    ("content", "message"),
    [(c, m) for _, c, m in BAD_DOCUMENTS],
    ids=[i for i, _, _ in BAD_DOCUMENTS],
)
def test_bad_document_exits_2_with_one_line(
    content: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, content)
    code, out, err = run(capsys, str(path), "--format", "json")
    assert code == 2
    assert out == ""
    assert one_error_line(err) == message.format(file=path)


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere" / "transcript.json"
    code, out, err = run(capsys, str(missing))
    assert (code, out) == (2, "")
    assert one_error_line(err) == f"{missing}: no such file"


def test_directory_instead_of_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(tmp_path))
    assert code == 2
    assert one_error_line(err) == f"{tmp_path}: is a directory, not a file"


def test_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes('[{"role": "user", "content": "caf\xe9"}]'.encode("latin-1"))
    code, _, err = run(capsys, str(path))
    assert code == 2
    assert one_error_line(err) == f"{path}: not UTF-8 text: byte 0xe9 at offset 33 (line 1)"


def test_deeply_nested_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "[" * 100_000 + "]" * 100_000)
    code, _, err = run(capsys, str(path))
    assert code == 2
    assert one_error_line(err) == f"{path}: nested too deeply"


SPAN_TRANSCRIPT = [SYSTEM, USER, {"role": "assistant", "content": "hi"}]


@pytest.mark.parametrize(
    ("span", "message"),
    [
        ("abc", "--span 'abc': expected START:END, e.g. 1:20"),
        ("3", "--span '3': expected START:END, e.g. 1:20"),
        ("1:x", "--span '1:x': expected START:END, e.g. 1:20"),
        ("1.5:2", "--span '1.5:2': expected START:END, e.g. 1:20"),
        ("1:9", "--span 1:9: not a non-empty span of the 3 messages (0 <= START < END <= 3)"),
        ("2:1", "--span 2:1: not a non-empty span of the 3 messages (0 <= START < END <= 3)"),
        ("2:2", "--span 2:2: not a non-empty span of the 3 messages (0 <= START < END <= 3)"),
        ("-1:2", "--span -1:2: not a non-empty span of the 3 messages (0 <= START < END <= 3)"),
        ("5:", "--span 5:3: not a non-empty span of the 3 messages (0 <= START < END <= 3)"),
        ("0:1", "--span 0:1: inside the protected head, span 0:1"),
    ],
)
def test_bad_span(
    span: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, json.dumps(SPAN_TRANSCRIPT))
    code, out, err = run(capsys, str(path), f"--span={span}", "--format", "json")
    assert (code, out) == (2, "")
    assert one_error_line(err) == message


def test_span_argument_that_looks_like_an_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, json.dumps(SPAN_TRANSCRIPT))
    code, out, err = run(capsys, str(path), "--span", "-1:2")
    assert (code, out) == (2, "")
    assert one_error_line(err) == (
        "argument --span: expected one argument (see: otel-compaction check --help)"
    )


def test_usage_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "t.json", "--format", "yaml")
    assert code == 2
    line = one_error_line(err)
    # argparse words the list of choices differently across Python versions
    assert line.startswith("argument --format: invalid choice: 'yaml' (choose from ")
    assert line.endswith(" (see: otel-compaction check --help)")


def test_bad_policy_name_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, json.dumps(SPAN_TRANSCRIPT))
    code, _, err = run(capsys, str(path), "--policy", "paranoid")
    assert code == 2
    assert one_error_line(err) == (
        "paranoid: no such policy file, and not a built-in policy (default, strict, lenient)"
    )


def test_bad_input_as_a_real_process(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps([USER, {"role": "tool", "tool_call_id": 5, "content": "x"}]))
    for argv in (
        [str(path)],
        [str(path), "--span", "oops"],
        [str(tmp_path / "missing.json")],
        ["-"],
    ):
        completed = subprocess.run(
            [sys.executable, "-m", "otel_compaction", "check", *argv, "--format", "json"],
            input="{not json",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=REPO_ROOT,
        )
        assert completed.returncode == 2, (argv, completed.stderr)
        assert completed.stdout == ""
        assert "Traceback" not in completed.stderr
        assert len(completed.stderr.splitlines()) == 1, completed.stderr
        assert completed.stderr.startswith("otel-compaction: error: ")
    assert "<stdin>: invalid JSON at line 1 column 2" in completed.stderr


# --------------------------------------------------------------------------------------------
# valid but defective, large, and stdin
# --------------------------------------------------------------------------------------------


def test_result_without_call_is_a_finding_not_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    messages = [
        USER,
        {"role": "tool", "tool_call_id": "ghost", "content": "ok"},
        {"role": "assistant", "content": "done"},
    ]
    path = write(tmp_path, json.dumps(messages))
    code, out, err = run(capsys, str(path), "--format", "json")
    assert (code, err) == (1, "")
    report = json.loads(out)
    assert report["orphan_results"] == [{"id": "ghost", "message_index": 1}]
    assert report["open_calls"] == []
    assert report["closed_cuts"] == [0, 1, 2, 3]
    # A result with no call splits nothing: it is reported and never blocks.
    assert [(f["rule"], f["message_index"], f["severity"]) for f in report["findings"]] == [
        ("unmatched_result", 1, "warn"),
    ]
    assert report["findings"][0]["detail"] == "ghost: a result whose call is not in the transcript"


def test_ten_megabytes_in_one_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = ("log line 0042: request served in 12 ms\n" * 300_000)[:10_000_000]
    messages = [
        USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "tail", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": big},
        {"role": "assistant", "content": "The log is clean."},
    ]
    path = write(tmp_path, json.dumps(messages))
    assert path.stat().st_size > 10_000_000
    code, out, err = run(capsys, str(path), "--span", "0:2", "--format", "json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert (report["messages"], report["tool_calls"]) == (4, 1)
    assert report["closed_cuts"] == [0, 1, 3, 4]
    assert (report["decision"]["action"], report["decision"]["span"]) == ("compact", [0, 3])


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [
        USER,
        {"type": "function_call", "call_id": "fc_1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "fc_1", "output": "42"},
    ]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(json.dumps(m) for m in lines)))
    code, out, err = run(capsys, "-", "--span", "0:2", "--format", "json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["format"] == "openai_responses"
    assert report["closed_cuts"] == [0, 1, 3]
    assert report["decision"]["span"] == [0, 3]


def test_stdin_empty(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, out, err = run(capsys, "-")
    assert (code, out) == (2, "")
    assert one_error_line(err) == "<stdin>: empty input; expected a JSON list of messages"
