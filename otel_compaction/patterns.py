"""Policy patterns: compiled once, scanned in linear time, one pass per text and list.

A policy lists its detection patterns (negative results, failures, rejections, commitments,
identifier shapes) as lists of regular expressions; `compile_patterns` joins a list into one
alternation, a `Scan`, so that each text is read once per list.

No pattern can hang the gate, whoever wrote it. A `Scan` runs on one of two engines:

- **RE2** (``google-re2``), a linear-time automaton: a 400 KB blob or a pattern such as
  ``(a+)+$`` costs time in proportion to the text, never more. It runs every pattern it can
  express, on every text whose meaning it reads as Python's `re` does: ASCII text (without
  ``\\v`` and U+001C..U+001F, the only ASCII characters Python's ``\\s`` adds to RE2's).
- **A bounded backtracking scan** (the ``regex`` module, compatible with `re`) for what RE2
  cannot express (lookaround, backreferences) and for non-ASCII text, where ``\\w``, ``\\d``,
  ``\\s`` and ``\\b`` are Unicode classes. Each call is stopped after `MATCH_TIMEOUT` seconds and
  counts as no match (CPU time of the thread, so a busy machine changes no verdict); a pattern
  list that times out `MAX_TIMEOUTS` times is switched off for the rest of the process, logged
  as an error naming it. The worst case of one list is therefore about
  ``MAX_TIMEOUTS * MATCH_TIMEOUT`` of CPU time per process, whatever its input.

Why not one engine: RE2 alone would reject the lookaheads that identifier shapes need to say
"letters and digits mixed", and would read ``\\w`` in non-ASCII text differently from the
policy author's Python; `re` alone can run for minutes on a 40-character text.

Verbose patterns (``(?x)`` with comments) and capture groups work in both. `sentences` splits
prose the way the commitment and verification checks read it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Literal, Protocol

import re2
import regex

__all__ = ["MATCH_TIMEOUT", "MAX_TIMEOUTS", "Match", "Scan", "compile_patterns", "sentences"]

_log = logging.getLogger(__name__)

MATCH_TIMEOUT: Final = 0.02
"""Seconds one backtracking match may run before it is stopped and counts as no match."""
MAX_TIMEOUTS: Final = 3
"""Timeouts after which a backtracking pattern list is switched off for the process."""
# Wall time one match may be given while its thread waits on others, before it counts as a
# timeout whatever the CPU time spent.
_MAX_WALL: Final = 2.0

Engine = Literal["re2", "bounded"]

_GLOBAL_FLAGS: Final = re.compile(r"^\(\?([aiLmsux]+)\)")
# Sentence ends: ., ! or ? followed by white space, or a line break. A dot inside a path or a
# version number is followed by no space, so it does not end a sentence.
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+|\n+")
# ASCII characters that Python's \s matches and RE2's does not.
_RE2_BLIND: Final = frozenset("\x0b\x1c\x1d\x1e\x1f")


def _seen_alike(text: str) -> bool:
    """True when `text` holds none of `_RE2_BLIND` (a short text is read one character at a
    time; a long one is searched for each, which runs at memory speed)."""
    if len(text) < 64:
        return _RE2_BLIND.isdisjoint(text)
    return not (
        "\x0b" in text or "\x1c" in text or "\x1d" in text or "\x1e" in text or "\x1f" in text
    )


class Match(Protocol):
    """What the rules read of a match, on either engine."""

    def group(self, index: int = 0, /) -> Any:
        """The text of group `index` (0: the whole match)."""

    def groups(self) -> tuple[Any, ...]:
        """Every capture group's text, None for those that did not take part."""

    def start(self, index: int = 0, /) -> int:
        """Where the match (or group `index`) starts."""

    def span(self, index: int = 0, /) -> tuple[int, int]:
        """Where the match (or group `index`) starts and ends."""


def _tokens(source: str) -> Iterator[tuple[str, bool]]:
    """`source` as (token, inside a character class) pairs: an escape is one token, and the
    ``^`` and ``]`` that may open a class are its literals."""
    i, n = 0, len(source)
    in_class = False
    while i < n:
        char = source[i]
        if char == "\\" and i + 1 < n:
            yield source[i : i + 2], in_class
            i += 2
            continue
        if in_class:
            in_class = char != "]"
            yield char, True
        elif char == "[":
            in_class = True
            opened = 1
            for literal in ("^", "]"):  # a leading ^ negates, a leading ] is a literal
                if source[i + opened : i + opened + 1] == literal:
                    opened += 1
            yield source[i : i + opened], True
            i += opened
            continue
        else:
            yield char, False
        i += 1


def _unverbose(pattern: str) -> str:
    """A ``(?x)`` body without its layout: unescaped white space and ``#`` comments outside
    character classes removed, as Python's verbose mode reads them."""
    out: list[str] = []
    comment = False
    for token, in_class in _tokens(pattern):
        if comment:
            comment = token != "\n"
        elif in_class or not (token == "#" or token.isspace()):
            out.append(token)
        else:
            comment = token == "#"
    return "".join(out)


def _python_spaces(source: str) -> str:
    """`source` with ``\\s`` and ``\\S`` read as Python's `re` reads them: Unicode white space
    and the separators U+001C..U+001F (which the ``regex`` module leaves out of ``\\s``)."""
    spaces = {
        ("\\s", False): "[\\s\\x1c-\\x1f]",
        ("\\s", True): "\\s\\x1c-\\x1f",
        ("\\S", False): "[^\\s\\x1c-\\x1f]",
    }
    return "".join(spaces.get(t, t[0]) for t in _tokens(source))


def _re2_ends(source: str) -> tuple[str, bool]:
    """`source` with Python's end anchors in RE2's spelling: ``\\Z`` is ``\\z``, and so is a
    ``$`` outside multi-line mode (true whenever the text does not end in a newline, before
    which Python's ``$`` also matches); and whether it has such a ``$``."""
    out: list[str] = []
    dollar = False
    for token, in_class in _tokens(source):
        end = token == "$" and not in_class
        dollar = dollar or end
        out.append("\\z" if end or token == "\\Z" else token)
    return "".join(out), dollar


def _scoped(pattern: str, *, strip_verbose: bool) -> str:
    """``(?i)word`` -> ``(?i:word)``: a leading flag group may only stand at the very start of
    a whole expression, so each alternative keeps its flags to itself. For RE2, which has no
    verbose mode, a verbose pattern's layout is removed instead."""
    match = _GLOBAL_FLAGS.match(pattern)
    if match is None:
        return f"(?:{pattern})"
    flags, body = match.group(1), pattern[match.end() :]
    if "x" in flags:
        if strip_verbose:
            body, flags = _unverbose(body), flags.replace("x", "")
        else:
            # A '#' comment runs to the end of the line: end the line before the group
            # closes, or the comment would swallow the rest of the alternation.
            body += "\n"
    return f"(?{flags}:{body})" if flags else f"(?:{body})"


def _re2_source(patterns: Sequence[str]) -> tuple[str, bool] | None:
    """The alternation as RE2 reads it with Python's meaning, and whether it holds a ``$``
    that reads differently before a final newline; None when RE2 cannot say it (the ``a``,
    ``L`` and ``u`` flags, and any multi-line pattern, have no RE2 form here)."""
    parts: list[str] = []
    dollar = False
    for pattern in patterns:
        match = _GLOBAL_FLAGS.match(pattern)
        flags = match.group(1) if match else ""
        if set(flags) - set("isx") or "(?m" in pattern:
            return None
        scoped, ends = _re2_ends(_scoped(pattern, strip_verbose=True))
        dollar = dollar or ends
        parts.append(scoped)
    return "|".join(parts), dollar


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a pattern RE2 cannot express goes to the bounded scan
    return options


def _without_lookarounds(pattern: str) -> str | None:
    """`pattern` with its lookahead and lookbehind groups removed: it matches every text
    `pattern` matches (an assertion removed only lets more through), so when it does not
    match, neither does `pattern`. None when there is nothing to remove, or no such superset
    is read here (backreferences, verbose layout)."""
    flags = _GLOBAL_FLAGS.match(pattern)
    if flags is not None and "x" in flags.group(1):
        return None
    tokens = list(_tokens(pattern))
    out: list[str] = []
    removed = False
    i = 0
    while i < len(tokens):
        token, in_class = tokens[i]
        if not in_class and (token[1:].isdigit() or token in ("\\g", "\\k")):
            return None  # a backreference
        ahead = "".join(t for t, _ in tokens[i : i + 4])
        if not in_class and ahead.startswith(("(?=", "(?!", "(?<=", "(?<!")):
            depth = 0
            while i < len(tokens):
                token, in_class = tokens[i]
                i += 1
                if in_class:
                    continue
                depth += (token == "(") - (token == ")")
                if depth == 0:
                    break
            removed = True
            continue
        if not in_class and ahead.startswith("(?P="):
            return None
        out.append(token)
        i += 1
    return "".join(out) if removed else None


def _leading_lookarounds(pattern: str) -> tuple[str, list[tuple[str, bool]]] | None:
    """`pattern` as a body and the lookaheads that open it, each with whether it is positive:
    a whole-text match of ``(?=A)(?!B)C`` is a whole-text match of ``C`` where ``A`` matches
    at the start and ``B`` does not. None when the pattern has any other shape (a flag other
    than ``i`` or ``s``, an alternative beside the lookaheads, a lookaround elsewhere)."""
    flags_match = _GLOBAL_FLAGS.match(pattern)
    flags = flags_match.group(1) if flags_match else ""
    if set(flags) - set("is"):
        return None
    tokens = list(_tokens(pattern[flags_match.end() :] if flags_match else pattern))
    heads: list[tuple[str, bool]] = []
    i = 0
    while i + 2 < len(tokens) and not tokens[i][1] and tokens[i][0] == "(":
        opener = tokens[i + 1][0] + tokens[i + 2][0]
        if opener not in ("?=", "?!"):
            break
        depth, j = 0, i
        while j < len(tokens):
            token, in_class = tokens[j]
            j += 1
            if not in_class:
                depth += (token == "(") - (token == ")")
                if depth == 0:
                    break
        if depth != 0:
            return None
        heads.append(("".join(t for t, _ in tokens[i + 3 : j - 1]), opener == "?="))
        i = j
    body = tokens[i:]
    depth = 0
    for k, (token, in_class) in enumerate(body):
        if in_class:
            continue
        if token == "|" and depth == 0:
            return None
        if token == "(" and "".join(t for t, _ in body[k + 1 : k + 4]).startswith(
            ("?=", "?!", "?<=", "?<!")
        ):
            return None
        depth += (token == "(") - (token == ")")
    if not heads:
        return None

    def scoped(part: str) -> str:
        return f"(?{flags}:{part})" if flags else part

    return scoped("".join(t for t, _ in body)), [(scoped(h), positive) for h, positive in heads]


def _matcher(patterns: list[str], make: Callable[[Any], Any]) -> Callable[[bytes], Any] | None:
    """The match function of an RE2 set of `patterns` (None without patterns): the indices of
    those matching a UTF-8 text, or None. The set's own method, without the wrapper's
    encoding step (the hot path of every identifier)."""
    if not patterns:
        return None
    built = make(_re2_options())
    for pattern in patterns:
        built.Add(pattern)
    built.Compile()
    inner = getattr(built, "_set", built)
    match: Callable[[bytes], Any] = inner.Match
    return match


class _Sets:
    """One pattern list as RE2 sets, for yes-or-no questions on text RE2 reads as Python's
    `re` does. A search asks the patterns RE2 expresses exactly, then (when none matched) the
    bounded scan of the others. A whole-text match asks, in one pass, the patterns RE2
    expresses exactly, the bodies of those that only open with lookaheads (whose lookaheads
    a second set then asks at the start of the text), and a superset of each of the others
    (its lookarounds removed): only a superset's hit sends the text to the bounded scan, so a
    value no shape can match costs one pass of RE2."""

    __slots__ = (
        "dollar", "exact", "heads", "opened", "rest", "search", "starts", "unfiltered", "whole",
    )  # fmt: skip

    def __init__(self, patterns: Sequence[str]) -> None:
        exact: list[str] = []
        opened: list[tuple[str, list[tuple[str, bool]]]] = []
        filters: list[str] = []
        self.dollar = False
        self.rest = False
        """Some patterns only the bounded scan runs."""
        self.unfiltered = False
        """Some of those have no superset RE2 runs: a whole-text match always asks them."""
        for pattern in patterns:
            source = _re2_exact(pattern)
            if source is not None:
                exact.append(source[0])
                self.dollar = self.dollar or source[1]
                continue
            self.rest = True
            split = _split_exact(pattern)
            if split is not None:
                opened.append(split[0])
                self.dollar = self.dollar or split[1]
                continue
            superset = _without_lookarounds(pattern)
            found = _re2_exact(superset) if superset is not None else None
            if found is None:
                self.unfiltered = True
            else:
                filters.append(found[0])
                self.dollar = self.dollar or found[1]
        self.exact = len(exact)
        self.opened = len(exact) + len(opened)
        """Whole-set indices below this are exact or lookahead-opened; the rest supersets."""
        heads = [head for _, parts in opened for head, _ in parts]
        self.heads: list[list[tuple[int, bool]]] = []
        """For each lookahead-opened pattern, its lookaheads' indices in `starts`."""
        at = 0
        for _, parts in opened:
            self.heads.append([(at + k, positive) for k, (_, positive) in enumerate(parts)])
            at += len(parts)
        self.search = _matcher(exact, re2.Set.SearchSet)
        self.whole = _matcher(exact + [body for body, _ in opened] + filters, re2.Set.FullMatchSet)
        self.starts = _matcher(heads, re2.Set.MatchSet)

    def reads(self, text: str) -> bool:
        """True when RE2 reads `text` as Python's `re` does, for these patterns."""
        return text.isascii() and _seen_alike(text) and not (self.dollar and text.endswith("\n"))

    def found(self, text: str) -> bool | None:
        """Whether a pattern is found in `text`; None when only the bounded scan can tell."""
        if self.search is not None and self.search(text.encode()):
            return True
        return None if self.rest else False

    def matches(self, text: str) -> bool | None:
        """Whether a pattern matches all of `text`; None when only the bounded scan can tell."""
        encoded = text.encode()
        hits = self.whole(encoded) if self.whole is not None else None
        if not hits:
            return None if self.unfiltered else False
        if min(hits) < self.exact:
            return True
        opened = [h - self.exact for h in hits if h < self.opened]
        if opened and self.starts is not None:
            starts = set(self.starts(encoded) or ())
            heads = self.heads
            if any(all((k in starts) is p for k, p in heads[o]) for o in opened):
                return True
        if len(opened) == len(hits) and not self.unfiltered:
            return False  # only lookahead-opened patterns, and none held
        return None


def _split_exact(pattern: str) -> tuple[tuple[str, list[tuple[str, bool]]], bool] | None:
    """`_leading_lookarounds` of `pattern` in RE2's spelling, when RE2 compiles every part;
    with whether a part holds a ``$`` (see `_re2_ends`)."""
    split = _leading_lookarounds(pattern)
    if split is None:
        return None
    body, heads = split
    parts = [_re2_exact(part) for part in (body, *(head for head, _ in heads))]
    if any(part is None for part in parts):
        return None
    exact = [part for part in parts if part is not None]
    spelled = [
        (source, positive) for (source, _), (_, positive) in zip(exact[1:], heads, strict=True)
    ]
    return (exact[0][0], spelled), any(dollar for _, dollar in exact)


class Scan:
    """One policy pattern list as a single alternation, run in linear or bounded time.

    Example:
        >>> scan = compile_patterns([r"(?i)\\bnot found\\b", r"^\\s*\\[\\s*\\]\\s*$"])
        >>> bool(scan.search("Error: file Not Found")), scan.search("found it") is None
        (True, True)
    """

    __slots__ = (
        "_bounded",
        "_dollar",
        "_lock",
        "_re2",
        "_rest",
        "_sets",
        "_timeouts",
        "disabled",
        "engine",
        "source",
    )

    def __init__(self, patterns: Sequence[str]) -> None:
        self.source = "|".join(_scoped(p, strip_verbose=False) for p in patterns)
        self._bounded = regex.compile(_python_spaces(self.source), regex.VERSION0)
        self._sets = _Sets(patterns)
        # The patterns the sets cannot say exactly, for the bounded scan after a superset hit.
        rest = [p for p in patterns if _re2_exact(p) is None]
        self._rest = (
            regex.compile(
                _python_spaces("|".join(_scoped(p, strip_verbose=False) for p in rest)),
                regex.VERSION0,
            )
            if rest
            else None
        )
        self._re2: Any = None
        self._dollar = False
        candidate = _re2_source(patterns)
        if candidate is not None:
            try:
                self._re2 = re2.compile(candidate[0], _re2_options())
                self._dollar = candidate[1]
            except re2.error:
                self._re2 = None
        self.engine: Engine = "re2" if self._re2 is not None else "bounded"
        """``re2`` when RE2 reads the list (ASCII text); ``bounded`` when it never can."""
        self.disabled = False
        """True once the bounded scan has timed out `MAX_TIMEOUTS` times."""
        self._timeouts = 0
        self._lock = threading.Lock()

    def _linear(self, text: str) -> bool:
        return (
            self._re2 is not None
            and text.isascii()
            and _seen_alike(text)
            and not (self._dollar and text.endswith("\n"))
        )

    def search(self, text: str) -> Match | None:
        """The first match anywhere in `text`, or None."""
        if self._linear(text):
            found: Match | None = self._re2.search(text)
            return found
        return self._bounded_call("search", text)

    def fullmatch(self, text: str) -> Match | None:
        """A match of all of `text`, or None."""
        if self._linear(text):
            found: Match | None = self._re2.fullmatch(text)
            return found
        return self._bounded_call("fullmatch", text)

    def found(self, text: str) -> bool:
        """Whether `search` finds a match in `text` (without making the match)."""
        if self.disabled:
            return False
        if self._sets.reads(text):
            answer = self._sets.found(text)
            if answer is not None:
                return answer
            return self._bounded_call("search", text, self._rest) is not None
        return self._bounded_call("search", text) is not None

    def whole(self, text: str) -> bool:
        """Whether `fullmatch` matches all of `text` (without making the match)."""
        if self._sets.reads(text):
            return self.whole_run(text)
        return not self.disabled and self._bounded_call("fullmatch", text) is not None

    def whole_run(self, text: str) -> bool:
        """`whole` for a text RE2 reads as Python's `re` does, such as one of ASCII letters,
        digits and ``_.+@/~#-`` only (an identifier candidate of ASCII text)."""
        if self.disabled:
            return False
        answer = self._sets.matches(text)
        if answer is not None:
            return answer
        return self._bounded_call("fullmatch", text, self._rest) is not None

    def _bounded_call(self, method: str, text: str, compiled: Any = None) -> Match | None:
        if self.disabled:
            return None
        run = getattr(self._bounded if compiled is None else compiled, method)
        # The engine's timeout is wall-clock time; what bounds the pattern is the CPU time
        # this thread spent in it. A thread kept waiting by others (the GIL, a busy machine)
        # runs the match again with more wall time, so the verdict never depends on load.
        cpu = time.thread_time()
        wall = MATCH_TIMEOUT
        while True:
            try:
                found: Match | None = run(text, timeout=wall)
                return found
            except TimeoutError:
                if time.thread_time() - cpu >= MATCH_TIMEOUT or wall >= _MAX_WALL:
                    break
                wall *= 4
        with self._lock:
            self._timeouts += 1
            if self._timeouts >= MAX_TIMEOUTS and not self.disabled:
                self.disabled = True
                _log.error(
                    "otel-compaction: policy pattern %r timed out %d times "
                    "(%.0f ms each); it is switched off for this process",
                    self.source, self._timeouts, MATCH_TIMEOUT * 1000,
                )  # fmt: skip
            else:
                _log.warning(
                    "otel-compaction: policy pattern %r took over %.0f ms on a "
                    "%d-character text; counted as no match",
                    self.source, MATCH_TIMEOUT * 1000, len(text),
                )  # fmt: skip
        return None


def _re2_exact(pattern: str) -> tuple[str, bool] | None:
    """`_re2_source` of `pattern` alone, when RE2 compiles it."""
    source = _re2_source([pattern])
    if source is None:
        return None
    try:
        re2.compile(source[0], _re2_options())
    except re2.error:
        return None
    return source


def check_pattern(pattern: str) -> None:
    """Raise `ValueError` naming what is wrong when `pattern` cannot be a policy pattern: it
    must compile alone and inside the joined alternation each list is scanned as."""
    try:
        re.compile(pattern)
        Scan([pattern, "x"])
    except (re.error, regex.error) as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None


def compile_patterns(patterns: Sequence[str]) -> Scan | None:
    """One `Scan` for a list, so a rule reads each text once; None for an empty list."""
    if not patterns:
        return None
    return Scan(patterns)


def sentences(text: str) -> list[str]:
    """`text` split into sentences and lines, stripped, empty ones dropped."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
