"""A worker of an agent fleet, in a process of its own, for the fleet tests and benchmark.

Run as a script it reads one JSON command a line on stdin and answers each with one JSON line
on stdout. Its ledger and archive are the ones ``OTEL_COMPACTION_LEDGER_URL`` and
``OTEL_COMPACTION_ARCHIVE_URL`` name (memory and a SQLite file in the working directory when
unset), its heartbeat every ``FLEET_HEARTBEAT_INTERVAL`` seconds, lapsing after
``FLEET_HEARTBEAT_TIMEOUT`` (for a shared ledger). Commands (``op``):

* ``owner``: this worker's identity.
* ``open`` / ``resolve``: `ObligationLedger.open` / `resolve` (``conversation``, ``kind``,
  ``id``, ``name``, ``status``); the record, or null.
* ``evaluate``: the gate's decision on ``messages[start:end]`` of ``conversation``.
* ``compact``: `GuardedCompactor.compact` (forced) of ``messages`` of ``conversation`` with a
  ``budget``, started at the wall-clock time ``at`` (so that two workers decide at once).
* ``put`` / ``recall``: archive ``messages``; the stored bytes of ``handle`` (base64).
* ``replay``: replay the ledger's outbox (a shared ledger); whether none waits any more.
* ``churn``: open and resolve ``count`` tool calls of ``conversation`` (the benchmark).

`FleetWorker` starts one and talks to it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

__all__ = ["FleetWorker"]

SCRIPT = Path(__file__).resolve()
REPO_ROOT = SCRIPT.parents[1]


class FleetWorker:
    """One worker process; `call` sends a command and returns its answer."""

    def __init__(
        self, workdir: Path, environment: Mapping[str, str], *, name: str = "worker"
    ) -> None:
        """Start the worker in `workdir` with `environment` added to this process's."""
        self.name = name
        workdir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = workdir / f"{name}.stderr"
        self._stderr = self.stderr_path.open("wb")
        env = {**os.environ, **environment, "PYTHONPATH": str(REPO_ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, str(SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=workdir,
        )
        self.owner = str(self.call({"op": "owner"}))

    def send(self, command: Mapping[str, Any]) -> None:
        """Send `command` without waiting for its answer (read it with `receive`)."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write((json.dumps(command) + "\n").encode("utf-8"))
        stdin.flush()

    def receive(self) -> Any:
        """The answer to the oldest command sent; an error in the worker fails here."""
        stdout = self.process.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise AssertionError(f"{self.name} exited ({self.process.poll()}):\n{self.stderr()}")
        answer = json.loads(line)
        if "error" in answer:
            raise AssertionError(f"{self.name}: {answer['error']}\n{self.stderr()}")
        return answer["result"]

    def call(self, command: Mapping[str, Any]) -> Any:
        """Send `command` and return its answer."""
        self.send(command)
        return self.receive()

    def stderr(self) -> str:
        """What the worker wrote on stderr."""
        self._stderr.flush()
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")[-4000:]

    def kill(self) -> None:
        """SIGKILL: no cleanup, no last heartbeat, no close."""
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        """End the worker (its stdin closed: it closes its ledger and exits); idempotent."""
        if self.process.poll() is None:
            stdin = self.process.stdin
            if stdin is not None:
                stdin.close()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        self._stderr.close()


# -- the worker ------------------------------------------------------------------------------


def _record(record: Any) -> Any:
    if record is None:
        return None
    return {
        "kind": record.kind,
        "id": record.id,
        "name": record.name,
        "conversation_id": record.conversation_id,
        "sequence": record.sequence,
        "status": record.status,
    }


def _serve(stdin: IO[str], stdout: IO[str]) -> None:
    from otel_compaction.archive import Archive
    from otel_compaction.compactor import GuardedCompactor
    from otel_compaction.gate import CompactionGate
    from otel_compaction.ledger import ObligationLedger

    options: dict[str, Any] = {}
    if os.environ.get("OTEL_COMPACTION_LEDGER_URL", "").startswith("postgres"):
        options = {
            "heartbeat_interval": float(os.environ.get("FLEET_HEARTBEAT_INTERVAL", "5")),
            "heartbeat_timeout": float(os.environ.get("FLEET_HEARTBEAT_TIMEOUT", "30")),
        }
    ledger = ObligationLedger.from_url(None, **options)
    archive = Archive.from_url()
    gate = CompactionGate("default", ledger=ledger)
    try:
        for line in stdin:
            command = json.loads(line)
            try:
                result = _run(command, ledger, archive, gate, GuardedCompactor)
            except Exception as error:
                answer: dict[str, Any] = {"error": f"{type(error).__name__}: {error}"}
            else:
                answer = {"result": result}
            stdout.write(json.dumps(answer) + "\n")
            stdout.flush()
    finally:
        archive.close()
        ledger.close()


def _run(command: dict[str, Any], ledger: Any, archive: Any, gate: Any, compactor: Any) -> Any:
    op = command["op"]
    conversation = command.get("conversation")
    if op == "owner":
        return ledger.owner or f"memory:{os.getpid()}"
    if op == "open":
        return _record(
            ledger.open(
                conversation,
                command.get("kind", "tool_call"),
                command["id"],
                name=command.get("name", ""),
            )
        )
    if op == "resolve":
        return _record(
            ledger.resolve(
                conversation,
                command["id"],
                command.get("status", "result"),
                kind=command.get("kind", "tool_call"),
            )
        )
    if op == "evaluate":
        messages = command["messages"]
        decision = gate.evaluate(
            messages,
            command.get("start", 0),
            command.get("end", len(messages)),
            conversation_id=conversation,
            raise_on_refuse=False,
        )
        return {
            "action": decision.action,
            "span": list(decision.span),
            "obligations": [ref.id for ref in decision.obligations],
            "orphaned": decision.to_dict()["orphaned"],  # the CLI's JSON contract
            "abandoned": [ref.id for ref in decision.must_carry.abandoned],
            "describe": decision.describe(),
        }
    if op == "compact":
        worker = compactor(budget=command.get("budget", 300), ledger=ledger, archive=archive)
        delay = command.get("at", 0) - time.time()
        if delay > 0:
            time.sleep(delay)
        result = worker.compact(command["messages"], conversation_id=conversation, force=True)
        return {
            "compacted": result.compacted,
            "reason": result.reason,
            "span": list(result.span) if result.span else None,
            "handle": result.archive_handle,
        }
    if op == "put":
        return archive.put(command["messages"], start=command.get("start", 0)).handle
    if op == "recall":
        return base64.b64encode(archive.recall_bytes(command["handle"])).decode("ascii")
    if op == "replay":
        return ledger.replay() if hasattr(ledger, "replay") else True
    if op == "churn":
        started = time.perf_counter()
        for n in range(command["count"]):
            ledger.open(conversation, "tool_call", f"call_{n}", name="bench")
            ledger.resolve(conversation, f"call_{n}", "result")
        return time.perf_counter() - started
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    _serve(sys.stdin, sys.stdout)
