"""``dangling_commitment``: the assistant promised an action ("I will verify X") and no tool
call has followed yet (seed 2).

Only the assistant's own statements of intent count. A message that asks the user something (a
question, a request to confirm or provide) waits on the user, and so does a promise conditional
on the user ("I will confirm the details once I have this information"): none of its promises
is owed by the runtime. The next tool call, in the same message or a later one (the calls that
follow it in the same turn), keeps the promise; `force_terminal` records it withdrawn; it goes
stale after the policy's ``stale_after``. A promise is named by its whole sentence.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Final

from otel_compaction.patterns import sentences
from otel_compaction.rules.base import Discharge, Finding, Rule, SpanView, Tracked, unclosed

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis
    from otel_compaction.policy import Policy

# A request to the user, the way an assistant ends a turn it cannot go on with alone.
_REQUEST: Final = re.compile(
    r"(?i)\b(?:please|kindly) (?:confirm|provide|let (?:me|us) know|share|tell|specify|choose"
    r"|select|reply|advise|verify|check and confirm)\b|\blet (?:me|us) know (?:if|whether|which)\b"
)
_WORD: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]{3,}")
_FILLER: Final = frozenset(
    [
        "that",
        "this",
        "with",
        "first",
        "then",
        "before",
        "after",
        "will",
        "would",
        "should",
        "could",
        "have",
        "your",
        "their",
        "there",
        "them",
        "they",
        "these",
        "those",
        "from",
        "into",
        "about",
        "just",
        "also",
        "again",
        "still",
        "what",
        "when",
        "which",
        "while",
        "sure",
        "okay",
        "right",
        "going",
        "make",
        "need",
        "want",
    ]
)


def promises(policy: Policy, text: str) -> list[tuple[str, str]]:
    """The (phrase, sentence) pairs of `text` that promise an action of the assistant's own;
    none when `text` asks the user something (`asks_user`).

    Example:
        >>> from otel_compaction import Policy
        >>> promises(Policy.load("default"), "I will verify the refund. Then I'm done.")
        [('I will verify', 'I will verify the refund.')]
    """
    regex = policy.commitment_regex
    if regex is None or not text:
        return []
    text = text.replace("\u2019", "'")  # I\u2019ll, as some models write it
    if not regex.found(text):
        return []
    conditional = policy.commitment_conditional_regex
    said = sentences(text)
    if asks_user(said):
        return []
    out: list[tuple[str, str]] = []
    for sentence in said:
        match = regex.search(sentence)
        if match is None:
            continue
        if conditional is not None and conditional.found(sentence):
            continue
        out.append((match.group(0), " ".join(sentence.split())))
    return out


def asks_user(said: list[str]) -> bool:
    """Whether a message of these sentences asks the user something: a question, or a request
    to confirm, provide or choose. Such a message waits on the user's answer, whatever it
    promises ("Let me confirm the details: ... Could you please confirm?")."""
    return any(s.endswith("?") or _REQUEST.search(s) for s in said)


def subjects(sentence: str) -> tuple[str, ...]:
    """The content words of a promise, by which a summary names it."""
    words = (w.lower() for w in _WORD.findall(sentence))
    return tuple(dict.fromkeys(w for w in words if w not in _FILLER))


class _Promises:
    """Every promise so far; an open one is kept by the next message with a tool call."""

    __slots__ = ("open", "tracked", "upto")

    def __init__(self) -> None:
        self.upto = 0
        self.tracked: list[Tracked] = []
        self.open: list[int] = []  # positions in `tracked` no call has followed yet

    def extend(self, analysis: Analysis) -> None:
        tracked = self.tracked
        for entry in analysis.transcript.entries[self.upto :]:
            found = analysis.scans.promises(entry) if entry.role == "assistant" else []
            for phrase, sentence in found:
                digest = hashlib.sha1(sentence.encode("utf-8", "surrogatepass")).hexdigest()[:10]
                self.open.append(len(tracked))
                tracked.append(
                    Tracked(
                        "dangling_commitment", "commitment", f"commitment-{digest}", sentence,
                        entry.index, None, "open", subjects(sentence.replace(phrase, " ")),
                    )
                )  # fmt: skip
            if entry.calls and self.open:
                for position in self.open:
                    tracked[position] = tracked[position].resolved_as(entry.index, "kept")
                self.open.clear()
        self.upto = len(analysis.transcript)


def scan(analysis: Analysis) -> list[Tracked]:
    """Every promise with the next tool call at or after it (None when none follows)."""
    fold = analysis.scans.fold("dangling_commitment", _Promises, len(analysis.transcript))
    fold.extend(analysis)
    return fold.tracked.copy()


def check(view: SpanView) -> list[Finding]:
    """Promises in the span that no call in the span keeps, and those only the ledger holds."""
    return unclosed(view, "dangling_commitment", "commitment", ledger_kind="commitment")


RULE = Rule(
    name="dangling_commitment",
    kind="obligation",
    summary='"I will verify X" with no tool call after it yet',
    severities={"default": "block", "strict": "block", "lenient": "warn"},
    check=check,
    scan=scan,
    discharge=Discharge(
        "commitment",
        "withdrawn",
        "make the promised call, or force_terminal() records it withdrawn",
    ),
)
