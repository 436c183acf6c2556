"""A hook's telemetry, sent without delaying its answer.

A hook process answers first, then gives its telemetry at most `EXPORT_GRACE_S` to reach the
endpoint, from a background thread, and exits. What did not make it (the endpoint is down,
refuses, or never answers) is dropped and counted in the CLI's config directory; every hook run
that exports reports the count so far as ``compaction.hook.exports.dropped``, so a backend that
comes back sees how much it missed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from opentelemetry.metrics import CallbackOptions, Observation

from otel_compaction.telemetry import semconv
from otel_compaction.telemetry.configuration import Telemetry

__all__ = ["EXPORT_GRACE_S", "count_drops", "dropped_exports", "finish"]

EXPORT_GRACE_S: Final = 0.25
"""How long a hook process waits for its telemetry after answering."""


def _counter_path(home: Path) -> Path:
    return home / "otel-compaction" / "exports-dropped"


def dropped_exports(home: Path) -> int:
    """How many hook runs of the CLI at `home` dropped their telemetry so far."""
    try:
        return int(_counter_path(home).read_text(encoding="ascii").strip() or 0)
    except (OSError, ValueError):
        return 0


def count_drops(telemetry: Telemetry, home: Path) -> None:
    """Report the drops counted so far as a cumulative counter of `telemetry`."""

    def observe(_: CallbackOptions) -> Iterable[Observation]:
        return [Observation(dropped_exports(home))]

    meter = telemetry.meter_provider.get_meter(semconv.SCOPE)
    meter.create_observable_counter(
        semconv.METRIC_HOOK_EXPORTS_DROPPED,
        callbacks=[observe],
        unit="{run}",
        description="Hook runs whose telemetry was dropped because the endpoint did not take "
        "it in time.",
    )


def finish(telemetry: Telemetry, home: Path, grace_s: float = EXPORT_GRACE_S) -> bool:
    """Flush and shut down `telemetry` in the background, waiting at most `grace_s`; False
    (and the drop counted) when it did not finish in time."""
    worker = threading.Thread(target=telemetry.shutdown, name="hook-export", daemon=True)
    worker.start()
    worker.join(grace_s)
    if not worker.is_alive():
        return True
    with contextlib.suppress(OSError):  # nowhere to count: dropped all the same
        _increment(_counter_path(home))
    return False


def _increment(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # hooks of parallel sessions count alike
        text = os.read(descriptor, 64).decode("ascii", "replace").strip()
        count = int(text) if text.isdigit() else 0
        os.lseek(descriptor, 0, os.SEEK_SET)
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{count + 1}\n".encode("ascii"))
    finally:
        os.close(descriptor)
