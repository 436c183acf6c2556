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
them as `Unit`s (each rule module cites the provider's documentation):

* ``thinking_tool_loop``: the Anthropic tool loop still in progress at the end, when it opens
  with a ``thinking`` block. The next request must open that loop with a thinking block, so the
  first message kept after a summary inside it must be an assistant message with a thinking
  block of its own (interleaved thinking gives one to each response); a loop that ended, or one
  in progress cut at such a message, may be cut between any two call/result rounds.
* ``whole_thinking_loop``: the whole extended-thinking turn (from its first ``thinking``
  message through its tool rounds, up to the next user message that is not only tool results),
  a stricter constraint than the provider's that a policy may choose.
* ``reasoning_item``: an OpenAI Responses ``reasoning`` item with the items of the same response
  after it: the next one, and through the last message or function call (a hosted call such as
  ``web_search_call`` between them is carried along, bound to nothing of its own).
* ``split_response``: one model response over several messages: consecutive assistant messages
  (unless both carry an ``id``, which tells them apart, or one is a hosted call such as
  ``web_search_call``), or assistant messages sharing one ``id`` with only tool results
  between them.

Which of them constrain a cut is the policy's choice (the atomicity rules).
"""

from __future__ import annotations

import bisect
import itertools
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
# Calls the provider runs inside the response: part of it, but bound to nothing of their own.
_RESPONSES_HOSTED: Final = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "image_generation_call",
        "code_interpreter_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
    }
)
_RESPONSES_PRODUCED: Final = _RESPONSES_OUTPUT_ITEMS | _RESPONSES_HOSTED

THINKING_TOOL_LOOP: Final = "thinking_tool_loop"
WHOLE_THINKING_LOOP: Final = "whole_thinking_loop"
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

    ``item`` is the Responses item type (empty for role messages other than a Responses
    assistant ``message`` item), ``thinking`` whether the
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
    ``thinking_tool_loop``, ``whole_thinking_loop``, ``reasoning_item``, ``split_response``."""

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
        if units is None:
            units = atomic_units(entries) + final_loop_units(entries)
            units.sort(key=_FIRST)
        self.units = units

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
    """The units that only grow as messages are appended (whole thinking loops, reasoning
    items, split responses), in order of their first message; only those starting at or after
    `start`, which begins a run of assistant messages and tool results or is a message no unit
    found before it reaches."""
    units: list[Unit] = []
    n = len(entries)
    covered = -1  # the last message of the latest thinking loop found
    first = last = -1  # the first and the latest part of the latest response
    response_id: str | None = None  # its id
    ends: dict[int, int] = {}  # the first message of a split response -> its last
    for entry in entries[start:]:
        index = entry.index
        if entry.role != "assistant":
            if not entry.results:
                first = -1  # a response never spans a message of the user's own
            continue
        if entry.thinking and entry.calls and index > covered:
            end = index
            while end + 1 < n and (
                entries[end + 1].role == "assistant" or entries[end + 1].only_results
            ):
                end += 1
            if end > index:
                units.append(Unit(WHOLE_THINKING_LOOP, index, end))
                covered = end
        if entry.item == "reasoning":
            # The item right after it, and the last message or call of its response.
            end = following = index + 1
            while (
                following < n
                and entries[following].item in _RESPONSES_PRODUCED
                and entries[following].role == "assistant"
            ):
                if entries[following].item in _RESPONSES_OUTPUT_ITEMS:
                    end = following
                following += 1
            if following > index + 1:
                units.append(Unit(REASONING_ITEM, index, end))
        if first >= 0 and (
            (last == index - 1 and _adjacent_parts(entries[last], entry))
            or (entry.response_id is not None and entry.response_id == response_id)
        ):
            last = ends[first] = index
            response_id = response_id or entry.response_id
        else:
            first = last = index
            response_id = entry.response_id
    units += [Unit(SPLIT_RESPONSE, first, last) for first, last in ends.items()]
    units.sort(key=_FIRST)
    return units


def final_loop_units(entries: Sequence[Entry]) -> list[Unit]:
    """The cuts Anthropic rejects inside the tool loop still in progress at the end (the last
    message holds tool results, or calls awaiting them), when the loop opens with a thinking
    block: one unit from each assistant message with a thinking block of its own to the message
    before the next one (or the end), so that a cut is closed only where the first message kept
    opens with its own thinking block."""
    n = len(entries)
    if not n or not (entries[-1].only_results or (entries[-1].calls and not entries[-1].results)):
        return []
    opener = -1
    index = n - 1
    # Back over the tool results and the assistant messages with the calls they answer.
    while index >= 0:
        entry = entries[index]
        if entry.role == "assistant" and entry.calls:
            opener = index
        elif not entry.only_results:
            break
        index -= 1
    if opener < 0 or not entries[opener].thinking:
        return []
    starts = [e.index for e in entries[opener:] if e.role == "assistant" and e.thinking]
    starts.append(n)
    return [
        Unit(THINKING_TOOL_LOOP, first, after - 1)
        for first, after in itertools.pairwise(starts)
        if after - 1 > first
    ]


def _adjacent_parts(before: Entry, after: Entry) -> bool:
    """Two consecutive assistant messages of one model response by position: not both with an
    ``id`` (those are told by it), not a Responses reasoning item starting a new response, and
    not a call the provider ran inside the response (``web_search_call``...), which the
    provider binds to nothing."""
    return (
        before.role == "assistant"
        and after.role == "assistant"
        and after.item != "reasoning"
        and before.item not in _RESPONSES_HOSTED
        and after.item not in _RESPONSES_HOSTED
        and (before.response_id is None or after.response_id is None)
    )


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
    """A call's or result's id; ``""`` for one without an id (``""`` or absent, as some
    OpenAI-compatible servers send them), which pairs by position (see `_add_result`)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
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
            # Only the run of assistant messages and tool results that the messages fed before
            # end with can hold a unit that grows or a response that gets another part: the
            # scan starts again there (`_growth_start`); the loop in progress is found afresh.
            kept = bisect.bisect_left(self._units, self._units_from, key=_FIRST)
            tail = atomic_units(self.entries, self._units_from)
            self._units = self._units[:kept] + tail
            self._units_from = self._growth_start(tail)
            self._units_upto = count
        units = self._units + final_loop_units(self.entries)
        if len(units) > len(self._units):
            units.sort(key=_FIRST)
        published = Transcript(
            messages, self.entries, self.calls, self.results,
            closed=closed, formats=self.formats, units=units,
        )  # fmt: skip
        self._published = weakref.ref(published)
        return published

    def _growth_start(self, tail: list[Unit]) -> int:
        """Where the units may still change as messages are appended: the first message of a
        unit in `tail` that reaches the last assistant message before the trailing tool results
        (a response may get another part), else that message (or the last one); moved back to
        the start of its run of assistant messages and tool results, so that a scan from there
        begins outside every response and loop."""
        entries = self.entries
        last = len(entries) - 1
        while last > 0 and entries[last].role != "assistant" and entries[last].results:
            last -= 1
        start = min((u.first for u in tail if u.last >= last), default=last)
        while start > 0 and (entries[start - 1].role == "assistant" or entries[start - 1].results):
            start -= 1
        return start

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
        elif (
            waiting and (call_id or len(waiting) == 1) and status == "result" and _is_interim(text)
        ):
            result.call, result.interim = waiting[-1], True  # still waiting for its final result
        elif waiting and (call_id or len(waiting) == 1):
            # The call it follows: the latest one still waiting (ids reused while a call is
            # open pair as the providers pair them). A result without an id pairs by position
            # only while one call without an id waits: with several, which one it answers
            # cannot be known, so it pairs with none and they stay open (a refusal says so).
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
            if message.get("type") == "message":  # a Responses output item
                entry.item = "message"
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
