"""``otel-compaction``: check transcripts against a policy, and inspect policies.

Exit status of ``check``: 0 compact or clean, 1 defer or findings, 3 refuse, 2 unusable input
(one line on stderr naming what is wrong and where, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from otel_compaction.errors import CompactionError, CompactionRefused
from otel_compaction.gate import CompactionGate, Decision, finding_dict
from otel_compaction.policy import BUILTIN_POLICIES, RULE_NAMES, Policy
from otel_compaction.rules import RULES, Finding
from otel_compaction.transcript import Transcript, load_messages

__all__ = ["main"]

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT, EXIT_REFUSED = 0, 1, 2, 3

EXAMPLE_TRANSCRIPT = Path(__file__).resolve().parent / "examples" / "deploy_agent.json"

_EPILOG = """\
exit status: 0 compact or clean, 1 defer or findings, 3 refuse, 2 unusable input

examples:
  otel-compaction check --example --span 1:12
  otel-compaction check transcript.json
  otel-compaction check run.jsonl --span 1:40 --format json
  otel-compaction check - --span 1:40 --critical --policy strict < transcript.json
  otel-compaction policy show strict
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-compaction",
        description="Guard agent transcript compaction against severing tool calls "
        "from their results, unanswered calls, failed searches and unkept promises.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
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
        epilog=_EPILOG,
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
        help="messages START..END-1 to compact (END may be omitted: to the end)",
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

    policy = commands.add_parser("policy", help="show, validate or describe policies")
    actions = policy.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="print a policy with every default filled in")
    show.add_argument("policy", nargs="?", default="default", metavar="NAME|FILE")
    validate = actions.add_parser("validate", help="validate policy files")
    validate.add_argument("policies", nargs="+", metavar="NAME|FILE")
    actions.add_parser("schema", help="print the policy file's JSON Schema")
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Run the command line; return the exit status."""
    out = stdout or sys.stdout
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed its message
        return int(exc.code or 0)
    try:
        if args.command == "check":
            return _check(args, out)
        return _policy(args, out)
    except CompactionError as exc:
        print(f"otel-compaction: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except RecursionError:
        print("otel-compaction: error: input is nested too deeply", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:  # the reader went away (| head); nothing left to say
        sys.stderr.close()
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
    transcript = Transcript.parse(load_messages(args.path))
    gate = CompactionGate(policy)
    analysis = gate.analyse(transcript)
    findings = gate.check(analysis)
    decision: Decision | None = None
    if span is not None:
        start, end = span[0], span[1] if span[1] is not None else len(transcript)
        try:
            decision = gate.evaluate(
                analysis, start, end, critical=args.critical, addressable=args.archived
            )
        except CompactionRefused as refused:
            decision = refused.decision
    report = _report(transcript, findings, decision, policy)
    if args.format == "json":
        json.dump(report, out, ensure_ascii=False)
        out.write("\n")
    else:
        _write_text(out, args.path, report, findings, decision)
    if decision is not None:
        return {"compact": EXIT_OK, "defer": EXIT_FINDINGS, "refuse": EXIT_REFUSED}[decision.action]
    return EXIT_FINDINGS if any(f.severity in ("block", "warn") for f in findings) else EXIT_OK


def _report(
    transcript: Transcript, findings: list[Finding], decision: Decision | None, policy: Policy
) -> dict[str, Any]:
    report: dict[str, Any] = {
        "format": transcript.format,
        "messages": len(transcript),
        "tool_calls": len(transcript.calls),
        "policy": policy.name,
        "closed_cuts": transcript.closed_cuts(),
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


def _ranges(cuts: list[int]) -> str:
    parts: list[str] = []
    i = 0
    while i < len(cuts):
        j = i
        while j + 1 < len(cuts) and cuts[j + 1] == cuts[j] + 1:
            j += 1
        parts.append(str(cuts[i]) if i == j else f"{cuts[i]}-{cuts[j]}")
        i = j + 1
    return ", ".join(parts) or "none"


def _meaning(rule: str) -> str:
    doc = RULES[rule].__doc__ or ""
    return " ".join(doc.split("\n\n")[0].split())


def _write_text(
    out: TextIO,
    path: str,
    report: dict[str, Any],
    findings: list[Finding],
    decision: Decision | None,
) -> None:
    w = out.write
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
    _write_findings(w, "findings", findings)
    if decision is not None:
        w(f"\ndecision: {decision.action.upper()}: {decision.describe()}\n")
        _write_findings(w, f"findings in messages {decision.span[0]}..{decision.span[1] - 1}",
                        list(decision.findings))  # fmt: skip
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


def _write_findings(w: Any, title: str, findings: list[Finding]) -> None:
    if not findings:
        w(f"{title}: none\n")
        return
    w(f"{title} ({len(findings)}):\n")
    for f in findings:
        where = f"message {f.message_index}" if f.message_index is not None else "ledger"
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
