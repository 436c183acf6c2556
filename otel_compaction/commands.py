"""What each ``otel-compaction`` command does, once `otel_compaction.cli` has parsed its
arguments: ``check``, ``policy``, ``archive``, ``audit``, ``hook`` and ``demo``."""

from __future__ import annotations

import argparse
import io
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final, TextIO

import yaml

from otel_compaction.analysis import Analysis
from otel_compaction.archive import Archive, ArchivedSpan
from otel_compaction.cli import EXIT_FINDINGS, EXIT_INPUT, EXIT_OK, EXIT_REFUSED, printable
from otel_compaction.errors import CompactionError, CompactionRefused
from otel_compaction.gate import CompactionGate, Decision, finding_dict
from otel_compaction.inputs import load_messages
from otel_compaction.policy import BUILTIN_POLICIES, RULE_NAMES, Policy
from otel_compaction.rules import RULES, Finding
from otel_compaction.transcript import Transcript

__all__ = ["EXAMPLE_TRANSCRIPT", "run"]

EXAMPLE_TRANSCRIPT = Path(__file__).resolve().parent / "examples" / "deploy_agent.json"


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run the parsed command; return its exit status."""
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
    bad = 0
    for number, path in enumerate(files, start=1):
        if progress:
            print(
                printable(f"\r[{number}/{len(files)}] {path}"[:120]),
                end="",
                file=sys.stderr,
                flush=True,
            )
        try:
            audits.append(audit_session(read_session(path), policy))
        except (CompactionError, RecursionError, TypeError, ValueError, KeyError) as exc:
            # One bad file neither stops the others nor hides: it is named with its reason,
            # and the exit status says so once every file has been audited.
            if len(files) == 1 and isinstance(exc, CompactionError):
                raise
            reason = str(exc) if isinstance(exc, CompactionError) else repr(exc)
            if str(path) not in reason:
                reason = f"{path}: {reason}"
            print(f"otel-compaction: skipped {printable(reason)}", file=sys.stderr)
            bad += 1
    if progress:
        print(file=sys.stderr)
    if args.format == "json":
        out.write(to_json(audits) + "\n")
    else:
        for audited in audits:
            write_text(out, audited)
        found = sum(len(a.compactions) for a in audits)
        skipped = f", {bad} unreadable" if bad else ""
        out.write(f"{len(audits)} session log(s), {found} compaction(s){skipped}\n")
    if bad:
        return EXIT_INPUT
    return EXIT_OK if all(a.clean for a in audits) else EXIT_FINDINGS


def _hook(args: argparse.Namespace, out: TextIO) -> int:
    import os

    # A hook run (``hook claude-code|codex``) never gets here: `cli.main` hands it over first.
    if args.action in ("resolve", "status", "doctor"):
        return _hook_tool(args, out)
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


def _hook_tool(args: argparse.Namespace, out: TextIO) -> int:
    import os

    from otel_compaction.hooks import tools
    from otel_compaction.hooks.run import CLIS

    if args.action == "resolve":
        if args.otlp_endpoint:  # the SDK reads its exporter settings from the process
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = args.otlp_endpoint
        [home] = tools.homes_of([args.cli], args.home).values()
        tools.resolve(args.cli, args.session, args.ids, args.resolution, home=home, out=out)
        return EXIT_OK
    clis = [args.cli] if args.cli else list(CLIS)
    homes = tools.homes_of(clis, args.home)
    if args.action == "status":
        tools.status(clis, homes, args.session, args.format, out)
        return EXIT_OK
    return tools.doctor(clis, homes, out)


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


def _listing(w: Any, title: str, meaning: str, items: list[str]) -> None:
    """A titled list of lines, or the title and ``none``."""
    if not items:
        w(f"{title}: none\n")
        return
    w(f"{title} ({meaning}):\n")
    for item in items:
        w(f"  {item}\n")


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
    _listing(
        w, "open calls", "never answered",
        [f"message {c['message_index']}: {c['name']} ({c['id']})" for c in report["open_calls"]],
    )  # fmt: skip
    _listing(
        w, "orphan results", "no earlier call with that id",
        [f"message {r['message_index']}: {r['id']}" for r in report["orphan_results"]],
    )  # fmt: skip
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
    with _inspected(args) as archive:
        if args.action == "list":
            spans = archive.spans()
            if args.format == "json":
                json.dump([span.to_dict() for span in spans], out, ensure_ascii=False)
                out.write("\n")
            else:
                _write_archive_list(out, archive.location, spans)
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


def _inspected(args: argparse.Namespace) -> Archive:
    """The archive ``archive show/list`` reads, read-only: ``--archive URL`` (SQLite or
    PostgreSQL), ``--db PATH``, else the store ``OTEL_COMPACTION_ARCHIVE_URL`` names (as the
    hooks and the recall commands they print read it), else ``OTEL_COMPACTION_ARCHIVE``, else
    the file in the current directory."""
    if args.db is not None:
        return Archive(args.db, readonly=True)
    return Archive.from_url(args.archive, readonly=True)


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
            config, telemetry=telemetry, out=out, progress=progress, in_place=in_place,
            as_json=args.format == "json",
        )  # fmt: skip
    finally:
        telemetry.shutdown()
    if args.format == "json":
        if args.plot is not None:
            demo.plot(*pairs[0], config, args.plot)
        return EXIT_OK
    if exporter is not None:
        out.write(f"{exporter.tool_spans} tool-call and result spans recorded\n")
    elif demo.otlp_endpoint_set():
        out.write("The guarded runs' spans and metrics went over OTLP.\n")
    if args.plot is not None:
        demo.plot(*pairs[0], config, args.plot)
        out.write(f"Seed {config.seed}, both runs, drawn in {args.plot}\n")
    return EXIT_OK
