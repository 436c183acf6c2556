"""Audit the compactions a CLI already made: was each one safe, and what went wrong after it?

For every compaction in a session log (Claude Code, Codex; see `otel_compaction.sessions`) the
audit takes the span it replaced (from the previous compaction's summary, or the start, to the
boundary) and what the session did afterwards (up to the next compaction), and reports:

* ``closed``: whether the boundary was a closed cut (no call waiting for its result, no cut
  the provider rejects) and the obligations still open there, judged on the messages as the
  CLI sent them: the summary stands where the span was, so a tool loop the session carried on
  after it is a new one (Claude Code compacts mid-turn and the next response opens the loop
  again), and a response is never joined across it;
* ``summary_missing``: what the summary failed to carry, by `verify_summary`, against what the
  session used afterwards (identifiers it referred to, negatives, pending obligations);
* ``reissued_after``: calls made after the compaction that repeat a side effect it removed
  from context (seed 1's duplicate side effect), by `otel_compaction.reissue.reissues`, the
  logic the CLI hooks stop re-issues by: the same side effect (a push, a commit, a write, an
  install, an MCP call that changes something) with the same arguments as one that succeeded
  before the boundary and was not superseded since. Reads, read-only commands and retries of
  a failure are not re-issues.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from otel_compaction.gate import CompactionGate, must_carry
from otel_compaction.policy import Policy
from otel_compaction.reissue import reissues
from otel_compaction.rules import ObligationRef, SpanView, run_rules
from otel_compaction.sessions import Compaction, Session
from otel_compaction.verification import Verification, verify

__all__ = ["CompactionAudit", "Reissue", "SessionAudit", "audit_session", "to_json", "write_text"]

# The one conversation of the gate's incremental state that every list judged is analysed
# under. A compaction is judged on the messages as the CLI sent them, then on the same messages
# without the summary; the next one's list starts with this one's "after". Each analysis thus
# takes over the parse and scans of the messages the previous one read, and each message is
# parsed and scanned about once, however many compactions are near it.
_JUDGED = "audit"


@dataclass(frozen=True, slots=True)
class Reissue:
    """A call made after a compaction that repeats a side effect done before it."""

    tool: str
    call_id: str
    duplicate_of: str
    message_index: int
    line: int


@dataclass(frozen=True, slots=True)
class CompactionAudit:
    """One compaction, judged."""

    compaction: Compaction
    closed: bool
    open_obligations: tuple[ObligationRef, ...]
    summary_missing: Verification
    reissued_after: tuple[Reissue, ...]

    @property
    def clean(self) -> bool:
        """True when nothing is wrong with it."""
        return (
            self.closed
            and not self.open_obligations
            and self.summary_missing.ok
            and not self.reissued_after
        )

    def to_dict(self) -> dict[str, Any]:
        """The compaction in ``audit --format json``'s contract."""
        return {
            "message_index": self.compaction.message_index,
            "line": self.compaction.line,
            "trigger": self.compaction.trigger,
            "closed": self.closed,
            "open_obligations": [
                {
                    "kind": o.kind,
                    "id": o.id,
                    "name": o.name,
                    "message_index": o.message_index,
                    "discharge": o.discharge,
                }
                for o in self.open_obligations
            ],
            "summary_missing": self.summary_missing.to_dict(),
            "reissued_after": [
                {
                    "tool": r.tool,
                    "call_id": r.call_id,
                    "duplicate_of": r.duplicate_of,
                    "message_index": r.message_index,
                    "line": r.line,
                }
                for r in self.reissued_after
            ],
        }


@dataclass(frozen=True, slots=True)
class SessionAudit:
    """Every compaction of one session log."""

    session: Session
    compactions: tuple[CompactionAudit, ...] = field(default_factory=tuple)

    @property
    def clean(self) -> bool:
        """True when every compaction is clean."""
        return all(c.clean for c in self.compactions)

    def to_dict(self) -> dict[str, Any]:
        """The file in ``audit --format json``'s contract."""
        return {
            "path": self.session.path,
            "format": self.session.format,
            "messages": len(self.session.messages),
            "compactions": [c.to_dict() for c in self.compactions],
        }


def audit_session(session: Session, policy: Policy | str = "default") -> SessionAudit:
    """Judge every compaction of `session` under `policy`."""
    with _frozen():
        return _audit_session(session, policy)


@contextmanager
def _frozen() -> Iterator[None]:
    """Everything alive now (the session read, above all) kept out of the cyclic garbage
    collector's walks while the compactions are judged, then handed back to it.

    The audit makes and drops an analysis per compaction; each of the collector's full passes
    would walk the whole session again, so that a log of a hundred compactions took twice
    as long as it does with the session set aside."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _audit_session(session: Session, policy: Policy | str) -> SessionAudit:
    gate = CompactionGate(policy)
    summaries = [c.message_index for c in session.compactions]
    audits: list[CompactionAudit] = []
    for number, compaction in enumerate(session.compactions):
        # The context it replaced began with the previous compaction's summary.
        start = summaries[number - 1] if number else 0
        boundary = compaction.message_index
        following = summaries[number + 1] if number + 1 < len(summaries) else None
        before = session.messages[start:boundary]
        after = session.messages[boundary + 1 : following]
        summary = session.messages[boundary]
        audits.append(_audit(gate, session, compaction, before, summary, after, boundary))
    return SessionAudit(session, tuple(audits))


def _audit(
    gate: CompactionGate,
    session: Session,
    compaction: Compaction,
    before: Sequence[dict[str, Any]],
    summary: dict[str, Any],
    after: Sequence[dict[str, Any]],
    boundary: int,
) -> CompactionAudit:
    cut = len(before)
    if cut == 0:
        return CompactionAudit(compaction, True, (), Verification(), ())
    # The boundary as the model met it: the summary in place of the span it replaced.
    sent = gate.analyse([*before, summary, *after], conversation_id=_JUDGED)
    findings = run_rules(SpanView(sent, 0, cut))
    open_obligations = tuple(
        dict.fromkeys(f.obligation for f in findings if f.severity == "block" and f.obligation)
    )
    # What the summary had to carry: the span against what the session did after it.
    missing = _missing(gate, [*before, *after], cut, compaction.summary)
    reissued = tuple(
        Reissue(call.name, call.id, original.call_id, index, session.line_of(index))
        for call, original in reissues(
            sent.transcript, sent.outcomes, gate.policy.side_effects, cut
        )
        for index in (boundary + call.message_index - cut,)
    )
    return CompactionAudit(
        compaction, bool(sent.pair_closed[cut]), open_obligations, missing, reissued
    )


def _missing(
    gate: CompactionGate, messages: list[dict[str, Any]], cut: int, summary: str
) -> Verification:
    """`verify_summary` of ``messages[:cut]`` replaced by `summary` (the same analysis, findings
    and verdict), analysed incrementally by `gate` rather than from scratch."""
    analysis = gate.analyse(messages, conversation_id=_JUDGED)
    findings = run_rules(SpanView(analysis, 0, cut, False))
    return verify(summary, must_carry(analysis, findings, 0, cut, levels=("carry", "block")))


def to_json(audits: Sequence[SessionAudit]) -> str:
    """``{"files": [...]}``, as ``audit --format json`` prints it."""
    return json.dumps({"files": [a.to_dict() for a in audits]}, ensure_ascii=False)


def write_text(out: Any, audit: SessionAudit) -> None:
    """A person's view of one file's audit."""
    session = audit.session
    w = out.write
    w(
        f"{session.path}: {session.format}, {len(session.messages)} messages, "
        f"{len(audit.compactions)} compaction(s)\n"
    )
    for number, item in enumerate(audit.compactions, start=1):
        c = item.compaction
        verdict = "clean" if item.clean else "FINDINGS"
        boundary = "closed" if item.closed else "NOT closed (a call or unit was cut)"
        w(
            f"  compaction {number} at line {c.line} (message {c.message_index}, "
            f"{c.trigger}): {verdict}; boundary {boundary}\n"
        )
        for ref in item.open_obligations:
            w(f"    open: {ref.describe()} ({ref.discharge})\n")
        for line in item.summary_missing.describe():
            w(f"    summary missing: {line}\n")
        for again in item.reissued_after:
            w(
                f"    re-issued at line {again.line}: {again.tool} ({again.call_id}) repeats "
                f"{again.duplicate_of}, a side effect done before the compaction\n"
            )
