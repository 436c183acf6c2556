"""``dangling_commitment``: the assistant promised an action ("I will verify X", "Let me read
the file", "I will transfer you to a human agent") and no call that does it has followed yet
(seed 2).

Only the assistant's own statements of intent count (the policy's ``commitment`` patterns). A
message that asks the user something (a question, a request to confirm or provide) waits on
the user, and so does a promise conditional on the user ("I will confirm the details once I
have this information"): none of its promises is owed by the runtime. A promise is named by its
whole sentence. The first call at or after it that plausibly does what it says keeps it
(`keeps`: the kind of action its verb names against the kind of tool, a no-op reasoning call, a
failed call made again, a later step of a plan); a promise a call of its own response went past
is withdrawn when a later response states and keeps a promise of its own; `force_terminal`
records it withdrawn; it goes stale after the policy's ``stale_after``.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Final

from otel_compaction.patterns import sentences
from otel_compaction.rules.base import Discharge, Finding, Rule, SpanView, Tracked, unclosed
from otel_compaction.rules.null_result import asked

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis
    from otel_compaction.policy import Policy
    from otel_compaction.transcript import ToolCall

# A request to the user, the way an assistant ends a turn it cannot go on with alone.
_REQUEST: Final = re.compile(
    r"(?i)\b(?:please|kindly) (?:confirm|provide|let (?:me|us) know|share|tell|specify|choose"
    r"|select|reply|advise|verify|check and confirm)\b|\blet (?:me|us) know (?:if|whether|which)\b"
)
_WORD: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]{3,}")

# A promise to do something again, which a call made again keeps.
_AGAIN: Final = re.compile(r"(?i)\b(?:again|retry|retrying|re-?run|re-?running|re-?try)\b")
# A later step of a plan: "..., then I'll export it", "After that I will gather ...".
_LATER: Final = re.compile(
    r"(?i)\b(?:then|after that|afterwards|after this),? I(?:'ll| will| am going to|'m going to)\b"
)
# Reasoning tools, which act on nothing: a call of one keeps only a promise to reason.
_REASONING: Final = frozenset({"think"})
_NAME_WORD: Final = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


def _families(table: dict[str, tuple[str, ...]]) -> dict[str, str]:
    return {word: family for family, words in table.items() for word in words}


# The kinds of action a promise's verb names (a verb not here names none).
_VERB_FAMILY: Final = _families(
    {
        "look": ("read", "re-read", "reread", "view", "open", "inspect", "examine", "reading",
                 "re-reading", "inspecting", "search", "searching", "find", "locate"),
        "change": ("edit", "fix", "update", "modify", "change", "replace", "write", "create",
                   "add", "remove", "delete", "rename", "implement", "upgrade", "downgrade",
                   "fixing", "updating", "writing", "creating"),
        "book": ("book", "reserve"),
        "cancel": ("cancel",),
        "transfer": ("transfer",),
        "reason": ("verify", "calculate", "compute", "compare", "analyze", "analyse",
                   "verifying", "calculating"),
    }
)  # fmt: skip
# The kinds of action of the tools coding agents call by these names.
_TOOL_FAMILY: Final = _families(
    {
        "look": ("Read", "NotebookRead", "Grep", "Glob", "LS", "WebFetch", "WebSearch", "View",
                 "read_file", "list_dir", "grep_search", "file_search", "codebase_search"),
        "change": ("Edit", "MultiEdit", "Write", "NotebookEdit", "apply_patch", "edit_file",
                   "write_file", "create_file", "str_replace_editor"),
    }
)  # fmt: skip
# The kinds of action a tool name opening with this verb does (`get_reservation_details`).
_NAME_FAMILY: Final = _families(
    {
        "look": ("get", "read", "search", "find", "list", "fetch", "lookup", "view", "show",
                 "query", "retrieve", "grep", "glob"),
        "change": ("edit", "write", "update", "modify", "create", "add", "delete", "remove",
                   "insert", "patch", "replace", "set"),
        "book": ("book", "reserve"),
        "cancel": ("cancel",),
        "transfer": ("transfer",),
    }
)  # fmt: skip

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
    none when `text` asks the user something (`asks_user`) or says what it will do once the
    user answers (the policy's ``conditional`` patterns: "Once I have this information, I can
    proceed"), since then the whole message waits on the user.

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
    if conditional is not None and any(conditional.found(s) for s in said):
        return []  # the message waits on the user: its plan goes on when they answer
    out: list[tuple[str, str]] = []
    for sentence in said:
        match = regex.search(sentence)
        if match is not None:
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


class _Open:
    """A promise no call has kept yet: where it stands in the tracked list, the kind of
    action its verb names, whether it promises to do something again or a later step of a
    plan, the words it promises about, whether the response that made it is still going on
    (`said`) and whether a call of that response went another way (`missed`)."""

    __slots__ = ("again", "family", "later", "missed", "position", "said", "subjects")

    def __init__(self, position: int, phrase: str, sentence: str) -> None:
        self.position = position
        self.family = verb_family(phrase)
        self.again = _AGAIN.search(sentence) is not None
        step = _LATER.search(sentence)
        self.later = step is not None
        self.subjects = frozenset(subjects(sentence[step.end() :] if step else sentence))
        self.said = True
        self.missed = False


class _Promises:
    """Every promise so far. An open one is kept by the first call at or after it that does
    what it says (`keeps`). One that a call of its own response did not keep (the attempt
    went another way) is withdrawn when a later response states a promise and keeps it: the
    assistant moved on to a new plan."""

    __slots__ = ("open", "tracked", "upto")

    def __init__(self) -> None:
        self.upto = 0
        self.tracked: list[Tracked] = []
        self.open: list[_Open] = []

    def extend(self, analysis: Analysis) -> None:
        t = analysis.transcript
        for entry in t.entries[self.upto :]:
            if entry.role != "assistant":
                for promise in self.open:
                    promise.said = False
                continue
            made = [self._track(entry.index, *found) for found in analysis.scans.promises(entry)]
            self.open += made
            if entry.calls and self.open:
                self._calls(analysis, entry.index, entry.calls)
        self.upto = len(t)

    def _track(self, at: int, phrase: str, sentence: str) -> _Open:
        digest = hashlib.sha1(sentence.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        promise = _Open(len(self.tracked), phrase, sentence)
        self.tracked.append(
            Tracked(
                "dangling_commitment", "commitment", f"commitment-{digest}", sentence, at,
                None, "open", subjects(sentence.replace(phrase, " ")),
            )
        )  # fmt: skip
        return promise

    def _calls(self, analysis: Analysis, at: int, ordinals: list[int]) -> None:
        """The calls of message `at`: the promises they keep, and those a new plan drops."""
        t = analysis.transcript
        calls = [(t.calls[c], repeats_failure(analysis, t.calls[c], at)) for c in ordinals]
        still: list[_Open] = []
        renewed = False
        for promise in self.open:
            if any(keeps(promise, call, again) for call, again in calls):
                self._resolve(promise, at, "kept")
                renewed = renewed or promise.said
                continue
            if promise.said and not promise.later:
                promise.missed = True
            still.append(promise)
        if renewed:
            for promise in [p for p in still if p.missed and not p.said]:
                still.remove(promise)
                self._resolve(promise, at, "withdrawn")
        self.open = still

    def _resolve(self, promise: _Open, at: int, status: str) -> None:
        self.tracked[promise.position] = self.tracked[promise.position].resolved_as(at, status)


def verb_family(phrase: str) -> str | None:
    """The kind of action the verb of a promise phrase names (``look``, ``change``,
    ``book``, ``cancel``, ``transfer``, ``reason``), or None for a verb that names none."""
    for word in phrase.lower().replace("'", " ").split():
        family = _VERB_FAMILY.get(word)
        if family is not None:
            return family
    return None


def call_family(name: str) -> str | None:
    """The kind of action a tool does, by its name: a known tool of a coding agent, or the
    verb a snake_case or camelCase name opens with (``get_reservation_details``: look)."""
    known = _TOOL_FAMILY.get(name)
    if known is not None:
        return known
    words = _NAME_WORD.findall(name)
    return _NAME_FAMILY.get(words[0].lower()) if words else None


def repeats_failure(analysis: Analysis, call: ToolCall, at: int) -> bool:
    """Whether `call` (made in message `at`) is the call just before it made again, the same
    tool with the same arguments but for those that only describe it, and that one failed
    before message `at`."""
    from otel_compaction.analysis import NEGATIVE_OUTCOMES

    t = analysis.transcript
    if call.ordinal == 0:
        return False
    before = t.calls[call.ordinal - 1]
    if before.result is None or t.results[before.result].message_index >= at:
        return False
    if analysis.outcomes[before.result] not in NEGATIVE_OUTCOMES:
        return False
    return before.name == call.name and asked(before) == asked(call)


def keeps(promise: _Open, call: ToolCall, repeat: bool) -> bool:
    """Whether `call` plausibly does what `promise` says the assistant will do.

    * A reasoning tool (``think``), which acts on nothing, keeps only a promise to reason
      (verify, calculate, compare): that it can do from what is already known, not a promise
      to look something up or to act.
    * A call that makes the failed call just before it again (`repeats_failure`) keeps
      only a promise to do it again ("retry", "try again", "re-run"): it does nothing the
      failed call did not, so not what was promised to be done differently.
    * A later step of a plan ("..., then I'll export it") is kept within the response that
      states it only by a call that names what it promises (a subject word in the tool's name
      or arguments): the calls of that response do the steps before it.
    * A call that changes something (an edit, a booking, a cancellation, a transfer) keeps a
      promise of the same kind of action, or to reason, or of one whose verb names no kind; a
      call that reads or looks something up keeps any promise (looking is how an action
      starts); any other call (a shell, a sub-agent, a tool of unknown kind) keeps any promise.
    """
    name = call.name
    if name.lower() in _REASONING:
        return promise.family == "reason"
    if repeat and not promise.again:
        return False
    if promise.later and promise.said:
        words = {w.lower() for w in _WORD.findall(name + " " + asked(call))}
        return not promise.subjects.isdisjoint(words)
    family = call_family(name)
    if family is None or family == "look" or promise.family in (None, "reason"):
        return True
    return family == promise.family


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
