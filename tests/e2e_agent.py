"""An instrumented agent process for the end-to-end tests against real servers.

Run as a script (``python tests/e2e_agent.py ...``), it wires otel-compaction with
`configure()` from the standard ``OTEL_*`` environment, then plays a deployment agent, one step
every ``--interval`` seconds. Each step, in a conversation of its own:

* reads a config (``read_config``: a call and its result, a closed pair);
* writes it (``write_config``): a call left open, so open obligations accumulate and the
  oldest one ages;
* asks the gate twice: for the whole history, which is deferred (the older, closed span is
  compacted instead, tokens are held verbatim), and for the span that starts at the open call,
  which is refused;
* in a second conversation, restarts a service whose result the ledger recorded but the
  transcript lost, so the gate counts a severed obligation.

The first step also opens a retry chain that never succeeds (a second kind of obligation).

``--prometheus-port`` serves the metrics for Prometheus to scrape (``0``: a free port), and
``--ready-file`` receives ``{"prometheus_port": N}`` once the agent is serving. With
``--resolve-at-end`` every open call gets its result when the run ends, so that the tool-call
spans end and are exported. The run ends after ``--steps`` steps, after ``--duration`` seconds,
or on SIGTERM/SIGINT, whichever comes first; the providers are flushed and shut down then.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from otel_compaction import configure, conversation
from otel_compaction.recorder import ToolCallHandle
from otel_compaction.telemetry.configuration import Telemetry

AGENT_NAME = "e2e-agent"
"""``gen_ai.agent.name`` of every tool-call span of this agent."""

Message = dict[str, Any]


def call_message(call_id: str, tool: str, arguments: dict[str, Any]) -> Message:
    """An OpenAI Chat Completions assistant message carrying one tool call."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": tool, "arguments": json.dumps(arguments)},
            }
        ],
    }


def result_message(call_id: str, content: str) -> Message:
    """The tool result answering `call_id`."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


class Agent:
    """The scripted agent: see the module docstring for what one step does."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry
        self.gate = telemetry.gate("default")
        self.open_calls: list[ToolCallHandle] = []
        self.steps = 0

    def step(self) -> None:
        """One step: a closed read, an open write, a deferral, a refusal, a severed call."""
        self.steps += 1
        n = self.steps
        recorder = self.telemetry.recorder
        service = f"svc-{n}"
        with conversation(f"e2e-deploy-{n}"):
            if n == 1:
                recorder.retry_chain("fetch_inventory").attempt_failed("TimeoutError")
            messages: list[Message] = [
                {"role": "system", "content": "You are a deployment agent (simulated)."},
                {"role": "user", "content": f"Move {service} to port 8443 with TLS."},
            ]
            read = recorder.call("read_config", f"read_{n}", arguments={"service": service})
            messages.append(call_message(read.id, "read_config", {"service": service}))
            read.result(f"{service}: port 8080, tls off")
            messages.append(result_message(read.id, f"{service}: port 8080, tls off"))
            # The user speaks before the write: an assistant message right before the call
            # would be one response with it, and the gate keeps a response whole.
            messages.append({"role": "user", "content": f"{service} listens on 8080; go on."})
            write_args = {"service": service, "port": 8443, "tls": True}
            write = recorder.call("write_config", f"write_{n}", arguments=write_args)
            self.open_calls.append(write)
            messages.append(call_message(write.id, "write_config", write_args))
            self.gate.evaluate(messages, 1, len(messages), raise_on_refuse=False)  # defer
            self.gate.evaluate(messages, len(messages) - 1, len(messages), raise_on_refuse=False)
        with conversation(f"e2e-restart-{n}"):
            restart = recorder.call("restart", f"restart_{n}", arguments={"service": service})
            restart.result(f"{service} restarted")
            severed: list[Message] = [
                {"role": "system", "content": "You are a deployment agent (simulated)."},
                {"role": "user", "content": f"Restart {service}."},
                call_message(restart.id, "restart", {"service": service}),
                {"role": "assistant", "content": f"Restarting {service}."},
            ]
            self.gate.evaluate(severed, 1, len(severed), raise_on_refuse=False)

    def resolve_all(self) -> None:
        """Give every call still open its result."""
        for handle in self.open_calls:
            handle.result("written")
        self.open_calls.clear()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--prometheus-port", type=int, default=None)
    parser.add_argument("--ready-file", type=Path, default=None)
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    parser.add_argument("--duration", type=float, default=60.0, help="stop after seconds")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between steps")
    parser.add_argument("--resolve-at-end", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the agent until its steps, its duration or a signal end it."""
    args = _parse(argv)
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    telemetry = configure(
        agent_name=AGENT_NAME, set_global=False, prometheus_port=args.prometheus_port
    )
    try:
        if args.prometheus_port is not None and telemetry.prometheus_address is None:
            print("e2e-agent: the Prometheus endpoint did not start", file=sys.stderr)
            return 1
        agent = Agent(telemetry)
        agent.step()  # the first metrics exist before anyone is told to scrape
        if args.ready_file is not None:
            address = telemetry.prometheus_address
            ready = {"prometheus_port": address[1] if address else None}
            partial = args.ready_file.with_suffix(".partial")
            partial.write_text(json.dumps(ready), encoding="utf-8")
            partial.replace(args.ready_file)  # readers never see half a file
        deadline = time.monotonic() + args.duration
        while (args.steps is None or agent.steps < args.steps) and time.monotonic() < deadline:
            if stop.wait(args.interval):
                break
            agent.step()
        if args.resolve_at_end:
            agent.resolve_all()
    finally:
        telemetry.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
