"""``otel-compaction``: check transcripts against a policy, inspect policies, read the archive.

Exit status of ``check``: 0 compact or clean, 1 defer or findings, 3 refuse, 2 unusable input
(one line on stderr naming what is wrong and where, never a traceback). ``archive show`` and
``archive list`` exit 0, or 2 for an unknown handle or an unreadable archive.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO, cast

from otel_compaction._version import __version__
from otel_compaction.errors import CompactionError

__all__ = ["main"]

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT, EXIT_REFUSED = 0, 1, 2, 3


_INDICES = """\
indices: messages are numbered from 0. A span START:END is half-open, as in --span:
  messages START up to, not including, END (1:12 is messages 1 to 11). Cut i is the
  boundary just before message i. Every span in the output is written this way.
"""

_EPILOG = """\
exit status: 0 compact or clean, 1 defer or findings, 3 refuse, 2 unusable input

examples:
  otel-compaction check --example --span 1:12
  otel-compaction check transcript.json
  otel-compaction check run.jsonl --span 1:40 --format json
  otel-compaction check - --span 1:40 --critical --policy strict < transcript.json
  otel-compaction policy show strict
"""


class _ArgumentParser(argparse.ArgumentParser):
    """Usage errors are one line on stderr too, like every other unusable input."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INPUT, f"otel-compaction: error: {message} (see: {self.prog} --help)\n")


def _demo_arguments(demo: argparse.ArgumentParser) -> None:
    """The demo's options; a function of their own keeps `_parser` within its length."""
    demo.add_argument("--runs", type=int, default=12, help="seeded runs (default: 12)")
    demo.add_argument("--seed", type=int, default=1, help="first seed (default: 1)")
    demo.add_argument(
        "--services", type=int, default=6, help="services each agent reconfigures (default: 6)"
    )
    demo.add_argument(
        "--budget", type=int, default=2_400, help="context budget in tokens (default: 2400)"
    )
    demo.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="draw the first seed's two runs, step by step, as FILE (.svg or .png; needs "
        "matplotlib, the plot extra: pip install '.[plot]' in a clone)",
    )
    demo.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="the report as text for a terminal, or as JSON (default: text)",
    )
    noise = demo.add_mutually_exclusive_group()
    noise.add_argument(
        "--verbose", action="store_true", help="print the gate's spans and each seed's progress"
    )
    noise.add_argument("--quiet", action="store_true", help="print only the report")


def _parser() -> argparse.ArgumentParser:
    # Imported here, as the help needs them: a hook run never builds this parser.
    from otel_compaction.rules.registry import BUILTIN_POLICIES

    parser = _ArgumentParser(
        prog="otel-compaction",
        description="Guard agent transcript compaction against severing tool calls "
        "from their results, unanswered calls, failed searches and unkept promises.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    check = commands.add_parser(
        "check",
        help="check a transcript and, with --span, decide on compacting a span",
        description="Read a transcript (a JSON list of messages, an object with 'messages', "
        "or JSONL; '-' is stdin; OpenAI Chat Completions, Anthropic Messages and OpenAI "
        "Responses are detected per message) and report its closed cuts, open calls, orphan "
        "results and findings. With --span, also decide: compact, defer or refuse.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_INDICES + "\n" + _EPILOG,
    )
    check.add_argument("path", metavar="PATH", nargs="?", help="transcript file, or - for stdin")
    check.add_argument(
        "--example",
        action="store_true",
        help="check the bundled example transcript (a deployment agent with a call in flight)",
    )
    check.add_argument(
        "--span",
        metavar="START:END",
        help="the span to compact, half-open: messages START up to, not including, END "
        "(END may be omitted: to the end)",
    )
    check.add_argument(
        "--critical", action="store_true", help="the budget is critical: no deferral allowed"
    )
    check.add_argument(
        "--archived",
        action="store_true",
        help="the span will be archived verbatim (reversible compaction)",
    )
    check.add_argument(
        "--policy",
        default="default",
        metavar="NAME|FILE",
        help=f"built-in policy ({', '.join(BUILTIN_POLICIES)}) or a YAML file (default: default)",
    )
    check.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default: text)"
    )

    demo = commands.add_parser(
        "demo",
        help="run the simulated agent with a naive and a guarded compactor, side by side",
        description="A simulation (a scripted agent, no model) that reconfigures services "
        "through tools whose results arrive late, so the context fills with calls in flight. "
        "Each seed runs twice: a naive token-threshold compactor and the guarded one. The "
        "report fits 80 columns. The gate's spans print to stderr with --verbose, and go "
        "over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.",
    )
    _demo_arguments(demo)

    policy = commands.add_parser("policy", help="show, validate or describe policies")
    actions = policy.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="print a policy with every default filled in")
    show.add_argument("policy", nargs="?", default="default", metavar="NAME|FILE")
    validate = actions.add_parser("validate", help="validate policy files")
    validate.add_argument("policies", nargs="+", metavar="NAME|FILE")
    actions.add_parser("schema", help="print the policy file's JSON Schema")

    audit = commands.add_parser(
        "audit",
        help="judge the compactions in Claude Code and Codex session logs",
        description="For every compaction in the session logs: whether it fell on a closed "
        "boundary and what was open then, what its summary failed to carry (against what the "
        "session used afterwards), and the calls re-issued after it that repeat one already "
        "resolved. PATH may be a file or a directory (searched for *.jsonl); with no PATH, "
        "$CLAUDE_CONFIG_DIR/projects and $CODEX_HOME/sessions.",
        epilog="exit status: 0 clean, 1 findings, 2 unusable input",
    )
    audit.add_argument("paths", nargs="*", metavar="PATH", help="session logs or directories")
    audit.add_argument("--policy", default="default", metavar="NAME|FILE")
    audit.add_argument("--format", choices=("text", "json"), default="text")

    hook = commands.add_parser(
        "hook",
        help="the Claude Code and Codex compaction hooks, and their installer",
        description="Run as a Claude Code or Codex hook (the hook's JSON on stdin): "
        "PreCompact blocks a compaction over open obligations and hands the summarizer what "
        "it must carry, PostCompact verifies the summary, SessionStart (after a compaction) "
        "injects what the summary lost. 'install' and 'uninstall' edit the CLI's settings.",
    )
    hooks = hook.add_subparsers(dest="action", metavar="ACTION", required=True)
    # The CLIs pass hooks only variables of their own: settings travel on the command line.
    runs = [hooks.add_parser(cli, help=f"run as a {cli} hook (reads the hook's JSON on stdin)")
            for cli in ("claude-code", "codex")]  # fmt: skip
    for action in ("install", "uninstall"):
        edit = hooks.add_parser(action, help=f"{action} the hooks in a CLI's settings")
        edit.add_argument("cli", choices=("claude-code", "codex"))
        scope = edit.add_mutually_exclusive_group()
        scope.add_argument(
            "--user", dest="scope", action="store_const", const="user",
            help="the user's settings (the default)",
        )  # fmt: skip
        scope.add_argument(
            "--project", dest="scope", action="store_const", const="project",
            help="the project's settings in the current directory",
        )  # fmt: skip
        edit.set_defaults(scope="user")
        if action == "install":
            runs.append(edit)
    for parser_ in runs:
        parser_.add_argument(
            "--policy", metavar="NAME|FILE", help="the hooks' policy (default: default)"
        )
    _add_hook_tools(hooks)
    for parser_ in [*runs, hooks.choices["resolve"]]:
        parser_.add_argument(
            "--otlp-endpoint",
            metavar="URL",
            help="send each hook's decision over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT)",
        )

    _add_archive(commands)
    from otel_compaction.completion import SHELLS

    completion = commands.add_parser(
        "completion",
        help="print a shell completion script",
        description='Print the completion script for a shell; load it with eval "$('
        'otel-compaction completion bash)" (in ~/.bashrc, or ~/.zshrc with zsh).',
    )
    completion.add_argument("shell", choices=SHELLS, nargs="?", default="bash")
    return parser


def _add_hook_tools(hooks: Any) -> None:
    """``hook resolve``, ``hook status`` and ``hook doctor``."""
    home_help = "the CLI's config directory (default: $CLAUDE_CONFIG_DIR or ~/.claude; "
    home_help += "$CODEX_HOME or ~/.codex)"
    resolve = hooks.add_parser(
        "resolve",
        help="mark open work of a session done or abandoned, so its compaction can proceed",
        description="Mark open work that blocked a compaction (the ids its message names) as "
        "done (it completed) or abandoned (it will not); the next compaction proceeds over "
        "it, and the repair no longer lists it as pending. Recorded as a "
        "compaction.obligation.discharged event when an OTLP endpoint is set.",
    )
    resolve.add_argument("cli", choices=("claude-code", "codex"))
    resolve.add_argument("ids", nargs="+", metavar="ID", help="the open work's ids")
    resolve.add_argument("--session", required=True, metavar="ID", help="the session's id")
    resolve.add_argument("--home", metavar="DIR", help=home_help)
    done = resolve.add_mutually_exclusive_group(required=True)
    done.add_argument("--done", dest="resolution", action="store_const", const="done")
    done.add_argument("--abandoned", dest="resolution", action="store_const", const="abandoned")
    for action, what in (
        ("status", "what is installed where, the state and archive, the latest decisions"),
        ("doctor", "check the installed hooks, their interpreter, state and archive"),
    ):
        tool = hooks.add_parser(action, help=what, description=what[0].upper() + what[1:] + ".")
        tool.add_argument("cli", nargs="?", choices=("claude-code", "codex"),
                          help="one CLI (default: both)")  # fmt: skip
        tool.add_argument("--home", metavar="DIR", help=home_help + "; with one CLI only")
        if action == "status":
            tool.add_argument("--session", metavar="ID", help="one session's decisions")
            tool.add_argument("--format", choices=("text", "json"), default="text")


def _add_archive(commands: Any) -> None:
    """The ``archive`` command and its actions."""
    from otel_compaction.archive import ARCHIVE_ENV, DEFAULT_ARCHIVE_PATH
    from otel_compaction.stores import ARCHIVE_URL_ENV

    archive = commands.add_parser("archive", help="read spans archived by reversible compaction")
    stored = archive.add_subparsers(dest="action", metavar="ACTION", required=True)
    db_help = (
        f"SQLite archive file (default: the store ${ARCHIVE_URL_ENV} names, else "
        f"${ARCHIVE_ENV}, else ./{DEFAULT_ARCHIVE_PATH})"
    )
    url_help = "the archive's store: sqlite:PATH or postgresql://USER@HOST:PORT/DATABASE"

    def where(action: Any) -> None:
        chosen = action.add_mutually_exclusive_group()
        chosen.add_argument("--db", metavar="PATH", help=db_help)
        chosen.add_argument("--archive", metavar="URL", help=url_help)

    show_span = stored.add_parser("show", help="print an archived span's record and messages")
    show_span.add_argument("handle", metavar="HANDLE", help="the span's handle (arc_...)")
    where(show_span)
    show_span.add_argument(
        "--format",
        choices=("text", "json", "raw"),
        default="text",
        help="text, json (record and messages) or raw (the stored bytes, exactly)",
    )
    list_spans = stored.add_parser("list", help="list the archived spans, oldest first")
    where(list_spans)
    list_spans.add_argument("--format", choices=("text", "json"), default="text")


_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(text: str) -> str:
    """`text` safe to show on a terminal: control characters (but newlines and tabs) and
    lone surrogates written as escapes (``\\x1b``, ``\\ud800``), so that input echoed in a
    finding or an error can neither drive the terminal nor fail to encode."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class _Printable:
    """A text stream that writes `printable` text to the one it wraps."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(printable(text))

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _is_hook_run(arguments: Sequence[str]) -> bool:
    """``hook claude-code ...`` or ``hook codex ...``, not asking for help."""
    return (
        len(arguments) >= 2
        and arguments[0] == "hook"
        and arguments[1] in ("claude-code", "codex")
        and not {"-h", "--help"} & set(arguments[2:])
    )


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Run the command line; return the exit status."""
    out = cast("TextIO", _Printable(stdout or sys.stdout))
    arguments = list(sys.argv[1:] if argv is None else argv)
    if _is_hook_run(arguments):
        # A hook run reads its own options leniently: a usage error's exit 2 would block the
        # compaction (Claude Code reads exit 2 so), and no option of another version may.
        from otel_compaction.hooks.run import main as run_hook

        # Run by the process's own command line (the console script, ``python -m``), the
        # hook may end the process; called with arguments, in a host's process, it may not.
        return run_hook(arguments[1], arguments[2:], owns_process=argv is None)
    try:
        parser = _parser()
        args = parser.parse_args(arguments)
    except SystemExit as exc:  # argparse has printed its message
        return int(exc.code or 0)
    if args.command == "completion":
        from otel_compaction.completion import script

        out.write(script(parser, args.shell))
        return EXIT_OK
    try:
        # The commands (and the gate, the policies and pydantic behind them) load only now:
        # `--help` and a usage error never import them.
        from otel_compaction import commands

        return commands.run(args, out)
    except CompactionError as exc:
        print(f"otel-compaction: error: {printable(str(exc))}", file=sys.stderr)
        return EXIT_INPUT
    except RecursionError:
        path = getattr(args, "path", None)
        where = "<stdin>" if path == "-" else path or "input"
        print(f"otel-compaction: error: {printable(where)}: nested too deeply", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:  # the reader went away (| head); nothing left to say
        sys.stderr.close()
        return EXIT_OK
