"""What the policy's patterns find in each message, computed once per message.

Every regex the analysis runs reads one message, one call or one result at a time: a
result's outcome, the identifiers of a message, the promises in an assistant's text, the
subjects of a call. `MessageScans` keeps each answer by position, so an analysis of a
conversation that only grew (see `otel_compaction.incremental`) scans the new messages and
reads the rest from here. One `MessageScans` belongs to one conversation under one policy:
positions are only meaningful while the messages before them are unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, cast

from otel_compaction.identifiers import candidates, find_identifiers, is_path
from otel_compaction.outcomes import RESULT_HEAD, Outcome, judge
from otel_compaction.patterns import Scan
from otel_compaction.policy import Policy
from otel_compaction.transcript import Entry, ToolCall, ToolResult, Transcript, TranscriptBuilder

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["RESULT_HEAD", "MessageScans", "Outcome", "call_subjects"]

# Arguments that set how a call runs, not what it is about: a summary never names a call by
# its output mode, its timeout or its working directory.
_OPTION_KEYS: Final = frozenset({
    "output_mode", "timeout", "timeout_ms", "yield_time_ms", "max_output_tokens",
    "run_in_background", "subagent_type", "head_limit", "limit", "offset", "multiline",
    "workdir", "cwd", "sandbox_permissions", "justification", "-A", "-B", "-C", "-n", "-i",
})  # fmt: skip
# What a call writes (a file's new content, an edit's old and new text): the call is named by
# the file it writes, never by the paths and words its content happens to hold.
_CONTENT_KEYS: Final = frozenset({
    "content", "new_string", "old_string", "edits", "new_source", "code", "patch", "diff",
})  # fmt: skip


class _Folding(Protocol):
    upto: int
    """Messages folded so far."""


_Fold = TypeVar("_Fold", bound=_Folding)
_Item = TypeVar("_Item")
_Out = TypeVar("_Out")


class _ById:
    __slots__ = ("found", "upto")

    def __init__(self) -> None:
        self.upto = 0
        self.found: dict[str, list[int]] = {}


class _Appended:
    __slots__ = ("found", "upto")

    def __init__(self) -> None:
        self.upto = 0
        self.found: list[Any] = []


def call_subjects(call: ToolCall | None) -> tuple[str, ...]:
    """The argument values a call is about (what a summary names it by), longest first;
    options (an output mode, a timeout, a working directory) aside."""
    if call is None or not call.arguments:
        return ()
    try:
        value: Any = json.loads(call.arguments)
    except (TypeError, ValueError):
        value = call.arguments
    found: list[str] = []

    def walk(item: Any) -> None:
        if isinstance(item, dict):
            for name, inner in item.items():
                if name not in _OPTION_KEYS and name not in _CONTENT_KEYS:
                    walk(inner)
        elif isinstance(item, list):
            for inner in item:
                walk(inner)
        elif isinstance(item, str):
            text = item.strip()
            # A short value is a subject only as a pattern (a Glob of ``*``).
            if 3 <= len(text) <= 120 or (text and "*" in text):
                found.append(text)
            # A command or a long query is also named by its paths (the program run alone
            # names nothing: most commands of a session run the same few programs).
            if " " in text:
                found.extend(c for c in candidates(text) if is_path(c))
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 1000:
            found.append(str(item))

    walk(value)
    return tuple(sorted(dict.fromkeys(found), key=len, reverse=True))


class MessageScans:
    """Per-message scan results of one conversation under one policy.

    Example:
        >>> from otel_compaction import Policy
        >>> from otel_compaction.transcript import Transcript
        >>> t = Transcript.parse([{"role": "user", "content": "book ZFA04Y"}])
        >>> MessageScans(Policy.load("default")).identifiers(t, t.entries[0])
        (('ZFA04Y', True),)
    """

    __slots__ = (
        "_folds", "_identifiers", "_known", "_outcomes", "_promises", "_roles",
        "_subjects", "_turns", "_turns_upto", "policy",
    )  # fmt: skip

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._outcomes: list[Outcome] = []
        self._turns: list[int] = []
        self._turns_upto = 0
        self._subjects: dict[int, tuple[str, ...]] = {}
        self._promises: dict[int, list[tuple[str, str]]] = {}
        self._identifiers: dict[int, tuple[tuple[str, bool], ...]] = {}
        # Each identifier run's verdict, as written (one conversation repeats the same values).
        self._known: dict[str, str] = {}
        self._roles: dict[str, str] = {}
        self._folds: dict[str, Any] = {}

    def carry(
        self,
        old: MessageScans,
        reused: Sequence[int],
        before: TranscriptBuilder,
        after: TranscriptBuilder,
    ) -> None:
        """Take over what `old` found in each message a rewrite kept. ``reused[i]`` is the
        index in `before` of the message read at `i` in `after` (-1 for a message read anew):
        every scan here reads one message alone, so a kept message's answers hold at its new
        place. The folds, which read the messages in order, start over; so does everything of
        a message read anew."""
        self._known, self._roles = old._known, old._roles
        identifiers, promises, subjects = old._identifiers, old._promises, old._subjects
        outcomes = old._outcomes
        carried: dict[int, Outcome] = {}
        for index, source in enumerate(reused):
            if source < 0:
                continue
            found = identifiers.get(source)
            if found is not None:
                self._identifiers[index] = found
            said = promises.get(source)
            if said is not None:
                self._promises[index] = said
            was, now = before.entries[source], after.entries[index]
            if subjects:
                for ordinal, placed in zip(was.calls, now.calls, strict=True):
                    about = subjects.get(ordinal)
                    if about is not None:
                        self._subjects[placed] = about
            for ordinal, placed in zip(was.results, now.results, strict=True):
                # An outcome reads its result and the call it answers (the call's tool).
                if ordinal < len(outcomes) and _same_call(before, ordinal, after, placed):
                    carried[placed] = outcomes[ordinal]
        if carried:
            calls = after.calls
            self._outcomes = [
                carried[r.ordinal] if r.ordinal in carried else self._outcome(r, calls)
                for r in after.results
            ]

    def outcomes(self, results: Sequence[ToolResult], calls: Sequence[ToolCall]) -> list[Outcome]:
        """The outcome of every result (answering its call among `calls`), in order."""
        memo = self._outcomes
        if len(memo) > len(results):
            # Not this conversation's results.
            return [self._outcome(r, calls) for r in results]
        memo.extend(self._outcome(r, calls) for r in results[len(memo) :])
        return memo.copy()

    def user_turns(self, transcript: Transcript) -> list[int]:
        """The messages where the user speaks (tool results aside), ascending."""
        turns, entries = self._turns, transcript.entries
        if self._turns_upto > len(entries):
            turns, self._turns_upto = [], 0
            self._turns = turns
        turns.extend(
            e.index for e in entries[self._turns_upto :] if e.role == "user" and not e.only_results
        )
        self._turns_upto = len(entries)
        return turns.copy()

    def subjects(self, call: ToolCall | None) -> tuple[str, ...]:
        """`call_subjects` of `call`."""
        if call is None:
            return ()
        found = self._subjects.get(call.ordinal)
        if found is None:
            found = self._subjects[call.ordinal] = call_subjects(call)
        return found

    def identifiers(self, transcript: Transcript, entry: Entry) -> tuple[tuple[str, bool], ...]:
        """The identifiers of a message, each once, in no particular order, with whether the
        message refers to it (assistant and user text, call arguments) or introduces it (a
        tool result, the system prompt): a value it does both with is introduced."""
        found = self._identifiers.get(entry.index)
        if found is None:
            found = self._identifiers[entry.index] = self._find_identifiers(transcript, entry)
        return found

    def promises(self, entry: Entry) -> list[tuple[str, str]]:
        """The (phrase, sentence) promises of an assistant message's text."""
        found = self._promises.get(entry.index)
        if found is None:
            from otel_compaction.rules.dangling_commitment import promises

            found = self._promises[entry.index] = promises(self.policy, entry.text)
        return found

    def fold(self, name: str, factory: Callable[[], _Fold], length: int) -> _Fold:
        """The state rule `name` folds the conversation's messages into, kept between
        analyses (a rule folds only the messages after its ``upto``); a new one from
        `factory` when there is none, or when it has read past `length` messages."""
        state = self._folds.get(name)
        if state is None or state.upto > length:
            state = self._folds[name] = factory()
        return cast("_Fold", state)

    def appended(
        self, name: str, items: Sequence[_Item], make: Callable[[_Item], Iterable[_Out]]
    ) -> list[_Out]:
        """What `make` finds in each of `items` (results, calls or messages, in order), for
        a fact that depends only on the item and what came before it: each item is read once
        while the conversation grows. A copy: the caller may keep it."""
        fold = self.fold(name, _Appended, len(items))
        fold.found.extend(out for item in items[fold.upto :] for out in make(item))
        fold.upto = len(items)
        return cast("list[_Out]", fold.found.copy())

    def calls_by_id(self, calls: Sequence[ToolCall]) -> dict[str, list[int]]:
        """The ordinals of the calls of each id, in order (ids are reused)."""
        fold = self.fold("calls_by_id", _ById, len(calls))
        for call in calls[fold.upto :]:
            fold.found.setdefault(call.id, []).append(call.ordinal)
        fold.upto = len(calls)
        return fold.found

    def tool_role(self, name: str, begin: Scan, end: Scan) -> str:
        """``begin`` or ``end`` when a tool's name opens or closes a transaction (by the
        policy's patterns `begin` and `end`), else empty; once per name."""
        role = self._roles.get(name)
        if role is None:
            role = "begin" if begin.found(name) else "end" if end.found(name) else ""
            self._roles[name] = role
        return role

    # -- the scans ---------------------------------------------------------------------------

    def _find_identifiers(
        self, transcript: Transcript, entry: Entry
    ) -> tuple[tuple[str, bool], ...]:
        shapes = self.policy.identifier_regex
        if shapes is None:
            return ()
        known, stopwords = self._known, self.policy.identifier_stopwords
        referring: list[str] = []
        introducing: list[str] = []
        if entry.text:
            found = find_identifiers(entry.text, shapes, known, stopwords)
            (introducing if entry.role in ("system", "developer") else referring).extend(found)
        for c in entry.calls:
            if text := transcript.calls[c].arguments:
                referring += find_identifiers(text, shapes, known, stopwords)
        for r in entry.results:
            if text := transcript.results[r].text:
                introducing += find_identifiers(text, shapes, known, stopwords)
        values = dict.fromkeys(referring, True)
        values.update(dict.fromkeys(introducing, False))
        return tuple(values.items())

    def _outcome(self, result: ToolResult, calls: Sequence[ToolCall]) -> Outcome:
        call = calls[result.call] if result.call is not None else None
        return judge(self.policy, result.status, result.text, call)


def _same_call(
    before: TranscriptBuilder, ordinal: int, after: TranscriptBuilder, placed: int
) -> bool:
    """True when result `ordinal` of `before` and result `placed` of `after` answer calls of
    the same tool and arguments (or are both orphans)."""
    was, now = before.results[ordinal].call, after.results[placed].call
    if was is None or now is None:
        return was is now
    a, b = before.calls[was], after.calls[now]
    return a.name == b.name and a.arguments == b.arguments
