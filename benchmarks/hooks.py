"""How long a Claude Code PreCompact hook takes on a 10 MB session log.

The session is built the way Claude Code writes one (a record per content block, tool results
in their own records, plenty of records that are not messages) from the real corpus'
transcripts (the synthetic transcript of ``_corpus`` when there is no corpus), repeated until
the file holds about 10 MB; ``--session`` times a copy of a real log instead. Before every
hook run the session grows by one assistant record, as a live session does between
compactions, so each run archives a span the archive does not hold yet. Measured, best of
the rounds:

* ``parse only``: reading the file and decoding every JSON line (the floor any hook pays);
* ``hook, in process``: `run_hook` on the PreCompact payload (read, gate, archive, state);
* ``hook, as the CLI runs it``: ``python -m otel_compaction hook claude-code`` as a process,
  interpreter start and imports included.

And where the CLI's time goes, stage by stage:

* ``start, imports, policy``: the same command on an event the hook ignores (interpreter
  start, the imports of the command path, the policy load: what every hook run pays);
* ``read``: `read_session`, the log into messages (these three in process, the collector
  paused as the hook process pauses it);
* ``gate``: the analysis and the decision over the context (`Guard.before_compaction`
  without archiving or recording);
* ``archive``: storing the context verbatim (canonical JSON, SHA-256, one SQLite transaction);
* ``the rest``: what the CLI run takes beyond those (the hook's state file, exit).

Wall-clock seconds and CPU seconds are both the best of the rounds; on a shared machine the
CPU figure is the steadier one. Aim: the hook as the CLI runs it finishes in under a second.
Exit status 0 (never fails).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from _corpus import corpus_dir, load_corpus, synthetic_messages
from _report import each_round, keep_best, verdict

from otel_compaction.archive import Archive
from otel_compaction.gate import CompactionGate
from otel_compaction.hooks import run_hook
from otel_compaction.hooks.guard import Guard, context_of
from otel_compaction.hooks.run import collector_paused
from otel_compaction.policy import Policy
from otel_compaction.sessions import read_session

MEGABYTES = 10.0
ROUNDS = 5
STAGES = ("start, imports, policy", "read", "gate", "archive")

_T = TypeVar("_T")


def claude_records(
    messages: list[dict[str, Any]], session: str, start: int
) -> list[dict[str, Any]]:
    """One corpus transcript (OpenAI Chat) as Claude Code session records."""
    out: list[dict[str, Any]] = []
    for n, message in enumerate(messages):
        base = {"sessionId": session, "uuid": f"u{start}-{n}", "cwd": "/home/dev/shop"}
        role = message.get("role")
        text = message.get("content") if isinstance(message.get("content"), str) else ""
        if role == "assistant":
            mid = f"msg_{start}_{n}"
            blocks = [{"type": "text", "text": text}] if text else []
            blocks += [
                {
                    "type": "tool_use",
                    "id": f"toolu_{start}_{call['id']}",
                    "name": call["function"]["name"],
                    "input": json.loads(call["function"]["arguments"] or "{}"),
                }
                for call in message.get("tool_calls") or []
            ]
            for block in blocks:
                message_part = {"id": mid, "role": "assistant", "content": [block]}
                out.append({**base, "type": "assistant", "message": message_part})
        elif role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": f"toolu_{start}_{message['tool_call_id']}",
                "content": text,
            }
            out.append({**base, "type": "user", "message": {"role": "user", "content": [block]}})
        elif role == "user":
            out.append({**base, "type": "user", "message": {"role": "user", "content": text}})
        out.append({**base, "type": "attachment", "attachment": {"type": "date", "date": "x"}})
    return out


def transcripts(corpus: str | None) -> tuple[str, list[list[dict[str, Any]]]]:
    """What the session is made of, and its description: the corpus' airline transcripts, or
    (without a corpus) the synthetic transcript in pieces of a few turns."""
    directory = corpus_dir(corpus)
    airline = [r for r in load_corpus(directory) if r.source == "tau_bench_gpt4o_airline"]
    if airline:
        return "the corpus' airline transcripts", [r.messages for r in airline]
    synthetic = synthetic_messages(60_000)
    pieces = [synthetic[i : i + 60] for i in range(0, len(synthetic), 60)]
    return f"the synthetic transcript (no corpus at {directory})", pieces


def build_session(path: Path, target_bytes: int, made_of: list[list[dict[str, Any]]]) -> int:
    """Write a session log of about `target_bytes` at `path` from the transcripts `made_of`,
    repeated as needed; return its size."""
    size = 0
    with path.open("w", encoding="utf-8") as out:
        round_number = 0
        while size < target_bytes:
            for messages in made_of:
                for line in claude_records(messages[1:], "bench", round_number):
                    text = json.dumps(line) + "\n"
                    out.write(text)
                    size += len(text.encode())
                round_number += 1
                if size >= target_bytes:
                    break
    return size


class Timings:
    """The best wall-clock and CPU seconds of each thing timed, over the rounds."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def call(self, name: str, work: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Time `work(*args, **kwargs)` in this process; return what it returns."""
        cpu, started = time.process_time(), time.perf_counter()
        result = work(*args, **kwargs)
        keep_best(self.wall, name, time.perf_counter() - started)
        keep_best(self.cpu, name, time.process_time() - cpu)
        return result

    def process(self, name: str, command: Sequence[str], stdin: str, env: Mapping[str, str]) -> int:
        """Time `command` as a process fed `stdin`; return its exit status."""
        before, started = _children_cpu(), time.perf_counter()
        done = subprocess.run(
            command, input=stdin, text=True, capture_output=True, env=dict(env), check=False
        )
        keep_best(self.wall, name, time.perf_counter() - started)
        keep_best(self.cpu, name, _children_cpu() - before)
        return done.returncode


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def grow(session: Path, number: int) -> None:
    """Append one assistant record: the session went on since the previous hook run."""
    record = {
        "sessionId": "bench",
        "uuid": f"grow-{number}",
        "cwd": "/home/dev/shop",
        "type": "assistant",
        "message": {
            "id": f"msg_grow_{number}",
            "role": "assistant",
            "content": [{"type": "text", "text": f"Noted, round {number}."}],
        },
    }
    with session.open("a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def parse_only(session: Path) -> None:
    """The floor: read the file and decode every line."""
    with session.open(encoding="utf-8") as handle:
        for line in handle:
            json.loads(line)


def main(argv: Sequence[str] | None = None) -> int:
    """Build the session, time the hook three ways and stage by stage, print the report."""
    parser = argparse.ArgumentParser(
        description="Time the Claude Code PreCompact hook on a large session log: in process, "
        "as the CLI runs it, and stage by stage (the exit status is always 0).",
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds (default {ROUNDS})")
    parser.add_argument(
        "--megabytes", type=float, default=MEGABYTES,
        help=f"size of the session log (default {MEGABYTES:g})",
    )  # fmt: skip
    parser.add_argument(
        "--session", type=Path, metavar="FILE",
        help="time the hook on a copy of this Claude Code session log instead of building one",
    )  # fmt: skip
    parser.add_argument("--corpus", help="corpus directory (default: the one the tests read)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        session = root / "projects" / "-home-dev-shop" / "bench.jsonl"
        session.parent.mkdir(parents=True)
        if args.session is not None:
            made_of = str(args.session)
            shutil.copyfile(args.session, session)
        else:
            made_of, pieces = transcripts(args.corpus)
            print(f"building the session log from {made_of}", file=sys.stderr)
            build_session(session, int(args.megabytes * 1e6), pieces)
        size = session.stat().st_size
        lines = sum(1 for _ in session.open(encoding="utf-8"))
        home = root / "claude"
        env = {"CLAUDE_CONFIG_DIR": str(home), "HOME": str(root), "PATH": ""}
        base = {"session_id": "bench", "transcript_path": str(session), "cwd": "/home/dev/shop"}
        payload = json.dumps({**base, "hook_event_name": "PreCompact", "trigger": "auto"})
        ignored = json.dumps({**base, "hook_event_name": "Notification"})
        command = [sys.executable, "-m", "otel_compaction", "hook", "claude-code"]
        policy = Policy.load("default")
        # Created once, as the hook's own archive is by the hook's first run.
        Archive(root / "stages.sqlite3").close()
        timings = Timings()
        outcome = None
        grown = 0
        for _ in each_round(max(1, args.rounds)):
            timings.call("parse only", parse_only, session)
            grown += 1
            grow(session, grown)
            outcome = timings.call("hook, in process", run_hook, "claude-code", payload, env)
            grown += 1
            grow(session, grown)
            timings.process("hook, as the CLI runs it", command, payload, env)
            timings.process(STAGES[0], command, ignored, env)
            grown += 1
            grow(session, grown)
            guard = Guard(CompactionGate(policy), home)  # a fresh gate, as in a new process
            with collector_paused():  # as the hook process runs them
                read = timings.call(STAGES[1], read_session, session)
                timings.call(STAGES[2], guard.before_compaction, read, archive=False, record=False)
                timings.call(STAGES[3], archive_context, root / "stages.sqlite3", context_of(read))
        assert outcome is not None
    print(f"session log: {made_of}")
    report(timings, size, lines, outcome.exit_code, outcome.stderr)
    return 0


def archive_context(path: Path, messages: list[dict[str, Any]]) -> None:
    """What the hook archives: the context, stored verbatim in an existing archive."""
    with Archive(path) as archive:
        archive.put(messages, conversation_id="bench", policy="default", from_json=True)


def report(timings: Timings, size: int, lines: int, exit_code: int, stderr: str) -> None:
    """Print the three ways, the stages and the verdict."""
    wall, cpu = timings.wall, timings.cpu
    print(f"PreCompact hook on a {size / 1e6:.1f} MB Claude Code session ({lines:,} records)")
    print(f"{'':<28}{'wall s':>9}{'cpu s':>9}{'ratio to parse':>16}")
    for name in ("parse only", "hook, in process", "hook, as the CLI runs it"):
        ratio = wall[name] / wall["parse only"]
        print(f"{name:<28}{wall[name]:>9.3f}{cpu[name]:>9.3f}{ratio:>15.1f}x")
    cli = wall["hook, as the CLI runs it"]
    print("\nwhere the CLI's time goes (each stage timed on its own):")
    for name in STAGES:
        print(f"  {name:<26}{wall[name]:>9.3f}{cpu[name]:>9.3f}")
    rest_wall = cli - sum(wall[name] for name in STAGES)
    rest_cpu = cpu["hook, as the CLI runs it"] - sum(cpu[name] for name in STAGES)
    print(f"  {'the rest':<26}{rest_wall:>9.3f}{rest_cpu:>9.3f}")
    print(f"\nAim: the hook as the CLI runs it under 1 s: {cli:.2f} s {verdict(cli < 1.0)}")
    print(f"(the hook answered exit {exit_code}: {stderr.strip()[:80] or 'ok'})")


if __name__ == "__main__":
    sys.exit(main())
