"""How long a Claude Code PreCompact hook takes on a 10 MB session log.

The session is built the way Claude Code writes one (a record per content block, tool results
in their own records, plenty of records that are not messages) from the real corpus'
transcripts, repeated until the file holds about 10 MB. Measured, best of 5 rounds:

* ``parse only``: reading the file and decoding every JSON line (the floor any hook pays);
* ``hook, in process``: `run_hook` on the PreCompact payload (read, gate, archive, state);
* ``hook, as the CLI runs it``: ``python -m otel_compaction hook claude-code`` as a process,
  interpreter start and imports included.

Aim: the hook as the CLI runs it finishes in under a second. Exit status 0 (never fails).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _corpus import corpus_dir, load_corpus
from _report import each_round, keep_best, verdict

from otel_compaction.hooks import run_hook

TARGET_BYTES = 10_000_000
ROUNDS = 5


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


def build_session(path: Path) -> int:
    """Write a ~10 MB session log at `path`; return its size."""
    corpus = [r for r in load_corpus(corpus_dir(None)) if r.source == "tau_bench_gpt4o_airline"]
    size = 0
    with path.open("w", encoding="utf-8") as out:
        round_number = 0
        while size < TARGET_BYTES:
            for record in corpus:
                for line in claude_records(record.messages[1:], "bench", round_number):
                    text = json.dumps(line) + "\n"
                    out.write(text)
                    size += len(text.encode())
                round_number += 1
                if size >= TARGET_BYTES:
                    break
    return size


def main() -> int:
    """Build the session, time the three ways, print them."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        session = root / "projects" / "-home-dev-shop" / "bench.jsonl"
        session.parent.mkdir(parents=True)
        size = build_session(session)
        lines = sum(1 for _ in session.open(encoding="utf-8"))
        env = {"CLAUDE_CONFIG_DIR": str(root / "claude"), "HOME": str(root)}
        payload = json.dumps(
            {
                "session_id": "bench",
                "transcript_path": str(session),
                "cwd": "/home/dev/shop",
                "hook_event_name": "PreCompact",
                "trigger": "auto",
            }
        )
        best: dict[str, float] = {}
        outcome = None
        for _ in each_round(ROUNDS):
            started = time.perf_counter()
            with session.open(encoding="utf-8") as handle:
                for line in handle:
                    json.loads(line)
            keep_best(best, "parse only", time.perf_counter() - started)
            started = time.perf_counter()
            outcome = run_hook("claude-code", payload, env)
            keep_best(best, "hook, in process", time.perf_counter() - started)
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "otel_compaction", "hook", "claude-code"],
                input=payload, text=True, capture_output=True, env={**env, "PATH": ""},
                check=False,
            )  # fmt: skip
            keep_best(best, "hook, as the CLI runs it", time.perf_counter() - started)
        assert outcome is not None
    print(f"PreCompact hook on a {size / 1e6:.1f} MB Claude Code session ({lines:,} records)")
    print(f"{'':<28}{'seconds':>10}{'ratio to parse':>16}")
    for name, seconds in best.items():
        print(f"{name:<28}{seconds:>10.3f}{seconds / best['parse only']:>15.1f}x")
    cli = best["hook, as the CLI runs it"]
    print(f"\nAim: the hook as the CLI runs it under 1 s: {cli:.2f} s {verdict(cli < 1.0)}")
    print(f"(the hook answered exit {outcome.exit_code}: {outcome.stderr.strip()[:80] or 'ok'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
