"""What the benchmark reports share: progress over the rounds and the verdict on an aim."""

from __future__ import annotations

import sys
from collections.abc import Iterator


def each_round(count: int) -> Iterator[int]:
    """Round numbers 1..`count`, announcing each on stderr as it starts."""
    for number in range(1, count + 1):
        print(f"  round {number}/{count}", file=sys.stderr, flush=True)
        yield number


def keep_best(best: dict[str, float], name: str, seconds: float) -> None:
    """Record `seconds` for `name` in `best` if it beats the time there."""
    best[name] = min(seconds, best.get(name, seconds))


def verdict(met: bool) -> str:
    """PASS when an aim is met, MISS otherwise."""
    return "PASS" if met else "MISS"
