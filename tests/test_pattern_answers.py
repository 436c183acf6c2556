"""A yes-or-no question to a pattern list (`Scan.found`, `Scan.whole`) answers exactly as
`search` and `fullmatch` do, whichever way it is answered: an RE2 set of the patterns RE2
says exactly, a superset (lookarounds removed) that sends a hit to the bounded scan, or the
bounded scan alone (non-ASCII text, backreferences, verbose patterns)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from conftest import Transcript as Record

from otel_compaction import Policy
from otel_compaction.identifiers import candidates
from otel_compaction.patterns import Scan, _leading_lookarounds, _without_lookarounds

LISTS = {
    "identifier shapes": list(Policy.load("default").patterns.identifiers.patterns),
    "negatives": list(Policy.load("default").patterns.null_result.patterns),
    "lookarounds": [r"(?<=id )\d+", r"(?=\w*\d)(?!\d+$)\w{4,}", r"x(?<!ax)y"],
    "backreference": [r"(a|b)\1", r"\bnot found\b"],
    "verbose": ["(?x) \\bI \\s will  # a promise\n \\s check", r"(?i)^\s*null\s*$"],
    "ends": [r"^\s*null\s*$", r"done\Z", r"(?i)^ok$"],
    "opening lookaheads": [
        r"(?=[a-z0-9]*\d)(?![0-9]+$)[a-z0-9]{3,8}",
        r"(?i)(?=.*ab)(?=x|\d)[\w.]+",
        r"(?s)(?!.*\n\n)(?=.*d).{2,}",
        r"(?=a)ab|b(?=a)",  # an alternative beside the lookahead: not split
        r"(?=[^@]*@)\S+@\S+$",
    ],
}
ALPHABET = "abxyAZ09_-./@ \n\tidnotfoundé\x1c"


def texts(rng: random.Random) -> list[str]:
    out = ["id 42", "ab", "abba", "null\n", "null", "done", "done\n", "ok\n", "OK", "ZFA04Y"]
    out += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 24))) for _ in range(3000)]
    return out


@pytest.mark.parametrize("name", sorted(LISTS))
def test_answers_equal_the_matches(name: str) -> None:
    scan = Scan(LISTS[name])
    for text in texts(random.Random(name)):
        assert scan.found(text) == (scan.search(text) is not None), repr(text)
        assert scan.whole(text) == (scan.fullmatch(text) is not None), repr(text)


def test_identifier_verdicts_on_the_corpus(corpus: list[Record]) -> None:
    scan = Policy.load("default").identifier_regex
    assert scan is not None
    checked = 0
    for record in corpus[:80]:
        for message in record.messages:
            text = message.get("content")
            if isinstance(text, str):
                for value in candidates(text):
                    assert scan.whole(value) == (scan.fullmatch(value) is not None), value
                    checked += 1
    assert checked > 1_000


@pytest.mark.parametrize(
    ("pattern", "superset"),
    [
        (r"(?=[A-Z0-9]*\d)(?=[0-9]*[A-Z])[A-Z0-9]{6,10}", r"[A-Z0-9]{6,10}"),
        (r"(?<=id )\d+", r"\d+"),
        (r"a(?!(?:b|c))d", r"ad"),
        (r"[(?=]x", None),  # inside a class, nothing to remove
        (r"(a)(?=b)\1", None),  # a backreference: no superset is read
        ("(?x) a (?=b) # c", None),
    ],
)
def test_a_superset_removes_only_lookarounds(pattern: str, superset: str | None) -> None:
    assert _without_lookarounds(pattern) == superset


@pytest.mark.parametrize(
    ("pattern", "split"),
    [
        (r"(?=\w*\d)(?!\d+$)\w{4,}", (r"\w{4,}", [(r"\w*\d", True), (r"\d+$", False)])),
        (r"(?i)(?=x)ab", ("(?i:ab)", [("(?i:x)", True)])),
        (r"(?=a)ab|b", None),  # the lookahead opens one alternative only
        (r"a(?=b)b", None),  # not at the start
        (r"(?=a)a(?<!b)", None),  # another lookaround in the body
        (r"(?x)(?=a) a", None),  # verbose layout
        (r"\w+", None),  # nothing to split
    ],
)
def test_opening_lookaheads_split_from_the_body(
    pattern: str, split: tuple[str, list[tuple[str, bool]]] | None
) -> None:
    assert _leading_lookarounds(pattern) == split


def test_default_identifier_shapes_need_no_backtracking_for_a_plain_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shapes that only open with lookaheads (letters and digits mixed) are answered by
    RE2 alone: a number or a word that fits their body but not their lookaheads is told apart
    without the bounded scan."""
    scan = Policy.load("default").identifier_regex
    assert scan is not None
    bounded: list[str] = []
    original = Scan._bounded_call

    def spy(self: Scan, method: str, text: str, compiled: Any = None) -> Any:
        bounded.append(text)
        return original(self, method, text, compiled)

    monkeypatch.setattr(Scan, "_bounded_call", spy)
    values = ("1234567", "deadbeef", "ZFA04Y", "ABCDEFG", "abc1234")
    assert {v: scan.whole(v) for v in values} == {
        "1234567": False, "deadbeef": False, "ZFA04Y": True, "ABCDEFG": False, "abc1234": True,
    }  # fmt: skip
    assert bounded == []
