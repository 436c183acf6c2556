"""Read a session log from its latest compaction on: what a hook decides over, in bounded time.

A hook needs the context the model sees now: the latest compaction's summary and what came
after it. `read_context` finds that compaction from the end of the file (a byte search for the
marker of a compaction record, then one line decoded to confirm it) and decodes only the lines
from there on, so its cost follows the context, not the log's history. The prefix before it is
only scanned as bytes: its newlines are counted (the lines stay the file's) and, for Claude
Code, the values of its ``"uuid"`` keys are gathered (a record whose uuid was read before is
skipped by the full reader: see `claude_code`).

Guarantees:

* **The same context as the full read.** The messages, their lines, the latest compaction, the
  session id and the cwd are those `read_session` gives from that compaction on; where the
  prefix could change them the whole log is read instead: a compaction that kept messages
  verbatim (``preservedMessages`` or ``preservedSegment``: those messages stand before it in
  the file), a tail record whose uuid the prefix holds, a tail with no main-thread message,
  a compaction record of a sidechain, or a log without a compaction.
* **Bounded.** The file may be as large as `file_limit`; what is decoded (the tail) at most
  `limit` bytes. The log is read as it was when opened, never waiting for a writer, and FIFOs
  and devices are refused, as by `read_session`.
* **Lenient on old damage only.** The lines before the latest compaction are not decoded: damage
  there (a line that is not JSON, bytes that are not UTF-8) does not stop a hook, which decides
  over the context; ``audit`` and ``check`` read the whole log and report it.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from otel_compaction.inputs import MAX_INPUT_BYTES, decode_log, open_log
from otel_compaction.sessions import (
    CLAUDE_CODE,
    CODEX,
    Session,
    _collector_paused,
    _parse,
    _records,
    detect_format,
    read_session,
)

__all__ = ["read_context"]

_CHUNK: Final = 8 * 1024 * 1024
_HEAD_LINES: Final = 64
"""The lines read from the start for the format, session id and cwd before giving up on the
tail (the first record carries them in every log the CLIs write)."""
_UUID: Final = re.compile(rb'"uuid"\s*:\s*"([^"\\\n]*)(\\?)')
"""A ``"uuid"`` key's value up to its end or its first escape (then the second group is it)."""
_PRESERVED: Final = ("preservedMessages", "preservedSegment")


def read_context(
    path: str | Path, *, limit: int = MAX_INPUT_BYTES, file_limit: int = MAX_INPUT_BYTES
) -> Session:
    """The `Session` of `path` from its latest compaction on (see the module docstring): its
    ``messages`` start with that compaction's summary, which is its one `Compaction` (at
    ``message_index`` 0), and ``whole`` is False; a log read whole (`read_session`, at most
    `limit` bytes) where the tail cannot be read on its own.

    Raises:
        TranscriptError: as `read_session`, for the part it decodes.
    """
    descriptor, size, name = open_log(path, limit=file_limit)
    try:
        session = _tail(descriptor, size, name, limit) if size else None
    finally:
        os.close(descriptor)
    return session if session is not None else read_session(path, limit=limit)


def _tail(descriptor: int, size: int, name: str, limit: int) -> Session | None:
    try:
        view = mmap.mmap(descriptor, size, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    with view:
        head = _head(view, name)
        if head is None:
            return None
        kind, session_id, cwd = head
        start = _last_compaction(view, kind)
        if start is None or size - start > limit:
            return None
        first_line, prefix_uuids, escaped = _scan_prefix(view, start, kind == CLAUDE_CODE)
        text = decode_log(view[start:], name, first_line=first_line, start=start == 0)
        place = (first_line, start)
    with _collector_paused():
        records = _records(text, name, first_line=first_line)
        if kind == CLAUDE_CODE and not _claude_tail_alone(records, prefix_uuids, escaped):
            return None
        session = _parse(records, name)
    return _from_latest(session, session_id, cwd, place)


def _head(view: mmap.mmap, name: str) -> tuple[str, str | None, str | None] | None:
    """The log's format and its session id and cwd as the full reader finds them (the first
    record carrying each), from its first lines; None when they are not all there."""
    records: list[Mapping[str, Any]] = []
    position = 0
    for _ in range(_HEAD_LINES):
        end = view.find(b"\n", position)
        if end < 0:
            return None
        line = view[position:end]
        position = end + 1
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            return None
        if not isinstance(record, dict):
            return None
        records.append(record)
        kind = detect_format(records)
        if kind is None:
            continue
        found = _identity(records, kind)
        if found is not None:
            return (kind, *found)
    return None


def _identity(records: list[Mapping[str, Any]], kind: str) -> tuple[str | None, str | None] | None:
    """The session id and cwd the readers take from `records` (the first of each), or None
    while one of them may still come from a later record."""
    session_id: str | None = None
    cwd: str | None = None
    for record in records:
        if kind == CODEX:
            payload = record.get("payload")
            if record.get("type") != "session_meta" or not isinstance(payload, Mapping):
                continue
            source: Mapping[str, Any] = payload
            id_key = "id"
        else:
            source, id_key = record, "sessionId"
        if session_id is None:
            session_id = _string(source.get(id_key))
        if cwd is None:
            cwd = _string(source.get("cwd"))
        if session_id is not None and cwd is not None:
            return session_id, cwd
    return None


def _last_compaction(view: mmap.mmap, kind: str) -> int | None:
    """The offset of the line the tail starts at: the latest compaction record after which the
    full reader's state owes nothing to the lines before it; None to read the whole log."""
    if kind == CODEX:
        compacted = _last_line(view, b'"compacted"', _is_codex_compaction)
        return None if compacted == _NONE else compacted
    kept: list[bool] = []  # each boundary passed over, for what it kept verbatim

    def usable(record: Any) -> bool | None:
        verdict = _is_claude_boundary(record)
        if verdict is False and _keeps(record):
            kept.append(True)
        return verdict

    boundary = _last_line(view, b'"compact_boundary"', usable)
    if boundary != _NONE or kept:
        return None if boundary == _NONE else boundary
    # No boundary in the whole log: a summary stands alone as a compaction.
    summary = _last_line(view, b'"isCompactSummary"', _is_claude_summary)
    return None if summary == _NONE else summary


_NONE: Final = -1
"""`_last_line`'s answer when no line holds the marker."""


def _last_line(view: mmap.mmap, marker: bytes, confirm: Callable[[Any], bool | None]) -> int | None:
    """The offset of the last line holding `marker` that `confirm` accepts once decoded (True;
    False passes over it), `_NONE` when there is none, None when `confirm` says None (the
    tail cannot be read alone)."""
    end = len(view)
    while True:
        at = view.rfind(marker, 0, end)
        if at < 0:
            return _NONE
        start = view.rfind(b"\n", 0, at) + 1
        stop = view.find(b"\n", at)
        line = view[start : stop if stop >= 0 else len(view)]
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            record = None
        verdict = confirm(record)
        if verdict is None:
            return None
        if verdict:
            return start
        end = start


def _is_claude_boundary(record: Any) -> bool | None:
    """A compaction boundary of the main thread that kept nothing verbatim (one that did is
    passed over: the messages it kept stand before it, and the tail starts further back)."""
    if not isinstance(record, dict):
        return False
    if record.get("type") != "system" or record.get("subtype") != "compact_boundary":
        return False
    if record.get("isSidechain") is True:
        return None
    return not _keeps(record)


def _is_claude_summary(record: Any) -> bool | None:
    if not isinstance(record, dict):
        return False
    if record.get("type") != "user" or record.get("isCompactSummary") is not True:
        return False
    return None if record.get("isSidechain") is True else True


def _keeps(record: Mapping[str, Any]) -> bool:
    """Whether a compaction record says it kept messages verbatim."""
    metadata = record.get("compactMetadata")
    return isinstance(metadata, Mapping) and any(key in metadata for key in _PRESERVED)


def _is_codex_compaction(record: Any) -> bool:
    return isinstance(record, dict) and record.get("type") == "compacted"


def _scan_prefix(view: mmap.mmap, end: int, uuids: bool) -> tuple[int, set[bytes], set[bytes]]:
    """The 1-based line at offset `end`, and (when asked) the values of the ``"uuid"`` keys
    before it as written, and the part before the first escape of those written with one: a
    scan of the bytes, nothing decoded."""
    newlines = 0
    found: set[bytes] = set()
    escaped: set[bytes] = set()
    position = 0
    while position < end:
        stop = min(end, position + _CHUNK)
        if stop < end:  # whole lines only, so that no value is split
            stop = view.rfind(b"\n", position, stop) + 1 or stop
        chunk = view[position:stop]
        newlines += chunk.count(b"\n")
        if uuids:
            for value, escape in _UUID.findall(chunk):
                (escaped if escape else found).add(value)
        position = stop
    return newlines + 1, found, escaped


def _claude_tail_alone(
    records: list[tuple[int, Any]], prefix_uuids: set[bytes], escaped: set[bytes]
) -> bool:
    """Whether the tail's records read on their own as they read in the whole log: a main
    thread (a message that is not a sidechain's), no uuid the prefix holds (the full reader
    would skip that record as read before), and each ``preservedSegment`` a compaction names
    traced within the tail (the full reader traces it over the whole file)."""
    main = False
    parents: dict[str, str] = {}
    segments: list[Mapping[str, Any]] = []
    for _, record in records:
        if not isinstance(record, dict):
            return True  # the reader names the line
        if record.get("type") in ("user", "assistant") and record.get("isSidechain") is not True:
            main = True
        uuid, parent = record.get("uuid"), record.get("parentUuid")
        if isinstance(uuid, str) and uuid:
            if _written(uuid, prefix_uuids, escaped):
                return False
            if isinstance(parent, str):
                parents.setdefault(uuid, parent)
        segment = _segment(record)
        if segment is not None:
            segments.append(segment)
    return main and all(_traced(segment, parents) for segment in segments)


def _segment(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``preservedSegment`` the full reader would trace for this record: a boundary's,
    when its ``preservedMessages`` lists no uuid."""
    if record.get("type") != "system" or record.get("subtype") != "compact_boundary":
        return None
    metadata = record.get("compactMetadata")
    if not isinstance(metadata, Mapping):
        return None
    listed = metadata.get("preservedMessages")
    if isinstance(listed, Mapping) and any(
        isinstance(listed.get(key), list) and any(isinstance(u, str) for u in listed[key])
        for key in ("allUuids", "uuids")
    ):
        return None
    segment = metadata.get("preservedSegment")
    return segment if isinstance(segment, Mapping) else None


def _traced(segment: Mapping[str, Any], parents: Mapping[str, str]) -> bool:
    """Whether the chain from the segment's tail back to its head is all in `parents`."""
    head, node = segment.get("headUuid"), segment.get("tailUuid")
    seen: set[str] = set()
    while isinstance(node, str) and node not in seen:
        seen.add(node)
        if node == head:
            return True
        if node not in parents:
            return False
        node = parents[node]
    return not isinstance(node, str)  # a chain that never names a uuid: nothing traced


def _written(uuid: str, complete: set[bytes], escaped: set[bytes]) -> bool:
    """Whether `uuid` may be the value of a ``"uuid"`` key of the prefix: one written as it is,
    or one written with an escape (none a CLI writes) whose part before it `uuid` starts with."""
    raw = uuid.encode("utf-8", "surrogatepass")
    return raw in complete or any(raw.startswith(head) for head in escaped)


def _from_latest(
    session: Session, session_id: str | None, cwd: str | None, place: tuple[int, int]
) -> Session | None:
    """`session` cut to its latest compaction on, with the whole log's id and cwd, and where
    in the file its lines begin (line, byte offset)."""
    if not session.compactions:
        return None
    latest = session.compactions[-1]
    start = latest.message_index
    return Session(
        session.path,
        session.format,
        session.messages[start:],
        session.lines[start:],
        [dataclasses.replace(latest, message_index=0)],
        session_id=session_id,
        cwd=cwd,
        whole=False,
        start=place,
    )


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
