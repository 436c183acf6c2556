"""Which calls are side effects: the table the repair and the re-issue guard share."""

from __future__ import annotations

import json

import pytest

from otel_compaction.analysis import Analysis
from otel_compaction.policy import Policy
from otel_compaction.side_effects import SideEffect, SideEffectTable, completed
from otel_compaction.transcript import ToolCall, Transcript

TABLE = SideEffectTable()


def _call(name: str, arguments: object) -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall("c1", name, 0, text, 0)


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("git push origin main", "vcs"),  # publishes commits
        ("git -C repo commit -m 'fix'", "vcs"),  # records, whatever the global options
        ("cd repo && git push", "vcs"),  # any stage that changes state
        ("gh pr create --fill", "vcs"),  # opens a pull request
        ("pip install requests", "install"),
        ("FOO=1 sudo apt-get install -y jq", "install"),  # after assignments and sudo
        ("curl -X POST https://api.example.com/v1/items", "http"),
        ("curl -d name=x https://api.example.com", "http"),  # data implies a POST
        ("kubectl apply -f deploy.yaml", "deploy"),
        ("npm publish", "publish"),
        ("sed -i s/a/b/ config.ini", "file"),
        ("cat <<EOF > notes.txt\nhello > world\nEOF", "file"),  # the redirect, not the body
        ("rm -rf build", "file"),
        ("git status", None),  # reads
        ("git log --oneline | head", None),
        ("git stash list", None),
        ("gh pr view 3", None),
        ("curl -s https://example.com", None),  # a GET
        ("kubectl get pods", None),
        ("sed -n 1,5p file", None),
        ("grep -r foo . 2>/dev/null", None),  # stderr thrown away is no write
        ("pytest -q", None),  # a test run
        ("npm test", None),
    ],
)
def test_shell_commands_by_what_they_change(command: str, kind: str | None) -> None:
    effect = TABLE.classify(_call("Bash", {"command": command}))
    assert (effect.kind if effect else None) == kind


def test_codex_argv_form_runs_its_last_part() -> None:
    push = _call("shell", {"command": ["bash", "-lc", "git push"]})
    assert TABLE.classify(push) == SideEffect("vcs", "shell", "git push")
    assert TABLE.classify(_call("shell", {"command": ["bash", "-lc", "git diff"]})) is None


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("Write", {"file_path": "/src/a.py", "content": "x"}, ("file", "/src/a.py")),
        ("Edit", {"file_path": "a.py", "old_string": "a", "new_string": "b"}, ("file", "a.py")),
        ("apply_patch", "*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n*** End Patch",
         ("file", "a.py")),  # the file named in the patch header
        ("mcp__slack__post_message", {"text": "hi"}, ("tool", '{"text": "hi"}')),  # no hint
        ("book_reservation", {"user_id": "u1"}, ("tool", '{"user_id": "u1"}')),  # a domain API
        ("mcp__github__get_issue", {"number": 1}, None),  # a reading verb
        ("mcp__github__listIssues", {}, None),  # camelCase verb
        ("get_user_details", {"user_id": "u1"}, None),
        ("TodoWrite", {"todos": []}, None),  # the agent's own notes
        ("Read", {"file_path": "a.py"}, None),
        ("WebFetch", {"url": "https://example.com"}, None),
    ],
)  # fmt: skip
def test_tools_by_name(name: str, arguments: object, expected: tuple[str, str] | None) -> None:
    effect = TABLE.classify(_call(name, arguments))
    assert (effect if effect is None else (effect.kind, effect.target)) == expected


def test_declared_metadata_decides_for_a_tool_of_no_known_kind() -> None:
    assert TABLE.classify(_call("mcp__db__run", {}), read_only=True) is None
    assert TABLE.classify(_call("mcp__db__get_rows", {}), read_only=False) is not None


def test_policy_changes_the_table() -> None:
    policy = Policy.from_yaml(
        "side_effects:\n  read_only_tools: [mcp__slack__post_message]\n"
        "  commands: {deploy: ['^make\\s+ship\\b']}\n"
    )
    table = policy.side_effects
    assert table.classify(_call("mcp__slack__post_message", {"text": "hi"})) is None
    assert table.command_kind("make ship") == "deploy"
    assert table.command_kind("git push") == "vcs"  # the kinds not named keep their defaults


def test_a_bad_pattern_names_its_kind() -> None:
    with pytest.raises(Exception, match=r"side_effects.commands: .*deploy: item 0"):
        Policy.from_yaml("side_effects:\n  commands: {deploy: ['(']}\n")


def test_completed_lists_only_side_effects_that_succeeded() -> None:
    def bash(call_id: str, command: str) -> dict[str, object]:
        block = {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}
        return {"role": "assistant", "content": [block]}

    def result(call_id: str, text: str, error: bool = False) -> dict[str, object]:
        block = {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": error}
        return {"role": "user", "content": [block]}

    messages = [
        {"role": "user", "content": "push it"},
        bash("t1", "git push origin main"),
        result("t1", "Exit code 1\nerror: failed to push some refs", error=True),
        bash("t2", "git status"),
        result("t2", "On branch main"),
        bash("t3", "git push --force-with-lease origin main"),
        result("t3", "To github.com:acme/app.git\n   1a2b3c4..5d6e7f8  main -> main"),
    ]
    transcript = Transcript.parse(messages)
    analysis = Analysis.build(transcript, Policy.load("default"))
    done = completed(transcript, analysis.outcomes, TABLE)
    assert [(d.effect.target, d.result) for d in done] == [
        ("git push --force-with-lease origin main", "To github.com:acme/app.git"),
    ]
