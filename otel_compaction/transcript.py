"""Read agent transcripts into one model: entries, tool calls and their resolutions.

Three wire formats are read, detected per message so a transcript may mix them:

* OpenAI Chat Completions: assistant ``tool_calls`` (with or without the ``function``
  wrapper), results as ``role: "tool"`` messages carrying ``tool_call_id`` (or ``id``).
* Anthropic Messages: ``tool_use`` / ``tool_result`` content blocks (``is_error`` marks a
  failed result); server-side ``*_tool_use`` / ``*_tool_result`` blocks pair the same way.
* OpenAI Responses items: ``function_call`` / ``function_call_output`` (and the custom and
  computer tool variants) joined by ``call_id``.

Pairing is exact: a result resolves the latest still-unanswered call with the same id in an
earlier message (the call it follows, as the providers pair them), because real transcripts
reuse ids. A long-running tool's interim result (a JSON object whose ``status`` says the work is
still under way, as Google ADK's ``LongRunningFunctionTool`` returns) pairs with its call without
resolving it: the final result, a later response with the same id, does. Parsing is a single
pass; the closed cuts come from one difference array, so everything here is linear in the
transcript size.

Besides pairing, the providers reject cuts inside some runs of messages; the parser records
them as `Unit`s: an Anthropic extended-thinking tool loop (an assistant turn that starts with a
``thinking`` block, through its ``tool_use``/``tool_result`` rounds, up to the next user
message that is not only tool results), an OpenAI Responses ``reasoning`` item with the items it
produced, and one model response split over consecutive assistant messages (or sharing one
``id``). Which of them constrain a cut is the policy's choice (the atomicity rules).
"""

from __future__ import annotations

import bisect
import json
import operator
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from otel_compaction.errors import TranscriptError

__all__ = [
    "Entry",
    "ToolCall",
    "ToolResult",
    "Transcript",
    "TranscriptBuilder",
    "Unit",
    "closed_cuts_of",
]

ResultStatus = Literal["result", "error"]

OPENAI_CHAT: Final = "openai_chat"
ANTHROPIC: Final = "anthropic_messages"
OPENAI_RESPONSES: Final = "openai_responses"
PLAIN: Final = "plain"
MIXED: Final = "mixed"

_ROLES: Final = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_RESPONSES_CALLS: Final = {
    "function_call": "arguments",
    "custom_tool_call": "input",
    "computer_call": "action",
    "local_shell_call": "action",
}
_RESPONSES_OUTPUTS: Final = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "computer_call_output",
        "local_shell_call_output",
    }
)
# Responses items that carry no obligation of the client's: text, reasoning, and tools the
# provider runs and resolves inside the same item.
_RESPONSES_PASSIVE: Final = frozenset(
    {
        "message",
        "reasoning",
        "web_search_call",
        "file_search_call",
        "image_generation_call",
        "code_interpreter_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "item_reference",
        "compaction",
    }
)
_TEXT_PARTS: Final = frozenset({"text", "input_text", "output_text", "refusal"})
# The statuses of a long-running tool's interim result: the work goes on, the result comes later.
_INTERIM_STATUSES: Final = frozenset({"pending", "in_progress", "in-progress", "queued"})
_THINKING: Final = frozenset({"thinking", "redacted_thinking"})
# Responses items the model outputs (what a reasoning item produces), as opposed to inputs.
_RESPONSES_OUTPUT_ITEMS: Final = frozenset({"message", *_RESPONSES_CALLS})

THINKING_TOOL_LOOP: Final = "thinking_tool_loop"
REASONING_ITEM: Final = "reasoning_item"
SPLIT_RESPONSE: Final = "split_response"


@dataclass(slots=True)
class ToolCall:
    """One tool call emitted by the model.

    ``result`` is the index in `Transcript.results` of its resolution, or None while open.
    """

    id: str
    name: str
    message_index: int
    arguments: str
    ordinal: int
    result: int | None = None


@dataclass(slots=True)
class ToolResult:
    """One tool result sent back to the model.

    ``call`` is the index in `Transcript.calls` of the call it resolves, or None for an
    orphan (no earlier unanswered call carries its id). ``interim`` marks a long-running
    tool's first answer (``{"status": "pending", ...}``): it pairs with its call and leaves it
    open for the final result.
    """

    call_id: str
    message_index: int
    status: ResultStatus
    text: str
    ordinal: int
    call: int | None = None
    interim: bool = False


@dataclass(slots=True)
class Entry:
    """One message: its role, detected format, prose text and the calls and results it holds.

    ``item`` is the Responses item type (empty for role messages), ``thinking`` whether the
    message opens with an Anthropic thinking block, ``response_id`` the message's own ``id``.
    """

    index: int
    role: str
    format: str
    text: str
    chars: int
    calls: list[int] = field(default_factory=list)
    results: list[int] = field(default_factory=list)
    item: str = ""
    thinking: bool = False
    response_id: str | None = None

    @property
    def only_results(self) -> bool:
        """True for a message that carries tool results and no prose of its own."""
        return bool(self.results) and not self.text.strip()


@dataclass(frozen=True, slots=True)
class Unit:
    """Messages ``first..last`` that a provider requires to stay together; ``kind`` is one of
    ``thinking_tool_loop``, ``reasoning_item``, ``split_response``."""

    kind: str
    first: int
    last: int


class Transcript:
    """A parsed transcript. Build it with `Transcript.parse` or `Transcript.load`.

    Example:
        >>> t = Transcript.parse([
        ...     {"role": "user", "content": "cancel ABC123"},
        ...     {"role": "assistant", "content": None, "tool_calls": [
        ...         {"id": "c1", "type": "function",
        ...          "function": {"name": "cancel", "arguments": "{}"}}]},
        ...     {"role": "tool", "tool_call_id": "c1", "content": "done"},
        ... ])
        >>> t.closed_cuts()
        [0, 1, 3]
    """

    __slots__ = (
        "__weakref__", "_closed", "calls", "entries", "format", "messages", "results", "units",
    )  # fmt: skip

    def __init__(
        self,
        messages: Sequence[Mapping[str, Any]],
        entries: list[Entry],
        calls: list[ToolCall],
        results: list[ToolResult],
        *,
        closed: bytearray | None = None,
        formats: set[str] | None = None,
        units: list[Unit] | None = None,
    ) -> None:
        self.messages = messages
        self.entries = entries
        self.calls = calls
        self.results = results
        if formats is None:
            formats = {e.format for e in entries if e.format != PLAIN}
        formats = set(formats)
        self.format = formats.pop() if len(formats) == 1 else (MIXED if formats else PLAIN)
        self._closed = _closed_cuts(len(entries), calls, results) if closed is None else closed
        self.units = atomic_units(entries) if units is None else units

    @classmethod
    def parse(cls, messages: Iterable[Any]) -> Transcript:
        """Parse messages of any supported format; raise `TranscriptError` naming the message."""
        if isinstance(messages, (str, bytes, Mapping)):
            raise TranscriptError(f"expected a list of messages, got {type(messages).__name__}")
        messages = list(messages)
        parser = TranscriptBuilder()
        parser.feed(messages)
        return parser.transcript(messages)

    @classmethod
    def load(cls, path: str | Path) -> Transcript:
        """Read a JSON list, an object with ``messages``, or JSONL from a file (``-`` is stdin)."""
        from otel_compaction.inputs import load_messages

        return cls.parse(load_messages(path))

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def closedness(self) -> bytes:
        """Pairing closedness of every cut 0..n: 1 closed, 0 not (read-only)."""
        return bytes(self._closed)

    def is_closed(self, cut: int) -> bool:
        """True when no call before `cut` lacks its resolution before `cut`."""
        return bool(self._closed[cut])

    def closed_cuts(self) -> list[int]:
        """Every pairing-closed cut, 0 through ``len(self)``, ascending (the atomic units
        are the policy's to apply: see `Analysis.closed_cuts`)."""
        return [i for i, closed in enumerate(self._closed) if closed]

    def open_calls(self) -> list[ToolCall]:
        """Calls that never receive a result in this transcript."""
        return [c for c in self.calls if c.result is None]

    def orphan_results(self) -> list[ToolResult]:
        """Results with no earlier unanswered call of the same id (no call at all, or a
        second result for an answered call)."""
        return [r for r in self.results if r.call is None]

    def result_of(self, call: ToolCall) -> ToolResult | None:
        """The resolution of `call`, if it is in the transcript."""
        return None if call.result is None else self.results[call.result]

    def call_of(self, result: ToolResult) -> ToolCall | None:
        """The call `result` resolves, if it is in the transcript."""
        return None if result.call is None else self.calls[result.call]


def _closed_cuts(n: int, calls: list[ToolCall], results: list[ToolResult]) -> bytearray:
    return closed_cuts_of(
        n,
        (
            (c.message_index, None if c.result is None else results[c.result].message_index)
            for c in calls
        ),
    )


def closed_cuts_of(n: int, pairs: Iterable[tuple[int, int | None]]) -> bytearray:
    """Closedness of every cut 0..n, given (call message, result message or None) pairs.

    A call at message m resolved at message r keeps cuts m+1..r open; never resolved,
    m+1..n. One difference array: linear in n plus the number of pairs.
    """
    delta = [0] * (n + 2)
    for opened, resolved in pairs:
        delta[opened + 1] += 1
        delta[n + 1 if resolved is None else resolved + 1] -= 1
    closed = bytearray(n + 1)
    depth = 0
    for cut in range(n + 1):
        depth += delta[cut]
        closed[cut] = depth == 0
    return closed


_FIRST = operator.attrgetter("first")


def atomic_units(entries: Sequence[Entry], start: int = 0) -> list[Unit]:
    """The runs of messages a provider rejects a cut inside, in order of their first message
    (only those starting at or after `start`: a message that begins a run of assistant messages
    and bare results, or one that no unit found before it reaches)."""
    units: list[Unit] = []
    n = len(entries)
    covered = -1  # the last message of the latest thinking loop found
    for entry in entries[start:]:
        index = entry.index
        if entry.role == "assistant" and entry.thinking and entry.calls and index > covered:
            last = index
            while last + 1 < n and (
                entries[last + 1].role == "assistant" or entries[last + 1].only_results
            ):
                last += 1
            if last > index:
                units.append(Unit(THINKING_TOOL_LOOP, index, last))
                covered = last
        if entry.item == "reasoning":
            last = index
            while (
                last + 1 < n
                and entries[last + 1].item in _RESPONSES_OUTPUT_ITEMS
                and (entries[last + 1].role == "assistant")
            ):
                last += 1
            if last > index:
                units.append(Unit(REASONING_ITEM, index, last))
        if entry.role == "assistant" and (
            index == 0 or not _same_response(entries[index - 1], entry)
        ):
            last = index
            while last + 1 < n and _same_response(entries[last], entries[last + 1]):
                last += 1
            if last > index:
                units.append(Unit(SPLIT_RESPONSE, index, last))
    units.sort(key=lambda u: u.first)
    return units


def _same_response(before: Entry, after: Entry) -> bool:
    """Two consecutive assistant messages of one model response: the same ``id``, or no
    message between them (a Responses reasoning item starts a new response)."""
    if before.role != "assistant" or after.role != "assistant" or after.item == "reasoning":
        return False
    if before.response_id is not None and after.response_id is not None:
        return before.response_id == after.response_id
    return True


def _text(content: Any) -> str:
    """Flatten message or result content (string, parts, blocks) into plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, Mapping):
                kind = part.get("type")
                if kind in _TEXT_PARTS or (kind is None and "text" in part):
                    value = part.get("text", part.get("refusal", ""))
                    pieces.append(value if isinstance(value, str) else _dump(value))
                elif kind == "tool_result" or kind in _RESPONSES_OUTPUTS:
                    pieces.append(_text(part.get("content", part.get("output"))))
        return "\n".join(pieces)
    return _dump(content)


def _dump(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def _require_id(value: Any, what: str, index: int) -> str:
    if isinstance(value, str) and value:
        return value
    if value is None or value == "":
        raise TranscriptError(f"{what} has no id", message_index=index)
    raise TranscriptError(
        f"{what} has an id of type {type(value).__name__}, expected a string",
        message_index=index,
    )


class TranscriptBuilder:
    """One pass over the messages; results are paired as they are met.

    The builder can be fed again with messages appended to the same conversation. What it
    published stays as it was: a call fed before and answered later is replaced in the
    builder's list, never changed in place (one fed by the same `feed` is answered in place),
    and `transcript` shares the builder's lists with the transcript it hands out until the
    next `feed`, which copies them first if that transcript still lives (a conversation whose
    transcripts are dropped between turns never copies its history).
    Cut closedness is kept as it goes: appending messages never changes whether an earlier cut
    is closed. After a `TranscriptError` the builder is half-fed: start a new one.

    A new builder can take over what another one read from messages it is given again (a
    sliding window, a truncation, a compaction that keeps some messages): `feed` with
    `reused` copies each such message's reading (role, text, format, its calls and results)
    from the `previous` builder instead of reading the message again, and redoes only what
    depends on the message's neighbours and position (indices, ordinals, pairing, closedness,
    units). The transcript is the one a fresh parse gives, as long as the reused messages are
    what they were when `previous` read them.
    """

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.calls: list[ToolCall] = []
        self.results: list[ToolResult] = []
        self.unanswered: dict[str, list[int]] = {}
        self.closed = bytearray()
        self.formats: set[str] = set()
        self._open = 0  # calls before the next cut still without their resolution
        self._units: list[Unit] = []
        self._units_upto = 0  # messages the units were found in
        self._units_from = 0  # the first of those a unit may still grow from (see transcript)
        self._published: weakref.ref[Transcript] | None = None  # shares the lists while alive
        # Result ordinal -> how many calls of its message came before it, for the results that
        # may pair with a call of their own message (server tools): what a reuse must replay.
        self._inline: dict[int, int] = {}
        self._unshared = 0  # the calls from this ordinal on were made by the current feed

    def __len__(self) -> int:
        return len(self.entries)

    def feed(
        self,
        messages: Sequence[Any],
        start: int = 0,
        *,
        previous: TranscriptBuilder | None = None,
        reused: Sequence[int] | None = None,
    ) -> None:
        """Parse ``messages[start:]`` (the messages before `start` already fed).

        With `previous` and `reused` (one entry per message: the index of the message in
        what `previous` was fed, or -1), a message with an index there is not read again: its
        reading is taken from `previous` (see the class).
        """
        self._unshared = len(self.calls)
        published = self._published
        if published is not None and start < len(messages):
            self._published = None
            if published() is not None:
                self.entries, self.calls = self.entries.copy(), self.calls.copy()
                self.results = self.results.copy()
        for index in range(start, len(messages)):
            source = -1 if reused is None else reused[index]
            if source >= 0 and previous is not None:
                self.closed.append(self._open == 0)
                self._replay(index, previous, source)
            else:
                message = messages[index]
                # A plain dict skips the slower ABC check.
                if type(message) is not dict and not isinstance(message, Mapping):
                    raise TranscriptError(
                        f"expected a message object, got {type(message).__name__}",
                        message_index=index,
                    )
                self.closed.append(self._open == 0)
                self._message(index, message)
            entry = self.entries[index]
            if entry.format != PLAIN:
                self.formats.add(entry.format)
            calls, results = self.calls, self.results
            for ordinal in entry.results:
                result = results[ordinal]
                call = result.call
                if call is not None and calls[call].message_index < index and not result.interim:
                    self._open -= 1
            for ordinal in entry.calls:
                if calls[ordinal].result is None:
                    self._open += 1

    def transcript(self, messages: Sequence[Mapping[str, Any]]) -> Transcript:
        """The transcript of everything fed so far (`messages` as the caller holds them)."""
        closed = self.closed.copy()
        closed.append(self._open == 0)
        count = len(self.entries)
        if self._units_upto != count:
            # Only a unit that reached the last message fed before can grow, and only that
            # message can begin a new one with the messages after it.
            kept = bisect.bisect_left(self._units, self._units_from, key=_FIRST)
            tail = atomic_units(self.entries, self._units_from)
            self._units = self._units[:kept] + tail
            self._units_from = min(
                (u.first for u in tail if u.last == count - 1), default=count - 1
            )
            self._units_upto = count
        published = Transcript(
            messages, self.entries, self.calls, self.results,
            closed=closed, formats=self.formats, units=self._units.copy(),
        )  # fmt: skip
        self._published = weakref.ref(published)
        return published

    def _replay(self, index: int, previous: TranscriptBuilder, source: int) -> None:
        """Message `index` as `previous` read its message `source`: the same fields, calls
        and results in the same order, placed and paired here."""
        old = previous.entries[source]
        # Entry(index, role, format, text, chars, calls, results), positionally (hot path).
        entry = Entry(index, old.role, old.format, old.text, old.chars, [], [])
        if old.item:
            entry.item = old.item
        if old.thinking:
            entry.thinking = True
        if old.response_id is not None:
            entry.response_id = old.response_id
        self.entries.append(entry)
        old_calls = previous.calls
        pending = old.calls
        taken = 0
        if old.results:
            inline = previous._inline
            for old_ordinal in old.results:
                result = previous.results[old_ordinal]
                before = inline.get(old_ordinal) if inline else None
                if before is not None:
                    while taken < before:  # the calls of its message it may pair with
                        call = old_calls[pending[taken]]
                        self._add_call(entry, call.id, call.name, call.arguments)
                        taken += 1
                self._add_result(entry, result.call_id, result.status, result.text, before)
        if taken < len(pending):
            calls, numbers = self.calls, entry.calls
            for ordinal in pending[taken:]:
                call = old_calls[ordinal]
                number = len(calls)
                # `_add_call`, inline (hot path).
                calls.append(ToolCall(call.id, call.name, index, call.arguments, number))
                numbers.append(number)
        if pending:
            self._release(entry)

    # -- recording ---------------------------------------------------------------------------

    def _call(self, entry: Entry, call_id: str, name: Any, arguments: Any) -> None:
        text = _dump(arguments) if arguments is not None else ""
        self._add_call(entry, call_id, name if isinstance(name, str) else "", text)
        entry.chars += len(text)

    def _add_call(self, entry: Entry, call_id: str, name: str, text: str) -> None:
        ordinal = len(self.calls)
        # ToolCall(id, name, message_index, arguments, ordinal), positionally (hot path).
        self.calls.append(ToolCall(call_id, name, entry.index, text, ordinal))
        entry.calls.append(ordinal)

    def _result(
        self, entry: Entry, call_id: str, content: Any, error: bool, inline: bool = False
    ) -> None:
        text = _text(content)
        status: ResultStatus = "error" if error else "result"
        self._add_result(entry, call_id, status, text, len(entry.calls) if inline else None)
        entry.chars += len(text)

    def _add_result(
        self, entry: Entry, call_id: str, status: ResultStatus, text: str, before: int | None
    ) -> None:
        """A result; `before` is None, or (for a result that may answer a call of its own
        message) how many calls of its message came before it."""
        ordinal = len(self.results)
        # ToolResult(call_id, message_index, status, text, ordinal), positionally (hot path).
        result = ToolResult(call_id, entry.index, status, text, ordinal)
        waiting = self.unanswered.get(call_id)
        # A server-side tool (Anthropic `server_tool_use`) runs inside the model's response, so
        # its result follows its call in the same message.
        own = None
        if before is not None:
            self._inline[ordinal] = before
            own = next((o for o in entry.calls if self.calls[o].id == call_id), None)
        if own is not None and self.calls[own].result is None:
            result.call = own
            self._answer(own, ordinal)
        elif waiting and status == "result" and _is_interim(text):
            result.call, result.interim = waiting[-1], True  # still waiting for its final result
        elif waiting:
            # The call it follows: the latest one still waiting (ids reused while a call is
            # open pair as the providers pair them).
            result.call = waiting.pop()
            self._answer(result.call, ordinal)
            if not waiting:  # freed now rather than kept alive (and GC-scanned) to the end
                del self.unanswered[call_id]
        self.results.append(result)
        entry.results.append(ordinal)

    def _answer(self, call: int, result: int) -> None:
        if call >= self._unshared:  # made by this feed: no transcript holds it yet
            self.calls[call].result = result
            return
        # A copy, not a change in place: a transcript published earlier keeps its open call.
        before = self.calls[call]
        self.calls[call] = ToolCall(
            before.id, before.name, before.message_index, before.arguments, call, result
        )

    def _release(self, entry: Entry) -> None:
        # Calls become answerable only by later messages.
        for ordinal in entry.calls:
            call = self.calls[ordinal]
            if call.result is None:
                queue = self.unanswered.get(call.id)
                if queue is None:
                    queue = self.unanswered[call.id] = []
                queue.append(ordinal)

    # -- formats -----------------------------------------------------------------------------

    def _message(self, index: int, message: Mapping[str, Any]) -> None:
        kind = message.get("type")
        if isinstance(kind, str) and ("role" not in message or kind != "message"):
            self._responses_item(index, kind, message)
        elif "role" in message:
            self._role_message(index, message)
        else:
            keys = ", ".join(sorted(str(k) for k in message)[:8]) or "none"
            raise TranscriptError(
                "unknown message shape: expected a 'role' (Chat Completions, Anthropic) or "
                f"a Responses item 'type'; keys present: {keys}",
                message_index=index,
            )

    def _role_message(self, index: int, message: Mapping[str, Any]) -> None:
        role = message.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise TranscriptError(
                f"unknown role {role!r}; expected one of {', '.join(sorted(_ROLES))}",
                message_index=index,
            )
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise TranscriptError(
                f"'content' must be a string, a list of parts or null, "
                f"got {type(content).__name__}",
                message_index=index,
            )
        # Entry(index, role, format, text, chars, calls, results), positionally (hot path).
        entry = Entry(index, role, PLAIN, "", 0, [], [])
        self.entries.append(entry)
        if role == "assistant":
            own_id = message.get("id")
            if isinstance(own_id, str) and own_id:
                entry.response_id = own_id
        if role == "tool":
            entry.format = OPENAI_CHAT
            call_id = message.get("tool_call_id", message.get("id"))
            call_id = _require_id(call_id, "tool result ('tool_call_id')", index)
            self._result(entry, call_id, content, message.get("error") is True)
            return
        if type(content) is str:
            text = content
        else:
            prose: list[str] = []
            if isinstance(content, str):
                prose.append(content)
            elif isinstance(content, list):
                self._blocks(entry, content, prose)
            text = "\n".join(prose)
        tool_calls = message.get("tool_calls")
        if tool_calls is not None:
            self._chat_tool_calls(entry, tool_calls)
        entry.text = text
        entry.chars += len(text)
        if entry.calls:
            self._release(entry)

    def _blocks(self, entry: Entry, blocks: list[Any], prose: list[str]) -> None:
        if blocks and isinstance(blocks[0], Mapping) and blocks[0].get("type") in _THINKING:
            entry.thinking = True
            entry.format = ANTHROPIC
        for position, block in enumerate(blocks):
            if type(block) is not dict:  # a plain dict skips the slower checks (hot path)
                if isinstance(block, str):
                    prose.append(block)
                    continue
                if not isinstance(block, Mapping):
                    raise TranscriptError(
                        f"content[{position}] must be an object or a string, "
                        f"got {type(block).__name__}",
                        message_index=entry.index,
                    )
            kind = block.get("type")
            if kind in _TEXT_PARTS:
                value = block.get("text", block.get("refusal", ""))  # as _text([block]) reads it
                prose.append(value if isinstance(value, str) else _dump(value))
                if kind in ("input_text", "output_text") and entry.format == PLAIN:
                    entry.format = OPENAI_RESPONSES
            elif isinstance(kind, str) and kind.endswith("tool_use"):
                entry.format = ANTHROPIC
                call_id = _require_id(block.get("id"), f"content[{position}] ({kind})", entry.index)
                self._call(entry, call_id, block.get("name"), block.get("input"))
            elif isinstance(kind, str) and kind.endswith("tool_result"):
                entry.format = ANTHROPIC
                call_id = _require_id(
                    block.get("tool_use_id"), f"content[{position}] ({kind})", entry.index
                )
                error = block.get("is_error") is True or _is_error_payload(block.get("content"))
                self._result(entry, call_id, block.get("content"), error, kind != "tool_result")

    def _chat_tool_calls(self, entry: Entry, tool_calls: Any) -> None:
        if not isinstance(tool_calls, list):
            raise TranscriptError(
                f"'tool_calls' must be a list, got {type(tool_calls).__name__}",
                message_index=entry.index,
            )
        for position, raw in enumerate(tool_calls):
            if type(raw) is not dict and not isinstance(raw, Mapping):
                raise TranscriptError(
                    f"tool_calls[{position}] must be an object, got {type(raw).__name__}",
                    message_index=entry.index,
                )
            call_id = _require_id(raw.get("id"), f"tool_calls[{position}]", entry.index)
            wrapper = raw.get("function") or raw.get("custom")
            if type(wrapper) is dict or isinstance(wrapper, Mapping):
                name, arguments = (
                    wrapper.get("name"),
                    wrapper.get("arguments", wrapper.get("input")),
                )
            else:
                name, arguments = raw.get("name"), raw.get("arguments")
            if not isinstance(name, str) or not name:
                raise TranscriptError(
                    f"tool_calls[{position}] has no function name", message_index=entry.index
                )
            entry.format = OPENAI_CHAT
            self._call(entry, call_id, name, arguments)

    def _responses_item(self, index: int, kind: str, item: Mapping[str, Any]) -> None:
        entry = Entry(
            index=index, role="assistant", format=OPENAI_RESPONSES, text="", chars=0, item=kind
        )
        if kind in _RESPONSES_CALLS:
            self.entries.append(entry)
            call_id = _require_id(item.get("call_id"), kind, index)
            self._call(entry, call_id, item.get("name", kind), item.get(_RESPONSES_CALLS[kind]))
            self._release(entry)
        elif kind in _RESPONSES_OUTPUTS:
            entry.role = "tool"
            self.entries.append(entry)
            call_id = _require_id(item.get("call_id"), kind, index)
            output = item.get("output")
            self._result(entry, call_id, output, _is_error_payload(output))
        elif kind in _RESPONSES_PASSIVE:
            # An approval's response is the user's answer to the model's request, not output.
            role = item.get("role", "user" if kind == "mcp_approval_response" else "assistant")
            entry.role = role if isinstance(role, str) and role in _ROLES else "assistant"
            self.entries.append(entry)
            entry.text = _text(item.get("content", item.get("summary")))
            entry.chars = len(entry.text)
        else:
            raise TranscriptError(f"unknown Responses item type {kind!r}", message_index=index)


def _is_interim(text: str) -> bool:
    """A long-running tool's interim answer: a JSON object whose ``status`` says the work is
    still under way (the final result follows as another response with the same call id)."""
    if text[:1] != "{" or '"status"' not in text:
        return False  # most results: not a JSON object, or no status in it
    try:
        value = json.loads(text)
    except ValueError:
        return False
    status = value.get("status") if isinstance(value, dict) else None
    return isinstance(status, str) and status.lower() in _INTERIM_STATUSES


def _is_error_payload(output: Any) -> bool:
    return isinstance(output, Mapping) and output.get("type") == "error"
