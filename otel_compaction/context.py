"""The current conversation: a scope that sets ``gen_ai.conversation.id`` for the context.

The id lives in a context variable, so it follows threads started with a copied context and
asyncio tasks (which copy the context when created), and is also put into OpenTelemetry
baggage so that other services in the trace can see it. Outside any scope, an id found in the
baggage (set by an upstream service) is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from opentelemetry import baggage
from opentelemetry import context as otel_context

from otel_compaction.telemetry.semconv import GEN_AI_CONVERSATION_ID

__all__ = ["conversation", "current_conversation_id", "scoped_conversation_id"]

_CONVERSATION: ContextVar[str | None] = ContextVar("otel_compaction_conversation", default=None)


@contextmanager
def conversation(conversation_id: str) -> Iterator[str]:
    """Make `conversation_id` the current conversation inside the ``with`` block.

    Example:
        >>> with conversation("conv-42"):
        ...     current_conversation_id()
        'conv-42'
    """
    token = _CONVERSATION.set(conversation_id)
    otel_token = otel_context.attach(baggage.set_baggage(GEN_AI_CONVERSATION_ID, conversation_id))
    try:
        yield conversation_id
    finally:
        otel_context.detach(otel_token)
        _CONVERSATION.reset(token)


def current_conversation_id() -> str | None:
    """The conversation of the current context: the innermost scope, else the baggage."""
    explicit = _CONVERSATION.get()
    if explicit is not None:
        return explicit
    value = baggage.get_baggage(GEN_AI_CONVERSATION_ID)
    return str(value) if value is not None else None


def scoped_conversation_id() -> str | None:
    """The innermost `conversation` scope of the current context, ignoring the baggage."""
    return _CONVERSATION.get()
