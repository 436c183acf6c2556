"""``unresolved_reference``: an identifier the retained part still refers to whose only
antecedent is in the span (seed 2's "verified by explicit binding").

An identifier is owed by a summary only when all of these hold: it appears in the span, it
appears nowhere before the span (the kept head binds it otherwise), and its first appearance
after the span *refers* to it (assistant text, tool-call arguments, user text). One that a tool
result or the harness after the span re-introduces before anyone uses it is bound there: the
blocks a harness puts in a user message (Claude Code's ``<task-notification>`` naming a
background task's output file, a ``<system-reminder>``) introduce what they name. Never owed:
the system's own paths (``/dev/null``, ``/usr/bin/env``), placeholders (``path/to/file``,
``../path/to/your.db``, ``<...>``), and test literals (a value written only into the code of a
test file, such as a fixture's ``user_12345``). Identifiers are whole values (see
`otel_compaction.identifiers`); a bulk listing is ranked by how often the retained part uses
each one and capped at ``max_identifiers``, the archive handle covering the rest.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from otel_compaction.identifiers import find_identifiers, is_path
from otel_compaction.rules.base import Discharge, Finding, ObligationRef, Rule, SpanView

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis
    from otel_compaction.transcript import Entry

# The system's own paths: a command's ``2>/dev/null``, a script's ``/usr/bin/env``.
_SYSTEM_PATH: Final = re.compile(
    r"/(?:dev|proc|sys)(?:/|$)|/(?:usr/(?:local/)?)?s?bin(?:/|$)|/usr/(?:lib|share)/|/tmp/?$"
)
# Placeholders written in examples and instructions, never values of the conversation's own.
_PLACEHOLDER: Final = re.compile(
    r"(?i)(?:^|[/_.@-])your(?:[_.-]|$)|(?:^|/)path/to/(?:files?|dirs?|directory|folder|"
    r"project|repo|script)(?:[./]|$)|[<>{}]|(?:^|[@.])example\.(?:com|org|net)$"
)
# Harness blocks of a user message: what they name, the harness supplies.
_HARNESS: Final = re.compile(
    r"<(system-reminder|task-notification|local-command-stdout|local-command-stderr|"
    r"bash-stdout|bash-stderr)>(.*?)</\1>",
    re.DOTALL,
)
# A test file (``test/foo_test.exs``, ``tests/test_app.py``, ``src/app.spec.ts``) and the
# arguments of a call that carry the code it writes into one.
_TEST_FILE: Final = re.compile(
    r"(?:^|/)(?:tests?|spec|specs|__tests__|fixtures?)/|(?:^|/)test_[^/]+$|"
    r"[._-](?:test|spec)\.[A-Za-z0-9]+$|(?:^|/)conftest\.py$"
)
_FILE_KEYS: Final = ("file_path", "path", "filename", "notebook_path", "target_file")
_CODE_KEYS: Final = ("content", "new_string", "old_string", "edits", "new_source", "code")


def unowed(value: str) -> bool:
    """True for a value no summary owes whatever refers to it: a system path, a placeholder."""
    return bool(_SYSTEM_PATH.match(value) or _PLACEHOLDER.search(value))


@dataclass(slots=True)
class Bindings:
    """Where each identifier appears: message indices ascending, and whether the appearance
    in that message refers to it (True) or introduces it (a tool result, the system prompt).
    Only the first ``lengths[i]`` appearances of value ``i`` belong to this transcript (the
    lists are shared with the conversation's table, which goes on growing)."""

    values: list[str] = field(default_factory=list)
    first: list[int] = field(default_factory=list)
    at: list[list[int]] = field(default_factory=list)
    refers: list[list[bool]] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    last: list[int] = field(default_factory=list)
    """The last appearance of each value in this transcript."""
    table: _Table | None = None
    """The conversation's table these bindings were read from (its span answers are kept)."""
    upto: int = 0
    """Messages of this transcript (the table's length when the bindings were read)."""
    alias: dict[str, str] = field(default_factory=dict)
    """Each relative path folded away, with the absolute path it was folded into."""
    merged: dict[str, int] = field(default_factory=dict)
    """The position of each absolute path a relative path was folded into."""


class _Table:
    """The conversation's identifier appearances, folded one message at a time, in order of
    first appearance (ties by value): a transcript that grew only folds its new messages."""

    __slots__ = (
        "at", "first", "known", "last", "owed", "position", "refers", "relative", "tails",
        "upto", "values",
    )  # fmt: skip

    def __init__(self) -> None:
        self.upto = 0
        self.known: dict[str, str] = {}  # the runs judged in harness blocks and test code
        self.position: dict[str, int] = {}
        self.values: list[str] = []
        self.first: list[int] = []
        self.at: list[list[int]] = []
        self.refers: list[list[bool]] = []
        self.last: list[int] = []
        self.relative: list[int] = []  # positions of the relative paths
        self.tails: dict[str, list[int]] = {}  # each tail of an absolute path: its positions
        self.owed: list[_Owed] = []  # the latest spans' owed identifiers, newest last

    def extend(self, analysis: Analysis) -> None:
        transcript = analysis.transcript
        identifiers = analysis.scans.identifiers
        position, at, refers, last = self.position, self.at, self.refers, self.last
        for entry in transcript.entries[self.upto :]:
            new: list[tuple[str, bool]] = []
            supplied = self._supplied(analysis, entry)
            for value, said in identifiers(transcript, entry):
                if unowed(value):
                    continue
                refer = said and value not in supplied
                where = position.get(value)
                if where is None:
                    new.append((value, refer))
                else:
                    at[where].append(entry.index)
                    refers[where].append(refer)
                    last[where] = entry.index
            for value, refer in sorted(new):
                position[value] = len(self.values)
                if is_path(value):
                    self._add_path(value, len(self.values))
                self.values.append(value)
                self.first.append(entry.index)
                at.append([entry.index])
                refers.append([refer])
                last.append(entry.index)
        self.upto = len(transcript)

    def _supplied(self, analysis: Analysis, entry: Entry) -> frozenset[str]:
        """The values of a message that refer to nothing the agent or user chose: those in
        the harness blocks of a user message, and those in the code a call writes into a
        test file."""
        policy = analysis.policy
        shapes, stopwords = policy.identifier_regex, policy.identifier_stopwords
        if shapes is None:
            return frozenset()
        texts: list[str] = []
        if entry.role == "user" and "</" in entry.text:
            texts.extend(block for _, block in _HARNESS.findall(entry.text))
        for c in entry.calls:
            texts.extend(_test_code(analysis.transcript.calls[c].arguments))
        found = (find_identifiers(text, shapes, self.known, stopwords) for text in texts)
        return frozenset(itertools.chain.from_iterable(found))

    def _add_path(self, value: str, at: int) -> None:
        if not value.startswith(("/", "~")):
            self.relative.append(at)
            return
        parts = value.split("/")
        for cut in range(1, len(parts) - 1):
            self.tails.setdefault("/".join(parts[cut:]), []).append(at)

    def bindings(self) -> Bindings:
        """This transcript's bindings, relative paths folded into their absolute paths."""
        bindings = Bindings(
            self.values.copy(), self.first.copy(), self.at.copy(), self.refers.copy(),
            list(map(len, self.at)), self.last.copy(), self, self.upto,
        )  # fmt: skip
        merged = _merge_relative_paths(bindings, self.relative, self.tails)
        if not merged:
            return bindings
        # A merged path takes the first appearance of either form: order again.
        order = sorted(
            (i for i in range(len(bindings.values)) if i not in merged),
            key=lambda i: (bindings.first[i], bindings.values[i]),
        )
        values = bindings.values
        targets = set(merged.values())
        return Bindings(
            [values[i] for i in order], [bindings.first[i] for i in order],
            [bindings.at[i] for i in order], [bindings.refers[i] for i in order],
            [bindings.lengths[i] for i in order], [bindings.last[i] for i in order],
            self, self.upto,
            {values[at]: values[target] for at, target in merged.items()},
            {values[i]: new for new, i in enumerate(order) if i in targets},
        )  # fmt: skip


def _test_code(arguments: str) -> list[str]:
    """The code a call's `arguments` write into a test file (none for any other call)."""
    if not arguments or not any(word in arguments for word in ("test", "spec", "fixture")):
        return []
    try:
        value: Any = json.loads(arguments)
    except (TypeError, ValueError):
        return []
    if not isinstance(value, dict):
        return []
    target = next((value[k] for k in _FILE_KEYS if isinstance(value.get(k), str)), "")
    if not _TEST_FILE.search(target):
        return []
    return [text for k in _CODE_KEYS if k in value for text in _strings(value[k])]


def _strings(value: Any) -> list[str]:
    """The strings in a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [text for item in value for text in _strings(item)] if isinstance(value, list) else []


def scan(analysis: Analysis) -> Bindings:
    """Every identifier's appearances, sorted by first appearance."""
    if analysis.policy.identifier_regex is None:
        return Bindings()
    table = analysis.scans.fold("unresolved_reference", _Table, len(analysis.transcript))
    table.extend(analysis)
    return table.bindings()


def _merge_relative_paths(
    bindings: Bindings, relative: list[int], tails: dict[str, list[int]]
) -> dict[int, int]:
    """Fold a relative path into the one absolute path it is the tail of (``src/a.py`` and
    ``/home/dev/shop/src/a.py`` are one file), so that either form binds the other. `tails`
    maps each tail of an absolute path to the positions of the absolute paths ending in it.
    Returns the positions of the relative paths folded away, each with its target's."""
    values = bindings.values
    folded: dict[int, int] = {}
    if not tails:
        return folded
    for at in relative:
        value = values[at]
        targets = tails.get(value.lstrip("/"))
        if not targets or len(targets) != 1:
            continue  # not a tail of any absolute path, or ambiguous
        target = targets[0]
        merged: dict[int, bool] = {}
        length = bindings.lengths[target]
        for index, refers in zip(
            bindings.at[target][:length], bindings.refers[target][:length], strict=True
        ):
            merged[index] = refers
        length = bindings.lengths[at]
        for index, refers in zip(
            bindings.at[at][:length], bindings.refers[at][:length], strict=True
        ):
            merged[index] = merged.get(index, True) and refers
        ordered = sorted(merged.items())
        bindings.at[target] = [i for i, _ in ordered]
        bindings.refers[target] = [r for _, r in ordered]
        bindings.lengths[target] = len(ordered)
        bindings.first[target] = ordered[0][0]
        bindings.last[target] = ordered[-1][0]
        folded[at] = target
    return folded


def owed(analysis: Analysis, start: int, end: int) -> tuple[list[tuple[str, int, int]], int]:
    """The identifiers a summary of ``[start, end)`` owes, as (value, first, first use after
    the span), ranked and capped; and how many the cap left out."""
    return analysis.span_memo(("owed", start, end), lambda: _owed(analysis, start, end))


_Key = tuple[int, int, str, int]
"""An owed identifier's rank: (-uses after the span, first use after it, value, first)."""
_KEPT_SPANS = 4


@dataclass(slots=True)
class _Owed:
    """The owed identifiers of one span ``[start, end)`` of the first `upto` messages, each
    value's rank and all ranks sorted (never changed once kept: a later span copies them)."""

    start: int
    end: int
    upto: int
    alias: dict[str, str]
    keys: dict[str, _Key]
    ranked: list[_Key]


def _rank(value: str, at: list[int], refers: list[bool], length: int, end: int) -> _Key | None:
    """`value`'s rank when it appears after `end` and its first appearance there refers to
    it, else None."""
    after = bisect.bisect_left(at, end, 0, length)
    if after < length and refers[after]:
        return (-sum(refers[after:length]), at[after], value, at[0])
    return None


def _owed(analysis: Analysis, start: int, end: int) -> tuple[list[tuple[str, int, int]], int]:
    bindings: Bindings = analysis.facts.get("unresolved_reference") or Bindings()
    found = _owed_spans(analysis, bindings, start, end)
    ranked = found.ranked if found is not None else _ranked(bindings, start, end)[1]
    cap = analysis.policy.patterns.identifiers.max_identifiers
    kept = ranked if cap is None else ranked[:cap]
    chosen = sorted(((value, first, use) for _, use, value, first in kept), key=lambda t: t[1])
    return chosen, len(ranked) - len(kept)


def _ranked(bindings: Bindings, start: int, end: int) -> tuple[dict[str, _Key], list[_Key]]:
    """Every owed identifier of ``[start, end)``, by value and in rank order."""
    lo = bisect.bisect_left(bindings.first, start)
    hi = bisect.bisect_left(bindings.first, end)
    keys: dict[str, _Key] = {}
    # Most values in the span never appear after it: only those that do are looked into.
    seen_after = itertools.compress(range(lo, hi), map(end.__le__, bindings.last[lo:hi]))
    for position in seen_after:
        value = bindings.values[position]
        key = _rank(
            value, bindings.at[position], bindings.refers[position], bindings.lengths[position], end
        )
        if key is not None:
            keys[value] = key
    return keys, sorted(keys.values())


def _owed_spans(analysis: Analysis, bindings: Bindings, start: int, end: int) -> _Owed | None:
    """The owed identifiers of ``[start, end)`` from those of an earlier span of the same
    conversation with the same start (an agent asks about a span that grows by a message or
    two each turn): only the values of the messages the span or the transcript took in since
    are ranked again. None when the bindings are not the conversation's latest."""
    table = bindings.table
    if table is None or table.upto != bindings.upto:
        return None
    upto, alias = bindings.upto, bindings.alias
    base: _Owed | None = None
    for kept in table.owed:
        if (
            kept.start == start
            and kept.end <= end
            and kept.upto <= upto
            and kept.alias == alias
            and (base is None or (kept.end, kept.upto) > (base.end, base.upto))
        ):
            base = kept
    if base is not None and base.end == end and base.upto == upto:
        return base
    if base is None:
        keys, ranked = _ranked(bindings, start, end)
    else:
        keys, ranked = base.keys.copy(), base.ranked.copy()
        transcript, identifiers = analysis.transcript, analysis.scans.identifiers
        touched: dict[str, None] = {}
        for index in itertools.chain(range(base.end, end), range(max(base.upto, end), upto)):
            for value, _ in identifiers(transcript, transcript.entries[index]):
                touched[alias.get(value, value)] = None
        for value in touched:
            old = keys.pop(value, None)
            if old is not None:
                del ranked[bisect.bisect_left(ranked, old)]
            key = _value_rank(table, bindings, value, start, end)
            if key is not None:
                keys[value] = key
                bisect.insort(ranked, key)
    found = _Owed(start, end, upto, alias, keys, ranked)
    table.owed.append(found)
    del table.owed[:-_KEPT_SPANS]
    return found


def _value_rank(table: _Table, bindings: Bindings, value: str, start: int, end: int) -> _Key | None:
    """`value`'s rank for ``[start, end)`` when it is first seen in the span."""
    merged = bindings.merged.get(value)
    if merged is not None:
        at, refers, length = bindings.at[merged], bindings.refers[merged], bindings.lengths[merged]
    else:
        position = table.position.get(value)
        if position is None:
            return None  # a value never owed (see `unowed`)
        at, refers = table.at[position], table.refers[position]
        length = len(at)
    if not start <= at[0] < end:
        return None
    return _rank(value, at, refers, length, end)


class _Findings:
    """The findings made so far in one conversation, by (value, first, use, severity): the
    same owed identifier is reported again before every model call."""

    __slots__ = ("made", "upto")

    def __init__(self) -> None:
        self.upto = 0
        self.made: dict[tuple[str, int, int, str], Finding] = {}


def check(view: SpanView) -> list[Finding]:
    """Identifiers first seen in the span that the retained part refers to."""
    analysis = view.analysis
    chosen, left_out = owed(analysis, view.start, view.end)
    severity = analysis.severities(view.addressable)["unresolved_reference"]
    made = analysis.scans.fold("unresolved_reference findings", _Findings, len(analysis.transcript))
    made.upto = len(analysis.transcript)
    out: list[Finding] = []
    for value, first, use in chosen:
        key = (value, first, use, severity)
        finding = made.made.get(key)
        if finding is None:
            finding = made.made[key] = Finding(
                "unresolved_reference", first,
                f"{value!r} is first seen at message {first} and referred to at message {use}",
                severity, ObligationRef("reference", value, first),
            )  # fmt: skip
        out.append(finding)
    if left_out:
        out.append(
            Finding(
                "unresolved_reference", None,
                f"{left_out} more identifiers are referred to later than max_identifiers "
                "allows; the archive handle covers them",
            )
        )  # fmt: skip
    return out


RULE = Rule(
    name="unresolved_reference",
    kind="quiescence",
    summary="an identifier the retained part refers to whose only antecedent is in the span",
    severities={"default": "carry", "strict": "block", "lenient": "warn"},
    check=check,
    scan=scan,
    discharge=Discharge("reference", None),
)
