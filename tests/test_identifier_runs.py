"""The identifier scan finds exactly the runs its plain definition names: every maximal run of
``[\\w.+@/~#-]`` (a ``:`` before a digit joined in) holding a digit, an ``@``, a ``/``, a ``-``,
a joined ``:`` or a ``.`` before a letter, or opening with six capitals, in ASCII and in any
other text (Unicode letters and digits included; kana and CJK ideographs end a run as a space
does), whichever of its two compiled forms reads the text."""

from __future__ import annotations

import json
import random
import re

import pytest

from otel_compaction import Policy
from otel_compaction.identifiers import MAX_LENGTH, candidates, canonical, runs
from otel_compaction.scans import MessageScans
from otel_compaction.transcript import Transcript

PLAIN = re.compile(
    r"(?<![\w.+@/~#-])(?:[\w.+@/~#-]*?(?:[\d@/-]|:\d|\.[^\W\d_])|[A-Z]{6})"
    r"[\w.+@/~#-]*(?::\d[\w.+@/~#-]*)*"
)
"""The definition, written the simplest way (slower: it backtracks over every run)."""
UNSPACED = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def plain(text: str) -> list[str]:
    return PLAIN.findall(UNSPACED.sub(" ", text))


ALPHABETS = {
    "ascii": "ab9Z_.+@/~#- \t\n,;:()'\"`[]<>!?",
    "unicode": "aé9ß٣_.+@/~#- ,;:()”“·漢字",
    "capitals": "ABXYZa9.:_/- ",
    "capitals, unicode": "ABXYZaé9.:_/- 字",
}


@pytest.mark.parametrize("alphabet", sorted(ALPHABETS))
def test_the_scan_equals_its_definition_on_random_text(alphabet: str) -> None:
    rng = random.Random(20261201)
    chars = ALPHABETS[alphabet]
    for _ in range(20_000):
        text = "".join(rng.choice(chars) for _ in range(rng.randint(0, 40)))
        assert runs(text) == plain(text), repr(text)


def test_the_scan_equals_its_definition_on_the_corpus(corpus: list) -> None:  # type: ignore[type-arg]
    checked = 0
    for transcript in corpus[:60]:
        for message in transcript.messages:
            text = message.get("content")
            if isinstance(text, str) and text:
                assert runs(text) == plain(text)
                checked += 1
    assert checked > 100


def test_a_message_s_identifiers_are_its_candidates_the_shapes_match() -> None:
    """Every message's identifiers, by their definition: the candidates of its texts that a
    shape matches whole, stopwords aside, each introduced (a result, the system prompt) when
    any of its texts introduces it, else referred to."""
    data = Policy.load("default").model_dump()
    data["patterns"]["identifiers"]["stopwords"] = ["ZFA04Y", "v1.2.3"]
    policy = Policy.model_validate(data)
    stopwords = policy.identifier_stopwords
    shapes = policy.identifier_regex
    assert shapes is not None
    words = ["ZFA04Y", "ZFA04Y.", "#ZFA04Y", "./src/a.py", "src/a.py/", "mia_li_3668", "v1.2.3",
             "1234567", "deadbeef1", "a@b.io", "é9ß", "x-1", "2026-12-01", "word"]  # fmt: skip
    rng = random.Random(7)

    def text() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(0, 6)))

    def found(value: str) -> bool:
        return len(value) <= MAX_LENGTH and value not in stopwords and bool(shapes.fullmatch(value))

    messages: list[dict[str, object]] = []
    for n in range(400):
        role = rng.choice(["system", "user", "assistant", "tool"])
        if role == "tool" and messages and messages[-1].get("tool_calls"):
            call_id = messages[-1]["tool_calls"][0]["id"]  # type: ignore[index]
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text()})
        elif role == "assistant":
            arguments = json.dumps({"q": text()})
            call = {
                "id": f"c{n}",
                "type": "function",
                "function": {"name": "f", "arguments": arguments},
            }
            messages.append({"role": "assistant", "content": text(), "tool_calls": [call]})
        else:
            messages.append({"role": "system" if role == "system" else "user", "content": text()})
    transcript = Transcript.parse(messages)
    scans = MessageScans(policy)
    for entry in transcript.entries:
        introducing = [transcript.results[r].text for r in entry.results]
        referring = [transcript.calls[c].arguments for c in entry.calls]
        (introducing if entry.role == "system" else referring).append(entry.text)
        expected = {v: True for t in referring for v in candidates(t) if found(v)}
        expected.update({v: False for t in introducing for v in candidates(t) if found(v)})
        assert dict(scans.identifiers(transcript, entry)) == expected, entry.index


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("served on localhost:3001.", ["localhost:3001", "localhost", "3001"]),
        ("see src/app.py:42: boom", ["src/app.py:42", "src/app.py"]),
        ("the reservation HXDUBJ.", ["HXDUBJ"]),
        ("read CLAUDE.md and Cargo.toml", ["CLAUDE.md", "Cargo.toml"]),
        ("AddTodoForm.tsx、TodoApp.tsx等の", ["AddTodoForm.tsx", "TodoApp.tsx"]),
        ("in C:\\Users\\dev\\app now", ["C:\\Users\\dev\\app"]),
        ('{"workdir":"C:\\\\Users\\\\dev\\\\app\\n"}', ["C:\\Users\\dev\\app"]),
    ],
)
def test_candidates_of_the_joined_runs(text: str, expected: list[str]) -> None:
    assert list(candidates(text)) == expected
    assert [canonical(value) for value in expected] == expected
