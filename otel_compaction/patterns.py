"""Policy patterns: compiled once, scanned fast, and matched as whole words where it matters.

A policy lists its detection patterns (negative results, failures, rejections, commitments,
identifier shapes) as lists of regular expressions. `compile_patterns` joins a list into one
alternation so that each text is scanned once per list; `scanner` wraps the result in a `Scan`
that runs the same expression in ASCII mode whenever that finds exactly the same matches (about
twice as fast). `sentences` splits prose the way the commitment and verification checks read it.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["Scan", "compile_patterns", "scanner", "sentences"]

_GLOBAL_FLAGS: Final = re.compile(r"^\(\?([aiLmsux]+)\)")
# A non-ASCII character written as an escape: it may fold case onto an ASCII letter.
_WIDE_ESCAPE: Final = re.compile(r"\\[uUN]")
# Sentence ends: ., ! or ? followed by white space, or a line break. A dot inside a path or a
# version number is followed by no space, so it does not end a sentence.
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+|\n+")


def _scoped(pattern: str) -> str:
    """``(?i)word`` -> ``(?i:word)``: a leading flag group may only stand at the very start of
    a whole expression, so each alternative keeps its flags to itself."""
    match = _GLOBAL_FLAGS.match(pattern)
    if match is None:
        return f"(?:{pattern})"
    flags = match.group(1)
    # In verbose mode a '#' comment runs to the end of the line: end the line before the
    # group closes, or the comment would swallow the rest of the alternation.
    end = "\n)" if "x" in flags else ")"
    return f"(?{flags}:{pattern[match.end() :]}{end}"


def compile_patterns(patterns: list[str]) -> re.Pattern[str] | None:
    """One alternation for a list, so a rule scans each text once; None for an empty list."""
    if not patterns:
        return None
    return re.compile("|".join(_scoped(p) for p in patterns))


class Scan:
    """A policy regex that runs in ASCII mode on the text where that finds the same matches.

    Python's `re` matches str patterns with Unicode semantics; ASCII semantics run about twice
    as fast and find exactly the same matches when the text is ASCII without the separators
    U+001C..U+001F (the only ASCII characters Unicode ``\\s`` adds) and the pattern names no
    non-ASCII character (one could fold case onto an ASCII letter, as the Kelvin sign does
    onto ``k``). Everywhere else the policy's own regex runs.
    """

    __slots__ = ("_ascii", "_unicode")

    def __init__(self, regex: re.Pattern[str]) -> None:
        self._unicode = regex
        self._ascii: re.Pattern[str] | None = None
        source = regex.pattern
        if source.isascii() and _WIDE_ESCAPE.search(source) is None:
            try:
                self._ascii = re.compile(source, (regex.flags & ~re.UNICODE) | re.ASCII)
            except (re.error, ValueError):  # the pattern asks for Unicode itself: (?u)
                self._ascii = None

    def pattern_for(self, text: str) -> re.Pattern[str]:
        """The compiled regex that reads `text` (and any part of it) as the policy's would."""
        return self._for(text)

    def _for(self, text: str) -> re.Pattern[str]:
        if (
            self._ascii is not None
            and text.isascii()
            and "\x1c" not in text
            and "\x1d" not in text
            and "\x1e" not in text
            and "\x1f" not in text
        ):
            return self._ascii
        return self._unicode

    def search(self, text: str) -> re.Match[str] | None:
        """`re.Pattern.search` of the policy's regex."""
        return self._for(text).search(text)

    def fullmatch(self, text: str) -> re.Match[str] | None:
        """`re.Pattern.fullmatch` of the policy's regex."""
        return self._for(text).fullmatch(text)

    def findall(self, text: str) -> list[Any]:
        """`re.Pattern.findall` of the policy's regex."""
        return self._for(text).findall(text)


# Keyed by id(); each value holds its regex, so an id cannot be reused while it is cached.
_SCANS: dict[int, tuple[re.Pattern[str], Scan]] = {}


def scanner(regex: re.Pattern[str] | None) -> Scan | None:
    """The `Scan` of a policy regex (None for none), built once per regex."""
    if regex is None:
        return None
    cached = _SCANS.get(id(regex))
    if cached is not None and cached[0] is regex:
        return cached[1]
    if len(_SCANS) >= 256:
        _SCANS.clear()
    scan = Scan(regex)
    _SCANS[id(regex)] = (regex, scan)
    return scan


def sentences(text: str) -> list[str]:
    """`text` split into sentences and lines, stripped, empty ones dropped."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
