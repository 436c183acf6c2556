"""Identifiers as whole values: found in text, put in one canonical form, matched by binding.

An identifier (a booking code, a user id, a path, a file name, an e-mail address, a long numeric
id, a host and port) is only ever taken whole. Every identifier sits in a run of
``[\\w.+@/~#-]`` (with a ``:`` before a digit joined in: ``localhost:3001``, ``app.py:42``) that
holds a digit, an ``@``, a ``/``, a ``-``, a joined ``:`` or a ``.`` before a letter
(``CLAUDE.md``), or that opens with six capitals (``HXDUBJ``); a Windows path (``C:\\Users\\dev``,
its backslashes doubled in JSON) is a run too. `candidates` finds those runs, strips the
punctuation that ends a sentence or wraps a value, and the policy's identifier shapes must
match a run *entirely* (never a piece of it, as a path inside a longer path), or, for a run
joined at a colon, one of its pieces (``app.py`` of ``app.py:42``). `canonical` gives one form
per value (``./src/a.py`` and ``src/a.py`` are one path), and `same_identifier` says whether a
value written in a summary carries an owed one (an absolute path is carried by the same path
relative to a project root)."""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator
from itertools import repeat
from typing import Final

from otel_compaction.patterns import Scan

__all__ = [
    "MAX_LENGTH",
    "candidates",
    "canonical",
    "find_identifiers",
    "is_path",
    "runs",
    "same_identifier",
]

# A run of ASCII text (almost all of it) is found from the character that makes it one (its
# first digit, @, / or -, a : before a digit or a backslash, a . before a letter, the first of
# six capitals): the engine tests only the characters of the opening class in its fast loop, a
# look at the characters about it says whether one opens a run, and the possessive tail reads
# the rest of the run once. Splitting the text on these tails leaves between them text that
# opens no run, so a run's letters before its tail are the letters that end the piece before
# it: all of this is done by the engine and by string methods, never a line of Python per run.
_ASCII_TAIL: Final = re.compile(
    r"([0-9@/:.A-Z-](?:"
    r"(?<=:)(?:\\{1,2}[A-Za-z0-9_.+@~#-]+)++"  # a Windows path after its drive letter
    r"|(?:(?<=[0-9@/-])|(?<=:)(?=[0-9])|(?<=\.)(?=[A-Za-z])"
    r"|(?<=[A-Z])(?<![A-Za-z0-9_.+@/~#-][A-Z])(?=[A-Z]{5}))"
    r"[A-Za-z0-9_.+@/~#-]*+(?::[0-9][A-Za-z0-9_.+@/~#-]*+)*+))"
)
_ASCII_HEAD: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.+~#"
# Scripts written without spaces between words (kana, CJK ideographs, hangul) end a run as a
# space does: ``TodoApp.tsx等`` is the file name and a word after it.
_UNSPACED: Final = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+"
)
# Other text is read with Unicode classes, each run found from the character before it (the
# text is read with a space put before it): a pattern that opens with a character class lets
# the engine skip every character that cannot stand before a run, so a word costs one attempt.
# The letters before the character that opens the run are taken one at a time until it comes
# (each step looks at one character), so an attempt reads its word once and the whole scan
# stays linear in the text.
_RUN: Final = re.compile(
    r"[^\w.+@/~#-]((?:[^\W\d]|[.+~#])*?(?:"
    r":(?:\\{1,2}[\w.+@~#-]+)++"
    r"|(?:[\d@/-]|:(?=\d)|\.(?=[^\W\d_])|(?<![\w.+@/~#-])[A-Z](?=[A-Z]{5}))"
    r"[\w.+@/~#-]*+(?::\d[\w.+@/~#-]*+)*+))"
)
MAX_LENGTH: Final = 256
"""The longest value taken for an identifier: a longer run (an encoded blob, a generated path)
is nothing a summary restates, and the archive handle covers it."""
# Punctuation that ends a sentence or closes a quotation around a value, never part of it.
_TRAILING: Final = ".,;:!?'\"`)]}>"
_LEADING: Final = "'\"`([{<#"
# A backslash alone in a Windows path whose backslashes are doubled: an escape after its end.
_LONE_BACKSLASH: Final = re.compile(r"(?<!\\)\\(?!\\)")


def canonical(value: str) -> str:
    """One form per identifier: wrapping punctuation, a leading ``./`` and a folder's closing
    slash removed; a Windows path with single backslashes (as written outside JSON)."""
    value = value.rstrip(_TRAILING).lstrip(_LEADING)
    while value.startswith("./"):
        value = value[2:]
    if "\\" in value:
        value = _windows(value)
    if len(value) > 1 and value.endswith("/"):
        value = value.rstrip("/")
    return value


def _windows(value: str) -> str:
    """A Windows path's one form. Doubled backslashes are a JSON string's escape of one: the
    path ends at the first backslash that is not doubled (a ``\\n`` after it), and each pair is
    one separator. A folder's closing backslash is removed."""
    if "\\\\" in value:
        lone = _LONE_BACKSLASH.search(value)
        if lone is not None:
            value = value[: lone.start()]
        value = value.replace("\\\\", "\\")
    return value.rstrip("\\") if len(value) > 3 else value


def runs(text: str) -> list[str]:
    """Every run of `text` that could hold an identifier (see the module docstring), in
    order, as written."""
    if not text.isascii():
        return _RUN.findall(" " + _UNSPACED.sub(" ", text))
    pieces = _ASCII_TAIL.split(text)
    tails = pieces[1::2]
    if not tails:
        return tails
    before = pieces[0:-1:2]
    heads = map(str.removeprefix, before, map(str.rstrip, before, repeat(_ASCII_HEAD)))
    return list(map(operator.add, heads, tails))


def _trimmed(run: str) -> str:
    """`canonical` of `run`, skipped for the runs that need no trimming (the hot path)."""
    if (
        run[-1] in _TRAILING
        or run[0] in _LEADING
        or run[-1] == "/"
        or run[:2] == "./"
        or "\\" in run
    ):
        return canonical(run)
    return run


def _forms(value: str) -> tuple[str, ...]:
    """The values a trimmed run may be, in order of preference: the run itself, and for a run
    joined at a colon (not a Windows path) the host and port of a URL (``//localhost:3001``),
    then each piece (``app.py:42`` names ``app.py`` at a line)."""
    if ":" not in value or "\\" in value:
        return (value,)
    forms = [value]
    if value.startswith("//"):
        forms.append(value.lstrip("/"))
    forms.extend(_trimmed(piece) for piece in value.split(":") if piece)
    return tuple(forms)


def candidates(text: str) -> Iterator[str]:
    """Every value of `text` that could be an identifier, in canonical form, in order: each
    run, and the pieces of a run joined at a colon."""
    for run in runs(text):
        for value in _forms(_trimmed(run)):
            if len(value) >= 3:
                yield value


def find_identifiers(
    text: str,
    shapes: Scan,
    known: dict[str, str] | None = None,
    stopwords: frozenset[str] = frozenset(),
) -> list[str]:
    """The identifiers of `text`, in order: of each run's candidates, the first that one of
    the policy's shapes matches whole, `stopwords` aside.

    `known` remembers each run's verdict across calls, as written: its identifier, or ``""``
    when it is none (one transcript repeats the same dates, codes and ids many times over, so
    a run seen before costs one lookup). Keep one `known` per `shapes` and `stopwords`."""
    if known is None:
        known = {}
    get = known.get
    found: list[str] = []
    for run in runs(text):
        value = get(run)
        if value is None:
            value = known[run] = _judge(run, shapes, stopwords)
        if value:
            found.append(value)
    return found


def _judge(run: str, shapes: Scan, stopwords: frozenset[str]) -> str:
    """The identifier `run` is, or ``""``."""
    for value in _forms(_trimmed(run)):
        if not 3 <= len(value) <= MAX_LENGTH or value in stopwords:
            continue
        # A run of ASCII text is made of ASCII characters that both engines read alike.
        whole = shapes.whole_run if value.isascii() else shapes.whole
        if whole(value):
            return value
    return ""


def is_path(value: str) -> bool:
    """True for a path: a value with a slash that is not an e-mail address."""
    return "/" in value and "@" not in value


def same_identifier(owed: str, written: str) -> bool:
    """True when `written` (in a summary) carries `owed`.

    Equal canonical forms carry; for paths, one form may be the other with a leading root
    (``/home/dev/shop/src/a.py`` and ``src/a.py``), so long as the shorter one keeps at least
    a directory and a name.
    """
    owed, written = canonical(owed), canonical(written)
    if owed == written:
        return True
    if not (is_path(owed) and is_path(written)):
        return False
    longer, shorter = (owed, written) if len(owed) > len(written) else (written, owed)
    shorter = shorter.lstrip("/")
    return "/" in shorter and longer.endswith("/" + shorter)
