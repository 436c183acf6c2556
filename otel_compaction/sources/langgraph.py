"""LangGraph as an obligation source: a compiled graph's checkpointer, read for one thread.

The conversation is the LangGraph ``thread_id``. From the thread's latest checkpoint
(``graph.get_state``, which any checkpointer serves: ``PostgresSaver``, ``SqliteSaver``,
``InMemorySaver``, and from any process that shares it) the source reads:

* the tool calls in the state's messages and their ``ToolMessage`` answers (the messages are
  read as the LangChain integration reads them, one transcript message per LangChain message),
  so a call without its ``ToolMessage`` is open;
* every interrupt still waiting for ``Command(resume=...)``: open work of kind
  ``background_task`` named ``langgraph interrupt in <node>``, by the interrupt's id;
* every pending task without interrupts and without a result (a step that crashed, or that a
  worker died in, and has not run again): ``background_task`` ``langgraph task <node>``, by
  the task's id.

The task running the decision itself (a compaction asked from inside a node of the same
thread) is not an obligation of its own: it is left out, found from LangGraph's run config.
A resumed interrupt, a task that ran and a call answered by its ``ToolMessage`` close by
themselves on the next reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.pregel.protocol import PregelProtocol
from langgraph.types import StateSnapshot

from otel_compaction.integrations.langchain import to_openai_messages
from otel_compaction.sources.base import SourceObligation, SourceReading
from otel_compaction.transcript import Transcript

__all__ = ["LangGraphSource"]


class LangGraphSource:
    """What a LangGraph thread still owes, read from the graph's checkpointer.

    Example:
        >>> from langgraph.checkpoint.postgres import PostgresSaver  # doctest: +SKIP
        >>> with PostgresSaver.from_conn_string(url) as saver:  # doctest: +SKIP
        ...     graph = builder.compile(checkpointer=saver)
        ...     gate = telemetry.gate("default", sources=[LangGraphSource(graph)])
        ...     gate.evaluate(messages, 0, len(messages), conversation_id="thread-7")
    """

    name = "langgraph"

    def __init__(
        self,
        graph: PregelProtocol[Any, Any, Any, Any],
        *,
        messages_key: str = "messages",
        configurable: Mapping[str, Any] | None = None,
    ) -> None:
        """Read `graph`'s threads.

        Args:
            graph: a compiled graph with a checkpointer.
            messages_key: the state key holding the conversation's messages.
            configurable: more ``configurable`` entries for ``get_state`` (a
                ``checkpoint_ns``, for instance); the ``thread_id`` is the conversation's.
        """
        self.graph = graph
        self.messages_key = messages_key
        self.configurable = dict(configurable or {})

    def read(self, conversation_id: str) -> SourceReading:
        """The thread's latest checkpoint, read now."""
        return self._reading(conversation_id, self.graph.get_state(self._config(conversation_id)))

    async def aread(self, conversation_id: str) -> SourceReading:
        """`read` through the graph's async checkpointer methods."""
        state = await self.graph.aget_state(self._config(conversation_id))
        return self._reading(conversation_id, state)

    def _config(self, conversation_id: str) -> RunnableConfig:
        return {"configurable": {**self.configurable, "thread_id": conversation_id}}

    def _reading(self, conversation_id: str, state: StateSnapshot) -> SourceReading:
        values = state.values if isinstance(state.values, Mapping) else {}
        found = values.get(self.messages_key)
        messages = [m for m in found if isinstance(m, BaseMessage)] if found else []
        calls = Transcript.parse(to_openai_messages(messages)) if messages else None
        running = _running_task(conversation_id)
        pending: list[SourceObligation] = []
        for task in state.tasks:
            if task.id == running:
                continue
            if task.interrupts:
                pending.extend(
                    SourceObligation(
                        "background_task",
                        interrupt.id,
                        f"langgraph interrupt in {task.name}",
                        "interrupt",
                    )
                    for interrupt in task.interrupts
                )
            elif task.result is None:
                pending.append(
                    SourceObligation(
                        "background_task", task.id, f"langgraph task {task.name}", "pending task"
                    )
                )
        return SourceReading(self.name, conversation_id, calls, tuple(pending))


def _running_task(conversation_id: str) -> str | None:
    """The id of the task of `conversation_id`'s thread running in this context, if any."""
    try:
        from langgraph.config import get_config

        config = get_config()
    except Exception:  # not inside a run
        return None
    configurable = config.get("configurable") or {}
    if str(configurable.get("thread_id", "")) != conversation_id:
        return None
    namespace = configurable.get("checkpoint_ns") or ""
    if not isinstance(namespace, str) or not namespace:
        return None
    # "node:task-id", nested subgraphs joined by "|": the top-level task is the first.
    _, _, task_id = namespace.split("|", 1)[0].partition(":")
    return task_id or None
