"""Read the session logs that Claude Code and OpenAI's Codex CLI keep on disk.

Claude Code writes ``$CLAUDE_CONFIG_DIR/projects/<cwd, / turned into ->/<session id>.jsonl``
(``~/.claude`` by default), its subagents ``<session id>/subagents/agent-*.jsonl``; Codex writes
``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`` (``~/.codex`` by default). `read_session`
turns either into a `Session`: the messages the CLI sends the model, in order, in the model
API's own format (Anthropic Messages for Claude Code, OpenAI Responses items for Codex), so that
`Session.transcript` parses them like any other transcript.

Guarantees:

* **The whole log, compactions inline.** ``messages`` holds every message of the log, the ones
  a compaction replaced included; each compaction's summary is a user message at
  `Compaction.message_index`, so ``messages[previous summary:message_index]`` is what that
  compaction summarized. The rebuilding of each format is described in `claude_code` and
  `codex`.
* **Traceable.** ``lines[i]`` is the 1-based line of the first record of message ``i`` (in
  file order, but for what a partial compaction preserved: see `claude_code`);
  `Compaction.line` is the line of the compaction record itself.
* **Strict on damage, lenient on novelty.** A line that is not JSON, a record that is not an
  object, a message record without a usable message, an empty file or a file in neither format
  raise `TranscriptError` naming the file and the line; record types the reader does not know
  are skipped, so newer CLI versions stay readable.
* **Live logs.** A CLI appends to its log while a hook reads it: the log is read as it was when
  opened (never waiting for the writer), and an unterminated last line that is not whole JSON
  is the record being written, not damage: it is left out. FIFOs and devices are refused.
* **Nothing copied needlessly.** Content blocks are shared with the records they come from;
  the readers never modify a record. `read_session` hands each record to the reader as it is
  decoded and lets it go once read, so that what stays in memory is the session, not every
  record of the file beside it (a damaged log is read again as a whole, for its exact error).
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from otel_compaction.errors import TranscriptError
from otel_compaction.inputs import MAX_INPUT_BYTES, read_log
from otel_compaction.transcript import Transcript

__all__ = [
    "CLAUDE_CODE",
    "CODEX",
    "Compaction",
    "Session",
    "default_locations",
    "detect_format",
    "find_session_files",
    "parse_session",
    "read_context",
    "read_session",
]

CLAUDE_CODE: Final = "claude_code"
CODEX: Final = "codex"

Record = tuple[int, Any]
"""A record with the 1-based line it was read from."""

_DECODER: Final = json.JSONDecoder()  # the configuration json.loads decodes with


@dataclass(frozen=True, slots=True)
class Compaction:
    """One compaction the CLI made.

    ``message_index`` is the index in `Session.messages` of the summary message (the first
    message after the boundary), ``line`` the 1-based line of the boundary record (Claude Code)
    or of the ``compacted`` record (Codex). ``trigger`` is ``manual``, ``auto`` or ``unknown``;
    ``pre_tokens`` the context size before it, when the log says.
    """

    message_index: int
    line: int
    trigger: str
    summary: str
    pre_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Session:
    """A session log read into model messages (see the module docstring for the guarantees).

    ``format`` is ``claude_code`` or ``codex``; ``session_id`` and ``cwd`` come from the log
    (the first record carrying them) when it has them. ``whole`` is False for a log read
    from its latest compaction on (`read_context`): ``messages`` then start with that
    compaction's summary and ``compactions`` holds that one compaction; ``start`` is where
    the lines it was read from begin (a 1-based line and its byte offset in the file).
    """

    path: str
    format: str
    messages: list[dict[str, Any]]
    lines: list[int]
    compactions: list[Compaction]
    session_id: str | None = None
    cwd: str | None = None
    whole: bool = True
    start: tuple[int, int] = (1, 0)

    def line_of(self, message_index: int) -> int:
        """The 1-based line of the first record of message `message_index`."""
        if not 0 <= message_index < len(self.lines):
            raise IndexError(
                f"message index {message_index} out of range for {len(self.lines)} messages"
            )
        return self.lines[message_index]

    def stamps(self, lines: Iterable[int]) -> dict[int, str]:
        """The ``timestamp`` of each record on `lines` (1-based) that has one, read back from
        the file from ``start`` on (a line before it, or one changed since, gives none)."""
        wanted = set(lines)
        found: dict[int, str] = {}
        if not wanted:
            return found
        number, offset = self.start
        last = max(wanted)
        try:
            with open(self.path, "rb") as file:
                file.seek(offset)
                for line in file:
                    if number in wanted:
                        try:
                            record = json.loads(line)
                        except (ValueError, RecursionError):
                            record = None
                        stamp = record.get("timestamp") if isinstance(record, dict) else None
                        if isinstance(stamp, str):
                            found[number] = stamp
                    if number >= last:
                        break
                    number += 1
        except OSError:
            pass
        return found

    def transcript(self) -> Transcript:
        """``Transcript.parse(self.messages)``; an error names the file and line as well."""
        try:
            return Transcript.parse(self.messages)
        except TranscriptError as exc:
            index = exc.message_index
            where = (
                f"line {self.lines[index]}: "
                if index is not None and 0 <= index < len(self.lines)
                else ""
            )
            error = TranscriptError(f"{self.path}: {where}{exc}")
            error.message_index = index
            raise error from None


def detect_format(records: Iterable[Mapping[str, Any]]) -> str | None:
    """``claude_code``, ``codex``, or None when `records` are not a session log of either (a
    plain list of messages, say). The first record of a recognizable shape decides."""
    from otel_compaction.sessions import claude_code, codex

    for record in records:
        if not isinstance(record, Mapping):
            continue
        if codex.is_record(record):
            return CODEX
        if claude_code.is_record(record):
            return CLAUDE_CODE
    return None


def parse_session(records: Sequence[Mapping[str, Any]], path: str = "<input>") -> Session:
    """A `Session` from already-parsed JSONL records, record ``i`` being on line ``i + 1``."""
    return _parse([(number, record) for number, record in enumerate(records, start=1)], path)


def read_session(path: str | Path, *, limit: int = MAX_INPUT_BYTES) -> Session:
    """Read a Claude Code or Codex session log, as it was when opened (`read_log`: a regular
    file of at most `limit` bytes); `TranscriptError` names the file and line of anything
    unusable (blank lines are allowed and keep the numbering)."""
    text, name = read_log(path, limit=limit)
    with _collector_paused():
        session = _streamed(text, name)
        if session is None:  # damage, or a log the one pass cannot read: as a whole says why
            session = _parse(_records(text, name), name)
        return session


def read_context(path: str | Path, *, limit: int = MAX_INPUT_BYTES) -> Session:
    """The session log `path` from its latest compaction on, decoding only that part
    (`otel_compaction.sessions.tail.read_context`: the same context as `read_session`)."""
    from otel_compaction.sessions import tail

    return tail.read_context(path, limit=limit)


def find_session_files(paths: Iterable[str | Path]) -> Iterator[Path]:
    """The session logs under `paths`: a file as given, a directory searched recursively for
    ``*.jsonl`` (in sorted order), e.g. a whole ``~/.claude/projects`` or ``~/.codex/sessions``."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*.jsonl") if p.is_file())
        else:
            yield path


def default_locations() -> list[Path]:
    """Those of ``$CLAUDE_CONFIG_DIR/projects`` (default ``~/.claude/projects``) and
    ``$CODEX_HOME/sessions`` (default ``~/.codex/sessions``) that exist."""
    candidates = (
        _home("CLAUDE_CONFIG_DIR", "~/.claude") / "projects",
        _home("CODEX_HOME", "~/.codex") / "sessions",
    )
    return [path for path in candidates if path.is_dir()]


def _home(variable: str, default: str) -> Path:
    value = os.environ.get(variable)
    return Path(value or default).expanduser()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while a log is read, then resumed as it was.

    Reading builds a tree of dicts and lists with no cycle in it, freed by reference counting;
    the collector would walk the growing tree again at each of its thresholds, so that reading
    grew faster than the log (9 s for 100 MB, against 0.5 s for 10 MB)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _records(text: str, name: str, *, first_line: int = 1) -> list[Record]:
    """The records of the lines of `text`, the first being line `first_line` of the file."""
    if not text.strip():
        raise TranscriptError(f"{name}: empty file; expected a Claude Code or Codex session log")
    return list(_decoded(text, name, first_line))


def _decoded(text: str, name: str, first_line: int) -> Iterator[Record]:
    """The records of the lines of `text` one by one, as `_records` reads them."""
    # Only "\n" ends a record: JSON text may hold U+2028 and other characters that
    # str.splitlines would also split on. The lines are cut one at a time, so that no list of
    # them stands beside the text.
    last = first_line + text.count("\n")
    find = text.find
    position = 0
    for number in range(first_line, last + 1):
        end_of_line = find("\n", position)
        if end_of_line < 0:
            end_of_line = len(text)
        line = text[position:end_of_line]
        position = end_of_line + 1
        # Nearly every line is one JSON value and nothing else: the decoder's raw_decode
        # reads it without json.loads' checks around it. Anything else (a blank or padded
        # line, damage) goes the way of json.loads, which says what is wrong.
        try:
            value, end = _DECODER.raw_decode(line)
        except (ValueError, RecursionError):
            end = -1
        if end == len(line):
            yield number, value
            continue
        if not line.strip() or number == last:
            continue  # blank, or the unterminated last line: a record still being written
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TranscriptError(
                f"{name}: line {number}: not JSON (column {exc.colno}: {exc.msg})"
            ) from None
        except RecursionError:
            raise TranscriptError(f"{name}: line {number}: nested too deeply") from None
        yield number, value


def _streamed(text: str, name: str) -> Session | None:
    """The `Session` of `text` read in one pass, each record handed to the format's reader as
    it is decoded and let go once read, so that the records of the whole log never stand in
    memory together; None when the log needs reading as a whole: anything the reader or the
    decoder rejects (read as a whole, it gets its exact error: the first damaged line before
    any record that is not an object, before anything a reader says), a log of neither
    format, or a partial compaction known only by its ``preservedSegment`` chain (which is
    followed over the whole file)."""
    from otel_compaction.sessions import claude_code, codex

    waiting: list[Record] = []  # the records before the first one of a recognizable shape
    records = _decoded(text, name, 1)
    kind: str | None = None
    for number, record in records:
        if type(record) is not dict:
            return None
        waiting.append((number, record))
        if codex.is_record(record):
            kind = CODEX
            break
        if claude_code.is_record(record):
            kind = CLAUDE_CODE
            break
    if kind is None:
        return None
    objects = _objects(records)
    try:
        if kind == CODEX:
            return codex.read(_chained(waiting, objects), name)
        return claude_code.read_stream(_chained(waiting, objects), name)
    except Exception:  # read as a whole, the log gets its exact error
        return None


class _NotAnObject(Exception):
    """A record that is not a JSON object, met in one pass."""


def _objects(records: Iterator[Record]) -> Iterator[Record]:
    for number, record in records:
        if type(record) is not dict:
            raise _NotAnObject
        yield number, record


def _chained(first: list[Record], rest: Iterator[Record]) -> Iterator[Record]:
    """`first`'s records (let go as they are handed on), then `rest`'s."""
    first.reverse()
    while first:
        yield first.pop()
    yield from rest


def _parse(records: list[Record], path: str) -> Session:
    from otel_compaction.sessions import claude_code, codex

    for number, record in records:
        if type(record) is not dict and not isinstance(record, Mapping):
            raise TranscriptError(
                f"{path}: line {number}: expected a JSON object, got {type(record).__name__}"
            )
    if not records:
        raise TranscriptError(f"{path}: empty file; expected a Claude Code or Codex session log")
    kind = detect_format(record for _, record in records)
    if kind == CLAUDE_CODE:
        return claude_code.read(records, path)
    if kind == CODEX:
        return codex.read(records, path)
    raise TranscriptError(
        f"{path}: not a Claude Code or Codex session log: no record has a Claude Code shape "
        "('type' with 'uuid' or 'sessionId') or a Codex shape ('type' with 'payload'); "
        "a plain list of messages is read by Transcript.load"
    )


def _trigger(value: Any) -> str:
    """``manual``, ``auto`` (also for ``automatic``) or ``unknown``."""
    if value == "manual":
        return "manual"
    if value in ("auto", "automatic"):
        return "auto"
    return "unknown"


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or its text parts joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    pieces = [
        part["text"]
        for part in content
        if isinstance(part, Mapping)
        and part.get("type") in ("text", "input_text", "output_text")
        and isinstance(part.get("text"), str)
    ]
    return "\n".join(pieces)
