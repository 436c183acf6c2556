"""What an obligation source reads, and the protocol every source keeps.

A source reads, just before a decision, what the engine that owns the work still owes for
one conversation: LangGraph's checkpointer (pending tasks, interrupts, tool calls without
their ``ToolMessage``), an OpenAI Agents SDK session (a ``function_call`` item without its
output), Temporal (a workflow's pending activities). A reading holds no content: tool calls
by id and name, other work by id, kind and a fixed description.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from otel_compaction.ledger import ObligationKind
from otel_compaction.transcript import Transcript

__all__ = [
    "ObligationSource",
    "SourceObligation",
    "SourceReading",
    "run_on_own_loop",
]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class SourceObligation:
    """Work an engine holds open that is not a tool call in its stored messages.

    ``kind`` is the ledger kind it is judged as (``background_task``: work that goes on
    outside the transcript); ``what`` says what it is in the engine's own terms
    (``interrupt``, ``pending task``, ``pending activity``), never its content;
    ``opened_at_ns`` is when the engine says it began, when it says.
    """

    kind: ObligationKind
    id: str
    name: str
    what: str
    opened_at_ns: int | None = None


@dataclass(frozen=True, slots=True)
class SourceReading:
    """What one source read for one conversation.

    ``calls`` is the engine's own record of the conversation's tool calls and results, as a
    parsed transcript (None when the engine keeps none); ``pending`` the other work it holds
    open; ``error`` is set, and nothing else, when the engine could not be read (the error's
    type and where, never its message: it may quote content).
    """

    source: str
    conversation_id: str
    calls: Transcript | None = None
    pending: tuple[SourceObligation, ...] = ()
    error: str | None = None


@runtime_checkable
class ObligationSource(Protocol):
    """An engine's view of what a conversation still owes.

    `read` is for synchronous callers (the gate); `aread` for code on an event loop (the
    Agents SDK session guard), on the caller's loop, so that a client bound to it (an async
    database engine) can be used. Either may raise: the caller turns a failure into a
    reading with ``error`` set, an open obligation of its own (`combine`).
    """

    name: str
    """The engine's name on telemetry (``compaction.source.name``)."""

    def read(self, conversation_id: str) -> SourceReading:
        """Read the engine for `conversation_id` now."""
        ...

    async def aread(self, conversation_id: str) -> SourceReading:
        """Read the engine for `conversation_id` now, on the running event loop."""
        ...


def run_on_own_loop(make: Callable[[], Awaitable[_T]]) -> _T:
    """Run the coroutine `make()` returns on an event loop of its own, in a thread of its
    own when this thread already runs one (a synchronous read from inside async code)."""
    import asyncio  # only for the sources that need it: the gate's import stays light

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(make))
    box: dict[str, _T] = {}
    failure: list[BaseException] = []

    def run() -> None:
        try:
            box["value"] = asyncio.run(_awaited(make))
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="otel-compaction-source", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return box["value"]


async def _awaited(make: Callable[[], Awaitable[_T]]) -> _T:
    return await make()
