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

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, Protocol

from otel_compaction.binding import (
    WORDS,
    Clause,
    Name,
    clause,
    flat,
    named,
    names,
    names_call,
    sibling_names,
    tells_apart,
)
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
    r"(?i)\b(?:not|no|none|nothing|never|neither|nor|nobody|nowhere|empty|fail(?:s|ed|ing|ures?)?|"
    r"errors?|errored|unable|unavailable|missing|absent|without|zero|rejected|declined|denied|"
    r"refused|invalid|unknown|cannot|could not|no such|timed out|blocked|aborted|crash(?:ed|es)?|"
    r"broken|exception|traceback|non-zero|nonzero|exit(?:ed)?(?: with)?(?: code| status)? [1-9])\b"
    r"|n't\b"
)
_PENDING: Final = re.compile(
    r"(?i)\b(?:pending|still|not (?:\w+ )?yet|yet to|outstanding|awaiting|waiting|in progress|"
    r"in flight|unfinished|incomplete|unresolved|open|no result yet|never (?:ran|returned|"
    r"answered|completed)|has not|hasn't|have not|haven't|will|intends?|plans? to|promised|"
    r"owes?|abandoned|given up|gave up|withdrawn|rolled back|to be done|to do)\b"
)
# A section heading at the start of a line: ``4. Errors and fixes:``, ``## Pending Tasks``,
# ``**Current Work**``, ``Next step: ...`` (Claude Code writes nine numbered sections; other
# summarizers write markdown headings or titles followed by a colon).
_HEADING: Final = re.compile(
    r"(?:#{1,6}[ \t]+(?P<hash>[^\n]{1,80})"
    r"|\d{1,2}[.)][ \t]+(?P<number>[A-Z][^:\n]{0,60}):"
    r"|\*\*(?P<bold>[^*\n]{1,60})\*\*:?"
    r"|(?P<plain>[A-Z][A-Za-z /&'-]{1,40}):)"
)
# What a section is about, by its heading: the lines under a pending heading state what is
# still to do. An errors heading states no failure by itself: a line under it that names a
# call without saying how it failed ("- The Edit of CLAUDE.md was done after reading it")
# may tell how it was fixed, or something else.
_PENDING_SECTION: Final = re.compile(
    r"(?i)\b(?:pending|current work|next steps?|remaining|remains|what(?:'s| is) left|to ?do|"
    r"outstanding|in progress|unfinished|open (?:items|tasks|questions))\b"
)
# A line under a pending heading that says nothing is pending there.
_DONE: Final = re.compile(
    r"(?i)^\W*(?:none|nothing|n/a)\b|\b(?:is|was|were|are|has been|have been) (?:now |already )?"
    r"(?:done|complete|completed|finished|exported|copied|written|created|applied|fixed|resolved)\b"
)
# What says a call is still to come back, not that it failed ("has not returned yet").
_STILL_TO_COME: Final = re.compile(
    r"(?i)\b(?:has|have|had|is|was)(?:n't| not)(?: yet)? (?:returned|finished|completed|come back|"
    r"been (?:answered|run|done|written|exported))\b|\bnot (?:done |finished |run )?yet\b|"
    r"\bno result yet\b"
)
# The wrapper a harness puts around a summary (Claude Code's continuation notice, Codex's
# handoff preamble): its "without asking" and "do not" say nothing about the conversation.
_BOILERPLATE: Final = re.compile(
    r"(?i)this session is being continued from a previous conversation|"
    r"summary below covers the earlier portion|"
    r"continue the conversation from where (?:we|it) left|"
    r"if you need specific details from before compaction|"
    r"resume directly|do not acknowledge the summary|pick up the last task|"
    r"messages after this summary are the most recent|"
    r"another language model started to solve this problem|"
    r"summary produced by the other language model|"
    r"</?system-reminder>|</?tools-used-before-summary>"
)
# A bare file name (``mix.exs``, ``.dialyzerignore``): no folder written before it.
_BARE_NAME: Final = re.compile(
    r"(?<![\w./~\\-])(\.?[\w-]+(?:\.[\w-]+)*\.[A-Za-z][A-Za-z0-9]{0,7}|\.[A-Za-z][\w-]+)"
    r"(?![\w/\\-]|\.\w)"
)
# A parenthesis: what it says is about what it holds, not about the clause around it.
_PARENTHESIS: Final = re.compile(r"\([^()]*\)")
# How many words in a row of a failure's own text a clause must repeat to quote it.
_QUOTED_WORDS: Final = 4
_VALUE: Final = re.compile(r"\S*[\d/\\@]\S*")
_STEM: Final = re.compile(r"(?:ing|ed|es|e|s)$")
_PROMISE_FILLER: Final = frozenset({
    "the", "a", "an", "of", "to", "and", "or", "for", "with", "this", "that", "then", "now",
    "first", "next", "also", "my", "your", "it", "its",
})  # fmt: skip


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


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _heading(line: str) -> tuple[str, bool] | None:
    """The title of a section heading `line` opens with, and whether it is a ``Title: ...``
    line (whose section ends at the next unindented line), or None."""
    found = _HEADING.match(line)
    if found is None or (found["hash"] and found.end() < len(line)):
        return None
    title = found["hash"] or found["number"] or found["bold"] or found["plain"]
    return title, bool(found["plain"])


@dataclass(slots=True)
class _Unit:
    """A sentence or line of a summary (or a bullet with the lines under it), its words and
    whether it says something is pending (a word of it, or under a pending heading)."""

    text: str
    flat: str
    section: str
    pending: bool


class _Summary:
    """A summary read once: its units indexed by word, the paths written in it by name."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.units: list[_Unit] = []
        self.by_word: dict[str, list[int]] = {}
        self.paths: dict[str, list[tuple[str, int]]] = {}  # basename: (path, unit)
        self.bare: set[str] = set()  # file names written without a folder
        self._clauses: dict[int, list[Clause]] = {}
        self._read(text)

    # -- reading ------------------------------------------------------------------------------

    def _read(self, text: str) -> None:
        section = ""  # "pending" or ""
        plain = False  # the section's heading is a ``Title: ...`` line: it ends unindented
        parents: list[tuple[int, int, str]] = []  # (indent, its line's unit, listed folder)
        for raw in text.splitlines():
            line = raw.strip()
            if not line or _BOILERPLATE.search(line):
                continue
            indent = len(raw) - len(raw.lstrip())
            heading = _heading(line) if indent == 0 else None
            if heading is not None:
                title, plain = heading
                section = "pending" if _PENDING_SECTION.search(title) else ""
                parents.clear()
            elif plain and indent == 0 and not line.startswith(("-", "*", "+")):
                section, plain = "", False
            while parents and parents[-1][0] >= indent:
                parents.pop()
            parent = parents[-1] if parents else None
            for sentence in sentences(line):
                self._add(sentence, section)
            self._add(line, section)
            at = len(self.units) - 1
            self._paths(line, parent[2] if parent else "", at)
            # A bullet and the lines under it are one statement ("- Grep `foo`:" over
            # "  - no matches"): each line joins its parent line's unit.
            if parent is not None:
                block = self.units[parent[1]]
                block.text += "\n" + line
                block.flat += flat(line)[1:]
                block.pending = block.pending or self.units[at].pending
                self._index(parent[1], line)
                self._paths(line, parent[2], parent[1])
            listed = parent[2] if parent else ""
            if line.endswith(":"):
                folders = [c for c in candidates(line) if is_path(c) and "." not in _basename(c)]
                listed = folders[-1] if folders else listed
            parents.append((indent, at, listed))

    def _add(self, text: str, section: str) -> None:
        at = len(self.units)
        self.units.append(
            _Unit(
                text, flat(text), section,
                section == "pending" or bool(_PENDING.search(text)),
            )
        )  # fmt: skip
        self._index(at, text)

    def _index(self, at: int, text: str) -> None:
        for word in dict.fromkeys(WORDS.findall(text.lower())):
            found = self.by_word.setdefault(word, [])
            if not found or found[-1] != at:
                found.append(at)

    def _paths(self, line: str, folder: str, at: int) -> None:
        """Index the paths `line` writes under unit `at`: as written, and each bare file name
        with the folder it is listed under (``in `lib/foo/`: `bar.ex`, `baz.ex```)."""
        written = [c for c in candidates(line) if is_path(c)]
        for path in written:
            self.paths.setdefault(_basename(path), []).append((path, at))
        folders = [p for p in written if "." not in _basename(p)]
        if folders:
            folder = folders[-1]
        for name in _BARE_NAME.findall(line):
            self.bare.add(name)
            if folder:
                self.paths.setdefault(name, []).append((f"{folder}/{name}", at))

    # -- what it carries ----------------------------------------------------------------------

    def carries(self, value: str, roots: frozenset[str]) -> bool:
        """True when the summary writes `value` whole, or (a path) an equivalent form of
        it: relative to a root, listed under its folder, or a root's file by its name."""
        if _token(value).search(self.text) or _token(canonical(value)).search(self.text):
            return True
        if not is_path(value):
            return False
        path = canonical(value)
        name = _basename(path)
        if any(same_identifier(path, w) for w, _ in self.paths.get(name, ())):
            return True
        return name in self.bare and path.rsplit("/", 1)[0] in roots

    def clauses(self, at: int) -> list[Clause]:
        """The clauses of unit `at`: each sentence of its lines cut at semicolons, and a
        bullet's line joined with each line under it ("- Grep `foo`:" over "  - no matches")."""
        found = self._clauses.get(at)
        if found is None:
            lines = self.units[at].text.split("\n")
            found = [
                clause(piece)
                for line in lines
                for sentence in sentences(line)
                for piece in sentence.split(";")
                if piece.strip()
            ]
            if _heading(lines[0].strip()) is None:  # a section is no statement
                found.extend(clause(f"{lines[0]}\n{line}") for line in lines[1:])
            self._clauses[at] = found
        return found

    def units_writing(self, call: frozenset[Name]) -> list[int]:
        """The units that may write one of `call`'s names (each then read clause by clause)."""
        found: set[int] = set()
        for name in call:
            if name.kind == "pattern":
                found.update(i for i, u in enumerate(self.units) if name.value in u.text)
                continue
            if name.kind == "date":
                found.update(i for i, u in enumerate(self.units) if "-" in u.text)
            value = name.value.rsplit("/", 1)[-1] if name.kind == "path" else name.value
            words = WORDS.findall(value.lower())
            if words:
                rarest = min(words, key=lambda w: len(self.by_word.get(w, ())))
                found.update(self.by_word.get(rarest, ()))
        return sorted(found)

    def _bound(
        self,
        tool: str,
        subjects: tuple[str, ...],
        siblings: tuple[tuple[str, ...], ...],
        says: Callable[[_Unit, Clause, frozenset[Name]], bool],
    ) -> bool:
        """Whether one clause names the call (told apart from its siblings) and `says` what
        is owed of it."""
        call = names(tool, subjects)
        others = sibling_names(tool, siblings)
        for at in self.units_writing(call):
            unit = self.units[at]
            for where in self.clauses(at):
                found = named(call, where, others)
                if (
                    names_call(found, only=not others)
                    and tells_apart(found, call, others)
                    and says(unit, where, found)
                ):
                    return True
        return False

    def states_negative(self, negative: Negative) -> bool:
        """True when one clause names the negative's call and says it failed (a negation
        about it, or the failure quoted in the tool's own words), or the summary writes its
        call id."""
        if negative.call_id and _token(negative.call_id).search(self.text):
            return True
        quoted = _shingles(negative.text)

        def failed(unit: _Unit, where: Clause, found: frozenset[Name]) -> bool:
            return _negated(where, found) or bool(quoted & _shingles(where.text))

        return self._bound(negative.tool, negative.subjects, negative.siblings, failed)

    def states_pending(self, ref: ObligationRef) -> bool:
        """True when one clause names the obligation and says it is still pending (or lists
        it under a pending heading), or the summary writes its id. A retry is also stated by
        its failure: whoever reads that it failed knows it is not done."""
        if ref.id and _token(ref.id).search(self.text):
            return True
        if ref.kind == "commitment":
            return self._states_promise(ref.subjects)

        def pending(unit: _Unit, where: Clause, found: frozenset[Name]) -> bool:
            if _says_pending(unit, where.text):
                return True
            return ref.kind == "retry" and _negated(where, found)

        return self._bound(ref.name, ref.subjects, ref.siblings, pending)

    def _states_promise(self, subjects: tuple[str, ...]) -> bool:
        """Whether one unit that says something is pending shares two of the promise's
        words (all of them when it has fewer), compared by their stems."""
        words = {_stem(w) for s in subjects for w in WORDS.findall(s.lower())}
        words -= _PROMISE_FILLER
        if not words:
            return False
        need = min(2, len(words))
        for at, unit in enumerate(self.units):
            for where in self.clauses(at):
                if len(words & {_stem(w) for w in where.flat.split()}) < need:
                    continue
                if _says_pending(unit, where.text):
                    return True
        return False


def _says_pending(unit: _Unit, text: str) -> bool:
    """Whether `text` (a clause of `unit`) says something is still to happen: in its words,
    or listed under a pending heading without saying it is done ("- None: ... was copied")."""
    if _PENDING.search(text):
        return True
    return unit.section == "pending" and not _DONE.search(text)


def _stem(word: str) -> str:
    """`word` without a common inflection (``creating`` and ``create`` are one word)."""
    return _STEM.sub("", word) if len(word) > 4 else word


def _shingles(text: str) -> frozenset[str]:
    """The runs of `_QUOTED_WORDS` words in a row of `text` (its first 600 characters), by
    which a clause that quotes it is found; never across a path or a value (whoever names
    the call writes those, quoting nothing)."""
    found: set[str] = set()
    for piece in _VALUE.split(text[:600].lower()):
        words = WORDS.findall(piece)
        for i in range(len(words) - _QUOTED_WORDS + 1):
            run = " ".join(words[i : i + _QUOTED_WORDS])
            if len(run) >= 16:
                found.add(run)
    return frozenset(found)


def _negated(where: Clause, found: frozenset[Name]) -> bool:
    """Whether `where` says something was not the case about what it names: a negation
    outside the names themselves (a Grep for ``error`` is no failure) and outside the
    parentheses that name none of them."""
    text = _PARENTHESIS.sub(
        lambda m: m.group(0) if named(found, clause(m.group(0))) else " ", where.text
    )
    text = _STILL_TO_COME.sub(" ", text)
    for name in found:
        if name.kind in ("value", "word", "program", "phrase", "tool"):
            text = re.sub(rf"(?i)(?<![\w-]){re.escape(name.value)}(?![\w-])", " ", text)
    return bool(_NEGATION.search(text))


def _roots(identifiers: Iterable[str], summary: _Summary) -> frozenset[str]:
    """The folders whose files a summary may name by their bare names: the folder that the
    absolute paths owed and written share (the project's root), and each absolute folder the
    summary writes. One path alone has no root: its folder may be anywhere."""
    written = {p for named in summary.paths.values() for p, _ in named}
    roots = {p for p in written if p.startswith("/") and "." not in _basename(p)}
    absolute = {canonical(v) for v in identifiers if is_path(v) and v.startswith("/")}
    absolute.update(p for p in written if p.startswith("/"))
    if len(absolute) > 1:
        common = os.path.commonpath(absolute)
        if common.count("/") >= 2:
            roots.add(common)
    return frozenset(roots)


def verify(summary: str, request: Owed) -> Verification:
    """Check that `summary` carries every identifier, negative and pending obligation that
    `request` lists (see the module docstring for what counts as carried)."""
    read = _Summary(summary)
    roots = _roots(request.identifiers, read)
    carried_ids = tuple(v for v in request.identifiers if read.carries(v, roots))
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
