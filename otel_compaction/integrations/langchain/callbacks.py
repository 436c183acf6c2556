"""LangChain and LangGraph tool calls as obligations: a callback handler.

`ObligationCallbackHandler` turns what a run does with tools into obligations, through a
`ToolCallRecorder`: each tool call in a chat model's ``AIMessage`` opens one (an
``execute_tool {tool}`` span and a ledger record) as soon as the model returns it; the tool's
end resolves it (its ``ToolMessage`` with ``status="error"`` as an error), a tool that raises
resolves it as an error, a cancelled one as abandoned; a LangGraph ``interrupt`` leaves it
open (the tool runs again on resume). A call answered without a tool run (a human-in-the-loop
rejection, ``ToolNode``'s answer to an unknown tool) is resolved from its ``ToolMessage`` when
the model is next called. The conversation is the run's LangGraph ``thread_id``, else the
current `otel_compaction.conversation` scope. While a tool runs its call is the running tool's
(`outer_call`): an MCP call the tool makes joins it instead of opening an obligation of its own.

It is safe across threads and asyncio tasks: open work is kept in dicts keyed by run id and by
(conversation, call id), guarded by one lock held only for dictionary work, and bounded. It
never raises into the host: a failure is logged and the run goes on. The summary model runs of
`GuardedSummarizationMiddleware` and of the built-in ``SummarizationMiddleware`` are skipped.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command
from opentelemetry import trace
from opentelemetry.trace import Span

from otel_compaction._internal_errors import internal_errors
from otel_compaction.integrations import outer_call
from otel_compaction.integrations.langchain.messages import (
    SUMMARY_TAG,
    answered_calls,
    conversation_of,
)
from otel_compaction.recorder import ToolCallHandle, ToolCallRecorder
from otel_compaction.telemetry import semconv

__all__ = ["ObligationCallbackHandler"]

_BOUND = 10_000  # runs, and emitted calls, held at most (older ones are forgotten)
_IGNORED = "\x00ignored"  # a chat model run of a summarizer: its output is no agent turn


class ObligationCallbackHandler(BaseCallbackHandler):
    """Tool calls of LangChain and LangGraph runs as obligations, through a `ToolCallRecorder`.

    Example:
        >>> from otel_compaction import ToolCallRecorder
        >>> handler = ObligationCallbackHandler(ToolCallRecorder())
        >>> # agent.invoke(inputs, {"callbacks": [handler]}), or `instrument` for every run
    """

    # Inline: tool calls must be opened before the tools that answer them start, in order.
    run_inline = True
    raise_error = False

    def __init__(self, recorder: ToolCallRecorder) -> None:
        """Record into `recorder` (and so into its ledger and tracer provider)."""
        super().__init__()
        self.recorder = recorder
        self._lock = threading.Lock()
        self._chat_runs: dict[UUID, str | None] = {}
        # Per tool run: its call, the conversation it was found in, the token of its mark.
        self._tool_runs: dict[UUID, tuple[ToolCallHandle, str | None, outer_call.Mark]] = {}
        # Calls the model emitted and no tool has picked up yet, per (conversation, call id).
        self._emitted: dict[tuple[str, str], list[ToolCallHandle]] = {}
        # The open run span of each root chain run.
        self._runs: dict[UUID, AbstractContextManager[Span]] = {}

    # Model and tool events, and a root chain's start and end (the run's span): LangChain
    # skips the rest for this handler. (Tool events are dispatched under `ignore_agent`, so
    # that one stays False.)
    @property
    def ignore_chain(self) -> bool:
        """Chain events open and close the run's span (only a root chain's do anything)."""
        return False

    @property
    def ignore_retriever(self) -> bool:
        """Retriever events are not needed."""
        return True

    @property
    def ignore_retry(self) -> bool:
        """Retry events are not needed."""
        return True

    @property
    def ignore_custom_event(self) -> bool:
        """Custom events are not needed."""
        return True

    # -- runs: one trace per root chain ------------------------------------------------------

    @internal_errors("the LangChain callback on_chain_start")
    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A root chain (an agent's or a graph's ``invoke``) opens the run's ``invoke_agent``
        span, current until it ends: its model calls, tool calls and decisions are its
        children. Nested chains, and a run already inside a span (the application's, or
        another instrumentation's agent span), open nothing."""
        if parent_run_id is not None or trace.get_current_span().get_span_context().is_valid:
            return
        name = kwargs.get("name") or (serialized or {}).get("name")
        run = self.recorder.agent_run(
            str(name) if name else None, conversation_id=conversation_of(metadata)
        )
        run.__enter__()
        with self._lock:
            self._runs[run_id] = run
            while len(self._runs) > _BOUND:
                self._runs.pop(next(iter(self._runs))).__exit__(None, None, None)

    @internal_errors("the LangChain callback on_chain_end")
    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A root chain's end ends the run's span."""
        self._end_run(run_id, None)

    @internal_errors("the LangChain callback on_chain_error")
    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A root chain that failed ends the run's span as an error; an interrupt (a run
        paused for a human) is no error."""
        self._end_run(run_id, None if isinstance(error, GraphBubbleUp) else error)

    def _end_run(self, run_id: UUID, error: BaseException | None) -> None:
        with self._lock:
            run = self._runs.pop(run_id, None)
        if run is not None:
            run.__exit__(
                type(error) if error else None, error, error.__traceback__ if error else None
            )

    # -- chat models -------------------------------------------------------------------------

    @internal_errors("the LangChain callback on_chat_model_start")
    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Remember the run's conversation; resolve calls its input shows answered."""
        if _is_summary_run(tags, metadata):
            self._remember(self._chat_runs, run_id, _IGNORED)
            return
        conversation = conversation_of(metadata)
        self._remember(self._chat_runs, run_id, conversation)
        for prompt in messages:
            self._resolve_answered(prompt, conversation)

    @internal_errors("the LangChain callback on_llm_end")
    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Open an obligation for each tool call in the response."""
        with self._lock:
            conversation = self._chat_runs.pop(run_id, None)
        if conversation == _IGNORED:
            return
        if conversation is None:
            conversation = conversation_of()
        for generations in response.generations:
            # The first generation is the one an agent continues with.
            first = generations[0] if generations else None
            if not isinstance(first, ChatGeneration) or not isinstance(first.message, AIMessage):
                continue
            for call in first.message.tool_calls:
                call_id = call.get("id")
                if not call_id:
                    continue
                handle = self.recorder.call(
                    call["name"],
                    call_id,
                    arguments=call["args"],
                    conversation_id=conversation,
                    layer=semconv.LAYER_LANGCHAIN,
                )
                with self._lock:
                    self._emitted.setdefault((conversation or "", call_id), []).append(handle)
                    if len(self._emitted) > _BOUND:
                        self._shrink_emitted()

    @internal_errors("the LangChain callback on_llm_error")
    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """The model call failed: it emitted nothing."""
        with self._lock:
            self._chat_runs.pop(run_id, None)

    # -- tools -------------------------------------------------------------------------------

    @internal_errors("the LangChain callback on_tool_start")
    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Take over the call this tool answers, or open one for a tool run without a model
        call (invoked directly, or by a node that made up its own call)."""
        conversation = conversation_of(metadata)
        call_id = kwargs.get("tool_call_id")
        handle = self._take_emitted(conversation, call_id) if isinstance(call_id, str) else None
        if handle is None:
            name = serialized.get("name") or kwargs.get("name") or "tool"
            handle = self.recorder.call(
                str(name),
                call_id if isinstance(call_id, str) and call_id else None,
                arguments=inputs if inputs is not None else input_str,
                conversation_id=conversation,
                layer=semconv.LAYER_LANGCHAIN,
            )
        mark = outer_call.enter(functools.partial(_same, handle))
        self._remember(self._tool_runs, run_id, (handle, conversation, mark))

    @internal_errors("the LangChain callback on_tool_end")
    def on_tool_end(
        self,
        output: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """The tool returned: its ``ToolMessage`` (``status="error"`` is an error) or value."""
        with self._lock:
            run = self._tool_runs.pop(run_id, None)
        if run is None:
            return
        handle, _, mark = run
        outer_call.leave(mark)
        message = _tool_message(output, handle.id)
        if message is None:
            handle.result(None if isinstance(output, Command) else output)
        elif message.status == "error":
            handle.error(None, content=message.content)
        else:
            handle.result(message.content)

    @internal_errors("the LangChain callback on_tool_error")
    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """The tool raised: an error; cancelled: abandoned; interrupted (LangGraph
        ``interrupt``): still open, the tool runs again when the graph resumes."""
        with self._lock:
            run = self._tool_runs.pop(run_id, None)
            if run is None:
                return
            handle, conversation, mark = run
            outer_call.leave(mark)
            if isinstance(error, GraphBubbleUp):
                # Keyed as this run found it (the handle's conversation may be another
                # layer's, which recorded the call first).
                key = (conversation or "", handle.id)
                self._emitted.setdefault(key, []).insert(0, handle)
                return
        if isinstance(error, asyncio.CancelledError):
            handle.abandon("cancelled")
        else:
            handle.error(error)

    # -- internals ---------------------------------------------------------------------------

    def _remember(self, table: dict[UUID, Any], run_id: UUID, value: Any) -> None:
        with self._lock:
            table[run_id] = value
            if len(table) > _BOUND:  # a run that never ended: forget the oldest
                del table[next(iter(table))]

    def _take_emitted(self, conversation: str | None, call_id: str) -> ToolCallHandle | None:
        with self._lock:
            waiting = self._emitted.get((conversation or "", call_id))
            while waiting:
                handle = waiting.pop(0)
                if not handle.resolved:
                    break
            else:
                handle = None
            if waiting is not None and not waiting:
                del self._emitted[(conversation or "", call_id)]
            return handle

    def _resolve_answered(self, messages: Sequence[BaseMessage], conversation: str | None) -> None:
        """Resolve emitted calls whose ``ToolMessage`` the model is being sent although no tool
        run reported it (a human-in-the-loop rejection, a node that answers calls itself)."""
        with self._lock:
            if not any(key[0] == (conversation or "") for key in self._emitted):
                return
        for call_id, answer in answered_calls(messages).items():
            handle = self._take_emitted(conversation, call_id)
            if handle is None:
                continue
            if answer.status == "error":
                handle.error(None, content=answer.content)
            else:
                handle.result(answer.content)

    def _shrink_emitted(self) -> None:
        """Drop handles resolved elsewhere, then the oldest calls no tool ever picked up, down
        to half the bound, so that sweeping stays rare (lock held). A forgotten call stays
        open in the ledger; only its pairing with a later tool run is lost."""
        for key in list(self._emitted):
            waiting = [h for h in self._emitted[key] if not h.resolved]
            if waiting:
                self._emitted[key] = waiting
            else:
                del self._emitted[key]
        while len(self._emitted) > _BOUND // 2:
            del self._emitted[next(iter(self._emitted))]


def _same(handle: ToolCallHandle) -> ToolCallHandle:
    return handle


def _is_summary_run(tags: list[str] | None, metadata: Mapping[str, Any] | None) -> bool:
    """A summarizer's model call (ours, or the built-in middleware's)."""
    if tags and SUMMARY_TAG in tags:
        return True
    return metadata is not None and metadata.get("lc_source") == "summarization"


def _tool_message(output: Any, call_id: str) -> ToolMessage | None:
    """The ``ToolMessage`` answering `call_id` in a tool's output: the message itself, one of
    a list, or one inside a LangGraph ``Command`` update."""
    candidates: Any = output
    if isinstance(output, Command):
        update = output.update
        candidates = update.get("messages") if isinstance(update, Mapping) else None
    if isinstance(candidates, ToolMessage):
        candidates = [candidates]
    if not isinstance(candidates, (list, tuple)):
        return None
    messages = [m for m in candidates if isinstance(m, ToolMessage)]
    return next((m for m in messages if m.tool_call_id == call_id), None)
