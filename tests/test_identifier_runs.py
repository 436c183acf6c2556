"""The identifier scan finds exactly the runs its plain definition names: every maximal run of
``[\\w.+@/~#-]`` holding a digit, an ``@``, a ``/`` or a ``-``, in ASCII and in any other text
(Unicode letters and digits included), whichever of its two compiled forms reads the text."""

from __future__ import annotations

import random
import re

import pytest

from otel_compaction.identifiers import runs

PLAIN = re.compile(r"(?<![\w.+@/~#-])[\w.+@/~#-]*[\d@/-][\w.+@/~#-]*")
"""The definition, written the simplest way (slower: it backtracks over every run)."""

ALPHABETS = {
    "ascii": "ab9Z_.+@/~#- \t\n,;:()'\"`[]<>!?",
    "unicode": "aé9ß٣_.+@/~#- ,;:()”“·漢字",
}


@pytest.mark.parametrize("alphabet", sorted(ALPHABETS))
def test_the_scan_equals_its_definition_on_random_text(alphabet: str) -> None:
    rng = random.Random(20261201)
    chars = ALPHABETS[alphabet]
    for _ in range(20_000):
        text = "".join(rng.choice(chars) for _ in range(rng.randint(0, 40)))
        assert runs(text) == PLAIN.findall(text), repr(text)


def test_the_scan_equals_its_definition_on_the_corpus(corpus: list) -> None:  # type: ignore[type-arg]
    checked = 0
    for transcript in corpus[:60]:
        for message in transcript.messages:
            text = message.get("content")
            if isinstance(text, str) and text:
                assert runs(text) == PLAIN.findall(text)
                checked += 1
    assert checked > 100
