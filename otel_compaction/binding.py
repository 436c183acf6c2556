"""Which call a clause of a summary is about: a call named by what it was about, told apart
from the other calls of its tool.

A summary states a negative result (or a pending call) only when one clause says that *this*
call failed, not when a sentence somewhere holds the program's name and a negation. A call is
reduced to its `Name` s: the paths, patterns, dates and values of its arguments, the programs
of a command and the command's other words, its tool's name when that names a domain action
(``get_reservation_details``, not ``Bash``). A clause names the call when it writes one
name that is enough alone (a path, a pattern, a date, a value, a program, a leading phrase) or
two of a command's other words; and among the other calls of the same tool in the span (its
*siblings*), it names the call only when what it writes tells the call from each of them (the
searched route ``JFK`` and ``LAX``, not the date every search of the day shares). A sibling
that has every name of the call (the same command run again, with more options) is the same
call and never stands in the way.

A date is also named by a range that covers it (``every date from 2024-05-01 through
2024-05-13``), and a path by the same path written in an equivalent form (relative to a
project root, with the other slashes, or its file name when it has an extension).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal

from otel_compaction.identifiers import candidates, canonical, is_path, same_identifier

__all__ = [
    "WORDS", "Clause", "Name", "clause", "flat", "named", "names", "names_call",
    "sibling_names", "tells_apart",
]  # fmt: skip

NameKind = Literal[
    "path", "file_name", "pattern", "date", "value", "program", "phrase", "word", "tool"
]

WORDS: Final = re.compile(r"[^\W_]+(?:[_-][^\W_]+)*")
"""A word of text: a snake or kebab name is one word (``search`` is not ``search_logs``)."""
_DATE: Final = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_DATE_RANGE: Final = re.compile(
    r"(\d{4}-\d{2}-\d{2})\s*(?:through|thru|to|until|till|-|\u2013|\u2014|\.\.)\s*(\d{4}-\d{2}-\d{2})"
)
_FILE_NAME: Final = re.compile(r"\.?[\w-]+(?:\.[\w-]+)*\.[A-Za-z][A-Za-z0-9]{0,7}")
_GLOB: Final = re.compile(r"[*?\[\]{}]")
_WINDOWS_PATH: Final = re.compile(r"(?<![\w\\])(?:[A-Za-z]:|\.{1,2})?\\(?:[^\s\\\"'`|;,()<>]+\\?)+")
_SEGMENTS: Final = re.compile(r"&&|\|\||[;|\n]")
_QUOTES: Final = "'\"`()[]{}"
_LEADING_WORDS: Final = 4
# Tools that run a command or a script: their name says nothing about which call it was.
_RUNNER: Final = re.compile(r"(?i)shell|command|exec|terminal|bash|powershell|script")
_STOP: Final = frozenset({
    "a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "with", "from", "into", "by",
    "at", "as", "is", "be", "not", "no", "null", "true", "false", "none", "then", "else", "if",
    "fi", "do", "done", "echo",
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Name:
    """One way a summary names a call. ``alone``: enough by itself to name the call (a
    command's other words need a second)."""

    kind: NameKind
    value: str
    alone: bool = True


@dataclass(slots=True)
class Clause:
    """A clause of a summary: its text, its words (lowercase, between single spaces) and the
    paths written in it."""

    text: str
    flat: str
    paths: tuple[str, ...]


def flat(text: str) -> str:
    """`text` as its lowercase words between single spaces, a snake or kebab name one word,
    padded with a space each side."""
    return " " + " ".join(WORDS.findall(text.lower())) + " "


def _slashes(path: str) -> str:
    return path.replace("\\", "/").rstrip("/")


def _path(value: str) -> str:
    """A path (POSIX or Windows) in one form: forward slashes, `canonical`."""
    return canonical(_slashes(value))


def written_paths(text: str) -> tuple[str, ...]:
    """The paths `text` writes, POSIX and Windows, canonical with forward slashes."""
    found = [canonical(c) for c in candidates(text) if is_path(c)]
    found.extend(_path(m) for m in _WINDOWS_PATH.findall(text))
    return tuple(dict.fromkeys(p for p in found if p))


def clause(text: str) -> Clause:
    """`text` read as one clause."""
    return Clause(text, flat(text), written_paths(text))


def _is_path(word: str) -> bool:
    return bool(_WINDOWS_PATH.fullmatch(word)) or is_path(canonical(word))


def _word_name(word: str, kind: NameKind, alone: bool) -> Name | None:
    words = WORDS.findall(word.lower())
    if not words:
        return None
    value = " ".join(words)
    if len(words) == 1 and (len(value) < 3 or value in _STOP):
        return None
    return Name(kind if len(words) == 1 else "phrase", value, alone or len(words) > 1)


def _single(value: str) -> Name | None:
    """The name of an argument value written without spaces."""
    if _GLOB.search(value):
        return Name("pattern", value)
    if _DATE.fullmatch(value):
        return Name("date", value)
    if ("/" in value or "\\" in value) and _is_path(value):
        return Name("path", _path(value))
    if "." in value and is_path(canonical(value)):
        return Name("path", canonical(value))
    if _FILE_NAME.fullmatch(value):
        return Name("file_name", value)
    return _word_name(value, "value", alone=True)


def _command(text: str) -> list[Name]:
    """The names of a command or a query: each segment's program and leading phrase, and
    the paths, patterns, dates and other words of its arguments."""
    out: list[Name] = []
    for segment in _SEGMENTS.split(text):
        words = [w.strip(_QUOTES) for w in segment.split()]
        words = [w for w in words if w]
        if len(words) >= 2 and words[1] == "=":  # ``$latest = Get-ChildItem ...``
            words = words[2:]
        if not words:
            continue
        program, rest = words[0], words[1:]
        if _is_path(program) and not _GLOB.search(program):
            program = _slashes(program).rsplit("/", 1)[-1]
        if (found := _word_name(program, "program", alone=True)) is not None:
            out.append(found)
        leading = [program]
        for word in rest:
            if any(c in word for c in "/\\=<>") or len(leading) == _LEADING_WORDS:
                break
            leading.append(word.lstrip("-"))
        phrase = flat(" ".join(leading)).split()
        while phrase and phrase[-1] in _STOP:
            phrase.pop()
        if len(phrase) >= 2:
            out.append(Name("phrase", " ".join(phrase)))
        for word in (part for w in rest for part in w.split(",")):
            if not word or word.startswith(("-", "$")):
                continue
            name = _single(word.strip(_QUOTES))
            if name is not None and name.kind in ("value", "phrase"):
                name = Name("word", name.value, alone=False) if name.kind == "value" else None
            if name is not None:
                out.append(name)
    return out


@lru_cache(maxsize=4096)
def names(tool: str, subjects: tuple[str, ...]) -> frozenset[Name]:
    """Every name of a call of `tool` about `subjects` (see the module docstring)."""
    out: list[Name] = []
    for written in subjects:
        value = written.strip()
        if not value or value.startswith("-"):  # an option of an argument vector
            continue
        if any(c.isspace() for c in value):
            out.extend(_command(value))
            out.extend(Name("path", p) for p in written_paths(value))
        elif (name := _single(value)) is not None:
            out.append(name)
    out.extend(_file_names(out))
    programs = {n.value for n in out if n.kind == "program"}
    out = [n for n in out if not (n.kind == "value" and n.value in programs)]
    domain = ("_" in tool or bool(re.search(r"[a-z][A-Z]", tool))) and not _RUNNER.search(tool)
    alone = domain or not any(n.alone for n in out)
    if tool and (found := _word_name(tool, "tool", alone=alone)) is not None:
        out.append(found)
    return frozenset(out)


def _file_names(found: Iterable[Name]) -> list[Name]:
    """The file name of each path with a folder and an extension: written alone it names
    the call only with a second name (``the Write of CLAUDE.md``), since other calls touch
    files of that name too."""
    out = []
    for name in found:
        if name.kind == "path" and "/" in name.value:
            base = name.value.rsplit("/", 1)[-1]
            if "." in base.lstrip("."):
                out.append(Name("file_name", base, alone=False))
    return out


def _covers(text: str, date: str) -> bool:
    return any(a <= date <= b for a, b in _DATE_RANGE.findall(text))


@lru_cache(maxsize=8192)
def _bounded(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.~/\\:-]){re.escape(value)}(?![\w-])", re.IGNORECASE)


def written(name: Name, where: Clause, others: frozenset[str] = frozenset()) -> bool:
    """Whether `where` writes `name`; a path also in an equivalent form, unless what it
    writes is exactly one of `others` (a sibling's own path)."""
    if name.kind == "path":
        path = name.value
        if _bounded(path).search(_slashes(where.text)):
            return True
        return any(
            p not in others and (same_identifier(path, p) or same_identifier(p, path))
            for p in where.paths
        )

    if name.kind == "file_name":
        return bool(_bounded(name.value).search(where.text))
    if name.kind == "pattern":
        return bool(_bounded(name.value).search(where.text))
    if name.kind == "date":
        return name.value in where.text or _covers(where.text, name.value)
    return f" {name.value} " in where.flat


def named(
    call: frozenset[Name], where: Clause, siblings: Sequence[frozenset[Name]] = ()
) -> frozenset[Name]:
    """The names of `call` that `where` writes (a path's equivalent forms only where they
    are not a sibling's own path)."""
    others = frozenset(n.value for s in siblings for n in s if n.kind == "path") - {
        n.value for n in call if n.kind == "path"
    }
    return frozenset(n for n in call if written(n, where, others))


def names_call(found: frozenset[Name], *, only: bool = False) -> bool:
    """Whether the names a clause writes are enough to name a call: one that stands alone,
    or two of the others besides the tool's name; the tool's name alone when the call is
    the `only` one of its tool owed."""
    if any(n.alone or (only and n.kind == "tool") for n in found):
        return True
    return sum(n.kind != "tool" for n in found) >= 2


def tells_apart(
    found: frozenset[Name], call: frozenset[Name], siblings: Iterable[frozenset[Name]]
) -> bool:
    """Whether names `found` (of `call`) tell it from each sibling: each lacks one of them.
    A sibling with every name of `call` (the same call run again, or one it differs from
    only in what no name holds, as an amount) cannot be told apart by naming, and is not
    asked to be."""
    return all(found - sibling for sibling in siblings if not call <= sibling)


def sibling_names(tool: str, siblings: Sequence[tuple[str, ...]]) -> list[frozenset[Name]]:
    """The names of each sibling call of `tool`."""
    return [names(tool, s) for s in siblings]
