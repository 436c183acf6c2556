"""What a CLI's compaction hooks decide, whichever CLI runs them.

Before a compaction (`before_compaction`): the gate over everything the CLI is about to
compact, at a critical budget (a CLI compacts all of it or nothing). Open obligations (a call in
flight, background work still running, a promise not kept, a retry not given up) make it a
refusal; otherwise the span is archived verbatim and the summarizer is handed what it must
carry: the pending obligations, the identifiers the current work refers to, the negative
results, and the archive handle. After it (`after_compaction`): the summary is verified against
that. At the next session start (`repair`): what the summary lost, as context for the model.

The state between the three runs lives in a small JSON file per session next to the archive.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from otel_compaction.analysis import Analysis, Negative
from otel_compaction.archive import ARCHIVE_ENV, Archive
from otel_compaction.gate import CompactionGate, Decision
from otel_compaction.rules import ObligationRef
from otel_compaction.rules.unresolved_reference import owed
from otel_compaction.sessions import Session
from otel_compaction.stores import ARCHIVE_URL_ENV
from otel_compaction.verification import Verification, verify

__all__ = ["Carry", "Guard", "PreCompact", "context_of"]

_MAX_NEGATIVES = 20
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(slots=True)
class Carry:
    """What a summary must carry, as stored between hook runs."""

    identifiers: list[str] = field(default_factory=list)
    negatives: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    archive_handle: str | None = None
    missing: dict[str, Any] | None = None

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


@dataclass(frozen=True, slots=True)
class _Owed:
    identifiers: tuple[str, ...]
    negatives: tuple[Negative, ...]
    pending: tuple[ObligationRef, ...]


@dataclass(frozen=True, slots=True)
class PreCompact:
    """The decision before a compaction and what the summarizer must be told."""

    decision: Decision
    carry: Carry

    @property
    def refused(self) -> bool:
        """True when open obligations make the compaction unsafe."""
        return self.decision.action == "refuse"

    def reason(self) -> str:
        """Why it is refused, naming each open obligation and how to discharge it."""
        lines = ["otel-compaction: compaction refused, obligations are still open:"]
        lines += [f"- {o.describe()}: {o.discharge}" for o in self.decision.obligations]
        lines.append("Finish or stop them, then compact again.")
        return "\n".join(lines)

    def instructions(self) -> str:
        """The must-carry table, as additional instructions for the summarizer."""
        carry = self.carry
        lines = ["When you write the summary, keep the following exactly (otel-compaction):"]
        if carry.pending:
            lines.append("Still pending, NOT done (say so; never describe them as completed):")
            lines += [
                f"- {p['kind']} {p['name']} ({p['id']}): still pending" for p in carry.pending
            ]
        if carry.identifiers:
            lines.append("Identifiers still in use (write each verbatim):")
            lines += [f"- {value}" for value in carry.identifiers]
        if carry.negatives:
            lines.append("Negative results (state what was NOT found or failed):")
            lines += [f"- {n['tool'] or 'tool'}: {n['text']}" for n in carry.negatives]
        if carry.archive_handle:
            lines.append(
                f"The original messages are archived as {carry.archive_handle}; mention it "
                f"(`otel-compaction archive show {carry.archive_handle}` reads them back)."
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
    """

    def __init__(self, gate: CompactionGate, home: Path) -> None:
        self.gate = gate
        self.home = home

    # -- before ------------------------------------------------------------------------------

    def before_compaction(
        self, session: Session, *, archive: bool = True, record: bool = True
    ) -> PreCompact:
        """Decide on compacting the session's current context, and (unless refused) archive
        it and store what its summary must carry."""
        messages = context_of(session)
        if not messages:
            nothing = Decision("compact", (0, 0), (0, 0), policy=self.gate.policy.name)
            return PreCompact(nothing, Carry())
        analysis = self.gate.analyse(messages, conversation_id=session.session_id)
        decision = self._decide(analysis, session)
        carry = self._carry(analysis)
        pre = PreCompact(decision, carry)
        if not pre.refused and archive:
            with self.archive() as store:
                stored = store.put(
                    messages,
                    conversation_id=session.session_id,
                    policy=self.gate.policy.name,
                    from_json=True,
                )
            carry.archive_handle = stored.handle
        if record:
            self._save(session.session_id, carry)
        return pre

    def _decide(self, analysis: Analysis, session: Session) -> Decision:
        n = len(analysis.transcript)
        return self.gate.evaluate(
            analysis, 0, n, critical=True, addressable=True, raise_on_refuse=False,
            conversation_id=session.session_id,
        )  # fmt: skip

    def _carry(self, analysis: Analysis) -> Carry:
        transcript = analysis.transcript
        n = len(transcript)
        # Nothing is retained after a CLI's compaction but the summary: the identifiers owed
        # are those the current work (from the latest user turn on) refers to.
        recent = analysis.user_turns[-1] if analysis.user_turns else n
        identifiers = [value for value, _, _ in owed(analysis, 0, recent)[0]] if recent else []
        negatives = [
            {**asdict(n_), "subjects": list(n_.subjects)}
            for n_ in analysis.negatives_in(0, n)[-_MAX_NEGATIVES:]
        ]
        pending = [
            {
                "kind": o.kind, "id": o.id, "name": o.name, "message_index": o.opened,
                "subjects": list(o.subjects),
            }
            for o in analysis.pending_at(0, n)
        ]  # fmt: skip
        return Carry(identifiers, negatives, pending)

    # -- after -------------------------------------------------------------------------------

    def after_compaction(self, session_id: str | None, summary: str) -> Verification | None:
        """Verify `summary` against what was stored before the compaction; None when nothing
        was stored (the hook did not run before it)."""
        carry = self._load(session_id)
        if carry is None:
            return None
        checked = verify(summary, carry.owed)
        carry.missing = checked.to_dict() | {
            "negatives": [asdict(n) for n in checked.missing_negatives],
            "pending": [
                {"kind": p.kind, "id": p.id, "name": p.name} for p in checked.missing_pending
            ],
        }
        self._save(session_id, carry)
        return checked

    def repair(self, session_id: str | None, summary: str | None = None) -> str | None:
        """What the summary lost, as context for the next model request; None when nothing
        was lost (or nothing is known)."""
        carry = self._load(session_id)
        if carry is None:
            return None
        if carry.missing is None and summary is not None:
            self.after_compaction(session_id, summary)
            carry = self._load(session_id) or carry
        # The summary not yet verified (the CLI starts the session before it logs the summary
        # or runs PostCompact): repair with all it had to carry, as that is what may be lost.
        missing = carry.missing if carry.missing is not None else asdict(carry)
        lines: list[str] = []
        if missing.get("pending"):
            lines.append("Still pending from before the compaction (not done yet):")
            lines += [f"- {p['kind']} {p['name']} ({p['id']})" for p in missing["pending"]]
        if missing.get("identifiers"):
            lines.append("Identifiers from before the compaction, still in use:")
            lines += [f"- {value}" for value in missing["identifiers"]]
        if missing.get("negatives"):
            lines.append("Established before the compaction (these were NOT the case):")
            lines += [f"- {n['tool'] or 'tool'}: {n['text']}" for n in missing["negatives"]]
        if not lines:
            return None
        header = "The compaction summary left out the following (otel-compaction):"
        footer = ""
        if carry.archive_handle:
            footer = (
                f"The original messages are archived as {carry.archive_handle}: "
                f"`otel-compaction archive show {carry.archive_handle}` prints them."
            )
        return "\n".join([header, *lines, footer]).strip() + "\n"

    # -- storage -----------------------------------------------------------------------------

    def archive(self) -> Archive:
        """The archive: ``OTEL_COMPACTION_ARCHIVE_URL``, else ``OTEL_COMPACTION_ARCHIVE``, else
        one in the CLI's config directory."""
        if os.environ.get(ARCHIVE_URL_ENV):
            return Archive.from_url()
        if os.environ.get(ARCHIVE_ENV):
            return Archive()
        path = self.home / "otel-compaction" / "archive.sqlite3"
        path.parent.mkdir(parents=True, exist_ok=True)
        return Archive(path)

    def _state_path(self, session_id: str | None) -> Path:
        name = _SAFE.sub("_", session_id or "default")[:128]
        return self.home / "otel-compaction" / "hooks" / f"{name}.json"

    def _save(self, session_id: str | None, carry: Carry) -> None:
        path = self._state_path(session_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(carry), ensure_ascii=False), encoding="utf-8")
        temporary.replace(path)

    def _load(self, session_id: str | None) -> Carry | None:
        path = self._state_path(session_id)
        try:
            data: Mapping[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return Carry(
            list(data.get("identifiers", [])),
            list(data.get("negatives", [])),
            list(data.get("pending", [])),
            data.get("archive_handle"),
            data.get("missing"),
        )
