"""A model request and response as the instrumentation sees them, whatever the SDK.

Applications send SDK objects as often as dicts (``messages.append(completion.choices[0]
.message)``, ``input += response.output``, Anthropic ``content=message.content``), so messages
are turned into plain dicts first; the caller's list and objects are never modified. Parsing is
tolerant: a message the transcript model cannot read is replaced by an empty placeholder (the
positions of the others stay right), so one odd item does not blind detection for the rest.

`MessageCache` keeps each conversation's conversion between its requests: a request whose
messages begin with those of the previous request (the same objects, or equal ones: a
framework may rebuild them on every call) converts only the appended ones and the last one
seen (it may have been written in place), and hands the others on as the plain objects of the
previous request, so the incremental parse recognises them by identity. Any other list
(shorter, an object replaced, other instructions) is converted whole. Not detected: an earlier
SDK object changed in place after its request, as for `otel_compaction.incremental`.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from otel_compaction.errors import TranscriptError
from otel_compaction.incremental import DEFAULT_MAX_CONVERSATIONS, TranscriptCache
from otel_compaction.instrumentation.conversation import OpeningTexts
from otel_compaction.instrumentation.detection import EmittedCall
from otel_compaction.transcript import Transcript

__all__ = [
    "MessageCache",
    "ModelRequest",
    "ModelResponse",
    "PlainMessages",
    "parse_transcript",
    "plain",
    "plain_messages",
]

_log = logging.getLogger(__name__)

_MAX_REPAIRS = 16
_PLACEHOLDER: Mapping[str, Any] = {"role": "assistant", "content": ""}


@dataclass(slots=True)
class ModelRequest:
    """One request to a model API.

    ``messages`` and ``instructions`` are the caller's (``messages`` or ``input``; OpenAI
    ``instructions``, Anthropic ``system``), as given: `MessageCache.read` turns them into
    plain dicts.
    """

    api: str
    provider: str
    model: str | None
    stream: bool
    messages: Any
    instructions: Any = None
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


def _plain_parts(parts: Any) -> Any:
    """A message's content or tool calls with SDK objects as dicts (a tuple as a list); the
    same object when there is nothing to convert, as for most dict messages."""
    if parts is None or type(parts) is str:
        return parts
    if isinstance(parts, (list, tuple)):
        for part in parts:
            if type(part) is not dict:
                return [plain(p) for p in parts]
        if isinstance(parts, tuple):
            return list(parts)
    return parts


def _plain_message(message: Any) -> Any:
    if type(message) is not dict:
        message = plain(message)
        if not isinstance(message, Mapping):
            return message
    content = message.get("content")
    calls = message.get("tool_calls")
    plain_content = _plain_parts(content)
    plain_calls = _plain_parts(calls)
    if plain_content is content and plain_calls is calls:
        return message
    copied = dict(message)
    if plain_content is not content:
        copied["content"] = plain_content
    if plain_calls is not calls:
        copied["tool_calls"] = plain_calls
    return copied


def _listed(messages: Any) -> Sequence[Any] | None:
    """The request's messages as a sequence; None when they are not a list or tuple (an
    iterator must not be consumed)."""
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    return messages if isinstance(messages, (list, tuple)) else None


def _system(instructions: Any) -> Mapping[str, Any] | None:
    """The request's instructions as the system message that goes first, if any."""
    if isinstance(instructions, (list, tuple)):
        instructions = [plain(part) for part in instructions]
    if isinstance(instructions, (str, list)) and instructions:
        return {"role": "system", "content": instructions}
    return None


def _plain_or_placeholder(message: Any) -> Mapping[str, Any]:
    converted = _plain_message(message)
    if type(converted) is dict or isinstance(converted, Mapping):
        return converted
    return dict(_PLACEHOLDER)


def plain_messages(messages: Any, *, instructions: Any = None) -> list[Mapping[str, Any]] | None:
    """The request's messages as plain dicts, `instructions` first as a system message; None
    when `messages` is not a list or tuple (an iterator must not be consumed)."""
    listed = _listed(messages)
    if listed is None:
        return None
    system = _system(instructions)
    out: list[Mapping[str, Any]] = [] if system is None else [system]
    out.extend(_plain_or_placeholder(message) for message in listed)
    return out


@dataclass(frozen=True, slots=True)
class PlainMessages:
    """A request's messages as plain dicts (instructions first), with the key of their
    conversation's incremental parse (`opening`) and their `first_texts`."""

    messages: list[Mapping[str, Any]]
    key: str
    texts: tuple[str, str]


class _Seen:
    """One conversation's last request: the caller's messages and their plain forms."""

    __slots__ = ("instructions", "lock", "plain", "raw", "system", "texts")

    def __init__(self) -> None:
        self.raw: list[Any] = []
        self.plain: list[Mapping[str, Any]] = []  # the system message first, when there is one
        self.instructions: Any = None
        self.system: Mapping[str, Any] | None = None
        self.texts = OpeningTexts()
        self.lock = threading.Lock()

    def update(
        self, messages: list[Any], instructions: Any, system: Mapping[str, Any] | None
    ) -> tuple[list[Mapping[str, Any]], int]:
        """The plain forms of `messages` after `system`, and how many leading plain messages
        are the ones handed out last time (under `lock`)."""
        seen = self.system
        same = system is not None and seen is not None
        if same and (instructions is self.instructions or system == seen):
            system = seen
        offset = 0 if system is None else 1
        raw = self.raw
        count = len(raw)
        appended = system is seen and 0 < count <= len(messages)
        if appended:
            # List equality compares by identity first, then by value: the fast test of an
            # append. The new messages join the kept list first, so that no copy of the
            # history is made (a copy touches every message object).
            raw.extend(messages[count:])
            appended = raw == messages
            if not appended:
                del raw[count:]
        if appended:
            # Every seen message is the same object or an equal one; the last one may be being
            # written in place.
            unchanged = offset + count - 1
            out = self.plain[:unchanged]
            last = self.plain[unchanged]
            again = _plain_or_placeholder(messages[count - 1])
            out.append(last if again is last or again == last else again)
            start = count
        else:
            unchanged = 0
            out = [] if system is None else [system]
            start = 0
        out.extend(map(_plain_or_placeholder, messages[start:] if start else messages))
        if not appended:
            self.raw = list(messages)
        self.plain = out
        self.instructions = instructions
        self.system = system
        return out, unchanged


class MessageCache:
    """Per-conversation incremental conversion of requests' messages (see the module), least
    recently used conversations evicted; thread-safe.

    Example:
        >>> cache = MessageCache()
        >>> messages = [{"role": "user", "content": "hi"}]
        >>> first = cache.read(messages, "Be brief.")
        >>> messages.append({"role": "assistant", "content": "hello"})
        >>> second = cache.read(messages, "Be brief.")
        >>> second.messages[0] is first.messages[0], second.texts
        (True, ('Be brief.', 'hi'))
    """

    def __init__(self, max_conversations: int = DEFAULT_MAX_CONVERSATIONS) -> None:
        """Keep the messages of at most `max_conversations` conversations."""
        self.max_conversations = max_conversations
        self._seen: OrderedDict[str, _Seen] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    def read(self, messages: Any, instructions: Any = None) -> PlainMessages | None:
        """`plain_messages(messages, instructions=instructions)` with its key and first
        texts, converting only what was appended since the conversation's last request."""
        listed = _listed(messages)
        if listed is None:
            return None
        if type(listed) is not list:
            listed = list(listed)
        system = _system(instructions)
        head = [] if system is None else [system]
        head.extend(_plain_or_placeholder(message) for message in listed[: 2 - len(head)])
        key = opening(head)
        seen = self._entry(key)
        with seen.lock:
            plain, unchanged = seen.update(listed, instructions, system)
            texts = seen.texts.scan(plain, unchanged)
        return PlainMessages(plain, key, texts)  # never changed: each request builds anew

    def _entry(self, key: str) -> _Seen:
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                seen = self._seen[key] = _Seen()
                while len(self._seen) > self.max_conversations:
                    self._seen.popitem(last=False)
            else:
                self._seen.move_to_end(key)
            return seen


def opening(messages: Sequence[Mapping[str, Any]]) -> str:
    """What a conversation's requests share from the first on: its first two messages (the
    instructions and the first user turn), as the key of its incremental parse. Two
    conversations that open alike share the key; the parse notices and starts over."""
    return repr(messages[:2])


def parse_transcript(
    messages: Sequence[Mapping[str, Any]] | None,
    cache: TranscriptCache | None = None,
    *,
    key: str | None = None,
) -> Transcript | None:
    """The transcript of `messages`, with unreadable messages replaced by placeholders; None
    when too many are unreadable. With `cache`, a request that repeats an earlier request of
    its conversation and appends to it costs only the appended messages (`key` is
    ``opening(messages)`` when the caller has it)."""
    if messages is None:
        return None
    if cache is not None:
        try:
            return cache.parse(messages, key=opening(messages) if key is None else key)
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
