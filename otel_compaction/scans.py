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
from typing import TYPE_CHECKING, Any, Final, Literal

from otel_compaction.identifiers import candidates, find_identifiers, is_path
from otel_compaction.policy import Policy
from otel_compaction.transcript import Entry, ToolCall, ToolResult, Transcript

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["RESULT_HEAD", "MessageScans", "Outcome", "call_subjects"]

# Outcomes are judged on the head of a result: an absence or a failure is stated up front,
# and scanning megabytes of payload for "not found" only finds noise.
RESULT_HEAD: Final = 2_000

Outcome = Literal["success", "silent", "failure", "absence", "rejection"]
"""What a result says: it worked (with output, or silently), it failed (and may be retried),
something was not the case, or the call was refused before it ran."""

_COMMAND_KEYS: Final = frozenset({"command", "cmd", "script"})


def call_subjects(call: ToolCall | None) -> tuple[str, ...]:
    """The argument values a call is about (what a summary names it by), longest first."""
    if call is None or not call.arguments:
        return ()
    try:
        value: Any = json.loads(call.arguments)
    except (TypeError, ValueError):
        value = call.arguments
    found: list[str] = []

    def walk(item: Any, key: str = "") -> None:
        if isinstance(item, dict):
            for name, inner in item.items():
                walk(inner, str(name))
        elif isinstance(item, list):
            for inner in item:
                walk(inner, key)
        elif isinstance(item, str):
            text = item.strip()
            if 3 <= len(text) <= 120:
                found.append(text)
            # A command or a long query is named by its parts: the program run, the paths.
            if " " in text:
                if key in _COMMAND_KEYS and len(text.split()[0]) >= 2:
                    found.append(text.split()[0])
                found.extend(c for c in candidates(text) if is_path(c))
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 1000:
            found.append(str(item))

    walk(value)
    return tuple(sorted(dict.fromkeys(found), key=len, reverse=True))


class MessageScans:
    """Per-message scan results of one conversation under one policy.

    Example:
        >>> from otel_compaction import Policy, Transcript
        >>> t = Transcript.parse([{"role": "user", "content": "book ZFA04Y"}])
        >>> MessageScans(Policy.load("default")).identifiers(t, t.entries[0])
        (('ZFA04Y', True),)
    """

    __slots__ = ("_identifiers", "_known", "_outcomes", "_promises", "_subjects", "policy")

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._outcomes: dict[int, Outcome] = {}
        self._subjects: dict[int, tuple[str, ...]] = {}
        self._identifiers: dict[int, tuple[tuple[str, bool], ...]] = {}
        self._promises: dict[int, list[tuple[str, str]]] = {}
        # Each identifier candidate's verdict (one conversation repeats the same values).
        self._known: dict[str, bool] = {}

    def outcomes(self, results: Sequence[ToolResult]) -> list[Outcome]:
        """The outcome of every result, in order."""
        memo = self._outcomes
        out: list[Outcome] = []
        for result in results:
            outcome = memo.get(result.ordinal)
            if outcome is None:
                outcome = memo[result.ordinal] = self._outcome(result)
            out.append(outcome)
        return out

    def subjects(self, call: ToolCall | None) -> tuple[str, ...]:
        """`call_subjects` of `call`."""
        if call is None:
            return ()
        found = self._subjects.get(call.ordinal)
        if found is None:
            found = self._subjects[call.ordinal] = call_subjects(call)
        return found

    def identifiers(self, transcript: Transcript, entry: Entry) -> tuple[tuple[str, bool], ...]:
        """The identifiers of a message, each once, with whether the message refers to it
        (assistant and user text, call arguments) or introduces it (a tool result, the
        system prompt)."""
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

    # -- the scans ---------------------------------------------------------------------------

    def _find_identifiers(
        self, transcript: Transcript, entry: Entry
    ) -> tuple[tuple[str, bool], ...]:
        shapes = self.policy.identifier_regex
        if shapes is None:
            return ()
        stop = self.policy.identifier_stopwords
        referring = [entry.text] if entry.role not in ("system", "developer") else []
        introducing = [entry.text] if not referring else []
        referring += [transcript.calls[c].arguments for c in entry.calls]
        introducing += [transcript.results[r].text for r in entry.results]
        found: dict[str, bool] = {}
        for texts, refers in ((introducing, False), (referring, True)):
            for text in texts:
                if not text:
                    continue
                for value in find_identifiers(text, shapes, self._known):
                    if value not in stop and value not in found:
                        found[value] = refers
        return tuple(found.items())

    def _outcome(self, result: ToolResult) -> Outcome:
        policy = self.policy
        head = result.text[:RESULT_HEAD]
        # One pass over the three shape lists first: most results match none of them.
        negative = policy.negative_regex
        if negative is None or negative.search(head) is None:
            if result.status == "error":
                return "failure"
            if not head.strip():
                return "absence" if policy.patterns.null_result.empty else "silent"
            return "success"
        rejection = policy.rejection_regex
        if rejection is not None and rejection.search(head) is not None:
            return "rejection"
        absence = policy.null_regex
        if absence is not None and absence.search(head) is not None:
            return "absence"
        if result.status == "error":
            return "failure"
        failure = policy.error_regex
        if failure is not None and failure.search(head) is not None:
            return "failure"
        if not head.strip():
            return "absence" if policy.patterns.null_result.empty else "silent"
        return "success"
