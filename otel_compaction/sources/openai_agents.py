"""An OpenAI Agents SDK session as an obligation source.

The Runner stores a conversation's items in its session (``SQLiteSession``, ``SQLAlchemySession``
on Postgres, ``RedisSession``, ...), which any process can open. A ``function_call`` item
without its ``function_call_output`` is a tool call still owed: one the run stopped at for
approval (a tool with ``needs_approval``), or one a crashed worker never answered. The source
reads every stored item (Responses items, read as the gate reads them) for the conversation's
session; the combination pairs them with the ledger's records.

Sessions are asynchronous: `AgentsSessionSource.aread` runs on the caller's event loop (the
session guard's, the Runner's), as a session bound to a loop needs; `read` runs it on a loop
of its own, for a session that is not bound to another one (SQLite, or an engine made for it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.memory import Session

from otel_compaction.sources.base import SourceReading, run_on_own_loop
from otel_compaction.transcript import Transcript

__all__ = ["AgentsSessionSource"]

# Every stored item: a default retrieval limit would hide the calls whose outputs are in view.
_ALL_ITEMS = 2_147_483_647


class AgentsSessionSource:
    """The tool calls an Agents SDK session holds without their output.

    Example:
        >>> from agents.extensions.memory import SQLAlchemySession  # doctest: +SKIP
        >>> source = AgentsSessionSource(
        ...     lambda conversation: SQLAlchemySession.from_url(conversation, url=url)
        ... )  # doctest: +SKIP
        >>> gate = telemetry.gate("default", sources=[source])  # doctest: +SKIP
    """

    name = "openai_agents"

    def __init__(self, session: Session | Callable[[str], Session]) -> None:
        """Read `session` (for every conversation), or the session `session(conversation_id)`
        returns.

        Raises:
            TypeError: `session` is neither a session nor a callable.
        """
        if not callable(session) and not callable(getattr(session, "get_items", None)):
            raise TypeError(
                f"{type(session).__name__} is not an Agents SDK session (it has no get_items) "
                "nor a function from a conversation id to one"
            )
        self._session = session

    def session_for(self, conversation_id: str) -> Session:
        """The session read for `conversation_id`."""
        if callable(getattr(self._session, "get_items", None)):
            return self._session  # type: ignore[return-value]
        factory: Callable[[str], Session] = self._session  # type: ignore[assignment]
        return factory(conversation_id)

    async def aread(self, conversation_id: str) -> SourceReading:
        """Every stored item of the conversation's session, on the running event loop."""
        items: list[Any] = list(await self.session_for(conversation_id).get_items(_ALL_ITEMS))
        calls = Transcript.parse(items) if items else None
        return SourceReading(self.name, conversation_id, calls)

    def read(self, conversation_id: str) -> SourceReading:
        """`aread` on an event loop of its own."""
        return run_on_own_loop(lambda: self.aread(conversation_id))
