"""``otel-compaction``: check transcripts against a policy, inspect policies, read the archive.

Exit status of ``check``: 0 compact or clean, 1 defer or findings, 3 refuse, 2 unusable input
(one line on stderr naming what is wrong and where, never a traceback). ``archive show`` and
``archive list`` exit 0, or 2 for an unknown handle or an unreadable archive.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final, NoReturn, TextIO, cast

import yaml

from otel_compaction._version import __version__
from otel_compaction.analysis import Analysis
from otel_compaction.archive import ARCHIVE_ENV, DEFAULT_ARCHIVE_PATH, Archive, ArchivedSpan
from otel_compaction.errors import CompactionError, CompactionRefused
from otel_compaction.gate import CompactionGate, Decision, finding_dict
from otel_compaction.inputs import load_messages
from otel_compaction.policy import BUILTIN_POLICIES, RULE_NAMES, Policy
from otel_compaction.rules import RULES, Finding
from otel_compaction.transcript import Transcript

__all__ = ["main"]

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT, EXIT_REFUSED = 0, 1, 2, 3

EXAMPLE_TRANSCRIPT = Path(__file__).resolve().parent / "examples" / "deploy_agent.json"

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
        "the plot extra: pip install 'otel-compaction[plot]')",
    )
    noise = demo.add_mutually_exclusive_group()
    noise.add_argument(
        "--verbose", action="store_true", help="print the gate's spans and each seed's progress"
    )
    noise.add_argument("--quiet", action="store_true", help="print only the report")


def _parser() -> argparse.ArgumentParser:
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
        parser_.add_argument(
            "--otlp-endpoint",
            metavar="URL",
            help="send each hook's decision over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT)",
        )

    _add_archive(commands)
    return parser


def _add_archive(commands: Any) -> None:
    """The ``archive`` command and its actions."""
    archive = commands.add_parser("archive", help="read spans archived by reversible compaction")
    stored = archive.add_subparsers(dest="action", metavar="ACTION", required=True)
    db_help = f"archive database (default: ${ARCHIVE_ENV}, else ./{DEFAULT_ARCHIVE_PATH})"
    show_span = stored.add_parser("show", help="print an archived span's record and messages")
    show_span.add_argument("handle", metavar="HANDLE", help="the span's handle (arc_...)")
    show_span.add_argument("--db", metavar="PATH", help=db_help)
    show_span.add_argument(
        "--format",
        choices=("text", "json", "raw"),
        default="text",
        help="text, json (record and messages) or raw (the stored bytes, exactly)",
    )
    list_spans = stored.add_parser("list", help="list the archived spans, oldest first")
    list_spans.add_argument("--db", metavar="PATH", help=db_help)
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


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Run the command line; return the exit status."""
    out = cast("TextIO", _Printable(stdout or sys.stdout))
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed its message
        return int(exc.code or 0)
    try:
        if args.command == "check":
            return _check(args, out)
        if args.command == "demo":
            return _demo(args, out)
        if args.command == "archive":
            return _archive(args, out)
        if args.command == "audit":
            return _audit(args, out)
        if args.command == "hook":
            return _hook(args, out)
        return _policy(args, out)
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


def _audit(args: argparse.Namespace, out: TextIO) -> int:
    from otel_compaction.audit import audit_session, to_json, write_text
    from otel_compaction.sessions import default_locations, find_session_files, read_session

    policy = Policy.load(args.policy)
    roots = [Path(p) for p in args.paths] or default_locations()
    for root in roots:
        if not root.exists():
            raise CompactionError(f"{root}: no such file or directory")
    files = list(find_session_files(roots))
    progress = len(files) > 1 and sys.stderr.isatty()
    audits = []
    for number, path in enumerate(files, start=1):
        if progress:
            print(
                printable(f"\r[{number}/{len(files)}] {path}"[:120]),
                end="",
                file=sys.stderr,
                flush=True,
            )
        try:
            session = read_session(path)
        except CompactionError as exc:
            if len(files) == 1:
                raise
            print(f"otel-compaction: skipped {printable(str(exc))}", file=sys.stderr)
            continue
        audits.append(audit_session(session, policy))
    if progress:
        print(file=sys.stderr)
    if args.format == "json":
        out.write(to_json(audits) + "\n")
    else:
        for audited in audits:
            write_text(out, audited)
        found = sum(len(a.compactions) for a in audits)
        out.write(f"{len(audits)} session log(s), {found} compaction(s)\n")
    return EXIT_OK if all(a.clean for a in audits) else EXIT_FINDINGS


def _hook(args: argparse.Namespace, out: TextIO) -> int:
    import os

    if args.action in ("claude-code", "codex"):
        from otel_compaction.hooks.run import main as run_hook_main

        environ = dict(os.environ)
        if args.policy:
            environ["OTEL_COMPACTION_POLICY"] = args.policy
        if args.otlp_endpoint:  # the SDK reads its exporter settings from the process
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = (
                args.otlp_endpoint
            )
        return run_hook_main(args.action, environ)
    from otel_compaction.hooks import install as installer

    path = installer.settings_path(args.cli, args.scope, os.environ, Path.cwd())
    if args.action == "install":
        if args.policy:
            Policy.load(args.policy)  # a bad policy fails now, not in every hook run
        options = installer.Options(
            policy=str(Path(args.policy).resolve())
            if args.policy and args.policy not in BUILTIN_POLICIES
            else args.policy,
            otlp_endpoint=args.otlp_endpoint,
        )
        added = installer.install(args.cli, path, options)
        what = ", ".join(added) if added else "nothing (already installed)"
        out.write(f"{path}: added {what}\n")
    else:
        removed = installer.uninstall(path)
        what = ", ".join(removed) if removed else "nothing (not installed)"
        out.write(f"{path}: removed {what}\n")
    return EXIT_OK


def _span(text: str) -> tuple[int, int | None]:
    start, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(start or 0), (int(end) if end else None)
    except ValueError:
        raise CompactionError(f"--span {text!r}: expected START:END, e.g. 1:20") from None


def _check(args: argparse.Namespace, out: TextIO) -> int:
    if (args.path is None) == (not args.example):
        raise CompactionError("check: give a transcript PATH ('-' for stdin) or --example")
    if args.example:
        args.path = str(EXAMPLE_TRANSCRIPT)
    policy = Policy.load(args.policy)
    span = _span(args.span) if args.span else None
    records = load_messages(args.path)
    lines: list[int] | None = None
    from otel_compaction.sessions import detect_format, parse_session

    if detect_format(records) is not None:  # a Claude Code or Codex session log
        session = parse_session(records, "<stdin>" if args.path == "-" else args.path)
        records, lines = session.messages, session.lines
    transcript = Transcript.parse(records)
    gate = CompactionGate(policy)
    analysis = gate.analyse(transcript)
    findings = gate.check(analysis)
    decision: Decision | None = None
    if span is not None:
        start, end = span[0], span[1] if span[1] is not None else len(transcript)
        if not 0 <= start < end <= len(transcript):
            raise CompactionError(
                f"--span {start}:{end}: not a non-empty span of the {len(transcript)} messages "
                f"(0 <= START < END <= {len(transcript)})"
            )
        if end <= analysis.head:
            raise CompactionError(
                f"--span {start}:{end}: inside the protected head, span 0:{analysis.head}"
            )
        try:
            decision = gate.evaluate(
                analysis, start, end, critical=args.critical, addressable=args.archived
            )
        except CompactionRefused as refused:
            decision = refused.decision
    report = _report(analysis, findings, decision, policy)
    if lines is not None:
        _add_lines(report, lines)
    if args.format == "json":
        json.dump(report, out, ensure_ascii=False)
        out.write("\n")
    else:
        _write_text(out, args.path, analysis, report, findings, decision, args.archived)
    if decision is not None:
        return {"compact": EXIT_OK, "defer": EXIT_FINDINGS, "refuse": EXIT_REFUSED}[decision.action]
    return EXIT_FINDINGS if any(f.severity in ("block", "warn") for f in findings) else EXIT_OK


def _report(
    analysis: Analysis, findings: list[Finding], decision: Decision | None, policy: Policy
) -> dict[str, Any]:
    transcript = analysis.transcript
    report: dict[str, Any] = {
        "format": transcript.format,
        "messages": len(transcript),
        "tool_calls": len(transcript.calls),
        "policy": policy.name,
        "closed_cuts": analysis.closed_cuts(),
        "open_calls": [
            {"id": c.id, "name": c.name, "message_index": c.message_index}
            for c in transcript.open_calls()
        ],
        "orphan_results": [
            {"id": r.call_id, "message_index": r.message_index} for r in transcript.orphan_results()
        ],
        "findings": [finding_dict(f) for f in findings],
    }
    if decision is not None:
        report["decision"] = decision.to_dict()
    return report


def _add_lines(report: dict[str, Any], lines: list[int]) -> None:
    """Beside every message index of a session log's report, the file's line number."""

    def place(item: dict[str, Any]) -> None:
        index = item.get("message_index")
        if isinstance(index, int) and 0 <= index < len(lines):
            item["line"] = lines[index]

    for key in ("findings", "open_calls", "orphan_results"):
        for item in report[key]:
            place(item)
    decision = report.get("decision")
    if decision is not None:
        for key in ("findings", "obligations"):
            for item in decision[key]:
                place(item)
    report["lines"] = lines


def _ranges(cuts: list[int]) -> str:
    parts: list[str] = []
    i = 0
    while i < len(cuts):
        j = i
        while j + 1 < len(cuts) and cuts[j + 1] == cuts[j] + 1:
            j += 1
        parts.append(str(cuts[i]) if i == j else f"{cuts[i]} to {cuts[j]}")
        i = j + 1
    return ", ".join(parts) or "none"


def _meaning(rule: str) -> str:
    return RULES[rule].summary


# The jargon of the text output, explained after it: (what shows it was used, its meaning).
_TERMS: Final = (
    ("span", " span ", "START:END is half-open: messages START up to, not including, END "
     "(1:12 is messages 1 to 11); a message number is its index, from 0"),
    ("closed cut", "closed cut", "cut i is the boundary just before message i; it is closed "
     "when every tool call before it has its result before it too, so a span may start or "
     "end there"),
    ("protected head", "protected head", "the leading system and developer messages, never "
     "compacted"),
    ("extended", "extended to", "the span's end moved forward to the first closed cut after "
     "the results its calls wait for, so no call is cut off from its result"),
    ("deferral", "DEFER", "the requested span is live, so the older closed span before its "
     "first open obligation is compacted instead and the rest stays verbatim"),
    ("refusal", "REFUSE", "no part of the span can be compacted without losing an open "
     "obligation; the transcript stays as it is"),
    ("obligation", "obligation", "something the agent still owes: a call without its "
     "result, an open transaction, a retry not yet successful, a promise not yet kept"),
    ("block", "[block]", "a finding that keeps the span from being compacted as asked"),
    ("carry", "[carry]", "a finding the summary must carry for the compaction to stand"),
    ("warn", "[warn ]", "a finding reported only"),
    ("must carry", "must carry", "what the summary that replaces the span has to state; it "
     "is verified after summarizing"),
    ("contradiction probe", "contradiction probe", "the check that the summary alone still "
     "says what was established not to be the case (every negative result stated); a span "
     "archived verbatim (--archived) can be recalled instead"),
)  # fmt: skip


def _write_text(
    out: TextIO,
    path: str,
    analysis: Analysis,
    report: dict[str, Any],
    findings: list[Finding],
    decision: Decision | None,
    addressable: bool,
) -> None:
    """The text report, then what its rules and terms mean (only those it used)."""
    text = io.StringIO()
    w = text.write
    n = report["messages"]
    answered = report["tool_calls"] - len(report["open_calls"])
    w(
        f"{path}: {n} messages ({report['format']}), {report['tool_calls']} tool calls, "
        f"{answered} answered; policy {report['policy']}\n"
    )
    w(f"closed cuts ({len(report['closed_cuts'])} of {n + 1}): {_ranges(report['closed_cuts'])}\n")
    if report["open_calls"]:
        w("open calls (never answered):\n")
        for call in report["open_calls"]:
            w(f"  message {call['message_index']}: {call['name']} ({call['id']})\n")
    else:
        w("open calls: none\n")
    if report["orphan_results"]:
        w("orphan results (no earlier call with that id):\n")
        for result in report["orphan_results"]:
            w(f"  message {result['message_index']}: {result['id']}\n")
    else:
        w("orphan results: none\n")
    shown = list(findings) + (list(decision.findings) if decision else [])
    lines = report.get("lines")
    _write_findings(w, "findings", findings, lines)
    if decision is not None:
        _write_decision(w, analysis, decision, addressable)
        start, end = decision.span
        _write_findings(w, f"findings in span {start}:{end}", list(decision.findings), lines)
        carry = decision.must_carry
        if carry.identifiers:
            w(f"must carry identifiers: {', '.join(carry.identifiers)}\n")
        for negative in carry.negatives:
            w(f"must carry negative: message {negative.message_index} {negative.tool}: "
              f"{negative.text}\n")  # fmt: skip
    rules = [r for r in RULE_NAMES if any(f.rule == r for f in shown)]
    if rules:
        w("\nwhat the findings mean:\n")
        for rule in rules:
            w(f"  {rule}: {_meaning(rule)}\n")
    body = text.getvalue()
    used = [(term, meaning) for term, shows, meaning in _TERMS if shows in body]
    out.write(body)
    if used:
        out.write("\nterms used above:\n")
        for term, meaning in used:
            out.write(f"  {term}: {meaning}\n")


def _write_decision(w: Any, analysis: Analysis, decision: Decision, addressable: bool) -> None:
    """The decision in the output's one convention, and why its span is not the one asked."""
    (start, end), (asked_start, asked_end) = decision.span, decision.requested
    if decision.action == "refuse":
        remedies = "; ".join(f"{r.describe()}: {r.discharge}" for r in decision.obligations)
        w(f"\ndecision: REFUSE span {asked_start}:{asked_end}\n")
        w(f"refused: open obligations, and how to discharge them: {remedies or 'none'}\n")
        return
    w(f"\ndecision: {decision.action.upper()} span {start}:{end}"
      f"{f' (requested {asked_start}:{asked_end})' if decision.span != decision.requested else ''}"
      "\n")  # fmt: skip
    if start != asked_start:
        head = "message 0 is" if start == 1 else f"span 0:{start} is"
        w(f"start moved from {asked_start} to {start}: {head} the protected head\n")
    if decision.action == "defer":
        named = "; ".join(r.describe() for r in decision.obligations) or "none"
        w(f"deferred to {start}:{end}: span {start}:{asked_end} holds open obligations "
          f"({named}); span {end}:{asked_end} stays verbatim\n")  # fmt: skip
    elif decision.extended:
        w(f"extended to {end}: {_extension_reason(analysis, decision, addressable)}\n")


def _extension_reason(analysis: Analysis, decision: Decision, addressable: bool) -> str:
    """What resolves at the new end's last message: the reason the end moved there."""
    start, end = decision.span
    blocking = analysis.blocking_rules(addressable)
    for tracked in reversed(analysis.obligations_opened_in(start, end)):
        if tracked.resolved == end - 1 and tracked.rule in blocking:
            if tracked.kind == "tool_call":
                return f"message {end - 1} answers the call at {tracked.opened}"
            kind = tracked.kind.replace("_", " ")
            return f"message {end - 1} resolves the {kind} opened at {tracked.opened}"
    return f"{end} is the first closed cut past what the span left open"


def _write_findings(
    w: Any, title: str, findings: list[Finding], lines: list[int] | None = None
) -> None:
    if not findings:
        w(f"{title}: none\n")
        return
    w(f"{title} ({len(findings)}):\n")
    for f in findings:
        where = f"message {f.message_index}" if f.message_index is not None else "ledger"
        if lines is not None and f.message_index is not None and f.message_index < len(lines):
            where += f" (line {lines[f.message_index]})"
        w(f"  [{f.severity:5}] {where:>12}  {f.rule}: {f.detail}\n")


def _policy(args: argparse.Namespace, out: TextIO) -> int:
    if args.action == "schema":
        json.dump(Policy.model_json_schema(), out, indent=2)
        out.write("\n")
    elif args.action == "show":
        data = Policy.load(args.policy).model_dump(mode="json")
        yaml.safe_dump(data, out, sort_keys=False, allow_unicode=True)
    else:
        for name in args.policies:
            policy = Policy.load(name)
            out.write(f"{name}: ok (policy {policy.name!r})\n")
    return EXIT_OK


def _archive(args: argparse.Namespace, out: TextIO) -> int:
    # Inspection never writes: read-only, no schema, no journal-mode switch, no chmod.
    with Archive(args.db, readonly=True) as archive:
        if args.action == "list":
            spans = archive.spans()
            if args.format == "json":
                json.dump([span.to_dict() for span in spans], out, ensure_ascii=False)
                out.write("\n")
            else:
                _write_archive_list(out, str(archive.path), spans)
            return EXIT_OK
        record = archive.get(args.handle)
        if args.format == "raw":  # the stored bytes, whatever they hold
            data = archive.recall_bytes(args.handle)
        else:
            messages = archive.recall(args.handle)
    if args.format == "raw":
        buffer = getattr(out, "buffer", None)
        if buffer is None:
            out.write(data.decode("utf-8"))
        else:
            out.flush()
            buffer.write(data)
            buffer.flush()
        return EXIT_OK
    if args.format == "json":
        json.dump({**record.to_dict(), "messages": messages}, out, ensure_ascii=False)
        out.write("\n")
        return EXIT_OK
    w = out.write
    w(f"handle:       {record.handle}\n")
    plural = "" if record.count == 1 else "s"
    w(f"span:         {record.start}:{record.end} ({record.count} message{plural})\n")
    w(f"conversation: {record.conversation_id or '-'}\n")
    w(f"policy:       {record.policy or '-'}\n")
    w(f"archived:     {_timestamp(record.created_at)}\n")
    w(f"stored:       {record.size} bytes, sha256 {record.sha256}\n")
    w(f"summary:      {record.summary if record.summary is not None else '-'}\n")
    for offset, message in enumerate(messages):
        kind = message.get("role", message.get("type", "?"))
        w(f"\n--- message {record.start + offset} ({kind}) ---\n")
        w(json.dumps(message, ensure_ascii=False, indent=2))
        w("\n")
    return EXIT_OK


def _timestamp(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _write_archive_list(out: TextIO, path: str, spans: list[ArchivedSpan]) -> None:
    if not spans:
        out.write(f"{path}: no archived spans\n")
        return
    out.write(f"{path}: {len(spans)} archived span{'s' if len(spans) != 1 else ''}\n")
    out.write(f"{'HANDLE':28}  {'SPAN':>9}  {'MSGS':>4}  {'BYTES':>9}  {'ARCHIVED':20}  "
              "CONVERSATION  POLICY  SUMMARY\n")  # fmt: skip
    for span in spans:
        summary = " ".join((span.summary or "-").split())
        if len(summary) > 60:
            summary = summary[:59] + "\u2026"
        out.write(
            f"{span.handle:28}  {f'{span.start}:{span.end}':>9}  {span.count:>4}  "
            f"{span.size:>9}  {_timestamp(span.created_at):20}  "
            f"{span.conversation_id or '-'}  {span.policy or '-'}  {summary}\n"
        )


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from otel_compaction import demo

    if args.runs < 1 or not 1 <= args.services <= 10 or args.budget < 200:
        raise CompactionError("demo: --runs >= 1, --services 1..10 and --budget >= 200")
    if args.plot is not None:
        demo.plot_format(args.plot)
        demo.require_matplotlib()
    telemetry, exporter = demo.demo_telemetry(sys.stderr if args.verbose else None)
    config = demo.DemoConfig(
        runs=args.runs, seed=args.seed, services=args.services, budget=args.budget
    )
    in_place = not args.verbose and sys.stderr.isatty()
    progress = None if args.quiet or not (args.verbose or in_place) else sys.stderr
    try:
        pairs = demo.run_demo(
            config, telemetry=telemetry, out=out, progress=progress, in_place=in_place
        )
    finally:
        telemetry.shutdown()
    if exporter is not None:
        out.write(f"{exporter.tool_spans} tool-call and result spans recorded\n")
    elif demo.otlp_endpoint_set():
        out.write("The guarded runs' spans and metrics went over OTLP.\n")
    if args.plot is not None:
        demo.plot(*pairs[0], config, args.plot)
        out.write(f"Seed {config.seed}, both runs, drawn in {args.plot}\n")
    return EXIT_OK
