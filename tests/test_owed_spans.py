"""The identifiers a span owes, kept per conversation as its spans grow, are exactly those a
fresh analysis finds: with relative paths folded into absolute ones, a fold undone when a
second absolute path shares the tail, and spans that grow, shrink and start elsewhere."""

from __future__ import annotations

import json
import random
from typing import Any

from otel_compaction import CompactionGate
from otel_compaction.rules.unresolved_reference import owed

Messages = list[dict[str, Any]]

_PATHS = [
    "/home/dev/shop/src/app.py",
    "src/app.py",
    "./src/app.py",
    "/srv/other/src/app.py",  # a second absolute path with the same tail: the fold is undone
    "/home/dev/shop/docs/guide.md",
    "docs/guide.md",
    "ZFA04Y",
    "mia_li_3668",
    "4417730215",
]


def conversation(rng: random.Random, length: int) -> Messages:
    messages: Messages = [{"role": "system", "content": "You edit files."}]
    while len(messages) < length:
        said = " and ".join(rng.sample(_PATHS, rng.randrange(1, 4)))
        roll = rng.random()
        if roll < 0.3:
            messages.append({"role": "user", "content": f"Look at {said}."})
        elif roll < 0.6:
            call_id = f"c{len(messages)}"
            arguments = json.dumps({"path": rng.choice(_PATHS)})
            messages.append(
                {
                    "role": "assistant",
                    "content": f"Reading {said}.",
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "read", "arguments": arguments},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": f"{said}: ok"})
        else:
            messages.append({"role": "assistant", "content": f"Edited {said}."})
    return messages


def spans(rng: random.Random, n: int) -> list[tuple[int, int]]:
    ends = {max(1, n // 2), max(1, n // 2 + 1), max(1, n - 1), n, rng.randrange(1, n + 1)}
    return [(start, end) for end in sorted(ends) for start in (0, 1) if start < end]


def test_owed_identifiers_as_spans_and_the_transcript_grow() -> None:
    checked = folded = 0
    for seed in range(8):
        rng = random.Random(seed)
        messages = conversation(rng, 60)
        incremental = CompactionGate("default")
        for length in range(2, len(messages) + 1):
            growing = messages[:length]
            analysis = incremental.analyse(growing, conversation_id="c")
            fresh = CompactionGate("default", incremental=False).analyse(growing)
            folded += bool(analysis.facts["unresolved_reference"].alias)
            for start, end in spans(rng, length):
                assert owed(analysis, start, end) == owed(fresh, start, end), (
                    f"seed {seed}, {length} messages, span {start}:{end}"
                )
                checked += 1
    assert checked > 1_000
    assert folded > 50  # the folds were exercised


def test_the_fold_of_a_relative_path_is_part_of_what_is_kept() -> None:
    """Until a second absolute path shares its tail, ``src/app.py`` is the same file as
    ``/home/dev/shop/src/app.py``; after, it is its own identifier again."""
    gate = CompactionGate("default")
    messages: Messages = [
        {"role": "system", "content": "You edit files."},
        {"role": "user", "content": "Open /home/dev/shop/src/app.py please."},
        {"role": "assistant", "content": "Opened it."},
        {"role": "user", "content": "Now fix src/app.py."},
    ]
    before = owed(gate.analyse(messages, conversation_id="c"), 1, 2)[0]
    assert [value for value, _, _ in before] == ["/home/dev/shop/src/app.py"]
    messages.append(
        {"role": "user", "content": "And compare /srv/other/src/app.py with src/app.py."}
    )
    after = owed(gate.analyse(messages, conversation_id="c"), 1, 2)[0]
    fresh = owed(CompactionGate("default", incremental=False).analyse(messages), 1, 2)[0]
    assert after == fresh == []  # the span's path is no longer the one referred to
