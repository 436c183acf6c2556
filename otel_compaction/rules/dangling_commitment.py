"""``dangling_commitment``: the assistant promised an action ("I will verify X") and no tool
call has followed yet (seed 2).

Only the assistant's own statements of intent count: a question to the user ("Shall I check
...?") or a promise conditional on the user ("I will confirm the details once I have this
information") waits on the user, not on the runtime, so it is no obligation. The next tool call,
in the same message or a later one, keeps the promise; `force_terminal` records it withdrawn;
it goes stale after the policy's ``stale_after``.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Final

from otel_compaction.patterns import sentences
from otel_compaction.rules.base import Finding, Rule, SpanView, Tracked, unclosed

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis
    from otel_compaction.policy import Policy

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
    """The (phrase, sentence) pairs of `text` that promise an action of the assistant's own."""
    regex = policy.commitment_regex
    if regex is None or not text or regex.search(text) is None:
        return []
    conditional = policy.commitment_conditional_regex
    out: list[tuple[str, str]] = []
    for sentence in sentences(text):
        match = regex.search(sentence)
        if match is None or sentence.endswith("?"):
            continue
        if conditional is not None and conditional.search(sentence) is not None:
            continue
        out.append((match.group(0), sentence))
    return out


def subjects(sentence: str) -> tuple[str, ...]:
    """The content words of a promise, by which a summary names it."""
    words = (w.lower() for w in _WORD.findall(sentence))
    return tuple(dict.fromkeys(w for w in words if w not in _FILLER))


def scan(analysis: Analysis) -> list[Tracked]:
    """Every promise with the next tool call at or after it (None when none follows)."""
    call_at = [c.message_index for c in analysis.transcript.calls]
    out: list[Tracked] = []
    following = 0
    for entry in analysis.transcript.entries:
        if entry.role != "assistant" or not entry.text:
            continue
        found = analysis.scans.promises(entry)
        if not found:
            continue
        while following < len(call_at) and call_at[following] < entry.index:
            following += 1
        resolved = call_at[following] if following < len(call_at) else None
        for phrase, sentence in found:
            digest = hashlib.sha1(sentence.encode("utf-8", "surrogatepass")).hexdigest()[:10]
            out.append(
                Tracked(
                    "dangling_commitment", "commitment", f"commitment-{digest}", phrase,
                    entry.index, resolved, "open" if resolved is None else "kept",
                    subjects(sentence.replace(phrase, " ")),
                )
            )  # fmt: skip
    return out


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
)
