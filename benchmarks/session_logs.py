"""How the cost of a session log grows with its size: the hook, ``audit`` and the reader.

Claude Code session logs of 1, 10 and 100 MB (``--megabytes``) are built as `hooks` builds its
10 MB one (the corpus' airline transcripts as Claude Code writes them, repeated), in two
shapes: ``no compaction``, and ``compacted every MB`` (a ``compact_boundary`` record and its
summary after every megabyte, the last one ``--context`` kB before the end, so the context the
model sees is the same small size whatever the log's length). Each is measured as its own
process, one after the other in the same run, CPU seconds (user + system) and peak resident
memory of that process:

* ``start-up``: ``python -m otel_compaction hook claude-code`` on an event the hook ignores;
* ``hook``: the same command on the PreCompact payload of the log;
* ``read``: `read_session` of the log in a fresh interpreter (imports included);
* ``audit``: ``python -m otel_compaction audit LOG --format json``.

The report gives each figure per size, the growth from the smallest size to the largest
(time ratio against size ratio: 1x is flat, the size ratio is linear), ``audit``'s
throughput in MB/s and its peak memory as a multiple of the file. Aims (issue 28): the hook
under 1 s at every size when the last compaction is near the end, start-up under 0.3 s,
``audit`` at least 10 MB/s at every size with memory at most 3x the file. Exit status 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _report import verdict
from hooks import claude_records, transcripts

SIZES = (1.0, 10.0, 100.0)
CONTEXT_KB = 200
SHAPES = ("no compaction", "compacted every MB")
_READ = "import sys; from otel_compaction.sessions import read_session; read_session(sys.argv[1])"


def build(path: Path, megabytes: float, pieces: list[list[dict[str, Any]]], every: int) -> int:
    """Write a log of about `megabytes` at `path`, a compaction after each `every` bytes (none
    when 0) and one `CONTEXT_KB` before the end; return its size."""
    target = int(megabytes * 1e6)
    last = target - CONTEXT_KB * 1000 if every else -1
    size, since, compactions, round_number = 0, 0, 0, 0
    with path.open("w", encoding="utf-8") as out:
        while size < target:
            for messages in pieces:
                for record in claude_records(messages[1:], "bench", round_number):
                    text = json.dumps(record) + "\n"
                    out.write(text)
                    size += len(text)
                    since += len(text)
                round_number += 1
                due = every and (since >= every or (last >= 0 and size >= last))
                if due:
                    compactions += 1
                    for record in compaction_records(compactions):
                        text = json.dumps(record) + "\n"
                        out.write(text)
                        size += len(text)
                    since = 0
                    if size >= last:
                        last = -1
                if size >= target:
                    break
    return size


def compaction_records(number: int) -> list[dict[str, Any]]:
    """A compaction as Claude Code logs it: the boundary, then the summary."""
    base = {"sessionId": "bench", "cwd": "/home/dev/shop"}
    summary = (
        f"This session is being continued from a previous conversation ({number}). "
        "The user is changing flight reservations; reservation ids and the refunds "
        "discussed are in the archive."
    )
    return [
        {
            **base,
            "uuid": f"boundary-{number}",
            "type": "system",
            "subtype": "compact_boundary",
            "content": "Conversation compacted",
            "compactMetadata": {"trigger": "auto", "preTokens": 150_000},
        },
        {
            **base,
            "uuid": f"summary-{number}",
            "type": "user",
            "isCompactSummary": True,
            "message": {"role": "user", "content": summary},
        },
    ]


def measure(command: Sequence[str], stdin: str = "") -> tuple[float, int, int]:
    """CPU seconds, peak resident kB and exit status of `command` run as its own process."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdin is not None
    process.stdin.write(stdin)
    process.stdin.close()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss, process.returncode


def main(argv: Sequence[str] | None = None) -> int:
    """Build the logs, measure each way at each size, print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, nargs="+", default=list(SIZES))
    parser.add_argument("--corpus", help="corpus directory (default: the one the tests read)")
    parser.add_argument("--skip", nargs="*", default=(), help="measures to leave out")
    args = parser.parse_args(argv)
    _, pieces = transcripts(args.corpus)
    python = sys.executable
    results: dict[tuple[str, str, float], tuple[float, int]] = {}
    sizes: dict[tuple[str, float], int] = {}
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        env_home = root / "claude"
        os.environ["CLAUDE_CONFIG_DIR"] = str(env_home)
        for shape in SHAPES:
            for megabytes in args.megabytes:
                log = root / f"{shape.replace(' ', '-')}-{megabytes:g}.jsonl"
                every = 1_000_000 if shape != "no compaction" else 0
                sizes[shape, megabytes] = build(log, megabytes, pieces, every)
                print(f"built {log.name}: {sizes[shape, megabytes] / 1e6:.1f} MB", file=sys.stderr)
                base = {"session_id": "bench", "transcript_path": str(log), "cwd": "/home/dev"}
                hook = [python, "-m", "otel_compaction", "hook", "claude-code"]
                runs = {
                    "start-up": (hook, json.dumps({**base, "hook_event_name": "Notification"})),
                    "hook": (hook, json.dumps({**base, "hook_event_name": "PreCompact"})),
                    "read": ([python, "-c", _READ, str(log)], ""),
                    "audit": (
                        [python, "-m", "otel_compaction", "audit", str(log), "--format", "json"],
                        "",
                    ),
                }
                for name, (command, stdin) in runs.items():
                    if name in args.skip:
                        continue
                    cpu, rss, _ = measure(command, stdin)
                    results[shape, name, megabytes] = (cpu, rss)
                    print(f"  {name}: {cpu:.2f} s, {rss / 1e3:.0f} MB", file=sys.stderr)
                log.unlink()
    report(results, sizes, args.megabytes)
    return 0


def report(
    results: dict[tuple[str, str, float], tuple[float, int]],
    sizes: dict[tuple[str, float], int],
    megabytes: Sequence[float],
) -> None:
    """One table per shape: CPU seconds per size, the growth, the aims."""
    small, large = min(megabytes), max(megabytes)
    for shape in SHAPES:
        print(f"\nClaude Code session logs, {shape} (CPU s, one process each)")
        head = "".join(f"{m:>9g} MB" for m in megabytes)
        print(f"{'':<12}{head}{'growth':>10}")
        for name in ("start-up", "hook", "read", "audit"):
            row = [results.get((shape, name, m)) for m in megabytes]
            if any(r is None for r in row):
                continue
            cells = "".join(f"{r[0]:>12.2f}" for r in row if r is not None)
            first, last = results[shape, name, small][0], results[shape, name, large][0]
            print(f"{name:<12}{cells}{last / first:>9.1f}x")
        print(f"(size grows {sizes[shape, large] / sizes[shape, small]:.0f}x)")
        for m in megabytes:
            size = sizes[shape, m]
            if (shape, "audit", m) in results:
                cpu, rss = results[shape, "audit", m]
                speed = size / 1e6 / cpu
                memory = rss * 1024 / size
                print(
                    f"audit at {m:g} MB: {speed:.1f} MB/s {verdict(speed >= 10)}, "
                    f"peak RSS {rss / 1e3:.0f} MB = {memory:.1f}x the file {verdict(memory <= 3)}"
                )
            if (shape, "hook", m) in results:
                cpu = results[shape, "hook", m][0]
                print(f"hook at {m:g} MB: {cpu:.2f} s {verdict(cpu <= 1.0)}")
            if (shape, "start-up", m) in results:
                cpu = results[shape, "start-up", m][0]
                print(f"start-up at {m:g} MB: {cpu:.2f} s {verdict(cpu <= 0.3)}")


if __name__ == "__main__":
    sys.exit(main())
