"""Which tool calls change something outside the conversation: the side effects a compaction
must not invite the agent to repeat.

A call is a side effect by its tool and, for a shell, by the command it runs:

* the file tools that write (``Write``, ``Edit``, ``MultiEdit``, ``NotebookEdit``, Codex's
  ``apply_patch``) always are;
* a shell command is one when a stage of it changes state: version control that records or
  publishes (``git commit``, ``git push``, ``gh pr create``), package installs, an HTTP request
  that sends (``curl -X POST``, ``curl -d``), deploys and infrastructure changes, messages and
  releases, and commands that rewrite files (``rm``, ``mv``, ``sed -i``, an output redirect);
  a read, a search, a test run or a build is not;
* an MCP tool, or any tool of no known kind (a domain API, an SDK function tool), is one
  unless it is declared read-only (MCP's ``readOnlyHint``, the SDK's tool metadata, or the
  policy's ``read_only_tools``) or its name starts with a reading verb (``get_``, ``list_``,
  ``search_``...);
* the agent's own bookkeeping (``TodoWrite``, ``update_plan``, ``Task``, ``AskUserQuestion``)
  and the reading tools (``Read``, ``Grep``, ``WebFetch``) never are.

The table is the policy's ``side_effects`` key (`SideEffectTable`); its defaults are below.
`completed` lists the side effects a transcript shows done: calls whose result came back
without failing, each with its result in one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from otel_compaction.outcomes import Outcome
    from otel_compaction.transcript import ToolCall, Transcript

__all__ = ["Completed", "SideEffect", "SideEffectTable", "completed", "result_line", "target"]

WRITE_TOOLS: Final = (
    "Write", "Edit", "MultiEdit", "NotebookEdit", "apply_patch", "write_file", "edit_file",
    "create_file", "str_replace_based_edit_tool", "str_replace_editor", "delete_file",
)  # fmt: skip
"""Tools that write files, whatever their arguments."""

AGENT_TOOLS: Final = (
    "TodoWrite", "TodoRead", "update_plan", "Task", "Agent", "ExitPlanMode", "EnterPlanMode",
    "AskUserQuestion", "BashOutput", "TaskOutput", "KillShell", "KillBash", "view_image",
    "Skill", "SlashCommand", "ToolSearch", "ListMcpResourcesTool", "ReadMcpResourceTool",
    "think", "calculate", "Read", "Grep", "Glob", "LS", "WebFetch", "WebSearch",
    "NotebookRead", "read_file", "list_dir", "grep_search", "file_search", "web_search",
)  # fmt: skip
"""Tools that only read, or keep the agent's own notes: never side effects."""

SHELL_TOOLS: Final = (
    "Bash", "shell", "shell_command", "exec_command", "local_shell", "local_shell_call",
    "run_command", "run_shell_command", "run_terminal_cmd", "execute_command", "terminal",
    "PowerShell", "container.exec",
)  # fmt: skip
"""Tools that run a command line: side effects only by what the command does."""

READ_ONLY_PREFIXES: Final = (
    "get", "list", "search", "read", "fetch", "find", "describe", "view", "show", "query",
    "lookup", "check", "count", "retrieve", "browse", "inspect", "explain", "preview",
)  # fmt: skip
"""Verbs a tool name starts with (``get_issue``, ``listPages``) when the tool only reads."""

COMMANDS: Final[Mapping[str, Sequence[str]]] = {
    "vcs": (
        r"^git\s+(?:-\S+(?:\s+[^-\s]\S*)?\s+)*(?:push|commit|merge|rebase|cherry-pick|revert|am|tag\s+\S|reset"
        r"|rm|mv|clean|stash(?!\s+(?:list|show))|branch\s+-[dDmMcC]|restore|apply|switch\s+-c"
        r"|checkout\s+-[bB])\b",
        r"^gh\s+(?:pr|issue|release|repo|gist|label|workflow|run)\s+(?:create|merge|close"
        r"|reopen|comment|edit|delete|review|ready|fork|upload|run|cancel|rerun)\b",
        r"^gh\s+api\b.*(?:-X\s*|--method[=\s]+)(?:POST|PUT|PATCH|DELETE)\b",
    ),
    "install": (
        r"^(?:python[\d.]*\s+-m\s+)?pip[\d.]*\s+(?:install|uninstall)\b",
        r"^uv\s+(?:pip\s+(?:install|uninstall|sync)|add|remove|sync|tool\s+install)\b",
        r"^(?:poetry|pdm|hatch)\s+(?:add|remove|install)\b",
        r"^(?:npm|pnpm|yarn|bun)\s+(?:install|i|ci|add|remove|uninstall|rm|link)\b",
        r"^(?:apt|apt-get|yum|dnf|apk|brew|pacman|zypper|snap|port|choco|winget)\s+"
        r"(?:-\S+\s+)*(?:install|remove|purge|upgrade|add|del|-S)\b",
        r"^(?:cargo|go|gem|conda|mamba|pipx)\s+(?:install|add|get|remove|uninstall)\b",
    ),
    "http": (
        r"^curl\b.*(?:\s-X\s*|\s--request[=\s]+)(?:POST|PUT|PATCH|DELETE)\b",
        r"^curl\b.*\s(?:-d|--data(?:-raw|-binary|-urlencode)?|-F|--form|-T|--upload-file"
        r"|--json)\b",
        r"^wget\b.*\s--(?:post-data|post-file|method)\b",
        r"^https?\s+(?:-\S+\s+)*(?:POST|PUT|PATCH|DELETE)\b",
    ),
    "deploy": (
        r"^kubectl\s+(?:-\S+\s+)*(?:apply|create|delete|patch|replace|scale|rollout|set|edit"
        r"|annotate|label|drain|cordon|taint|expose|run)\b",
        r"^helm\s+(?:install|upgrade|uninstall|rollback|delete)\b",
        r"^(?:terraform|tofu)\s+(?:apply|destroy|import|taint)\b",
        r"^(?:pulumi\s+(?:up|destroy)|cdk\s+(?:deploy|destroy)|serverless\s+deploy)\b",
        r"^(?:fly|flyctl|vercel|netlify|firebase|railway|wrangler)\b.*\b(?:deploy|publish)\b",
        r"^vercel\s+--prod\b",
        r"^(?:gcloud|aws|az)\b.*\s(?:deploy|create|delete|update|put-\S+|s3\s+(?:cp|mv|rm|sync)"
        r"|invoke)\b",
        r"^docker\s+(?:push|rm|rmi|stop|kill)\b",
        r"^docker(?:-|\s+)compose\s+(?:-\S+\s+\S+\s+)*(?:up|down|rm|push)\b",
        r"^(?:systemctl|service)\s+(?:\S+\s+)?(?:start|stop|restart|reload|enable|disable)\b",
        r"^ansible-playbook\b",
        r"^make\s+(?:\S+\s+)*(?:deploy|release|publish|install)\b",
        r"^(?:npm|pnpm|yarn|bun)\s+run\s+(?:deploy|release|publish)\b",
    ),
    "publish": (
        r"^(?:npm|pnpm|yarn)\s+publish\b",
        r"^(?:twine\s+upload|cargo\s+publish|gem\s+push|poetry\s+publish|uv\s+publish)\b",
    ),
    "message": (
        r"^(?:mail|mailx|sendmail|mutt|msmtp|swaks)\b",
        r"^(?:slack|slack-cli)\s+(?:chat\s+)?send\b",
    ),
    "file": (
        r"^(?:rm|rmdir|mv|cp|shred|truncate|chmod|chown|ln|dd|tee|install|rsync|scp)\s",
        r"^(?:sed|perl)\s+(?:-\S+\s+)*-i",
        r"^(?:sqlite3|psql|mysql)\b.*\b(?:insert|update|delete|drop|create|alter)\b",
    ),
}
"""Shell command stages that change state, by kind (regular expressions on one stage of the
command, after ``sudo``, ``env`` and variable assignments, matched case-insensitively)."""

_SEGMENTS: Final = re.compile(r"&&|\|\||[|;\n&]")
# A here-document's body is data, not commands; the rest of its first line is still command.
_HEREDOC: Final = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?([^\n]*)\n.*?\n\s*\1\b", re.DOTALL)
# An output redirect to a file (not to /dev/null or another descriptor).
_REDIRECT: Final = re.compile(r"(?<![\d<&])>>?\s*(?!&|/dev/null\b)[\w./~'\"$-]")
_ASSIGNMENT: Final = re.compile(r"^\w+=\S*\s+")
_PREFIX: Final = re.compile(r"^(?:sudo|time|nice|env|command|exec|nohup|xargs)(?:\s+-\S+)*\s+")
_COMMAND_KEYS: Final = ("command", "cmd", "script")
_PATH_KEYS: Final = ("file_path", "path", "notebook_path", "filename", "target_file")
# Codex's apply_patch takes the patch itself: the files are named in its headers.
_PATCH_FILE: Final = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.MULTILINE)
_ONE_LINE: Final = 160


@dataclass(frozen=True, slots=True)
class SideEffect:
    """What a call changes: its kind (``file``, ``vcs``, ``install``, ``http``, ``deploy``,
    ``publish``, ``message``, ``tool``), the tool and its target in one line (the command it
    ran, the path it wrote, or its arguments)."""

    kind: str
    tool: str
    target: str

    def describe(self) -> str:
        """The call as the CLI shows it: ``Bash: git push origin main``."""
        return f"{self.tool}: {self.target}"


@dataclass(frozen=True, slots=True)
class Completed:
    """A side effect a transcript shows done: its call, what it changed, and its result in
    one line."""

    call: ToolCall
    effect: SideEffect
    result: str


class SideEffectTable(BaseModel):
    """The policy's ``side_effects`` key: which calls are side effects.

    Example:
        >>> from otel_compaction.transcript import ToolCall
        >>> table = SideEffectTable()
        >>> push = ToolCall("t1", "Bash", 3, '{"command": "git push origin main"}', 0)
        >>> table.classify(push)
        SideEffect(kind='vcs', tool='Bash', target='git push origin main')
        >>> table.classify(ToolCall("t2", "Bash", 5, '{"command": "git status"}', 1)) is None
        True
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    write_tools: list[str] = Field(default_factory=lambda: list(WRITE_TOOLS))
    read_only_tools: list[str] = Field(default_factory=lambda: list(AGENT_TOOLS))
    shell_tools: list[str] = Field(default_factory=lambda: list(SHELL_TOOLS))
    read_only_prefixes: list[str] = Field(default_factory=lambda: list(READ_ONLY_PREFIXES))
    commands: dict[str, list[str]] = Field(
        default_factory=lambda: {kind: list(patterns) for kind, patterns in COMMANDS.items()}
    )

    @field_validator("commands", mode="after")
    @classmethod
    def _valid_regexes(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for kind, patterns in value.items():
            for position, pattern in enumerate(patterns):
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ValueError(f"{kind}: item {position}: {exc}") from None
        return value

    @cached_property
    def _names(self) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        def fold(names: list[str]) -> frozenset[str]:
            return frozenset(_bare(name) for name in names)

        return fold(self.write_tools), fold(self.read_only_tools), fold(self.shell_tools)

    @cached_property
    def _commands(self) -> tuple[tuple[str, re.Pattern[str]], ...]:
        return tuple(
            (kind, re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE))
            for kind, patterns in self.commands.items()
            if patterns
        )

    @cached_property
    def _reading(self) -> re.Pattern[str] | None:
        if not self.read_only_prefixes:
            return None
        verbs = "|".join(re.escape(v.lower()) for v in self.read_only_prefixes)
        # get_issue, get-issue, getIssue, listPages; not "gettext_apply" or "settle".
        return re.compile(rf"^(?:{verbs})(?:[_\-.]|[A-Z]|$)", re.IGNORECASE)

    def classify(self, call: ToolCall, *, read_only: bool | None = None) -> SideEffect | None:
        """What `call` changes, or None when it only reads. `read_only` is the tool's declared
        metadata where the caller knows it (MCP's ``readOnlyHint``, an SDK tool's flag); it
        decides for a tool of no known kind."""
        writes, reads, shells = self._names
        name = _bare(call.name)
        arguments = _arguments(call.arguments)
        command = _command(arguments)
        if name in writes:
            target = _path(arguments) or ", ".join(_PATCH_FILE.findall(call.arguments))
            return SideEffect("file", call.name, target or _one_line(call.arguments))
        if name in reads:
            return None
        if command is not None and (name in shells or not call.name.startswith("mcp__")):
            kind = self.command_kind(command)
            return None if kind is None else SideEffect(kind, call.name, _one_line(command))
        if name in shells:
            return None
        if read_only is None:
            reading = self._reading
            read_only = reading is not None and reading.match(_verb_part(call.name)) is not None
        if read_only:
            return None
        return SideEffect("tool", call.name, _one_line(call.arguments))

    def command_kind(self, command: str) -> str | None:
        """The kind of state `command` changes (the first stage that changes any), or None
        for a command that only reads, searches, builds or tests."""
        for stage in _stages(command):
            for kind, pattern in self._commands:
                if pattern.search(stage):
                    return kind
            if _REDIRECT.search(stage):
                return "file"
        return None

    def effective_command(self, command: str) -> str:
        """`command` as far as it changes state: its ``cd`` stages and the stages that change
        something, in order, whitespace collapsed (``cd repo && git status && git push`` is
        ``cd repo && git push``); the whole command when no stage does."""
        kept = [
            " ".join(stage.split())
            for stage in _stages(command)
            if stage.startswith("cd ") or self.command_kind(stage) is not None
        ]
        return " && ".join(kept) if kept else " ".join(command.split())


def completed(
    transcript: Transcript,
    outcomes: Sequence[Outcome],
    table: SideEffectTable,
    start: int = 0,
    end: int | None = None,
) -> list[Completed]:
    """The side effects done in messages `start` to `end`: each call with side effects whose
    result came back there and did not fail (`outcomes` are the transcript's results' outcomes,
    as `Analysis.outcomes` holds them), in the order they completed."""
    end = len(transcript) if end is None else end
    done: list[Completed] = []
    for result in transcript.results:
        if not start <= result.message_index < end or result.call is None or result.interim:
            continue
        if outcomes[result.ordinal] not in ("success", "silent"):
            continue
        call = transcript.calls[result.call]
        effect = table.classify(call)
        if effect is not None:
            done.append(Completed(call, effect, result_line(result.text)))
    return done


def target(call: ToolCall) -> str:
    """What `call` acts on, in one line, as the CLI shows it: the command a shell ran, the
    path a file tool wrote or read, else its arguments."""
    arguments = _arguments(call.arguments)
    command = _command(arguments)
    if command is not None:
        return _one_line(command)
    found = _path(arguments) or ", ".join(_PATCH_FILE.findall(call.arguments))
    return found or _one_line(call.arguments)


def _bare(name: str) -> str:
    """A tool name compared without its namespace (``mcp__server__``, ``functions.``)."""
    return name.lower().rsplit("__", 1)[-1].removeprefix("functions.")


def _verb_part(name: str) -> str:
    return name.rsplit("__", 1)[-1].removeprefix("functions.")


def _arguments(text: str) -> Mapping[str, Any]:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return {}
    return value if isinstance(value, Mapping) else {}


def _command(arguments: Mapping[str, Any]) -> str | None:
    """The command line a shell call runs (Codex's argv form runs its last part)."""
    for key in _COMMAND_KEYS:
        command = arguments.get(key)
        if isinstance(command, str):
            return command
        if isinstance(command, list) and all(isinstance(part, str) for part in command):
            if len(command) >= 3 and command[-2] in ("-c", "-lc", "-Command", "/c"):
                return str(command[-1])
            return " ".join(command)
    return None


def _path(arguments: Mapping[str, Any]) -> str | None:
    for key in _PATH_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _stages(command: str) -> list[str]:
    stages = []
    for segment in _SEGMENTS.split(_HEREDOC.sub(r"\2", command)):
        stage = segment.strip().lstrip("({").strip()
        while True:
            bare = _PREFIX.sub("", _ASSIGNMENT.sub("", stage))
            if bare == stage:
                break
            stage = bare
        if stage:
            stages.append(stage)
    return stages


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _ONE_LINE else line[: _ONE_LINE - 1] + "\u2026"


_EXIT_HEADER: Final = re.compile(
    r"\A(?:(?:chunk id|wall time|original token count|exit code:? 0|process exited with code 0)"
    r"[^\n]*\n|output:\n)+",
    re.IGNORECASE,
)


def result_line(text: str) -> str:
    """A result in one line: its first line that says something (after a shell's headers)."""
    body = _EXIT_HEADER.sub("", text.strip())
    for line in body.splitlines():
        if line.strip():
            return _one_line(line)
    return "(no output)"
