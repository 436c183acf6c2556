"""LangGraph as an obligation source: real graphs, real checkpointers, LangChain's fake chat model.

Against a real PostgreSQL server on loopback (``PostgresSaver``): process A runs a graph whose
model emits a tool call that the tools node holds for approval with ``interrupt()``, and exits
stopped at the interrupt; a fresh process B, with a ledger of its own that has never seen the
call, reads the thread through `LangGraphSource` before compacting, refuses over the open call
and the interrupt, resumes with ``Command(resume=...)``, and then compacts. In process (an
in-memory saver): an interrupt outside any tool call that only the source knows, a task a crash
left pending, the task asking from inside the graph, and a thread that does not exist.

Run as a script, this module is the worker processes: ``stop URL THREAD`` and
``resume URL THREAD`` (one JSON object on stdout).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from frameworks import require_framework
from source_workers import disagreement_metrics, disagreement_points, run_worker

try:
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
    from langchain_core.runnables import Runnable, RunnableConfig
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import Command, interrupt

    from otel_compaction.integrations.langchain import to_openai_messages
    from otel_compaction.sources.langgraph import LangGraphSource
except ImportError as error:  # pragma: no cover - the dev extra installs them
    MISSING: ImportError | None = error
else:
    MISSING = None

from otel_compaction.gate import CompactionGate
from otel_compaction.ledger import ObligationLedger
from otel_compaction.sources import ObligationSources, SourceReading

if __name__ != "__main__":
    require_framework(MISSING, "langgraph", "langchain")

HISTORY = [
    {"type": "human", "content": "Hello, I need help with an order."},
    {"type": "ai", "content": "Sure: which order?"},
    {"type": "human", "content": "Refund order 7, please."},
]
CALL_ID = "call_refund_7"


class ToolCallingFakeModel(GenericFakeChatModel):
    """langchain-core's fake chat model answering from its script, able to "bind" tools."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, AIMessage]:
        """The script already holds the tool calls."""
        return self


def scripted(*replies: AIMessage) -> ToolCallingFakeModel:
    return ToolCallingFakeModel(messages=iter(replies))


def refund_call() -> AIMessage:
    return AIMessage(
        "",
        tool_calls=[{"id": CALL_ID, "name": "refund", "args": {"order": 7}, "type": "tool_call"}],
    )


def refund_graph(checkpointer: BaseCheckpointSaver[Any], model: ToolCallingFakeModel) -> Any:
    """agent -> tools (each call held for approval by ``interrupt()``) -> agent -> end."""

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def tools(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        answers: list[BaseMessage] = []
        for call in getattr(last, "tool_calls", []):
            approval = interrupt({"approve": call["name"]})
            answers.append(ToolMessage(f"refund {approval}", tool_call_id=call["id"]))
        return {"messages": answers}

    def route(state: MessagesState) -> str:
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


def config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def decision_dict(decision: Any) -> dict[str, Any]:
    return {
        "action": decision.action,
        "span": list(decision.span),
        "obligations": [[o.kind, o.id, o.name] for o in decision.obligations],
        "pending": [[o.kind, o.id, o.name] for o in decision.must_carry.pending],
        # Reported without holding the span: an obligation with no place in the transcript.
        "reported": [
            [f.rule, f.obligation.id]
            for f in decision.findings
            if f.severity in ("warn", "carry") and f.message_index is None and f.obligation
        ],
    }


# -- the worker processes ------------------------------------------------------------------------


def _stop(url: str, thread: str) -> dict[str, Any]:
    """Process A: run until the tools node interrupts, then exit."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        graph = refund_graph(saver, scripted(refund_call()))
        result = graph.invoke({"messages": HISTORY}, config(thread))
        return {"interrupts": [i.id for i in result.get("__interrupt__", ())]}


def _resume(url: str, thread: str) -> dict[str, Any]:
    """Process B: read the thread before compacting, resume it, decide again."""
    from langgraph.checkpoint.postgres import PostgresSaver

    metrics, reader = disagreement_metrics()
    with PostgresSaver.from_conn_string(url) as saver:
        graph = refund_graph(saver, scripted(AIMessage("Refunded order 7.")))
        source = LangGraphSource(graph)
        ledger = ObligationLedger()  # this process has seen no call
        gate = CompactionGate(
            "default", ledger=ledger, sources=ObligationSources([source], metrics=metrics)
        )
        before = to_openai_messages(graph.get_state(config(thread)).values["messages"])
        reading = source.read(thread)
        held = gate.evaluate(before, 0, len(before), conversation_id=thread, raise_on_refuse=False)
        graph.invoke(Command(resume="approved"), config(thread))
        after = to_openai_messages(graph.get_state(config(thread)).values["messages"])
        closed = source.read(thread)
        allowed = gate.evaluate(after, 0, len(after), conversation_id=thread, raise_on_refuse=False)
    assert reading.calls is not None and closed.calls is not None
    return {
        "before": decision_dict(held),
        "pending": [[p.kind, p.id, p.name, p.what] for p in reading.pending],
        "open_calls": [c.id for c in reading.calls.open_calls()],
        "after": decision_dict(allowed),
        "pending_after": [p.id for p in closed.pending],
        "open_calls_after": [c.id for c in closed.calls.open_calls()],
        "messages_after": [m["role"] for m in after],
        "disagreements": disagreement_points(reader),
        "ledger": [r.id for r in ledger.snapshot(thread).obligations],
    }


def _worker(command: str, url: str, thread: str) -> dict[str, Any]:
    return run_worker(str(Path(__file__)), command, url, thread)


# -- against PostgreSQL --------------------------------------------------------------------------


def test_a_fresh_process_sees_the_interrupted_call_resumes_it_and_it_closes(
    postgres_url: str,
) -> None:
    stopped = _worker("stop", postgres_url, "thread-refund")
    assert len(stopped["interrupts"]) == 1
    interrupt_id = stopped["interrupts"][0]

    found = _worker("resume", postgres_url, "thread-refund")

    # Before compacting, the engine's word: the call has no ToolMessage, the interrupt waits.
    assert found["open_calls"] == [CALL_ID]
    assert found["pending"] == [
        ["background_task", interrupt_id, "langgraph interrupt in tools", "interrupt"]
    ]
    # The gate defers over the call; the interrupt, which has no place in the transcript, is
    # reported and handed to the summarizer as still pending.
    assert found["before"] == {
        "action": "defer",
        "span": [0, 3],
        "obligations": [["tool_call", CALL_ID, "refund"]],
        "pending": [["background_task", interrupt_id, "langgraph interrupt in tools"]],
        "reported": [["open_background_task", interrupt_id]],
    }
    # Resumed, the call has its ToolMessage and the graph ran to its end: nothing is owed.
    assert found["messages_after"] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert found["open_calls_after"] == []
    assert found["pending_after"] == []
    assert found["after"]["action"] == "compact"
    # Process B's ledger never held either: both are disagreements, each counted once.
    assert found["ledger"] == []
    assert found["disagreements"] == [
        [
            {
                "compaction.obligation.kind": "background_task",
                "compaction.source.disagreement": "source_open",
                "compaction.source.name": "langgraph",
            },
            1,
        ],
        [
            {
                "compaction.obligation.kind": "tool_call",
                "compaction.source.disagreement": "source_open",
                "compaction.source.name": "langgraph",
            },
            1,
        ],
    ]


# -- in process ----------------------------------------------------------------------------------


def review_graph(checkpointer: BaseCheckpointSaver[Any], fail: list[bool]) -> Any:
    """draft -> review (``interrupt()``, no tool call) -> publish; publish raises while
    `fail` holds True."""

    def draft(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("Draft: the release notes for 2.4.")]}

    def review(state: MessagesState) -> dict[str, Any]:
        verdict = interrupt("approve the draft?")
        return {"messages": [HumanMessage(f"Review: {verdict}.")]}

    def publish(state: MessagesState) -> dict[str, Any]:
        if fail and fail[0]:
            raise RuntimeError("the publishing service is down")
        return {"messages": [AIMessage("Published.")]}

    builder = StateGraph(MessagesState)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_node("publish", publish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=checkpointer)


def test_an_interrupt_only_the_engine_knows_is_carried_by_the_summary() -> None:
    graph = review_graph(InMemorySaver(), [])
    graph.invoke({"messages": HISTORY}, config("t-review"))
    messages = to_openai_messages(graph.get_state(config("t-review")).values["messages"])
    blind = CompactionGate("default", ledger=ObligationLedger())
    unseen = blind.evaluate(messages, 0, len(messages), conversation_id="t-review")
    assert (unseen.action, unseen.must_carry.pending) == ("compact", ())
    gate = CompactionGate("default", ledger=ObligationLedger(), sources=[LangGraphSource(graph)])
    decision = gate.evaluate(messages, 0, len(messages), conversation_id="t-review")
    [interrupt_id] = [i.id for i in graph.get_state(config("t-review")).interrupts]
    # No place in the transcript, so no cut can sever it: the compaction goes ahead, and the
    # summary must say the review is still waiting.
    assert decision.action == "compact"
    assert [(o.kind, o.id, o.name) for o in decision.must_carry.pending] == [
        ("background_task", interrupt_id, "langgraph interrupt in review")
    ]
    # Carried (background work is), and no cut can sever it: it has no place in the transcript.
    reported = [(f.rule, f.severity) for f in decision.findings if f.message_index is None]
    assert reported == [("open_background_task", "carry")]
    graph.invoke(Command(resume="approved"), config("t-review"))
    messages = to_openai_messages(graph.get_state(config("t-review")).values["messages"])
    after = gate.evaluate(messages, 0, len(messages), conversation_id="t-review")
    assert (after.action, after.must_carry.pending) == ("compact", ())
    assert [f.rule for f in after.findings if f.severity == "warn"] == []


def test_a_task_a_crash_left_pending_is_open_until_it_runs() -> None:
    fail = [True]
    graph = review_graph(InMemorySaver(), fail)
    graph.invoke({"messages": HISTORY}, config("t-crash"))
    with pytest.raises(RuntimeError, match="publishing service"):
        graph.invoke(Command(resume="approved"), config("t-crash"))
    source = LangGraphSource(graph)
    reading = source.read("t-crash")
    [task] = graph.get_state(config("t-crash")).tasks
    assert [(p.kind, p.id, p.name, p.what) for p in reading.pending] == [
        ("background_task", task.id, "langgraph task publish", "pending task")
    ]
    fail[0] = False
    graph.invoke(None, config("t-crash"))  # the step runs again
    assert source.read("t-crash").pending == ()


def test_the_task_asking_from_inside_the_graph_is_not_its_own_obligation() -> None:
    seen: list[tuple[Any, SourceReading]] = []
    holder: list[Any] = []

    def first(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("looked it up")]}

    def ask(state: MessagesState) -> dict[str, Any]:
        graph = holder[0]
        seen.append((graph.get_state(config("t-inside")), LangGraphSource(graph).read("t-inside")))
        return {"messages": [AIMessage("checked")]}

    builder = StateGraph(MessagesState)
    builder.add_node("first", first)
    builder.add_node("ask", ask)
    builder.add_edge(START, "first")
    builder.add_edge("first", "ask")
    builder.add_edge("ask", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    holder.append(graph)
    # Checkpoints written before each step: the running task is pending in the one read.
    graph.invoke(cast(Any, {"messages": HISTORY}), config("t-inside"), durability="sync")
    [(state, reading)] = seen
    assert [(task.name, task.result) for task in state.tasks] == [("ask", None)]
    assert reading.pending == ()
    assert reading.calls is not None and len(reading.calls) == 4


def test_reading_on_the_event_loop_and_a_thread_that_does_not_exist() -> None:
    graph = refund_graph(InMemorySaver(), scripted(refund_call()))

    async def run() -> SourceReading:
        await graph.ainvoke({"messages": HISTORY}, config("t-async"))
        return await LangGraphSource(graph).aread("t-async")

    reading = asyncio.run(run())
    assert reading.calls is not None
    assert [c.id for c in reading.calls.open_calls()] == [CALL_ID]
    assert [p.what for p in reading.pending] == ["interrupt"]
    empty = LangGraphSource(graph).read("no-such-thread")
    assert (empty.calls, empty.pending, empty.error) == (None, (), None)


if __name__ == "__main__":
    command, url, thread = sys.argv[1:4]
    run = {"stop": _stop, "resume": _resume}[command]
    print(json.dumps(run(url, thread)))
