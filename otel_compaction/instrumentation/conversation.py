"""Which conversation an instrumented model request belongs to (``gen_ai.conversation.id``).

The ledger keeps obligations per conversation, so every request must be given one. A request
made inside an OpenAI Agents SDK trace with a ``group_id`` (``RunConfig.group_id``) belongs to
that group (source ``agents``, asked of that SDK's integration once the SDK is imported): the
conversation its processor files the run's tool calls under, so both layers agree. Otherwise, in
order:

1. ``explicit``: the innermost ``otel_compaction.conversation(...)`` scope of the caller;
2. ``baggage``: ``gen_ai.conversation.id`` in the OpenTelemetry baggage (an upstream service set
   it);
3. ``provider``: the provider keeps the conversation: the OpenAI Responses ``conversation``
   parameter, or a ``previous_response_id`` naming a response this process saw;
4. ``continued``: the request carries a tool call or result whose call id this process saw the
   model emit in a known conversation, so a conversation keeps its identity when its compactor
   rewrites the first messages (the rewritten form is remembered as an alias);
5. ``derived``: ``derived:`` and the first 16 hex digits of the SHA-256 of the first system or
   developer instruction (OpenAI ``instructions`` and Anthropic ``system`` count) and the first
   user message, as plain text, joined by a NUL character. Stable across processes and runs.

Two agents that start with the same instruction and the same first user message share a derived
id; give them an explicit scope. The index is bounded (least recently used entries go first) and
thread-safe.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry import baggage

from otel_compaction.context import scoped_conversation_id
from otel_compaction.telemetry.semconv import GEN_AI_CONVERSATION_ID
from otel_compaction.transcript import Transcript

__all__ = [
    "DERIVED_PREFIX",
    "ConversationIndex",
    "Identity",
    "IdentitySource",
    "OpeningTexts",
    "derived_id",
    "first_texts",
]

DERIVED_PREFIX = "derived:"

IdentitySource = Literal["agents", "explicit", "baggage", "provider", "continued", "derived"]

_log = logging.getLogger(__name__)

_INSTRUCTION_ROLES = frozenset({"system", "developer"})
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


@dataclass(frozen=True, slots=True)
class Identity:
    """A conversation id and where it came from."""

    id: str
    source: IdentitySource


@functools.lru_cache(maxsize=256)  # a conversation asks again on every request
def derived_id(instruction: str, first_user: str) -> str:
    """The derived conversation id of a request with this instruction and first user message.

    Example:
        >>> derived_id("You book flights.", "Oslo on Friday")
        'derived:dcf0bded37e0a967'
    """
    digest = hashlib.sha256(f"{instruction}\x00{first_user}".encode()).hexdigest()
    return DERIVED_PREFIX + digest[:16]


def first_texts(messages: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """The text of the first system or developer message and of the first user message."""
    return OpeningTexts().scan(messages, 0)


class OpeningTexts:
    """`first_texts` of a growing list of messages, reading each message once.

    Example:
        >>> texts = OpeningTexts()
        >>> messages = [{"role": "user", "content": "hi"}]
        >>> texts.scan(messages, 0)
        ('', 'hi')
        >>> messages.append({"role": "system", "content": "Be brief."})
        >>> texts.scan(messages, 1)
        ('Be brief.', 'hi')
    """

    __slots__ = ("instruction", "instruction_at", "scanned", "user", "user_at")

    def __init__(self) -> None:
        """Nothing read yet."""
        self.instruction: str | None = None
        self.instruction_at = 0
        self.user: str | None = None
        self.user_at = 0
        self.scanned = 0

    def scan(self, messages: Sequence[Mapping[str, Any]], unchanged: int) -> tuple[str, str]:
        """`first_texts(messages)`, given that ``messages[:unchanged]`` are the messages read
        by the previous scan (pass 0 for a list that is not an extension of it)."""
        if self.scanned > unchanged:
            self.scanned = unchanged
            if self.instruction is not None and self.instruction_at >= unchanged:
                self.instruction = None
            if self.user is not None and self.user_at >= unchanged:
                self.user = None
        index = self.scanned
        count = len(messages)
        while index < count and (self.instruction is None or self.user is None):
            message = messages[index]
            role = message.get("role")
            if self.instruction is None and role in _INSTRUCTION_ROLES:
                self.instruction, self.instruction_at = _text(message.get("content")), index
            elif self.user is None and role == "user":
                self.user, self.user_at = _text(message.get("content")), index
            index += 1
        self.scanned = index
        return self.instruction or "", self.user or ""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type", "text") in _TEXT_PARTS
        )
    return ""


def _agents_group_id() -> str | None:
    """The ``group_id`` of the current Agents SDK trace; None until that SDK is imported."""
    if "agents.tracing" not in sys.modules:
        return None
    try:
        from otel_compaction.integrations.openai_agents.tracing import current_group_id
    except Exception:
        _log.debug("otel-compaction: the Agents SDK integration cannot be imported")
        return None
    return current_group_id()


class _Lru:
    """A bounded mapping that forgets its least recently used keys."""

    __slots__ = ("_items", "_limit")

    def __init__(self, limit: int) -> None:
        self._items: OrderedDict[str, str] = OrderedDict()
        self._limit = limit

    def get(self, key: str) -> str | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: str, value: str) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._limit:
            self._items.popitem(last=False)


class ConversationIndex:
    """Remembers conversations, the call and response ids emitted in them, and aliases, so that
    `identify` can follow a conversation across requests."""

    def __init__(self, max_entries: int = 100_000) -> None:
        """Keep at most `max_entries` of each kind of entry."""
        self._lock = threading.Lock()
        self._known = _Lru(max_entries)  # conversation id or alias -> conversation id
        self._calls = _Lru(max_entries)  # tool-call id -> conversation id
        self._responses = _Lru(max_entries)  # response id -> conversation id

    def identify(
        self,
        messages: Sequence[Mapping[str, Any]] | None,
        transcript: Transcript | None,
        *,
        provider_conversation: str | None = None,
        previous_response_id: str | None = None,
        texts: tuple[str, str] | None = None,
    ) -> Identity:
        """The conversation of a request with these (plain) messages, in the documented order;
        `texts` is their `first_texts` when the caller already has it."""
        group = _agents_group_id()
        if group:
            return Identity(group, "agents")
        scoped = scoped_conversation_id()
        if scoped:
            return Identity(scoped, "explicit")
        carried = baggage.get_baggage(GEN_AI_CONVERSATION_ID)
        if carried:
            return Identity(str(carried), "baggage")
        if provider_conversation:
            return Identity(provider_conversation, "provider")
        if previous_response_id:
            with self._lock:
                chained = self._responses.get(previous_response_id)
            if chained is not None:
                return Identity(chained, "provider")
            # A chain this process did not see begin: the chain itself is the conversation.
            return Identity(derived_id("", previous_response_id), "derived")
        derived = derived_id(*(texts if texts is not None else first_texts(messages or ())))
        with self._lock:
            known = self._known.get(derived)
            if known is not None:
                return Identity(known, "derived" if known == derived else "continued")
            continued = self._continued(transcript)
            self._known.put(derived, continued or derived)
        if continued is not None:
            return Identity(continued, "continued")
        return Identity(derived, "derived")

    def remember(
        self, conversation_id: str, call_ids: Iterable[str], response_id: str | None = None
    ) -> None:
        """The model emitted these calls (and this response) in `conversation_id`."""
        with self._lock:
            self._known.put(conversation_id, conversation_id)
            for call_id in call_ids:
                self._calls.put(call_id, conversation_id)
            if response_id:
                self._responses.put(response_id, conversation_id)

    def _continued(self, transcript: Transcript | None) -> str | None:
        """The conversation of the most recent call or result id of `transcript` seen before."""
        if transcript is None:
            return None
        for call in reversed(transcript.calls):
            found = self._calls.get(call.id)
            if found is not None:
                return found
        for result in reversed(transcript.results):
            found = self._calls.get(result.call_id)
            if found is not None:
                return found
        return None
