"""What a tool result says about its call: the outcome the rules read it by.

A result is judged as the tool's outcome, never by the words of the data it returned. The
structured signals come first: an error flag (Anthropic ``is_error``, tau2 ``error``, a
Responses error payload) or a shell's exit status (Claude Code's ``Exit code N`` header,
Codex's ``Exit code: N`` and ``Process exited with code N`` headers and its ``exit_code``
metadata). A call that failed is a failure, an absence (it says something does not exist) or a
rejection; one cancelled before it could run (a sibling's failure, an interrupt) is
``cancelled``: nothing was learned about its subject.

A call that ran is then read by its tool's family. A file read returned the file: its
content is data, whatever it says. A search or a listing returned what it found: nothing, or
only the tool's own short "No files found", is an absence; file names and matching lines that
mention "error" are data; a listing of only a directory's own ``.`` and ``..`` entries is
empty. Any other shell command's output is data too (and its empty output silent success:
``git status --short`` on a clean tree), unless it is a short statement that something is not
the case, or unless it stops at an interactive prompt nobody answered (an installer asking
"Would you like ...?" with no terminal to answer it): the command ended there without doing
its work, a failure.

A tool of no known family (a domain API, an MCP tool) states its outcome up front: the
policy's patterns are read on its first line, and a JSON result is data unless it is empty or
carries a top-level ``error``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from otel_compaction.patterns import Scan
    from otel_compaction.policy import Policy
    from otel_compaction.transcript import ResultStatus, ToolCall

__all__ = [
    "RESULT_HEAD",
    "Family",
    "Outcome",
    "exit_status",
    "family",
    "judge",
    "unanswered_prompt",
]

# Outcomes are judged on the head of a result: an absence or a failure is stated up front,
# and scanning megabytes of payload for "not found" only finds noise.
RESULT_HEAD: Final = 2_000

Outcome = Literal["success", "silent", "failure", "absence", "rejection", "cancelled"]
"""What a result says: it worked (with output, or silently), it failed (and may be retried),
something was not the case, the call was refused before it ran, or it was cancelled before it
could run (nothing was learned about its subject, and it is no success)."""

Family = Literal["read", "search", "shell", "other"]
"""What a tool returns: a file's content, what a search or listing found, a command's output,
or an answer of its own (a domain API, an MCP tool, a web fetch)."""

# Tool names by family, compared lower-case with any namespace (``mcp__server__``,
# ``functions.``) dropped.
_READ_TOOLS: Final = frozenset(
    {
        "read", "read_file", "readfile", "read_text_file", "read_multiple_files", "view",
        "view_file", "open_file", "notebookread", "get_file_contents", "cat",
    }
)  # fmt: skip
_SEARCH_TOOLS: Final = frozenset(
    {
        "grep", "glob", "ls", "list", "list_dir", "list_directory", "list_files", "find",
        "find_files", "file_search", "search_files", "grep_search", "codebase_search",
        "directory_tree", "search", "websearch", "web_search", "web_search_call",
    }
)  # fmt: skip
_SHELL_TOOLS: Final = frozenset(
    {
        "bash", "shell", "shell_command", "exec_command", "local_shell", "local_shell_call",
        "run_command", "run_shell_command", "run_terminal_cmd", "execute_command",
        "terminal", "powershell", "container.exec",
    }
)  # fmt: skip
# Programs of a shell command by family (lower-case, without a directory or ``.exe``).
_READ_PROGRAMS: Final = frozenset(
    {
        "cat", "head", "tail", "less", "more", "nl", "bat", "batcat", "tac", "xxd", "od",
        "hexdump", "strings", "get-content", "gc", "type",
    }
)  # fmt: skip
_SEARCH_PROGRAMS: Final = frozenset(
    {
        "grep", "egrep", "fgrep", "rg", "ag", "ack", "find", "fd", "fdfind", "ls", "tree",
        "dir", "locate", "get-childitem", "gci", "select-string", "sls", "findstr",
    }
)  # fmt: skip
_COMMAND_KEYS: Final = ("command", "cmd", "script")
# A long listing's lines that name no entry of the directory: its total, and the directory
# itself and its parent (``ls -la`` of an empty directory prints only these).
_NO_ENTRY: Final = re.compile(r"(?m)^(?:total \d+|(?:\S.*\s)?\.{1,2})[ \t]*$")
# Terminal control sequences (colours, cursor moves) an interactive program writes.
_ANSI: Final = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# An interactive prompt waiting for its answer, as the prompt libraries of installers draw
# it ("? Would you like ...? <pointer> No / Yes", "? Pick one: (Use arrow keys)",
# "? Continue? (y/N)"), and the check or cross mark they redraw it with once answered or
# cancelled.
_PROMPT: Final = re.compile(
    r"(?mi)^[ \t]*\?[ \t]+\S[^\n]*?"
    r"(?:[\u203a\u276f]|\(use arrow keys\)|\([yn]/[yn]\)|\[[yn]/[yn]\])"
)
_ANSWERED: Final = re.compile(r"[\u2714\u2713\u221a\u2716\u00d7][ \t]+\S")
# How a call was cancelled before it ran: Claude Code cancels the parallel siblings of a call
# that errored, and answers a call the user interrupted; Codex answers an interrupted call
# with "aborted".
_CANCELLED: Final = re.compile(
    r"""\A\W*(?:<tool_use_error>\s*)?(?:error:\s*)?(?:
        sibling\ tool\ call\ errored
      | cancelled:\ parallel\ tool\ call\b
      | \[request\ interrupted\ by\ user
      | aborted\s*\Z
    )""",
    re.IGNORECASE | re.VERBOSE,
)
# A shell's exit status ahead of its output: Claude Code's "Exit code 1", Codex's
# "Exit code: 1 / Wall time: ... / Output:" and unified exec's "Chunk ID: ... / Wall time: ...
# / Process exited with code 1 / Original token count: ... / Output:".
_EXIT_HEADER: Final = re.compile(
    r"""\A(?:(?:chunk\ id|wall\ time|original\ token\ count):[^\n]*\n)*
        (?:exit\ code:?\ |process\ exited\ with\ code\ )(-?\d+)[^\n]*(?:\n|\Z)
        (?:(?:wall\ time|original\ token\ count|total\ output\ lines):[^\n]*\n)*
        (?:output:\n)?""",
    re.IGNORECASE | re.VERBOSE,
)
_SEGMENTS: Final = re.compile(r"&&|\|\||[|;\n&]")
_HEREDOC: Final = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?[^\n]*\n.*?\n\s*\1\b", re.DOTALL)
_STDOUT_REDIRECT: Final = re.compile(r"(?<![\d<])>")
_ASSIGNMENT: Final = re.compile(r"^\w+=")
_PREFIXES: Final = frozenset({"sudo", "time", "nice", "env", "command", "exec", "xargs"})
_QUIET: Final = frozenset({"-q", "--quiet", "--silent"})
_STATEMENT_LINES: Final = 3
_STATEMENT_CHARS: Final = 300
_ERROR_KEYS: Final = ("error", "errors", "error_message", "errorMessage")
_NOT_JSON: Final = object()
# What a program puts ahead of its message: its name, then the target it names
# ("find: 'types/': No such file or directory").
_PROGRAM_PREFIX: Final = re.compile(
    r"\A[\w.-]+:\s+(?:[\u2018'\"`][^\u2019'\"`\n]*[\u2019'\"`]:?\s+)?"
)


def family(call: ToolCall | None) -> Family:
    """The family of what `call` returns, by its tool's name and, for a shell, the programs
    its command runs (a pipeline with a search in it is a search; one of reads only, a read)."""
    if call is None:
        return "other"
    name = call.name.lower().rsplit("__", 1)[-1].removeprefix("functions.")
    if name in _READ_TOOLS:
        return "read"
    if name in _SEARCH_TOOLS:
        return "search"
    command = _command(call.arguments)
    if command is None:
        return "shell" if name in _SHELL_TOOLS else "other"
    return _command_family(command)


def exit_status(text: str) -> tuple[int | None, str]:
    """A shell result's exit code (None when it states none) and the head of its output, read
    from the header a shell tool puts ahead of the output or from Codex's JSON envelope
    (``{"output": ..., "metadata": {"exit_code": N}}``)."""
    header = _EXIT_HEADER.match(text, 0, RESULT_HEAD)
    if header is not None:
        return int(header.group(1)), text[header.end() : header.end() + RESULT_HEAD]
    if text.startswith('{"output"'):
        try:
            value = json.loads(text)
        except ValueError:
            return None, text
        if isinstance(value, Mapping) and isinstance(value.get("output"), str):
            metadata = value.get("metadata")
            code = metadata.get("exit_code") if isinstance(metadata, Mapping) else None
            if isinstance(code, int) and not isinstance(code, bool):
                return code, value["output"][:RESULT_HEAD]
    return None, text[:RESULT_HEAD]


def judge(policy: Policy, status: ResultStatus, text: str, call: ToolCall | None) -> Outcome:
    """The outcome of a result of `status` and `text` answering `call` (None for an orphan),
    judged on the first `RESULT_HEAD` characters of its output."""
    kind = family(call)
    code, body = exit_status(text)
    if _CANCELLED.match(body):
        return "cancelled"
    if status == "error" or (code is not None and code != 0):
        return _failed(policy, body, kind)
    stripped = body.strip()
    if kind == "search" and (stripped in ("[]", "{}") or not _NO_ENTRY.sub("", stripped).strip()):
        return "absence"  # nothing found, or a listing of no entry
    if not stripped:
        return "absence" if policy.patterns.null_result.empty else "silent"
    if kind == "shell" and unanswered_prompt(stripped) is not None:
        return "failure"
    if kind == "other":
        return _answered(policy, stripped)
    if kind == "read" and code == 0:
        return "success"  # the file, whatever it says
    statement = _statement(stripped)
    if statement is None:
        return "success"
    if kind == "shell":
        # A command's own words; one that exited 0 did not fail, whatever it printed.
        return _stated(policy, statement, failures=code is None)
    # A search's or a read's data may mention anything: only its own message counts, one
    # that opens with what it says ("No files found", "find: 'x': No such file ...").
    return _stated(policy, statement, failures=code is None, opening=True)


# -- the judgements --------------------------------------------------------------------------


def _failed(policy: Policy, body: str, kind: Family) -> Outcome:
    """A call that failed: refused, not finding its subject, or failing."""
    rejection = policy.rejection_regex
    if rejection is not None and rejection.found(body):
        return "rejection"
    # A search that exits non-zero with nothing to say (grep's 1) found no match.
    if kind == "search" and body.strip() in ("", "Error"):
        return "absence"
    absence = policy.null_regex
    if absence is not None and absence.found(body):
        return "absence"
    return "failure"


def _answered(policy: Policy, stripped: str) -> Outcome:
    """A tool of its own: the outcome it states up front, or the error its JSON carries."""
    if stripped[0] in "{[":
        value = _json(stripped)
        if value is not _NOT_JSON and value:
            return _json_outcome(policy, value)
    lead = stripped.split("\n", 1)[0][:_STATEMENT_CHARS]
    return _stated(policy, lead)


def _stated(
    policy: Policy, statement: str, *, failures: bool = True, opening: bool = False
) -> Outcome:
    """What a tool's statement says; a failure counts only with `failures`. With `opening`,
    only what the statement opens with counts, or what follows a program's name and target
    (``find: 'x': No such file or directory``)."""
    regexes: tuple[tuple[Outcome, Scan | None], ...] = (
        ("rejection", policy.rejection_regex),
        ("absence", policy.null_regex),
        ("failure", policy.error_regex if failures else None),
    )
    texts = [statement]
    if opening:
        prefix = _PROGRAM_PREFIX.match(statement)
        if prefix is not None:
            texts.append(statement[prefix.end() :])
    for outcome, regex in regexes:
        if regex is None:
            continue
        for text in texts:
            match = regex.search(text)
            if match is not None and (not opening or match.start() == 0):
                return outcome
    return "success"


def _json_outcome(policy: Policy, value: Any) -> Outcome:
    """A JSON answer is data, unless it says at its top level that the call failed."""
    if not isinstance(value, Mapping):
        return "success"
    if value.get("isError") is True or value.get("success") is False or value.get("ok") is False:
        error: Any = next((value[k] for k in _ERROR_KEYS if value.get(k)), "")
    else:
        error = next((value[k] for k in _ERROR_KEYS if value.get(k)), None)
        if error is None:
            return "success"
    absence = policy.null_regex
    if absence is not None and absence.found(str(error)):
        return "absence"
    return "failure"


# -- reading ---------------------------------------------------------------------------------


def _statement(body: str) -> str | None:
    """The first line of a short result that reads as a sentence (two words or more): what a
    tool says instead of data. A single word is a value or a path, not a statement."""
    stripped = body.strip()
    if len(stripped) > _STATEMENT_CHARS:
        return None
    lines = [line for line in stripped.splitlines() if line.strip()]
    if not lines or len(lines) > _STATEMENT_LINES or len(lines[0].split()) < 2:
        return None
    return lines[0].strip()


def unanswered_prompt(body: str) -> str | None:
    """The interactive prompt the output stops at, without its terminal codes: its last
    prompt, never redrawn as answered (the program got no answer and ended there); else
    None."""
    if "?" not in body:
        return None
    plain = _ANSI.sub("", body)
    prompts = list(_PROMPT.finditer(plain))
    if not prompts or _ANSWERED.search(plain, prompts[-1].end()) is not None:
        return None
    start = prompts[-1].start()
    end = plain.find("\n", start)
    return plain[start : end if end >= 0 else None].strip()


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_JSON  # cut at the head, or not JSON: read as text


def _command(arguments: str) -> str | None:
    """The command line a shell call runs, or None for a call with no command argument."""
    try:
        value: Any = json.loads(arguments) if arguments else None
    except ValueError:
        return None
    if not isinstance(value, Mapping):
        return None
    for key in _COMMAND_KEYS:
        command = value.get(key)
        if isinstance(command, str):
            return command
        if isinstance(command, list) and all(isinstance(part, str) for part in command):
            # Codex's argv form: ["bash", "-lc", "rg foo"] runs its last part.
            if len(command) >= 3 and command[-2] in ("-c", "-lc", "-Command", "/c"):
                return str(command[-1])
            return " ".join(command)
    return None


def _command_family(command: str) -> Family:
    """A search when any stage of the command searches or lists (and its output is what the
    call returns), a read when every stage reads a file, else a shell command."""
    stages = [s.strip() for s in _SEGMENTS.split(_HEREDOC.sub("", command)) if s.strip()]
    kinds = [_stage_family(stage) for stage in stages]
    kinds = [k for k in kinds if k is not None]
    if "search" in kinds:
        return "search"
    if kinds and all(k == "read" for k in kinds):
        return "read"
    return "shell"


def _stage_family(stage: str) -> Family | None:
    """One stage's family, or None for one that adds nothing to the output (``cd``)."""
    words = stage.split()
    while words and (_ASSIGNMENT.match(words[0]) or words[0] in _PREFIXES):
        words = words[1:]
    if not words:
        return None
    program = words[0].strip("'\"").replace("\\", "/").rsplit("/", 1)[-1].lower()
    program = program.removesuffix(".exe")
    if program in ("cd", "set-location", "pushd", "popd"):
        return None
    if _STDOUT_REDIRECT.search(stage):
        return "shell"  # its output went to a file
    if program == "git" and len(words) > 1 and words[1] in ("grep", "ls-files"):
        return "search"
    if program in _SEARCH_PROGRAMS and _QUIET.isdisjoint(words):
        return "search"
    if program in _READ_PROGRAMS or (program == "sed" and "-n" in words and "-i" not in words):
        return "read"
    return "shell"
