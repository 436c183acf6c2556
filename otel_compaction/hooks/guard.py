"""What a CLI's compaction hooks decide, whichever CLI runs them.

Before a compaction (`before_compaction`): the gate over everything the CLI is about to
compact, at a critical budget (a CLI compacts all of it or nothing). Open obligations (a call in
flight, a promise not kept, a retry not given up) block a manual compaction, naming each in the
CLI's own terms with a command that resolves it (`resolve`); an automatic one is never blocked,
as the CLI compacts automatically only at its context limit, where a refusal leaves the session
unable to go on: it proceeds, is archived, and the open work goes to the summarizer and back to
the model after it. Whatever is not blocked is archived verbatim, and the summarizer is handed
what it must carry: the pending obligations, the side effects already done, the identifiers the
current work refers to, the negative results, and how to read the archive back. After it
(`after_compaction`): the summary is verified against that. At the next session start
(`repair`): what the summary lost, and the side effects done (not to be repeated), as context
for the model.

The state between runs lives in a small file per session next to the archive (`state`).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, cast

from otel_compaction.analysis import Analysis, Negative
from otel_compaction.archive import ARCHIVE_ENV, Archive
from otel_compaction.gate import CompactionGate, Decision
from otel_compaction.hooks.state import DIR_MODE, SessionState, state_dir
from otel_compaction.ledger import ObligationKind, ObligationLedger, ResolutionStatus
from otel_compaction.patterns import sentences
from otel_compaction.rules import ObligationRef
from otel_compaction.rules.registry import DISCHARGE
from otel_compaction.rules.unresolved_reference import owed
from otel_compaction.sessions import Session
from otel_compaction.side_effects import completed, target
from otel_compaction.stores import ARCHIVE_URL_ENV
from otel_compaction.transcript import ToolCall, Transcript
from otel_compaction.verification import Verification, verify

__all__ = ["Carry", "Guard", "PreCompact", "Resolution", "context_of"]

_MAX_NEGATIVES: Final = 20
_MAX_DONE: Final = 30
"""The side effects a repair lists as done (the newest)."""
_OPEN: Final = {
    "tool_call": "no result yet",
    "background_task": "still running",
    "retry": "failed, and neither retried with success nor given up",
    "commitment": "promised, not done yet",
    "transaction": "begun, neither committed nor rolled back",
    "approval": "waiting for approval",
    "tool_result": "a result whose call is gone",
}
"""What each kind of open work is waiting for, as a CLI user reads it."""
_CALL_KINDS: Final = frozenset({"tool_call", "background_task", "retry", "approval"})

Resolution = Literal["done", "abandoned"]
"""How a user resolves open work: it completed (outside what the session shows), or it will
not (it was stopped, or is no longer wanted)."""


@dataclass(slots=True)
class Carry:
    """What a summary must carry, as stored between hook runs."""

    identifiers: list[str] = field(default_factory=list)
    negatives: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    archive_handle: str | None = None
    missing: dict[str, Any] | None = None
    done: list[dict[str, Any]] = field(default_factory=list)
    """The side effects completed before the compaction: tool, target, one-line result."""
    recall: str | None = None
    """The command that prints the archived messages, exactly as it runs."""

    @property
    def owed(self) -> _Owed:
        """The items as `verify` reads them."""
        return _Owed(
            tuple(self.identifiers),
            tuple(
                Negative(
                    n["message_index"], n["call_id"], n["tool"], n["text"],
                    tuple(n.get("subjects", ())), n.get("outcome", "absence"),
                )
                for n in self.negatives
            ),
            tuple(
                ObligationRef(
                    p["kind"], p["id"], p.get("message_index"), p.get("name", ""),
                    tuple(p.get("subjects", ())),
                )
                for p in self.pending
            ),
        )  # fmt: skip

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Carry:
        """The carry stored in a session's state."""
        return cls(
            list(data.get("identifiers", [])),
            list(data.get("negatives", [])),
            list(data.get("pending", [])),
            data.get("archive_handle"),
            data.get("missing"),
            list(data.get("done", [])),
            data.get("recall"),
        )


@dataclass(frozen=True, slots=True)
class _Owed:
    identifiers: tuple[str, ...]
    negatives: tuple[Negative, ...]
    pending: tuple[ObligationRef, ...]


def _open_line(p: Mapping[str, Any]) -> str:
    """One piece of open work as the CLI shows it: ``Bash `make deploy` (toolu_2, started
    2026-12-01 10:00:04 UTC): no result yet``."""
    what = p.get("what") or ""
    label = f"{p.get('name') or p['kind']} `{what}`" if what else (p.get("name") or p["kind"])
    if p["kind"] == "commitment":
        label = f'promise "{what or p.get("name", "")}"'
    when = f", {p['when']}" if p.get("when") else ""
    waiting = _OPEN.get(p["kind"], "still open")
    return f"{label} ({p['id']}{when}): {waiting}"


def _done_line(d: Mapping[str, Any]) -> str:
    when = f" ({d['when']})" if d.get("when") else ""
    return f"{d['tool']}: {d['target']}{when} -> {d['result']}"


@dataclass(frozen=True, slots=True)
class PreCompact:
    """The decision before a compaction and what the summarizer must be told.

    ``blocked`` is what the hook does: a refusal blocks only a manual compaction the policy
    blocks (``hooks.manual: block``). ``stranded`` marks an automatic compaction the policy
    would block (``hooks.auto: block``) that proceeds instead, as blocking it at the context
    limit would leave the session unable to go on."""

    decision: Decision
    carry: Carry
    trigger: str = "manual"
    blocked: bool = False
    stranded: bool = False
    resolve: str | None = None
    """The command that resolves the open work, exactly as it runs."""

    @property
    def refused(self) -> bool:
        """True when open obligations make the compaction unsafe."""
        return self.decision.action == "refuse"

    def _blocking(self) -> list[dict[str, Any]]:
        keys = {(o.kind, o.id) for o in self.decision.obligations}
        return [p for p in self.carry.pending if (p["kind"], p["id"]) in keys]

    def reason(self) -> str:
        """Why it is refused: each piece of open work in the CLI's terms, and how to go on."""
        if self.blocked:
            lines = ["otel-compaction: compaction blocked, work is still open in this session:"]
        elif self.stranded:
            lines = [
                f"otel-compaction: {self.trigger} compaction allowed over open work: blocking it "
                "at the context limit would leave the session unable to go on. The open work "
                "goes to the summarizer and is handed back to the model after the compaction:"
            ]
        else:
            lines = [f"otel-compaction: {self.trigger} compaction allowed over open work:"]
        lines += [f"- {_open_line(p)}" for p in self._blocking()]
        if self.blocked and self.resolve:
            lines += [
                "To go on, let it finish and compact again; or mark it resolved, then compact "
                "again (in a terminal, or after ! in Claude Code; --done instead of "
                "--abandoned when it did complete):",
                f"  {self.resolve}",
            ]
        elif not self.blocked and not self.stranded:
            lines.append("(the policy only warns on this trigger)")
        return "\n".join(lines) + "\n"

    def instructions(self) -> str:
        """The must-carry table, as additional instructions for the summarizer."""
        carry = self.carry
        lines = ["When you write the summary, keep the following exactly (otel-compaction):"]
        if carry.pending:
            lines.append("Still pending, NOT done (say so; never describe them as completed):")
            lines += [f"- {_open_line(p)}" for p in carry.pending]
        if carry.done:
            lines.append("Already done (say each is done; it must not be done again):")
            lines += [f"- {_done_line(d)}" for d in carry.done]
        if carry.identifiers:
            lines.append("Identifiers still in use (write each verbatim):")
            lines += [f"- {value}" for value in carry.identifiers]
        if carry.negatives:
            lines.append("Negative results (state what was NOT found or failed):")
            lines += [f"- {n['tool'] or 'tool'}: {n['text']}" for n in carry.negatives]
        if carry.archive_handle:
            lines.append(
                f"The original messages are archived as {carry.archive_handle}; mention it, "
                f"with the command that reads them back: `{carry.recall}`"
            )
        return "\n".join(lines) + "\n"


def context_of(session: Session) -> list[dict[str, Any]]:
    """The messages the model sees now: from the latest compaction's summary on."""
    start = session.compactions[-1].message_index if session.compactions else 0
    return session.messages[start:]


class Guard:
    """The decisions of one CLI's hooks over its session logs.

    Args:
        gate: the gate (with telemetry when configured) that decides.
        home: where the archive and the per-session state live (the CLI's config directory),
            unless ``OTEL_COMPACTION_ARCHIVE`` names an archive.
        cli: the CLI (``claude-code`` or ``codex``), for the commands a refusal prints.
        environ: the hook's environment (what those commands carry over: the OTLP endpoint).
    """

    def __init__(
        self,
        gate: CompactionGate,
        home: Path,
        cli: str = "claude-code",
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.gate = gate
        self.home = home
        self.cli = cli
        self.environ = os.environ if environ is None else environ

    def state(self, session_id: str | None) -> SessionState:
        """The state file of a session."""
        return SessionState(state_dir(self.home), session_id)

    # -- before ------------------------------------------------------------------------------

    def before_compaction(
        self,
        session: Session,
        *,
        trigger: str = "manual",
        archive: bool = True,
        record: bool = True,
    ) -> PreCompact:
        """Decide on compacting the session's current context; unless that blocks it, archive
        the context; store what its summary must carry."""
        messages = context_of(session)
        state = self.state(session.session_id)
        if not messages:
            nothing = Decision("compact", (0, 0), (0, 0), policy=self.gate.policy.name)
            return PreCompact(nothing, Carry(), trigger)
        stored = state.read() if record or archive else {}
        analysis = self._analyse(messages, session.session_id, stored.get("resolved", []))
        decision = self._decide(analysis, session)
        carry = self._carry(analysis, session)
        mode = self.gate.policy.hooks.mode(trigger)
        refused = decision.action == "refuse"
        blocked = refused and mode == "block" and trigger == "manual"
        pre = PreCompact(
            decision, carry, trigger, blocked,
            stranded=refused and mode == "block" and not blocked,
            resolve=self._resolve_command(session.session_id, decision.obligations),
        )  # fmt: skip
        if not blocked and archive:
            with self.archive() as store:
                archived = store.put(
                    messages,
                    conversation_id=session.session_id,
                    policy=self.gate.policy.name,
                    from_json=True,
                )
                carry.archive_handle = archived.handle
                carry.recall = self._recall_command(archived.handle, store)
        if record:
            state.write(stored | asdict(carry) | {"missing": None})
            state.record_decision(
                {
                    "at": time.time(), "event": "PreCompact", "trigger": trigger,
                    "action": _action(pre),
                    "open": [_open_line(p) for p in pre._blocking()],
                    "archive": carry.archive_handle,
                }
            )  # fmt: skip
        return pre

    def _analyse(
        self, messages: Sequence[Any], session_id: str | None, resolved: list[dict[str, Any]]
    ) -> Analysis:
        """The analysis of the context, with the work a user resolved discharged (through a
        ledger of this session's resolutions, as `force_terminal` records them)."""
        if not resolved:
            return self.gate.analyse(messages, conversation_id=session_id)
        ledger = ObligationLedger()
        for r in resolved:
            kind = cast("ObligationKind", r["kind"])
            ledger.open(session_id, kind, r["id"], name=r.get("name", ""))
            ledger.resolve(session_id, r["id"], cast("ResolutionStatus", r["status"]), kind=kind)
        snapshot = ledger.snapshot(session_id)
        return Analysis.build(Transcript.parse(messages), self.gate.policy, snapshot)

    def _decide(self, analysis: Analysis, session: Session) -> Decision:
        n = len(analysis.transcript)
        return self.gate.evaluate(
            analysis, 0, n, critical=True, addressable=True, raise_on_refuse=False,
            conversation_id=session.session_id,
        )  # fmt: skip

    def _carry(self, analysis: Analysis, session: Session) -> Carry:
        transcript = analysis.transcript
        n = len(transcript)
        offset = session.compactions[-1].message_index if session.compactions else 0
        when = _Timestamps(session, offset)
        # Nothing is retained after a CLI's compaction but the summary: the identifiers owed
        # are those the current work (from the latest user turn on) refers to.
        recent = analysis.user_turns[-1] if analysis.user_turns else n
        identifiers = [value for value, _, _ in owed(analysis, 0, recent)[0]] if recent else []
        negatives = [
            {**asdict(n_), "subjects": list(n_.subjects)}
            for n_ in analysis.negatives_in(0, n)[-_MAX_NEGATIVES:]
        ]
        pending = []
        started: set[int] = set()  # the calls of the pending work: none of them is done
        for o in analysis.pending_at(0, n):
            call = _call_of(transcript, o.kind, o.id, o.opened)
            if call is not None:
                started.add(call.ordinal)
            what = target(call) if call is not None else _said(transcript, o.opened, o.name)
            what = what or " ".join(" ".join(o.subjects).split())
            pending.append(
                {
                    "kind": o.kind, "id": o.id, "name": o.name, "message_index": o.opened,
                    "subjects": list(o.subjects), "what": what[:160], "when": when(o.opened),
                }
            )  # fmt: skip
        done = [
            {
                "tool": d.call.name, "target": d.effect.target, "kind": d.effect.kind,
                "result": d.result, "call_id": d.call.id, "when": when(d.call.message_index),
            }
            for d in completed(transcript, analysis.outcomes, self.gate.policy.side_effects)
            if d.call.ordinal not in started
        ][-_MAX_DONE:]  # fmt: skip
        return Carry(identifiers, negatives, pending, done=done)

    # -- the commands a hook prints ----------------------------------------------------------

    def _resolve_command(
        self, session_id: str | None, obligations: Sequence[ObligationRef]
    ) -> str | None:
        if not obligations:
            return None
        words = [sys.executable, "-m", "otel_compaction", "hook", "resolve", self.cli]
        words += ["--home", str(self.home), "--session", session_id or "default"]
        endpoint = self.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        if endpoint:
            words += ["--otlp-endpoint", endpoint]
        words += [*dict.fromkeys(o.id for o in obligations), "--abandoned"]
        return shlex.join(words)

    def _recall_command(self, handle: str, store: Archive) -> str:
        words = [sys.executable, "-m", "otel_compaction", "archive", "show", handle]
        if self.environ.get(ARCHIVE_URL_ENV):
            # The URL may hold a password: the command reads it from the same variable.
            return f'{ARCHIVE_URL_ENV}="${ARCHIVE_URL_ENV}" {shlex.join(words)}'
        return shlex.join([*words, "--db", str(store.path)])

    # -- resolving ---------------------------------------------------------------------------

    def resolve(
        self, session_id: str | None, ids: Sequence[str], resolution: Resolution
    ) -> list[dict[str, Any]]:
        """Mark the open work `ids` of a session resolved (`resolution`), so that the next
        compaction proceeds over it; return what was resolved. Raises `LookupError` naming
        what is open when an id is not open work of the session's last PreCompact."""
        state = self.state(session_id)
        stored = state.read()
        pending = {p["id"]: p for p in stored.get("pending", [])}
        unknown = [i for i in ids if i not in pending]
        if unknown:
            known = ", ".join(pending) or "none"
            raise LookupError(
                f"session {state.session_id}: no open work {', '.join(unknown)} "
                f"(open at its last compaction: {known})"
            )
        now = time.time()
        resolved = [
            {
                "kind": pending[i]["kind"], "id": i, "name": pending[i].get("name", ""),
                "message_index": pending[i].get("message_index"),
                "status": DISCHARGE.get(pending[i]["kind"], "abandoned"),
                "resolution": resolution, "at": now, "what": _open_line(pending[i]),
            }
            for i in dict.fromkeys(ids)
        ]  # fmt: skip
        kept = [r for r in stored.get("resolved", []) if r["id"] not in ids]
        state.write(
            stored
            | {
                "resolved": [*kept, *resolved],
                "pending": [p for p in stored.get("pending", []) if p["id"] not in ids],
            }
        )
        state.record_decision(
            {
                "at": now,
                "event": "resolve",
                "action": resolution,
                "open": [r["what"] for r in resolved],
            }
        )
        return resolved

    # -- after -------------------------------------------------------------------------------

    def after_compaction(self, session_id: str | None, summary: str) -> Verification | None:
        """Verify `summary` against what was stored before the compaction; None when nothing
        was stored (the hook did not run before it)."""
        state = self.state(session_id)
        stored = state.read()
        if not stored:
            return None
        carry = Carry.of(stored)
        checked = verify(summary, carry.owed)
        missing = checked.to_dict() | {
            "negatives": [asdict(n) for n in checked.missing_negatives],
            "pending": [
                {"kind": p.kind, "id": p.id, "name": p.name} for p in checked.missing_pending
            ],
        }
        state.write(stored | {"missing": missing})
        return checked

    def repair(self, session_id: str | None, summary: str | None = None) -> str | None:
        """What the summary lost, and the side effects done before the compaction (not to be
        repeated), as context for the next model request; None when there is neither (or
        nothing is known)."""
        stored = self.state(session_id).read()
        if not stored:
            return None
        if stored.get("missing") is None and summary is not None:
            self.after_compaction(session_id, summary)
            stored = self.state(session_id).read() or stored
        carry = Carry.of(stored)
        # The summary not yet verified (the CLI starts the session before it logs the summary
        # or runs PostCompact): repair with all it had to carry, as that is what may be lost.
        missing = carry.missing if carry.missing is not None else asdict(carry)
        resolved = {r["id"] for r in stored.get("resolved", [])}
        by_key = {(p["kind"], p["id"]): p for p in carry.pending}
        pending = [
            by_key.get((p["kind"], p["id"]), p)
            for p in missing.get("pending") or ()
            if p["id"] not in resolved
        ]
        lines: list[str] = []
        if pending:
            lines.append("Still pending from before the compaction (not done yet):")
            lines += [f"- {_open_line(p)}" for p in pending]
        if missing.get("identifiers"):
            lines.append("Identifiers from before the compaction, still in use:")
            lines += [f"- {value}" for value in missing["identifiers"]]
        if missing.get("negatives"):
            lines.append("Established before the compaction (these were NOT the case):")
            lines += [f"- {n['tool'] or 'tool'}: {n['text']}" for n in missing["negatives"]]
        parts: list[str] = []
        if lines:
            parts += ["The compaction summary left out the following (otel-compaction):", *lines]
        if carry.done:
            parts.append(
                "Done before the compaction, do not repeat (otel-compaction; each ran and "
                "succeeded):"
            )
            parts += [f"- {_done_line(d)}" for d in carry.done]
        if not parts:
            return None
        if carry.archive_handle:
            parts.append(
                f"The original messages are archived as {carry.archive_handle}: "
                f"`{carry.recall}` prints them."
            )
        return "\n".join(parts) + "\n"

    # -- storage -----------------------------------------------------------------------------

    def archive(self) -> Archive:
        """The archive: ``OTEL_COMPACTION_ARCHIVE_URL``, else ``OTEL_COMPACTION_ARCHIVE``, else
        one in the CLI's config directory."""
        if self.environ.get(ARCHIVE_URL_ENV):
            return Archive.from_url(self.environ[ARCHIVE_URL_ENV])
        if self.environ.get(ARCHIVE_ENV):
            return Archive(self.environ[ARCHIVE_ENV])
        path = self.home / "otel-compaction" / "archive.sqlite3"
        path.parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        return Archive(path)


def _action(pre: PreCompact) -> str:
    """A decision in a word or three, for ``hook status``."""
    if pre.blocked:
        return "blocked"
    if pre.stranded:
        return "allowed at the context limit"
    return "allowed over open work" if pre.refused else "allowed"


class _Timestamps:
    """When each message of a session was logged, as a CLI user reads it (``2026-12-01
    10:00:04 UTC``): from the log record it came from, read only when asked."""

    def __init__(self, session: Session, offset: int) -> None:
        self._session = session
        self._offset = offset
        self._lines: dict[int, str] | None = None

    def __call__(self, message_index: int | None) -> str | None:
        if message_index is None:
            return None
        index = message_index + self._offset
        if not 0 <= index < len(self._session.lines):
            return None
        if self._lines is None:
            self._lines = self._session.stamps(self._session.lines[self._offset :])
        stamp = self._lines.get(self._session.lines[index])
        return _readable(stamp) if stamp else None


def _readable(stamp: str) -> str:
    """``2026-12-01T10:00:04.123Z`` as ``2026-12-01 10:00:04 UTC``."""
    day, _, rest = stamp.partition("T")
    clock = rest[:8]
    zone = " UTC" if rest.endswith(("Z", "+00:00")) else ""
    return f"{day} {clock}{zone}" if clock else stamp


def _said(transcript: Transcript, index: int, name: str) -> str:
    """The sentence of message `index` that says `name` (a promise as it was made)."""
    if not 0 <= index < len(transcript.entries):
        return ""
    said = sentences(transcript.entries[index].text)
    return next((s for s in said if name and name.lower() in s.lower()), said[0] if said else "")


def _call_of(transcript: Transcript, kind: str, obligation_id: str, opened: int) -> ToolCall | None:
    """The call a piece of open work is (or the one that started it), if it is a call's."""
    if kind not in _CALL_KINDS:
        return None
    for call in reversed(transcript.calls):
        if call.id == obligation_id and call.message_index <= opened:
            return call
    # A background task's id is its handle: its call is the one whose result named it.
    for result in transcript.results:
        if result.message_index == opened and result.call is not None:
            return transcript.calls[result.call]
    return None
