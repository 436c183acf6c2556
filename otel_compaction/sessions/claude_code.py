"""Claude Code session logs: rebuild the Anthropic Messages that Claude Code sends.

Claude Code writes one JSONL record per content block: the blocks of one model response are
records sharing ``message.id``, and the tool results answering it (user records of
``tool_result`` blocks) may be written between its ``tool_use`` records. The messages are
rebuilt as Claude Code's own ``normalizeMessagesForAPI`` builds its request:

* An assistant record joins the earlier assistant message of the same ``message.id``, looking
  back past assistant messages and tool-result messages only; its blocks are appended in order.
  Otherwise it starts a new assistant message (``{"role", "content", "id"}``).
* A user record joins the user message right before it: contents become block lists (a plain
  string is one ``text`` block), a ``\\n`` is added where two text blocks meet, and the
  ``tool_result`` blocks are moved to the front, as the API requires. So the results of one
  response are gathered into the one user message that follows it. A user record that is not
  merged keeps its content as written (a plain string stays a string).
* A ``system`` record of subtype ``local_command`` (a slash command's output) becomes a user
  message with its text, as Claude Code sends it (unless it is ``isDisplayOnly``).
* Skipped: records that are not messages (``summary``, ``file-history-snapshot``,
  ``attachment``, ``progress``, ``queue-operation``, other ``system`` subtypes, unknown types),
  synthetic API-error messages (``isApiErrorMessage`` with model ``<synthetic>``), display-only
  ``isVirtual`` messages, a second record with a ``uuid`` already read, and, in a main session
  file, the ``isSidechain`` records of subagents (a subagent's own file, all sidechain, is read
  whole).

A compaction is a ``system`` record of subtype ``compact_boundary`` (``compactMetadata``:
``trigger``, ``preTokens``) followed by the user record holding the summary (flagged
``isCompactSummary``); nothing before the boundary merges with anything after it, and the
summary starts a message of its own. When the compaction kept the latest messages verbatim
(``compactMetadata.preservedMessages``, or the ``preservedSegment`` chain from its tail back to
its head), the messages made of those records move from before the boundary to right after the
summary, where Claude Code relinks them: so ``messages[previous summary:summary]`` is exactly
what was summarized, and those messages' lines are out of file order. A summary record without
a boundary before it is a compaction too (at the summary's line, trigger ``unknown``). A
boundary followed by another message, or by nothing, is an error naming its line.

Not rebuilt: attachments (they are context Claude Code renders into reminders; newer versions
store the rendering beside them, but they carry no tool calls), and branches left by rewinding:
the log is read in file order, the abandoned branch included.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from otel_compaction.errors import TranscriptError
from otel_compaction.sessions import (
    CLAUDE_CODE,
    Compaction,
    Record,
    Session,
    _text_of,
    _trigger,
)

__all__ = ["Unstreamable", "is_record", "read", "read_stream"]

_SYNTHETIC_MODEL: Final = "<synthetic>"
_KEYS: Final = ("uuid", "parentUuid", "sessionId", "leafUuid", "messageId")


def is_record(record: Mapping[str, Any]) -> bool:
    """True for a record of Claude Code's shape: a string ``type`` and one of Claude Code's
    identifying keys (``uuid``, ``parentUuid``, ``sessionId``, ``leafUuid``, ``messageId``),
    neither a Codex ``payload`` nor a message's own ``role``."""
    return (
        isinstance(record.get("type"), str)
        and "payload" not in record
        and "role" not in record
        and any(key in record for key in _KEYS)
    )


def read(records: Sequence[Record], path: str) -> Session:
    """The `Session` of a Claude Code log's records (each with its 1-based line)."""
    return _Reader(path, records).run()


def read_stream(records: Iterable[Record], path: str) -> Session:
    """`read` of records handed over one at a time, each let go once read (a main session
    file's records are held back only until its first main-thread message says that it is
    one). Raises `Unstreamable` for a partial compaction known only by its
    ``preservedSegment`` chain, which `read` follows over the whole file."""
    reader = _Reader(path, ())
    reader.streamed = True
    waiting: list[Record] | None = []  # until the file is known to be a main session file
    for line, record in records:
        if waiting is None:
            reader.take(line, record, True)
        elif _is_message(record) and record.get("isSidechain") is not True:
            waiting.reverse()
            while waiting:
                reader.take(*waiting.pop(), True)
            waiting = None
            reader.take(line, record, True)
        else:
            waiting.append((line, record))
    if waiting is not None:  # all sidechain: a subagent's own file, read whole
        for line, record in waiting:
            reader.take(line, record, False)
    return reader.finish()


class Unstreamable(Exception):
    """The log cannot be read one record at a time."""


def _is_message(record: Mapping[str, Any]) -> bool:
    return record.get("type") in ("user", "assistant")


def _blocks(content: Any) -> list[Any]:
    """Content as a new list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def _has_tool_result(content: Any) -> bool:
    if not isinstance(content, list):
        return False
    for block in content:
        # A plain dict skips the slower ABC check.
        if (type(block) is dict or isinstance(block, Mapping)) and block.get(
            "type"
        ) == "tool_result":
            return True
    return False


def _is_text(block: Any) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "text"


def _merge_user(before: Any, after: Any) -> list[Any]:
    """Claude Code's ``mergeUserMessages``: join the blocks, ``\\n`` at a text-text seam,
    tool results first."""
    first, second = _blocks(before), _blocks(after)
    if first and second and _is_text(first[-1]) and _is_text(second[0]):
        last = first[-1]
        text = last.get("text")
        first[-1] = {**last, "text": (text if isinstance(text, str) else "") + "\n"}
    joined = first + second
    results = [b for b in joined if isinstance(b, Mapping) and b.get("type") == "tool_result"]
    others = [b for b in joined if not (isinstance(b, Mapping) and b.get("type") == "tool_result")]
    return results + others


@dataclass(frozen=True, slots=True)
class _Boundary:
    """A compaction boundary waiting for its summary."""

    line: int
    trigger: str
    pre_tokens: int | None
    preserved: frozenset[str]


class _Reader:
    """One pass over the records, building messages as Claude Code normalizes them."""

    def __init__(self, path: str, records: Sequence[Record]) -> None:
        self.path = path
        self.records = records
        self.messages: list[dict[str, Any]] = []
        self.lines: list[int] = []
        self.sources: list[set[str]] = []  # the uuids of each message's records
        self.compactions: list[Compaction] = []
        # Messages before this index are closed: a compaction boundary came after them.
        self.floor = 0
        # For the look-back of an assistant record, without walking: the latest assistant
        # message of each id, and the user messages that hold no tool result (it stops there).
        self.ids: dict[str, int] = {}
        self.blockers: list[int] = []
        self.boundary: _Boundary | None = None
        self.parents: dict[str, str] | None = None  # built when a preservedSegment needs it
        self.session_id: str | None = None
        self.cwd: str | None = None
        self.seen: set[str] = set()  # the uuids read (a record read again is skipped)
        self.streamed = False  # records handed over one at a time: `records` is empty

    def error(self, line: int, problem: str) -> TranscriptError:
        return TranscriptError(f"{self.path}: line {line}: {problem}")

    def run(self) -> Session:
        # A main session file holds the main thread; its sidechain records (subagents, in
        # older versions) are another conversation. A subagent's own file is all sidechain.
        main = any(
            _is_message(record) and record.get("isSidechain") is not True
            for _, record in self.records
        )
        for line, record in self.records:
            self.take(line, record, main)
        return self.finish()

    def take(self, line: int, record: Mapping[str, Any], main: bool) -> None:
        """Read the next record, of a main session file when `main`."""
        if self.session_id is None or self.cwd is None:
            self._identify(record)
        uuid = record.get("uuid")
        if isinstance(uuid, str) and uuid:
            if uuid in self.seen:
                return
            self.seen.add(uuid)
        else:
            uuid = None
        if main and record.get("isSidechain") is True:
            return
        self._record(line, uuid, record)

    def finish(self) -> Session:
        """The session of the records read."""
        if self.boundary is not None:
            raise self.error(self.boundary.line, "compact boundary with no summary after it")
        return Session(
            self.path,
            CLAUDE_CODE,
            self.messages,
            self.lines,
            self.compactions,
            session_id=self.session_id,
            cwd=self.cwd,
        )

    def _identify(self, record: Mapping[str, Any]) -> None:
        if self.session_id is None:
            value = record.get("sessionId")
            if isinstance(value, str) and value:
                self.session_id = value
        if self.cwd is None:
            value = record.get("cwd")
            if isinstance(value, str) and value:
                self.cwd = value

    def _record(self, line: int, uuid: str | None, record: Mapping[str, Any]) -> None:
        kind = record.get("type")
        if kind == "system":
            subtype = record.get("subtype")
            if subtype == "compact_boundary":
                self._boundary(line, record)
            elif (
                subtype == "local_command"
                and isinstance(record.get("content"), str)
                and record.get("isDisplayOnly") is not True
            ):
                self._expect_no_boundary(line, "a command's output")
                self._user(line, uuid, record["content"], summary=False)
            return
        if kind not in ("user", "assistant") or record.get("isVirtual") is True:
            return
        message = record.get("message")
        if type(message) is not dict and not isinstance(message, Mapping):
            raise self.error(line, f"{kind} record has no 'message' object")
        content = message.get("content")
        if not isinstance(content, (str, list)):
            raise self.error(
                line,
                f"{kind} message 'content' must be a string or a list of blocks, "
                f"got {type(content).__name__}",
            )
        if kind == "user":
            self._user(line, uuid, content, summary=record.get("isCompactSummary") is True)
            return
        if record.get("isApiErrorMessage") is True and message.get("model") == _SYNTHETIC_MODEL:
            return  # an error Claude Code shows, never sends
        self._expect_no_boundary(line, "an assistant message")
        message_id = message.get("id")
        self._assistant(line, uuid, content, message_id if isinstance(message_id, str) else None)

    def _expect_no_boundary(self, line: int, what: str) -> None:
        if self.boundary is not None:
            raise self.error(
                self.boundary.line,
                f"compact boundary followed by {what} (line {line}), not by its summary",
            )

    def _boundary(self, line: int, record: Mapping[str, Any]) -> None:
        if self.boundary is not None:
            raise self.error(self.boundary.line, "compact boundary with no summary after it")
        metadata = record.get("compactMetadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        pre = metadata.get("preTokens")
        pre_tokens = pre if isinstance(pre, int) and not isinstance(pre, bool) else None
        self.boundary = _Boundary(
            line, _trigger(metadata.get("trigger")), pre_tokens, self._preserved(metadata)
        )

    def _preserved(self, metadata: Mapping[str, Any]) -> frozenset[str]:
        """The uuids of the records a partial compaction kept verbatim: its
        ``preservedMessages``, or the chain from ``preservedSegment``'s tail back to its head."""
        kept: set[str] = set()
        listed = metadata.get("preservedMessages")
        if isinstance(listed, Mapping):
            for key in ("allUuids", "uuids"):
                uuids = listed.get(key)
                if isinstance(uuids, list):
                    kept.update(u for u in uuids if isinstance(u, str))
        segment = metadata.get("preservedSegment")
        if not kept and isinstance(segment, Mapping):
            parents = self._parents()
            head, node = segment.get("headUuid"), segment.get("tailUuid")
            while isinstance(node, str) and node not in kept and len(kept) <= len(parents):
                kept.add(node)
                if node == head:
                    break
                node = parents.get(node)
            else:
                kept.clear()  # the chain never reached the head: trust none of it
        return frozenset(kept)

    def _parents(self) -> dict[str, str]:
        """Each record's ``parentUuid`` by its ``uuid`` (the first one given), over the file."""
        if self.streamed:
            raise Unstreamable
        if self.parents is None:
            self.parents = {}
            for _, record in self.records:
                uuid, parent = record.get("uuid"), record.get("parentUuid")
                if isinstance(uuid, str) and isinstance(parent, str):
                    self.parents.setdefault(uuid, parent)
        return self.parents

    def _user(
        self, line: int, uuid: str | None, content: str | list[Any], *, summary: bool
    ) -> None:
        if self.boundary is not None or summary:
            self._summary(line, uuid, content)
            return
        last = len(self.messages) - 1
        if last >= self.floor and self.messages[last]["role"] == "user":
            merged = _merge_user(self.messages[last]["content"], content)
            self.messages[last]["content"] = merged
            self._source(last, uuid)
            if self.blockers and self.blockers[-1] == last and _has_tool_result(merged):
                self.blockers.pop()
            return
        self._push(line, uuid, {"role": "user", "content": _copy(content)})

    def _summary(self, line: int, uuid: str | None, content: str | list[Any]) -> None:
        boundary = self.boundary or _Boundary(line, "unknown", None, frozenset())
        self.boundary = None
        # What a partial compaction preserved follows the summary, as Claude Code relinks it.
        # Only the messages since the previous summary can move (that summary stays), so only
        # they are looked at: each message is looked at once however many compactions follow.
        preserved: list[tuple[dict[str, Any], int, set[str]]] = []
        if boundary.preserved:
            first = self.floor + 1 if self.compactions else self.floor
            kept: list[tuple[dict[str, Any], int, set[str]]] = []
            for row in zip(
                self.messages[first:], self.lines[first:], self.sources[first:], strict=True
            ):
                (kept if row[2].isdisjoint(boundary.preserved) else preserved).append(row)
            if preserved:
                del self.messages[first:], self.lines[first:], self.sources[first:]
                for message, number, sources in kept:
                    self.messages.append(message)
                    self.lines.append(number)
                    self.sources.append(sources)
        index = len(self.messages)
        summary = _text_of(content)
        self.compactions.append(
            Compaction(index, boundary.line, boundary.trigger, summary, boundary.pre_tokens)
        )
        self._push(line, uuid, {"role": "user", "content": _copy(content)})
        self.floor = index
        self.ids.clear()
        self.blockers = [index]
        for message, number, sources in preserved:
            self._push(number, None, message)
            self.sources[-1] = sources

    def _assistant(
        self, line: int, uuid: str | None, content: str | list[Any], message_id: str | None
    ) -> None:
        if message_id:
            # Claude Code looks back past assistant and tool-result messages only.
            index = self.ids.get(message_id)
            start = self.blockers[-1] + 1 if self.blockers else self.floor
            if index is not None and index >= max(start, self.floor):
                earlier = self.messages[index]
                if isinstance(earlier["content"], list):  # a list of the reader's own
                    earlier["content"].extend(_blocks(content))
                else:
                    earlier["content"] = _blocks(earlier["content"]) + _blocks(content)
                self._source(index, uuid)
                return
        message: dict[str, Any] = {"role": "assistant", "content": _copy(content)}
        if message_id:
            message["id"] = message_id
        self._push(line, uuid, message)

    def _push(self, line: int, uuid: str | None, message: dict[str, Any]) -> None:
        index = len(self.messages)
        self.messages.append(message)
        self.lines.append(line)
        self.sources.append(set() if uuid is None else {uuid})
        if message["role"] == "assistant":
            if message.get("id"):
                self.ids[message["id"]] = index
        elif not _has_tool_result(message["content"]):
            self.blockers.append(index)

    def _source(self, index: int, uuid: str | None) -> None:
        if uuid is not None:
            self.sources[index].add(uuid)


def _copy(content: str | list[Any]) -> str | list[Any]:
    """A list of its own (merging later replaces it, but never mutates the record's)."""
    return content if isinstance(content, str) else list(content)
