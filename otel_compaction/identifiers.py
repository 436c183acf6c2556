"""Identifiers as whole values: found in text, put in one canonical form, matched by binding.

An identifier (a booking code, a user id, a path, an e-mail address, a long numeric id) is only
ever taken whole. Every identifier sits in a run of ``[\\w.+@/~#-]`` that holds a digit, an ``@``,
a ``/`` or a ``-``; `candidates` finds those runs, strips the punctuation that ends a sentence
or wraps a value, and the policy's identifier shapes must match a run *entirely* (never a piece
of it, as a path inside a longer path). `canonical` gives one form per value (``./src/a.py``
and ``src/a.py`` are one path), and `same_identifier` says whether a value written in a summary
carries an owed one (an absolute path is carried by the same path relative to a project root).
"""

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

# A run of ASCII text (almost all of it) is found from its first digit, @, / or -: the engine
# tests only those characters in its fast loop, and the possessive tail reads the rest of the
# run once. Splitting the text on these tails leaves between them text that holds no digit,
# @, / or -, so a run's letters before its first one are the letters that end the piece before
# it: all of this is done by the engine and by string methods, never a line of Python per run.
_ASCII_TAIL: Final = re.compile(r"([0-9@/-][A-Za-z0-9_.+@/~#-]*+)")
_ASCII_HEAD: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.+~#"
# Other text is read with Unicode classes, each run found from the character before it (the
# text is read with a space put before it): a pattern that opens with a character class lets
# the engine skip every character that cannot stand before a run, so a word costs one attempt.
# The letters before the first digit, @, / or - are taken possessively and never given back, so
# an attempt reads its word once and the whole scan stays linear in the text.
_RUN: Final = re.compile(r"[^\w.+@/~#-]((?:[^\W\d]|[.+~#])*+[\d@/-][\w.+@/~#-]*+)")
MAX_LENGTH: Final = 256
"""The longest value taken for an identifier: a longer run (an encoded blob, a generated path)
is nothing a summary restates, and the archive handle covers it."""
# Punctuation that ends a sentence or closes a quotation around a value, never part of it.
_TRAILING: Final = ".,;:!?'\"`)]}>"
_LEADING: Final = "'\"`([{<#"


def canonical(value: str) -> str:
    """One form per identifier: wrapping punctuation and a leading ``./`` removed."""
    value = value.rstrip(_TRAILING).lstrip(_LEADING)
    while value.startswith("./"):
        value = value[2:]
    if len(value) > 1 and value.endswith("/"):
        value = value.rstrip("/")
    return value


def runs(text: str) -> list[str]:
    """Every maximal run of ``[\\w.+@/~#-]`` in `text` that holds a digit, an ``@``, a ``/`` or
    a ``-``, in order, as written."""
    if not text.isascii():
        return _RUN.findall(" " + text)
    pieces = _ASCII_TAIL.split(text)
    tails = pieces[1::2]
    if not tails:
        return tails
    before = pieces[0:-1:2]
    heads = map(str.removeprefix, before, map(str.rstrip, before, repeat(_ASCII_HEAD)))
    return list(map(operator.add, heads, tails))


def _trimmed(run: str) -> str:
    """`canonical` of `run`, skipped for the runs that need no trimming (the hot path)."""
    if run[-1] in _TRAILING or run[0] in _LEADING or run[-1] == "/" or run[:2] == "./":
        return canonical(run)
    return run


def candidates(text: str) -> Iterator[str]:
    """Every run of `text` that could be an identifier, in canonical form, in order."""
    for run in runs(text):
        value = _trimmed(run)
        if len(value) >= 3:
            yield value


def find_identifiers(
    text: str,
    shapes: Scan,
    known: dict[str, str] | None = None,
    stopwords: frozenset[str] = frozenset(),
) -> list[str]:
    """The identifiers of `text`, in order: candidates that one of the policy's shapes
    matches whole, `stopwords` aside.

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
    value = _trimmed(run)
    if not 3 <= len(value) <= MAX_LENGTH or value in stopwords:
        return ""
    # A run of ASCII text is made of ASCII run characters only, which both engines read alike.
    whole = shapes.whole_run if value.isascii() else shapes.whole
    return value if whole(value) else ""


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
