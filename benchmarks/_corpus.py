"""Workloads shared by the benchmark scripts.

* The real transcript corpus (``*/transcripts.jsonl`` records), found the way the tests find
  it: ``OTEL_COMPACTION_CORPUS``, ``shared/data/transcripts`` beside the repository root, or
  the slice of it kept in ``tests/data/corpus``.
* The compaction request both scripts evaluate: the oldest `fraction` of the characters after
  the protected head, cut at the first message boundary that reaches it.
* A deterministic synthetic transcript of any length, shaped like the corpus (user and
  assistant text full of identifiers, tool calls with JSON arguments, JSON results with some
  "not found" and error results followed by retries, reused call ids and parallel calls).
* The pairing floor: the least work any gate must do, one pass that pairs calls with results.
"""

from __future__ import annotations

import json
import os
import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

__all__ = [
    "CORPUS_ENV",
    "Record",
    "corpus_dir",
    "coverage",
    "load_corpus",
    "pair_floor",
    "request",
    "synthetic_messages",
]

CORPUS_ENV = "OTEL_COMPACTION_CORPUS"
"""Environment variable naming the corpus directory (the tests read the same one)."""

_REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class Record:
    """One transcript of the corpus."""

    source: str
    id: str
    format: str
    messages: list[dict[str, Any]]


def corpus_dir(override: str | None = None) -> Path:
    """The corpus directory: `override`, then ``$OTEL_COMPACTION_CORPUS``, then the full corpus
    beside the repository, then the slice of it in the repository (``tests/data/corpus``)."""
    if override:
        return Path(override)
    from_env = os.environ.get(CORPUS_ENV)
    if from_env:
        return Path(from_env)
    full = _REPO_ROOT.parent / "shared" / "data" / "transcripts"
    return full if full.is_dir() else _REPO_ROOT / "tests" / "data" / "corpus"


def load_corpus(directory: Path) -> list[Record]:
    """Every record of every ``*/transcripts.jsonl`` under `directory`, in file-name order."""
    records: list[Record] = []
    for path in sorted(directory.glob("*/transcripts.jsonl")):
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    raw = json.loads(line)
                    records.append(Record(raw["source"], raw["id"], raw["format"], raw["messages"]))
    return records


def request(chars: Sequence[int], head: int, fraction: float = 0.5) -> tuple[int, int] | None:
    """The span ``[head, end)`` holding the oldest `fraction` of the characters after `head`.

    `chars` are the messages' sizes (``Entry.chars``). ``end`` is the first cut where the
    running total after the head reaches the fraction; None when nothing after the head has
    any characters.
    """
    total = sum(chars[head:])
    if total <= 0:
        return None
    goal = total * fraction
    running = 0
    for index in range(head, len(chars)):
        running += chars[index]
        if running >= goal:
            return head, index + 1
    return head, len(chars)


def coverage(chars: Sequence[int], span: tuple[int, int], requested: tuple[int, int]) -> float:
    """Characters of `span` inside `requested`, as a fraction of the characters requested."""
    prefix = [0, *accumulate(chars)]
    (start, end), (want_start, want_end) = span, requested
    wanted = prefix[want_end] - prefix[want_start]
    lo, hi = max(start, want_start), min(end, want_end)
    covered = prefix[hi] - prefix[lo] if hi > lo else 0
    return covered / wanted if wanted else 1.0


def pair_floor(messages: Sequence[Mapping[str, Any]]) -> int:
    """The floor: one pass that pairs each result with the earliest unanswered call of its id
    (Chat Completions ``tool_calls`` and ``role: "tool"`` results, by ``tool_call_id`` or
    ``id``), through one deque per id still waiting, and nothing else. Returns the number of
    pairs."""
    waiting: dict[str, deque[int]] = {}
    paired = 0
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id") or message.get("id") or ""
            queue = waiting.get(call_id)
            if queue:
                queue.popleft()
                paired += 1
                if not queue:
                    del waiting[call_id]
            continue
        for call in message.get("tool_calls") or ():
            queue = waiting.get(call["id"])
            if queue is None:
                queue = waiting[call["id"]] = deque()
            queue.append(index)
    return paired


# -- the synthetic transcript ------------------------------------------------------------------

_FIRST = ("mia", "omar", "liam", "sofia", "noah", "yusuf", "emma", "ivan", "chen", "aisha")
_LAST = ("li", "garcia", "kim", "patel", "smith", "nguyen", "rossi", "khan", "muller", "silva")
_AIRPORTS = ("JFK", "LAX", "SFO", "ORD", "ATL", "SEA", "BOS", "DEN", "MIA", "EWR", "DTW", "MSP")
_WORDS = (
    "the", "flight", "reservation", "please", "my", "change", "cabin", "baggage", "refund",
    "policy", "payment", "card", "travel", "insurance", "passenger", "date", "return", "seat",
    "upgrade", "cancel", "economy", "business", "certificate", "total", "fee", "and", "to",
    "with", "for", "on", "is", "it", "that", "would", "like", "also", "thanks", "need",
)  # fmt: skip
_TOOLS = (
    "get_user_details",
    "get_reservation_details",
    "search_direct_flight",
    "search_onestop_flight",
    "update_reservation_flights",
    "update_reservation_baggages",
    "book_reservation",
    "cancel_reservation",
    "read_file",
    "think",
)
_SYSTEM_PROMPT = " ".join(
    f"Rule {n}: verify the user id and the reservation before any change; never book for "
    f"another user; refunds go to the original payment method (see /policy/airline/rule_{n}.md)."
    for n in range(1, 25)
)


class _Synth:
    """A seeded generator of one long conversation, one turn at a time."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.next_call = 0
        self.answered: list[str] = []  # answered call ids, which a later call may reuse
        self.active: list[str] = []  # identifiers the conversation is currently about

    def identifier(self) -> str:
        rng = self.rng
        if self.active and rng.random() < 0.75:
            return rng.choice(self.active[-12:])
        kind = rng.random()
        if kind < 0.35:
            value = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(5))
            value += rng.choice("0123456789")
        elif kind < 0.65:
            value = f"{rng.choice(_FIRST)}_{rng.choice(_LAST)}_{rng.randint(1000, 9999)}"
        elif kind < 0.8:
            value = f"{rng.choice(_FIRST)}.{rng.choice(_LAST)}{rng.randint(1, 99)}@example.com"
        elif kind < 0.9:
            value = f"/srv/data/{rng.choice(_LAST)}/{rng.choice(_WORDS)}_{rng.randint(1, 999)}.json"
        else:
            value = f"credit_card_{rng.randint(1_000_000, 9_999_999)}"
        self.active.append(value)
        return value

    def sentence(self, words: int) -> str:
        rng = self.rng
        out = [rng.choice(_WORDS) for _ in range(words)]
        for _ in range(rng.randint(0, 2)):
            out.insert(rng.randrange(len(out) + 1), self.identifier())
        return " ".join(out).capitalize() + "."

    def prose(self, sentences: int, words: int) -> str:
        return " ".join(self.sentence(words) for _ in range(sentences))

    def call_id(self) -> str:
        rng = self.rng
        if len(self.answered) > 20 and rng.random() < 0.04:
            return self.answered.pop(rng.randrange(len(self.answered)))
        self.next_call += 1
        return f"call_{self.next_call:07d}_{rng.getrandbits(32):08x}"

    def arguments(self, tool: str) -> str:
        rng = self.rng
        if tool == "think":
            return json.dumps({"thought": self.prose(1, 12)})
        if tool.startswith("search"):
            return json.dumps(
                {
                    "origin": rng.choice(_AIRPORTS),
                    "destination": rng.choice(_AIRPORTS),
                    "date": f"2024-05-{rng.randint(1, 28):02d}",
                }
            )
        return json.dumps({"id": self.identifier(), "user_id": self.identifier()})

    def result(self, tool: str) -> tuple[str, bool]:
        """A result for `tool` and whether it failed (so the model retries it)."""
        rng = self.rng
        roll = rng.random()
        if tool == "think":
            return "", False
        if roll < 0.04:
            return f"Error: {rng.choice(_TOOLS)} timed out; service unavailable, try again", True
        if roll < 0.09:
            return f"Reservation {self.identifier()} not found", False
        if roll < 0.11:
            return "[]", False
        flights = [
            {
                "flight_number": f"HAT{rng.randint(1, 300):03d}",
                "origin": rng.choice(_AIRPORTS),
                "destination": rng.choice(_AIRPORTS),
                "date": f"2024-05-{rng.randint(1, 28):02d}",
                "price": rng.randint(50, 900),
            }
            for _ in range(rng.randint(1, 4))
        ]
        record = {
            "reservation_id": self.identifier(),
            "user_id": self.identifier(),
            "cabin": rng.choice(("basic_economy", "economy", "business")),
            "flights": flights,
            "payment_history": [{"payment_id": self.identifier(), "amount": rng.randint(50, 2000)}],
            "note": self.sentence(8),
        }
        return json.dumps(record), False

    def turn(self, messages: list[dict[str, Any]]) -> None:
        """A user message, up to three rounds of tool calls and their results, a reply."""
        rng = self.rng
        messages.append({"role": "user", "content": self.prose(rng.randint(1, 2), 9)})
        retry: str | None = None
        for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
            width = 1 if rng.random() < 0.92 else rng.randint(2, 3)
            tools = [retry or rng.choice(_TOOLS)] + [rng.choice(_TOOLS) for _ in range(width - 1)]
            ids = [self.call_id() for _ in tools]
            content = f"I'll check {self.identifier()} first." if rng.random() < 0.1 else None
            messages.append(
                {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": tool, "arguments": self.arguments(tool)},
                        }
                        for call_id, tool in zip(ids, tools, strict=True)
                    ],
                }
            )
            retry = None
            for call_id, tool in zip(ids, tools, strict=True):
                text, failed = self.result(tool)
                messages.append(
                    {"role": "tool", "tool_call_id": call_id, "name": tool, "content": text}
                )
                self.answered.append(call_id)
                if failed:
                    retry = tool
        messages.append({"role": "assistant", "content": self.prose(rng.randint(2, 4), 12)})


def synthetic_messages(count: int, seed: int = 1729) -> list[dict[str, Any]]:
    """A deterministic Chat Completions transcript of exactly `count` messages.

    The same seed always gives the same messages, and a shorter transcript is a prefix of a
    longer one. It opens with a system prompt, then repeats turns: a user message, zero to
    three rounds of tool calls (8% of them parallel, two or three calls) each followed by its
    results (about 4% errors that ask for a retry, which the next round performs, 5% "not
    found", 2% empty), and an assistant reply. About 4% of calls reuse an answered call's id.
    Text is full of identifiers (booking codes, user ids, e-mails, paths) that recur.
    """
    synth = _Synth(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": _SYSTEM_PROMPT}]
    while len(messages) < count:
        synth.turn(messages)
    return messages[:count]
