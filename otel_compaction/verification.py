"""Is a summary good enough to replace a span? What it carries and what it misses, by kind.

A summary must carry three things (seed 1 and seed 2), each checked the way a careful reader
would, not by exact phrasing:

* **identifiers** the retained part still refers to: each as a whole value (``ZFA04Y`` is not
  carried by ``ZFA04Y7``, nor by ``ZFA04``); a path also in an equivalent form (an absolute
  path is carried by the same path relative to a project root);
* **negatives**: each result that said something was not the case is stated when one sentence
  (or line) of the summary names its subject (what the call was about: a query, a path, an
  entity), its tool or its call id, together with a negation ("searched X, nothing found");
* **pending** obligations: each named (its tool, subject, id or the promised action's words)
  in a sentence that says it is still pending, not done.

`verify` checks a summary against a `SummaryRequest` (or a gate's `MustCarry`);
`verify_summary` does the whole thing from a transcript, a span and a summary.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, Protocol

from otel_compaction.identifiers import candidates, canonical, is_path, same_identifier
from otel_compaction.patterns import sentences
from otel_compaction.rules.base import ObligationRef

if TYPE_CHECKING:
    from otel_compaction.analysis import Negative
    from otel_compaction.ledger import ObligationLedger
    from otel_compaction.policy import Policy
    from otel_compaction.transcript import Transcript

__all__ = ["Owed", "Verification", "verify", "verify_summary"]

_NEGATION: Final = re.compile(
    r"(?i)\b(?:not|no|none|nothing|never|neither|nor|nobody|nowhere|empty|failed|fails|"
    r"failure|error|errored|errors|unable|unavailable|missing|absent|without|zero|"
    r"rejected|declined|denied|refused|invalid|unknown|cannot)\b|n't\b"
)
_PENDING: Final = re.compile(
    r"(?i)\b(?:pending|still|not yet|yet to|outstanding|awaiting|waiting|in progress|"
    r"in flight|unfinished|incomplete|unresolved|open|no result|never (?:ran|returned|"
    r"answered|completed)|has not|hasn't|have not|haven't|will|intends?|plans? to|promised|"
    r"owes?|abandoned|given up|gave up|withdrawn|rolled back|to be done|to do)\b"
)


class Owed(Protocol):
    """What a summary must carry: a `SummaryRequest` or a gate's `MustCarry`."""

    @property
    def identifiers(self) -> tuple[str, ...]: ...

    @property
    def negatives(self) -> tuple[Negative, ...]: ...

    @property
    def pending(self) -> tuple[ObligationRef, ...]: ...


@dataclass(frozen=True, slots=True)
class Verification:
    """What a summary carries and what it misses, by kind."""

    missing_identifiers: tuple[str, ...] = ()
    missing_negatives: tuple[Negative, ...] = ()
    missing_pending: tuple[ObligationRef, ...] = ()
    carried_identifiers: tuple[str, ...] = ()
    carried_negatives: tuple[Negative, ...] = ()
    carried_pending: tuple[ObligationRef, ...] = ()

    @property
    def ok(self) -> bool:
        """True when nothing is missing."""
        return not (self.missing_identifiers or self.missing_negatives or self.missing_pending)

    def describe(self) -> tuple[str, ...]:
        """Each missing item as one line, as a retry names them to the summarizer."""
        lines = [f"identifier {value!r} must appear verbatim" for value in self.missing_identifiers]
        lines.extend(
            f"negative result of {n.tool or 'tool'} ({n.call_id}) must be stated: {n.text}"
            for n in self.missing_negatives
        )
        lines.extend(
            f"{p.describe()} must be stated as still pending" for p in self.missing_pending
        )
        return tuple(lines)

    def outline(self) -> tuple[str, ...]:
        """`describe` without content, for telemetry: identifiers by count, negatives by the
        call that returned them, pending obligations by kind and id."""
        count = len(self.missing_identifiers)
        lines = [f"identifiers: {count}"] if count else []
        lines.extend(f"negative_result {n.call_id}" for n in self.missing_negatives)
        lines.extend(f"{p.kind} {p.id}" for p in self.missing_pending)
        return tuple(lines)

    def to_dict(self) -> dict[str, Any]:
        """The missing items as JSON-ready lists (``identifiers``, ``negatives``, ``pending``)."""
        return {
            "identifiers": list(self.missing_identifiers),
            "negatives": [
                {"message_index": n.message_index, "call_id": n.call_id, "tool": n.tool}
                for n in self.missing_negatives
            ],
            "pending": [
                {"kind": p.kind, "id": p.id, "name": p.name, "message_index": p.message_index}
                for p in self.missing_pending
            ],
        }


@lru_cache(maxsize=4096)
def _token(value: str) -> re.Pattern[str]:
    """`value` standing alone: not inside a longer word, code or name."""
    return re.compile(rf"(?<![\w-]){re.escape(value)}(?![\w-])")


@lru_cache(maxsize=4096)
def _word(value: str) -> re.Pattern[str]:
    """`value` as a whole word, any case; ``_`` and ``-`` may be written as spaces."""
    parts = [re.escape(p) for p in re.split(r"[_\s-]+", value.strip()) if p]
    return re.compile(r"(?i)(?<![\w-])" + r"[_\s-]+".join(parts) + r"(?![\w-])")


class _Summary:
    """A summary read once: its text, its sentences and the identifiers written in it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.sentences = sentences(text)
        self.paths = [c for c in candidates(text) if is_path(c)]

    def carries(self, value: str) -> bool:
        if _token(value).search(self.text) or _token(canonical(value)).search(self.text):
            return True
        return is_path(value) and any(same_identifier(value, p) for p in self.paths)

    def names(self, sentence: str, names: Iterable[str]) -> bool:
        """True when `sentence` names one of `names` (a path also in an equivalent form)."""
        written: list[str] | None = None
        for name in names:
            if not name:
                continue
            if _word(name).search(sentence):
                return True
            if is_path(canonical(name)):
                if written is None:
                    written = [c for c in candidates(sentence) if is_path(c)]
                if any(same_identifier(name, w) for w in written):
                    return True
        return False

    def states_negative(self, negative: Negative) -> bool:
        if negative.call_id and _token(negative.call_id).search(self.text):
            return True
        names = (negative.tool, *negative.subjects)
        return any(_NEGATION.search(s) and self.names(s, names) for s in self.sentences)

    def states_pending(self, ref: ObligationRef) -> bool:
        if ref.id and _token(ref.id).search(self.text):
            return True
        names = (ref.name, *ref.subjects) if ref.kind != "commitment" else ref.subjects
        for sentence in self.sentences:
            if not _PENDING.search(sentence):
                continue
            if ref.kind == "commitment":
                lowered = sentence.lower()
                if any(word in lowered for word in names):
                    return True
            elif self.names(sentence, names):
                return True
        return False


def verify(summary: str, request: Owed) -> Verification:
    """Check that `summary` carries every identifier, negative and pending obligation that
    `request` lists (see the module docstring for what counts as carried)."""
    read = _Summary(summary)
    carried_ids = tuple(v for v in request.identifiers if read.carries(v))
    carried_negatives = tuple(n for n in request.negatives if read.states_negative(n))
    carried_pending = tuple(p for p in request.pending if read.states_pending(p))
    return Verification(
        missing_identifiers=tuple(v for v in request.identifiers if v not in carried_ids),
        missing_negatives=tuple(n for n in request.negatives if n not in carried_negatives),
        missing_pending=tuple(p for p in request.pending if p not in carried_pending),
        carried_identifiers=carried_ids,
        carried_negatives=carried_negatives,
        carried_pending=carried_pending,
    )


def verify_summary(
    transcript: Transcript | Sequence[Mapping[str, Any]],
    span: tuple[int, int],
    summary: str,
    *,
    policy: Policy | str = "default",
    ledger: ObligationLedger | None = None,
    conversation_id: str | None = None,
    archived: bool = False,
) -> Verification:
    """What `summary` carries and misses as a replacement of messages ``span[0]..span[1]-1``.

    What is owed is what the policy makes the summary carry (severity ``carry``, or ``block``)
    for that span: the identifiers the retained part refers to, the negative results in the
    span, and the obligations still pending at the cut (stale ones and those only the ledger
    holds included). `archived` says whether the span is kept verbatim.

    Example:
        >>> messages = [
        ...     {"role": "user", "content": "find booking ZFA04Y"},
        ...     {"role": "assistant", "content": None, "tool_calls": [{"id": "c1",
        ...      "type": "function", "function": {"name": "get_reservation",
        ...      "arguments": '{"reservation_id": "ZFA04Y"}'}}]},
        ...     {"role": "tool", "tool_call_id": "c1", "content": "Error: not found"},
        ...     {"role": "assistant", "content": "ZFA04Y does not exist. Another code?"},
        ... ]
        >>> check = verify_summary(messages, (0, 3), "Looked up ZFA04Y: it was not found.")
        >>> check.ok
        True
        >>> verify_summary(messages, (0, 3), "The user asked about a booking.").to_dict()
        {'identifiers': ['ZFA04Y'], 'negatives': [{'message_index': 2, 'call_id': 'c1', \
'tool': 'get_reservation'}], 'pending': []}
    """
    from otel_compaction.gate import CompactionGate, must_carry
    from otel_compaction.rules import SpanView, run_rules

    gate = CompactionGate(policy, ledger=ledger)
    analysis = gate.analyse(transcript, conversation_id=conversation_id)
    start, end = span
    findings = run_rules(SpanView(analysis, start, end, archived))
    return verify(summary, must_carry(analysis, findings, start, end, levels=("carry", "block")))
