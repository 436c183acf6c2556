"""A guard around the OpenAI Agents SDK's compaction session.

The SDK compacts a session's history through ``run_compaction``: its
``OpenAIResponsesCompactionSession`` (and any session that wraps one, such as
``EncryptedSession``) replaces the stored items with what ``responses.compact`` returns, on
the Runner's say-so after a turn or when called by hand. `CompactionGuardSession` wraps such a
session and asks the gate first.

Before each ``run_compaction`` it reads every stored item (Responses-format input items), adds
the tool calls the ledger holds open for the conversation that the items do not show yet (a
function tool still running: the Runner stores a turn's calls only when the turn ends, but the
compaction of a response chain covers them), and evaluates `CompactionGate` over all of it:

* ``compact``: the wrapped session compacts, exactly as it would unguarded;
* otherwise, with ``on_open="defer"`` (the default): nothing is compacted this time and the
  history stays verbatim; the gate's decision is recorded (a ``compaction.deferred`` or
  ``compaction.refused`` event when the gate came from `Telemetry.gate`), and the SDK asks
  again after a later turn. The SDK compacts whole histories, so a gate deferral's older span
  cannot be compacted on its own: holding everything is the deferral it can honour;
* with ``on_open="refuse"``: the gate is asked as for a critical budget (compact or refuse)
  and a refusal raises `CompactionRefused` (`OpenObligationError`) naming the obligations.

With a `ToolCallRecorder` (``recorder=telemetry.recorder``), each compaction applied tells it
which calls left the model's context: every call recorded for the conversation that the
compacted history no longer shows (`ToolCallRecorder.compacted_except`), so that a later repeat
of one of their side effects is a re-issue (``compaction.reissue``, and the approval of
`otel_compaction.integrations.openai_agents.approval`).

The gate's obligation sources (`otel_compaction.sources`: the session store itself, read by
another worker, a LangGraph checkpointer, Temporal) are read on the session's event loop just
before each decision.

Every other operation (reads, writes, the SDK's private compaction hooks) goes to the wrapped
session unchanged, so the Runner's own bookkeeping keeps working. The conversation whose
ledger is consulted is `conversation_id`, else the current `conversation` scope, else the
session id: run the agent with ``RunConfig(group_id=session.session_id)`` (or inside the same
scope) so that `ObligationTracingProcessor` files its tool calls under the same conversation.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from agents.memory import Session, SessionABC

from otel_compaction.context import current_conversation_id
from otel_compaction.gate import CompactionGate, Decision, SpanError, refusal_error
from otel_compaction.reconcile import CallState, reconcile_calls
from otel_compaction.recorder import ToolCallRecorder
from otel_compaction.sources import SourceReading
from otel_compaction.transcript import Transcript

__all__ = ["CompactionGuardSession", "OnOpen"]

_log = logging.getLogger(__name__)

OnOpen = Literal["defer", "refuse"]

# Read the whole history, as the SDK does for a manual compaction (a default retrieval limit
# would hide the calls whose results are in view).
_ALL_ITEMS = 2_147_483_647
_NOT_STORED: tuple[CallState] = ("missing",)  # open in the ledger, no stored call pairs with it


class CompactionGuardSession(SessionABC):
    """A session that compacts only when the gate allows it.

    Example:
        >>> from agents.memory import OpenAIResponsesCompactionSession  # doctest: +SKIP
        >>> guarded = CompactionGuardSession(
        ...     OpenAIResponsesCompactionSession("chat-7", SQLiteSession("chat-7")),
        ...     telemetry.gate("default"),
        ... )  # doctest: +SKIP
        >>> await Runner.run(
        ...     agent, "hi", session=guarded, run_config=RunConfig(group_id="chat-7")
        ... )  # doctest: +SKIP
    """

    def __init__(
        self,
        session: Session,
        gate: CompactionGate,
        *,
        on_open: OnOpen = "defer",
        conversation_id: str | None = None,
        recorder: ToolCallRecorder | None = None,
    ) -> None:
        """Guard `session`'s ``run_compaction`` with `gate`.

        Args:
            session: a session with ``run_compaction`` (``OpenAIResponsesCompactionSession``,
                or a wrapper around one).
            gate: the gate to ask; give it the ledger the tool calls are recorded in
                (`Telemetry.gate` does, and records every decision).
            on_open: hold the history verbatim (``defer``) or raise the refusal (``refuse``)
                when the gate does not allow the compaction.
            conversation_id: the conversation whose ledger is consulted; the current
                `conversation` scope, else the session id, when None.
            recorder: told, after each compaction, which recorded calls left the context.

        Raises:
            TypeError: `session` cannot compact (it has no ``run_compaction``).
        """
        compact = getattr(session, "run_compaction", None)
        if not callable(compact):
            raise TypeError(
                f"{type(session).__name__} has no run_compaction: there is no compaction to "
                "guard (wrap an OpenAIResponsesCompactionSession)"
            )
        if on_open not in ("defer", "refuse"):
            raise ValueError(f"on_open must be 'defer' or 'refuse', got {on_open!r}")
        self.session = session
        self._compact: Callable[..., Awaitable[None]] = compact
        self.session_id = session.session_id
        self.gate = gate
        self.on_open: OnOpen = on_open
        self.conversation_id = conversation_id
        self.recorder = recorder
        self.last_decision: Decision | None = None
        """The gate's answer to the latest ``run_compaction`` (None: nothing to evaluate)."""
        self.compactions = 0
        self.deferrals = 0

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this class lacks: the SDK's private hooks of the
        # wrapped session (generation tracking, deferral markers) stay reachable.
        session = self.__dict__.get("session")
        if session is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(session, name)

    @property
    def session_settings(self) -> Any:
        """The wrapped session's settings."""
        return getattr(self.session, "session_settings", None)

    @session_settings.setter
    def session_settings(self, value: Any) -> None:
        self.session.session_settings = value

    # -- the Session protocol, passed through ------------------------------------------------

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        """The wrapped session's items."""
        items: list[Any] = await _forward(self.session.get_items, limit, wrapper=wrapper)
        return items

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        """Append to the wrapped session."""
        await _forward(self.session.add_items, items, wrapper=wrapper)

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        """Pop from the wrapped session."""
        return await _forward(self.session.pop_item, wrapper=wrapper)

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Clear the wrapped session."""
        await _forward(self.session.clear_session, wrapper=wrapper)

    # -- compaction, guarded -----------------------------------------------------------------

    async def run_compaction(self, args: Any = None, *, wrapper: Any = None) -> None:
        """Compact the wrapped session if the gate allows it; otherwise defer or refuse.

        Raises:
            CompactionRefused: with ``on_open="refuse"``, when the gate refuses.
        """
        items = await self._items()
        try:
            decision = self._decide(items, await self._readings())
        except Exception:
            # Unreadable history, or a failure of the gate: holding the history verbatim
            # loses nothing, compacting it unchecked might.
            _log.exception("otel-compaction: session %s: compaction deferred", self.session_id)
            self.last_decision = None
            self.deferrals += 1
            return
        if decision is None or decision.action == "compact":
            await _forward(self._compact, args, wrapper=wrapper)
            self.compactions += 1
            if self.recorder is not None:
                await self._compacted(self.recorder, items)
            return
        if self.on_open == "refuse":
            raise refusal_error(decision)
        self.deferrals += 1
        _log.info(
            "otel-compaction: session %s: compaction deferred: %s",
            self.session_id,
            decision.outline(),
        )

    async def evaluate(self) -> Decision | None:
        """Ask the gate about compacting the whole history, the calls in flight included.

        Returns None when there is nothing to evaluate (no items, or only the protected
        head). Records the decision as `last_decision` (and, with a gate from
        `Telemetry.gate`, as telemetry); never raises a refusal.

        Raises:
            TranscriptError: a stored item cannot be read as a transcript message.
        """
        return self._decide(await self._items(), await self._readings())

    async def _compacted(self, recorder: ToolCallRecorder, before: list[Any]) -> None:
        """Tell `recorder` which calls the compaction took out of context (none when the
        history did not change)."""
        try:
            after = await self._items()
            if after == before:
                return
            kept = [call.id for call in Transcript.parse(after).calls]
        except Exception:  # unreadable: every call may be gone, or none: say nothing
            _log.exception("otel-compaction: session %s: compacted history", self.session_id)
            return
        recorder.compacted_except(self._conversation(), kept)

    async def _items(self) -> list[Any]:
        return list(await self.get_items(_ALL_ITEMS))

    async def _readings(self) -> list[SourceReading] | None:
        """The gate's obligation sources, read on this event loop (None: it has none)."""
        sources = self.gate.sources
        if not sources:
            return None
        return await sources.aread(self._conversation())

    def _decide(self, items: list[Any], readings: list[SourceReading] | None) -> Decision | None:
        conversation = self._conversation()
        transcript = Transcript.parse(items)
        in_flight = self._in_flight(conversation, transcript)
        if in_flight:
            transcript = Transcript.parse(items + in_flight)
        decision: Decision | None = None
        if len(transcript):
            try:
                decision = self.gate.evaluate(
                    transcript,
                    0,
                    len(transcript),
                    critical=self.on_open == "refuse",
                    conversation_id=conversation,
                    raise_on_refuse=False,
                    readings=readings,
                )
            except SpanError:  # nothing outside the protected head
                decision = None
        self.last_decision = decision
        return decision

    def _conversation(self) -> str:
        return self.conversation_id or current_conversation_id() or self.session_id

    def _in_flight(self, conversation: str, transcript: Transcript) -> list[dict[str, Any]]:
        """Tool calls open in the ledger that the stored items do not show (no call pairs
        with their record: `otel_compaction.reconcile`), as the Responses items they will be
        stored as."""
        ledger = self.gate.ledger
        if ledger is None:
            return []
        return [
            {
                "type": "function_call",
                "call_id": pair.record.id,
                "name": pair.record.name,
                "arguments": "",
            }
            for pair in reconcile_calls(
                transcript, ledger.open_obligations(conversation), only=_NOT_STORED
            )
        ]


def _accepts_wrapper(method: Any) -> bool:
    """Whether a session method takes the Runner's context ``wrapper`` (newer SDK sessions
    opt in by declaring it; older ones must be called without it)."""
    try:
        parameter = inspect.signature(method).parameters.get("wrapper")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


async def _forward(method: Any, *args: Any, wrapper: Any) -> Any:
    if wrapper is not None and _accepts_wrapper(method):
        return await method(*args, wrapper=wrapper)
    return await method(*args)
