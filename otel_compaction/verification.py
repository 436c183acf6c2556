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
from collections.abc import Iterable, Iterator, Mapping, Sequence
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
    r"(?i)\b(?:not|no|none|nothing|never|neither|nor|nobody|nowhere|empty|fail(?:s|ed|ing|ures?)?|"
    r"errors?|errored|unable|unavailable|missing|absent|without|zero|rejected|declined|denied|"
    r"refused|invalid|unknown|cannot|could not|no such|timed out|blocked|aborted|crash(?:ed|es)?|"
    r"broken|exception|traceback|non-zero|nonzero|exit(?:ed)?(?: with)?(?: code| status)? [1-9])\b"
    r"|n't\b"
)
_PENDING: Final = re.compile(
    r"(?i)\b(?:pending|still|not yet|yet to|outstanding|awaiting|waiting|in progress|"
    r"in flight|unfinished|incomplete|unresolved|open|no result|never (?:ran|returned|"
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
# What a section is about, by its heading: the lines under an errors heading state failures,
# those under a pending heading state what is still to do.
_ERRORS_SECTION: Final = re.compile(r"(?i)\b(?:errors?|failures?|failed|bugs?|issues?)\b")
_PENDING_SECTION: Final = re.compile(
    r"(?i)\b(?:pending|current work|next steps?|remaining|to ?do|outstanding|in progress|"
    r"unfinished|open (?:items|tasks|questions))\b"
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
# What a command or query is split at into its segments, and what ends a segment's leading
# words (a path, a quotation, a redirection, an assignment).
_SEGMENTS: Final = re.compile(r"&&|\|\||[;|\n]")
_WORDS: Final = re.compile(r"[^\W_]+(?:[_-][^\W_]+)*")
_GLOB: Final = re.compile(r"[*?\[\]{}()|\\^$]")
_LEADING_WORDS: Final = 4
# Tools that run a command: their name says nothing about which call it was.
_RUNNER: Final = re.compile(r"(?i)shell|command|exec|terminal|bash")
_FILLER: Final = frozenset({"a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "with"})


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


def _flat(text: str) -> str:
    """`text` as its lowercase words between single spaces, a snake or kebab name one word
    (``search`` is not ``search_logs``), padded with a space each side."""
    return " " + " ".join(_WORDS.findall(text.lower())) + " "


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True, slots=True)
class _Term:
    """One way a summary may name a call: a path, a pattern written as is, or a phrase."""

    kind: str  # "path", "raw" or "phrase"
    value: str


def _terms(names: Iterable[str]) -> list[_Term]:
    """What a summary may name a call by, from its subjects: each path, each pattern written
    as is, each value of one word, and the leading words of each command or query (``mix
    test``, ``python -m pytest``), never the program alone."""
    terms: list[_Term] = []
    for written in names:
        name = written.strip()
        if not name:
            continue
        if " " not in name and "\n" not in name:
            if is_path(canonical(name)) and not _GLOB.search(name):
                terms.append(_Term("path", canonical(name)))
            elif _GLOB.search(name):
                terms.append(_Term("raw", name))
            elif _flat(name).strip():
                terms.append(_Term("phrase", _flat(name)))
            continue
        for segment in _SEGMENTS.split(name):
            words: list[str] = []
            for word in segment.split():
                if any(c in word for c in "/\\'\"`<>=") or len(words) == _LEADING_WORDS:
                    break
                words.append(word)
            while words and words[-1].lower() in _FILLER:
                words.pop()
            phrase = _flat(" ".join(words))
            if len(phrase.split()) >= 2:
                terms.append(_Term("phrase", phrase))
    return terms


def _call_terms(tool: str, subjects: Sequence[str]) -> list[_Term]:
    """The terms of a call: its subjects' and, when they are none or it names a domain
    action (``get_reservation_details``, not ``Bash`` nor ``exec_command``), its tool's
    name."""
    terms = _terms(subjects)
    domain = ("_" in tool or bool(re.search(r"[a-z][A-Z]", tool))) and not _RUNNER.search(tool)
    if tool and (not terms or domain):
        terms.append(_Term("phrase", _flat(tool)))
    return terms


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
    what it says: a failure (a negation, or under an errors heading), something pending."""

    text: str
    flat: str
    negative: bool
    pending: bool


class _Summary:
    """A summary read once: its units indexed by word, the paths written in it by name."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.units: list[_Unit] = []
        self.by_word: dict[str, list[int]] = {}
        self.paths: dict[str, list[tuple[str, int]]] = {}  # basename: (path, unit)
        self.bare: set[str] = set()  # file names written without a folder
        self._read(text)

    # -- reading ------------------------------------------------------------------------------

    def _read(self, text: str) -> None:
        section = ""  # "errors", "pending" or ""
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
                section = (
                    "errors" if _ERRORS_SECTION.search(title)
                    else "pending" if _PENDING_SECTION.search(title) else ""
                )  # fmt: skip
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
                block.flat += _flat(line)[1:]
                block.negative = block.negative or self.units[at].negative
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
                text, _flat(text),
                section == "errors" or bool(_NEGATION.search(text)),
                section == "pending" or bool(_PENDING.search(text)),
            )
        )  # fmt: skip
        self._index(at, text)

    def _index(self, at: int, text: str) -> None:
        for word in dict.fromkeys(_WORDS.findall(text.lower())):
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

    def units_naming(self, terms: Iterable[_Term]) -> Iterator[int]:
        """The units that name one of `terms`."""
        for term in terms:
            phrase = term.value
            if term.kind == "path":
                name = _basename(term.value)
                for written, at in self.paths.get(name, ()):
                    if same_identifier(term.value, written):
                        yield at
                if "." not in name:
                    continue  # a folder is named by a path, never by its last name alone
                phrase = _flat(name)
            elif term.kind == "raw":
                yield from (i for i, u in enumerate(self.units) if term.value in u.text)
                continue
            words = phrase.split()
            if not words:
                continue
            rarest = min(words, key=lambda w: len(self.by_word.get(w, ())))
            for at in self.by_word.get(rarest, ()):
                if phrase in self.units[at].flat:
                    yield at

    def states_negative(self, negative: Negative) -> bool:
        """True when one unit names the negative's call and says it failed (or the summary
        writes its call id)."""
        if negative.call_id and _token(negative.call_id).search(self.text):
            return True
        terms = _call_terms(negative.tool, negative.subjects)
        return any(self.units[at].negative for at in self.units_naming(terms))

    def states_pending(self, ref: ObligationRef) -> bool:
        """True when one unit names the obligation and says it is still pending (or lists
        it under a pending heading), or the summary writes its id."""
        if ref.id and _token(ref.id).search(self.text):
            return True
        if ref.kind == "commitment":
            words = (w for subject in ref.subjects for w in _WORDS.findall(subject.lower()))
            return any(self.units[at].pending for w in words for at in self.by_word.get(w, ()))
        terms = _call_terms(ref.name, ref.subjects)
        return any(self.units[at].pending for at in self.units_naming(terms))


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
