"""A model request and response as the instrumentation sees them, whatever the SDK.

Applications send SDK objects as often as dicts (``messages.append(completion.choices[0]
.message)``, ``input += response.output``, Anthropic ``content=message.content``), so messages
are turned into plain dicts first; the caller's list and objects are never modified. Parsing is
tolerant: a message the transcript model cannot read is replaced by an empty placeholder (the
positions of the others stay right), so one odd item does not blind detection for the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from otel_compaction.errors import TranscriptError
from otel_compaction.incremental import TranscriptCache
from otel_compaction.instrumentation.detection import EmittedCall
from otel_compaction.transcript import Transcript

__all__ = ["ModelRequest", "ModelResponse", "parse_transcript", "plain", "plain_messages"]

_log = logging.getLogger(__name__)

_MAX_REPAIRS = 16
_PLACEHOLDER: Mapping[str, Any] = {"role": "assistant", "content": ""}
_NESTED = ("content", "tool_calls")  # where SDK objects hide inside a dict message


@dataclass(slots=True)
class ModelRequest:
    """One request to a model API.

    ``messages`` are plain dicts with the request's instructions first (``instructions``,
    ``system``), or None when they cannot be read (an iterator, an unknown shape).
    """

    api: str
    provider: str
    model: str | None
    stream: bool
    messages: list[Mapping[str, Any]] | None
    provider_conversation: str | None = None
    previous_response_id: str | None = None

    @property
    def full_history(self) -> bool:
        """False when the provider keeps earlier turns (the messages are only the new ones)."""
        return self.provider_conversation is None and self.previous_response_id is None


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """What a complete model response emitted."""

    response_id: str | None = None
    calls: tuple[EmittedCall, ...] = field(default_factory=tuple)


def plain(value: Any) -> Any:
    """An SDK object (pydantic model) as a dict; anything else as it is."""
    if type(value) is dict or isinstance(value, (str, int, float, bool, type(None))):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="python", warnings=False)
        except TypeError:  # an older pydantic without `warnings`
            return dump()
    return value


def _plain_message(message: Any) -> Any:
    if type(message) is not dict:
        message = plain(message)
        if not isinstance(message, Mapping):
            return message
    copied: dict[str, Any] | None = None
    for key in _NESTED:
        parts = message.get(key)
        if parts is None or type(parts) is str:
            continue
        if isinstance(parts, (list, tuple)) and any(type(p) is not dict for p in parts):
            copied = dict(message) if copied is None else copied
            copied[key] = [plain(p) for p in parts]
        elif isinstance(parts, tuple):
            copied = dict(message) if copied is None else copied
            copied[key] = list(parts)
    return message if copied is None else copied


def plain_messages(messages: Any, *, instructions: Any = None) -> list[Mapping[str, Any]] | None:
    """The request's messages as plain dicts, `instructions` first as a system message; None
    when `messages` is not a list or tuple (an iterator must not be consumed)."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if not isinstance(messages, (list, tuple)):
        return None
    out: list[Mapping[str, Any]] = []
    if isinstance(instructions, (list, tuple)):
        instructions = [plain(part) for part in instructions]
    if isinstance(instructions, (str, list)) and instructions:
        out.append({"role": "system", "content": instructions})
    for message in messages:
        converted = _plain_message(message)
        out.append(converted if isinstance(converted, Mapping) else dict(_PLACEHOLDER))
    return out


def opening(messages: Sequence[Mapping[str, Any]]) -> str:
    """What a conversation's requests share from the first on: its first two messages (the
    instructions and the first user turn), as the key of its incremental parse. Two
    conversations that open alike share the key; the parse notices and starts over."""
    return repr(messages[:2])


def parse_transcript(
    messages: Sequence[Mapping[str, Any]] | None, cache: TranscriptCache | None = None
) -> Transcript | None:
    """The transcript of `messages`, with unreadable messages replaced by placeholders; None
    when too many are unreadable. With `cache`, a request that repeats an earlier request of
    its conversation and appends to it costs only the appended messages."""
    if messages is None:
        return None
    if cache is not None:
        try:
            return cache.parse(messages, key=opening(messages))
        except TranscriptError:
            pass  # read again below, unreadable messages replaced
    working: list[Mapping[str, Any]] | None = None
    for _ in range(_MAX_REPAIRS):
        try:
            return Transcript.parse(messages if working is None else working)
        except TranscriptError as error:
            index = error.message_index
            if index is None:
                break
            if working is None:
                working = list(messages)
            working[index] = _PLACEHOLDER
    _log.debug("otel-compaction: request messages not readable; no detection for this request")
    return None
