"""An agent process for the exporter-down tests: `configure()` from the environment it is
given, calls, results and gate decisions, then a normal interpreter exit (no explicit
shutdown, so otel-compaction's exit hook flushes the providers).

Prints two JSON lines: what the agent recorded, once the work is done, and the ledger's
records once that exit hook has shut the providers down.
"""

from __future__ import annotations

import atexit
import json
from typing import Any

from telemetry_harness import FLIGHT_MESSAGES, ledger_rows

from otel_compaction import Telemetry, configure, conversation

CONVERSATION = "conv-exit"


def agent_run(telemetry: Telemetry) -> dict[str, Any]:
    """Calls, results and decisions; returns the ledger's records and the decisions."""
    recorder = telemetry.recorder
    gate = telemetry.gate()
    decisions: list[dict[str, Any]] = []
    with conversation(CONVERSATION):
        for i in range(300):
            handle = recorder.call("search", f"call_{i}")
            if i % 3:
                handle.result(f"outcome {i}")
            else:
                handle.error(f"outcome {i}")
        recorder.call("pay", "c3")
        for start, end, critical in ((0, 2, False), (4, 8, False), (4, 8, True)):
            decision = gate.evaluate(
                FLIGHT_MESSAGES, start, end, critical=critical, raise_on_refuse=False
            )
            decisions.append(decision.to_dict())
    return {"ledger": ledger_rows(telemetry.ledger, CONVERSATION), "decisions": decisions}


def main() -> None:
    holder: list[Telemetry] = []

    def after_shutdown() -> None:
        print(json.dumps(ledger_rows(holder[0].ledger, CONVERSATION)), flush=True)

    # Exit hooks run last registered first: this one after configure()'s.
    atexit.register(after_shutdown)
    holder.append(configure())
    print(json.dumps(agent_run(holder[0])), flush=True)


if __name__ == "__main__":
    main()
