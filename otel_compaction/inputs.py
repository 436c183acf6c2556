"""Reading transcript and session files: bounded, strict UTF-8, JSON or JSONL, clear errors.

The transcripts the command line reads from a file or standard input go through `read_text`,
so a path and a pipe behave alike: at most `MAX_INPUT_BYTES` (a device such as
``/dev/zero`` or a runaway file is refused, not read forever), UTF-8 only (a byte-order mark is
allowed), and an error that names the input and the place. `decode_json` turns the text into
Python values with the same care: an integer too long for Python to convert, or a lone
surrogate escape (``"\\ud800"``, which no UTF-8 output can carry), is refused with its line and
column rather than failing later, somewhere else. `read_log` reads a log another process may be
writing: a regular file only, never waiting, up to what it held when opened.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from otel_compaction.errors import TranscriptError

__all__ = [
    "MAX_INPUT_BYTES",
    "decode_json",
    "decode_log",
    "load_messages",
    "open_log",
    "parse_messages_text",
    "read_log",
    "read_text",
]

MAX_INPUT_BYTES: Final = 256 * 1024 * 1024
"""The largest transcript or session file read (256 MiB; a long session log is tens of MB)."""

_MAX_DIGITS: Final = 4_300  # Python's default bound on int <-> str conversion
_LONG_NUMBER: Final = re.compile(rf"\d{{{_MAX_DIGITS + 1},}}")
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def read_text(path: str | Path, *, limit: int = MAX_INPUT_BYTES) -> tuple[str, str]:
    """The text of `path` (``-`` is standard input) and the name errors give it.

    Raises:
        TranscriptError: no such file, unreadable, larger than `limit` bytes, or not UTF-8.
    """
    name = str(path)
    try:
        if name == "-":
            name = "<stdin>"
            stream = getattr(sys.stdin, "buffer", None)
            if stream is None:  # a text stream put in its place (an embedding host, a test)
                text = sys.stdin.read(limit + 1)
                if len(text) > limit:
                    raise TranscriptError(f"{name}: larger than {limit:,} characters; not read")
                return text, name
            data = stream.read(limit + 1)
        else:
            with Path(path).open("rb") as handle:
                data = handle.read(limit + 1)
    except FileNotFoundError:
        raise TranscriptError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise TranscriptError(f"{name}: is a directory, not a file") from None
    except OSError as exc:
        raise TranscriptError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise TranscriptError(f"{name}: larger than {limit:,} bytes; not read")
    try:
        return data.decode("utf-8-sig"), name
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TranscriptError(
            f"{name}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
            f"(line {line})"
        ) from None


def read_log(path: str | Path, *, limit: int = MAX_INPUT_BYTES) -> tuple[str, str]:
    """The text of the log file `path` as it was when opened, and the name errors give it.

    A log is appended while it is read (a CLI writes its session as it goes): the size at open
    time bounds the read, so a writer never keeps the reader waiting, and the bytes after the
    last newline (a record still being written, perhaps cut inside a character) are kept only
    when they decode. Opening never waits either: a FIFO, a device, a socket or a directory
    is refused before anything is read.

    Raises:
        TranscriptError: no such file, not a regular file, unreadable, larger than `limit`
            bytes, or not UTF-8.
    """
    descriptor, size, name = open_log(path, limit=limit)
    try:
        chunks: list[bytes] = []
        left = size
        while left > 0:
            chunk = os.read(descriptor, left)
            if not chunk:  # truncated meanwhile: what there was
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise TranscriptError(f"{name}: cannot read: {_reason(exc)}") from None
    finally:
        os.close(descriptor)
    return decode_log(b"".join(chunks), name), name


def open_log(path: str | Path, *, limit: int = MAX_INPUT_BYTES) -> tuple[int, int, str]:
    """A descriptor of the log file `path` (the caller closes it), its size when opened and
    the name errors give it; `read_log`'s refusals, without reading anything.

    Raises:
        TranscriptError: no such file, not a regular file, unreadable, or larger than `limit`
            bytes.
    """
    name = str(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise TranscriptError(f"{name}: no such file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise TranscriptError(f"{name}: cannot read: {_reason(exc)}") from None
    try:
        status = os.fstat(descriptor)
        if stat.S_ISDIR(status.st_mode):
            raise TranscriptError(f"{name}: is a directory, not a file")
        if not stat.S_ISREG(status.st_mode):
            raise TranscriptError(f"{name}: {_kind(status.st_mode)}, not a regular file; not read")
        if status.st_size > limit:
            raise TranscriptError(f"{name}: larger than {limit:,} bytes; not read")
    except OSError as exc:
        os.close(descriptor)
        raise TranscriptError(f"{name}: cannot read: {_reason(exc)}") from None
    except TranscriptError:
        os.close(descriptor)
        raise
    return descriptor, status.st_size, name


def decode_log(data: bytes, name: str, *, first_line: int = 1, start: bool = True) -> str:
    """The text of the bytes `data` of a log (from its line `first_line` on; `start` when they
    begin the file, where a byte-order mark may stand): UTF-8, the bytes after the last
    newline kept only when they decode (a record still being written may be cut inside a
    character).

    Raises:
        TranscriptError: not UTF-8 (naming the line).
    """
    complete = data.rfind(b"\n") + 1
    head = "utf-8-sig" if start else "utf-8"
    try:
        text = data[:complete].decode(head)
    except UnicodeDecodeError as exc:
        raise _not_utf8(name, data, exc.start, first_line) from None
    try:
        text += data[complete:].decode("utf-8" if complete else head)
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data":
            raise _not_utf8(name, data, complete + exc.start, first_line) from None
        # else a record still being written, cut inside a character: left out
    return text


def _not_utf8(name: str, data: bytes, offset: int, first_line: int = 1) -> TranscriptError:
    line = data.count(b"\n", 0, offset) + first_line
    return TranscriptError(
        f"{name}: cannot read: not UTF-8 text: byte 0x{data[offset]:02x} at offset {offset} "
        f"(line {line})"
    )


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _reason(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


def decode_json(text: str, name: str, *, line: int | None = None) -> Any:
    """`json.loads` of `text`, refusing what Python would accept now and fail on later.

    Raises:
        json.JSONDecodeError: invalid JSON (the caller words it).
        TranscriptError: an integer of more than 4,300 digits, or a lone surrogate escape.
    """
    where = f"{name}: line {line}" if line is not None else name
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # only an integer too long to convert gets here
        long = _LONG_NUMBER.search(text)
        if long is None:
            raise
        digits = len(long.group())
        raise TranscriptError(
            f"{where}: {_position(text, long.start())}a number of {digits:,} digits "
            f"(at most {_MAX_DIGITS:,})"
        ) from None
    if _SURROGATE_ESCAPE.search(text):
        lone = _lone_surrogate(value)
        if lone is not None:
            raise TranscriptError(
                f"{where}: {lone}: a lone surrogate escape, which is not valid Unicode"
            )
    return value


def load_messages(path: str | Path) -> list[Any]:
    """Read the messages of a transcript file: a JSON list, ``{"messages": [...]}`` or JSONL.

    ``-`` reads standard input. Errors name the file and, for JSON, the line and column.
    """
    text, name = read_text(path)
    return parse_messages_text(text, name)


def parse_messages_text(raw: str, name: str = "<input>") -> list[Any]:
    """Decode transcript text (JSON list, object with ``messages``, or JSONL)."""
    text = raw.strip()
    if not text:
        raise TranscriptError(f"{name}: empty input; expected a JSON list of messages")
    try:
        document = decode_json(text, name)
    except json.JSONDecodeError as exc:
        if "\n" in text and text.startswith("{"):
            return _jsonl(text, name)
        raise TranscriptError(
            f"{name}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    return _messages_of(document, name)


def _jsonl(text: str, name: str) -> list[Any]:
    messages: list[Any] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            messages.append(decode_json(line, name, line=number))
        except json.JSONDecodeError as exc:
            raise TranscriptError(
                f"{name}: line {number}: invalid JSON at column {exc.colno}: {exc.msg}"
            ) from None
    return messages


def _messages_of(document: Any, name: str) -> list[Any]:
    if isinstance(document, list):
        return document
    if isinstance(document, Mapping):
        if "messages" in document:
            messages = document["messages"]
            if not isinstance(messages, list):
                raise TranscriptError(
                    f"{name}: 'messages' must be a list, got {type(messages).__name__}"
                )
            return messages
        if "role" in document or "type" in document:
            return [document]
        raise TranscriptError(
            f"{name}: expected a list of messages, an object with 'messages', or JSONL; "
            "got an object without 'messages'"
        )
    raise TranscriptError(
        f"{name}: expected a list of messages, an object with 'messages', or JSONL; "
        f"got {type(document).__name__}"
    )


def _position(text: str, offset: int) -> str:
    if offset < 0:
        return ""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line} column {column}: "


def _lone_surrogate(value: Any, path: str = "") -> str | None:
    """Where in `value` a string holds a lone surrogate (``[0].tool_calls[0].id``), or None."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            if not _encodes(item):
                return at or "(top)"
        elif isinstance(item, list):
            stack.extend((inner, f"{at}[{i}]") for i, inner in reversed(list(enumerate(item))))
        elif isinstance(item, dict):
            for key, inner in reversed(list(item.items())):
                if not _encodes(key):
                    return f"{at}.{key.encode('utf-8', 'backslashreplace').decode()} (a key)"
                stack.append((inner, f"{at}.{key}" if at else str(key)))
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
