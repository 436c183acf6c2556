"""``otel_compaction.conversation(id)``: the current conversation follows asyncio tasks and
copied contexts, is put in baggage, and selects the ledger the gate cross-checks."""

from __future__ import annotations

import asyncio
import contextvars
import threading

from opentelemetry import baggage
from opentelemetry import context as otel_context
from telemetry_harness import (
    Pipeline,
    assistant,
    calls,
    ledger_rows,
    result,
    user,
)

from otel_compaction import conversation
from otel_compaction.context import current_conversation_id

# The ledger of "conv-a" still holds the weather call open although the transcript has its
# result: the ledger and the transcript disagree, and that blocks the span.
MESSAGES = [
    user("weather in Oslo?"),
    calls(("x", "weather")),
    result("x", "sunny"),
    assistant("It is sunny."),
]


def test_the_conversation_follows_asyncio_tasks(pipeline: Pipeline) -> None:
    recorder = pipeline.recorder
    seen: dict[str, str | None] = {}

    async def agent_step(number: int) -> None:
        await asyncio.sleep(0)
        seen[f"step {number}"] = current_conversation_id()
        recorder.call("search", f"call_{number}").result()

    async def side_task() -> None:
        with conversation("conv-side"):  # a nested scope in one task only
            await asyncio.sleep(0)
            seen["side"] = current_conversation_id()
            recorder.call("notify", "call_side").result()

    async def main() -> None:
        with conversation("conv-async"):
            await asyncio.gather(agent_step(1), agent_step(2), side_task(), agent_step(3))
            seen["after gather"] = current_conversation_id()
        seen["outside"] = current_conversation_id()

    asyncio.run(main())
    assert seen == {
        "step 1": "conv-async",
        "step 2": "conv-async",
        "step 3": "conv-async",
        "side": "conv-side",
        "after gather": "conv-async",
        "outside": None,
    }
    assert [row[1] for row in ledger_rows(pipeline.ledger, "conv-async")] == [
        "call_1",
        "call_2",
        "call_3",
    ]
    assert [row[1] for row in ledger_rows(pipeline.ledger, "conv-side")] == ["call_side"]
    for span in pipeline.spans():
        assert span.attributes is not None
        expected = "conv-side" if "notify" in span.name else "conv-async"
        assert span.attributes["gen_ai.conversation.id"] == expected


def test_the_gate_reads_the_current_conversations_ledger(pipeline: Pipeline) -> None:
    recorder = pipeline.recorder
    gate = pipeline.telemetry.gate()
    with conversation("conv-a"):
        recorder.call("weather", "x")  # still open in this conversation's ledger
    with conversation("conv-b"):
        recorder.call("weather", "x").result("sunny")

    async def decide_in_task(conversation_id: str) -> tuple[str, tuple[int, int], list[str]]:
        with conversation(conversation_id):

            async def evaluate() -> tuple[str, tuple[int, int], list[str]]:
                decision = gate.evaluate(MESSAGES, 0, 4, critical=True, raise_on_refuse=False)
                return decision.action, decision.span, [f.rule for f in decision.blocking]

            return await asyncio.create_task(evaluate())

    async def main() -> list[tuple[str, tuple[int, int], list[str]]]:
        return list(await asyncio.gather(decide_in_task("conv-a"), decide_in_task("conv-b")))

    assert asyncio.run(main()) == [
        ("refuse", (0, 4), ["ledger_mismatch"]),
        ("compact", (0, 4), []),
    ]
    # Outside any scope the default conversation's ledger (empty) is read.
    assert gate.evaluate(MESSAGES, 0, 4, critical=True).action == "compact"
    # An explicit id wins over the scope.
    with conversation("conv-b"):
        decision = gate.evaluate(MESSAGES, 0, 4, conversation_id="conv-a", raise_on_refuse=False)
    assert (decision.action, decision.span, decision.conversation_id) == ("defer", (0, 1), "conv-a")
    evaluate_spans = pipeline.spans("compaction.evaluate")
    assert [(s.attributes or {}).get("gen_ai.conversation.id") for s in evaluate_spans] == [
        "conv-a",
        "conv-b",
        None,
        "conv-a",
    ]


def test_the_conversation_is_baggage_and_follows_copied_contexts(pipeline: Pipeline) -> None:
    with conversation("conv-baggage"):
        assert baggage.get_baggage("gen_ai.conversation.id") == "conv-baggage"
        copied = contextvars.copy_context()
    assert baggage.get_baggage("gen_ai.conversation.id") is None

    found: list[str | None] = []
    worker = threading.Thread(
        target=copied.run, args=(lambda: found.append(current_conversation_id()),)
    )
    worker.start()
    worker.join()
    assert found == ["conv-baggage"]

    # An id set upstream (propagated baggage) is the current conversation outside any scope.
    token = otel_context.attach(baggage.set_baggage("gen_ai.conversation.id", "conv-upstream"))
    try:
        assert current_conversation_id() == "conv-upstream"
        pipeline.recorder.call("search", "call_up").result()
        with conversation("conv-inner"):
            assert current_conversation_id() == "conv-inner"
    finally:
        otel_context.detach(token)
    assert [row[1] for row in ledger_rows(pipeline.ledger, "conv-upstream")] == ["call_up"]
