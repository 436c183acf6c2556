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

import re
from collections.abc import Iterator
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

# A run is found from the character before it (the text is read with a space put before it):
# a pattern that opens with a character class lets the engine skip, in its fast loop, every
# character that cannot stand before a run, so a word costs one attempt rather than one per
# character. The letters before the first digit, @, / or - are taken possessively and never
# given back, so an attempt reads its word once and the whole scan stays linear in the text.
# ASCII text (almost all of it) is read with ASCII classes, which the engine tests faster.
_RUN: Final = re.compile(r"[^\w.+@/~#-]((?:[^\W\d]|[.+~#])*+[\d@/-][\w.+@/~#-]*+)")
_ASCII_RUN: Final = re.compile(
    r"[^A-Za-z0-9_.+@/~#-]([A-Za-z_.+~#]*+[0-9@/-][A-Za-z0-9_.+@/~#-]*+)"
)
MAX_LENGTH: Final = 256
"""The longest value taken for an identifier: a longer run (an encoded blob, a generated path)
is nothing a summary restates, and the archive handle covers it."""
# Punctuation that ends a sentence or closes a quotation around a value, never part of it.
_TRAILING: Final = ".,;:!?'\"`)]}>"
_LEADING: Final = "'\"`([{<#"


def canonical(value: str) -> str:
    """One form per identifier: wrapping punctuation and a leading ``./`` removed."""
    value = value.strip(_TRAILING).lstrip(_LEADING)
    while value.startswith("./"):
        value = value[2:]
    if len(value) > 1 and value.endswith("/"):
        value = value.rstrip("/")
    return value


def runs(text: str) -> list[str]:
    """Every maximal run of ``[\\w.+@/~#-]`` in `text` that holds a digit, an ``@``, a ``/`` or
    a ``-``, in order, as written."""
    return (_ASCII_RUN if text.isascii() else _RUN).findall(" " + text)


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


def find_identifiers(text: str, shapes: Scan, known: dict[str, bool] | None = None) -> list[str]:
    """The identifiers of `text`, in order: candidates that one of the policy's shapes
    matches whole.

    `known` remembers each candidate's verdict across calls (one transcript repeats the same
    dates, codes and ids many times over)."""
    # A run of ASCII text is made of ASCII run characters only, which both engines read alike.
    ascii = text.isascii()
    whole = shapes.whole_run if ascii else shapes.whole
    if known is None:
        known = {}
    found: list[str] = []
    for run in (_ASCII_RUN if ascii else _RUN).findall(" " + text):
        # `_trimmed`, inline (the hot path: most runs need no trimming).
        if run[-1] in _TRAILING or run[0] in _LEADING or run[-1] == "/" or run[:2] == "./":
            value = canonical(run)
        else:
            value = run
        if not 3 <= len(value) <= MAX_LENGTH:
            continue
        verdict = known.get(value)
        if verdict is None:
            verdict = known[value] = whole(value)
        if verdict:
            found.append(value)
    return found


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
