"""Run a piece of work on several threads at once, and fail the test on any error in them."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_in_threads(work: Callable[[int], None], count: int, *, timeout: float = 60) -> None:
    """Run ``work(n)`` for n in 0..`count`-1, each on its own thread, all released at once by a
    barrier; wait up to `timeout` seconds for each, then fail if any of them raised."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            barrier.wait()
            work(n)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    assert errors == [], errors
