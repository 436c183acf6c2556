"""Token counts: a tokenizer only when it is already on disk, and each message counted once.

`default_token_counter` uses ``tiktoken``'s ``o200k_base`` only when its encoding file is
already cached (tiktoken otherwise downloads it, over the network and with no timeout, the
first time it is asked): ``TIKTOKEN_CACHE_DIR``, ``DATA_GYM_CACHE_DIR`` or tiktoken's default
cache under the temporary directory. Otherwise it falls back to `char_estimate`, about four
characters a token. `counter_name` says which one is in use; the compactor logs it once.

`MessageTokens` keeps each message's count, so a transcript that only grew costs its new
messages: the messages seen last time are matched by identity, and the last one is counted
again (a reply may still be written in place).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from otel_compaction.rewrites import seen_again

__all__ = [
    "ENCODING",
    "MessageTokens",
    "TokenCounter",
    "cached_encoding_path",
    "char_estimate",
    "counter_name",
    "default_token_counter",
]

_log = logging.getLogger(__name__)

TokenCounter = Callable[[str], int]

ENCODING: Final = "o200k_base"
_BLOB: Final = f"https://openaipublic.blob.core.windows.net/encodings/{ENCODING}.tiktoken"


def char_estimate(text: str) -> int:
    """About four characters a token: the estimate used when no tokenizer is available."""
    return math.ceil(len(text) / 4)


def cached_encoding_path() -> Path | None:
    """Where tiktoken keeps the ``o200k_base`` encoding, when it is there (None: it would
    have to be downloaded, or caching is switched off)."""
    directory = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if directory is None:
        directory = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if not directory:
        return None
    path = Path(directory) / hashlib.sha1(_BLOB.encode()).hexdigest()
    return path if path.is_file() else None


def default_token_counter() -> TokenCounter:
    """tiktoken's ``o200k_base`` when tiktoken is installed and its encoding is cached on
    disk; `char_estimate` otherwise. Never downloads anything."""
    if cached_encoding_path() is None:
        return char_estimate
    try:
        import tiktoken

        encoding = tiktoken.get_encoding(ENCODING)
    except Exception:  # not installed, or the cached file is unusable
        return char_estimate

    def count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    count.__qualname__ = count.__name__ = f"tiktoken {ENCODING}"
    return count


def counter_name(counter: TokenCounter) -> str:
    """What `counter` is, for people: ``tiktoken o200k_base``, ``estimate (4 characters a
    token)`` or the function's name."""
    if counter is char_estimate:
        return "estimate (4 characters a token)"
    return getattr(counter, "__qualname__", None) or repr(counter)


def _as_list(messages: Sequence[Any]) -> list[Any]:
    """`messages` as a list (itself when it is one)."""
    return messages if isinstance(messages, list) else list(messages)


def message_text(message: Any) -> str:
    """The form a message is counted in: its JSON."""
    return json.dumps(message, ensure_ascii=False, default=str)


class MessageTokens:
    """Per-message token counts of the transcripts one compactor sees, kept between calls.

    Example:
        >>> tokens = MessageTokens(char_estimate)
        >>> messages = [{"role": "user", "content": "x" * 400}]
        >>> tokens.total(messages)
        108
        >>> messages.append({"role": "assistant", "content": "ok"})
        >>> tokens.total(messages), tokens.counted
        (118, 3)
    """

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.counted = 0
        """Messages counted so far (each counted once, but for the last one of a call)."""
        self._seen: list[Any] = []
        self._counts: list[int] = []
        self._sum = 0
        self._lock = threading.Lock()

    def count(self, message: Any) -> int:
        """Tokens of one message."""
        self.counted += 1
        return self.counter(message_text(message))

    def per_message(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """Tokens of each message."""
        with self._lock:
            self._update(messages)
            return self._counts.copy()

    def total(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of the whole transcript."""
        with self._lock:
            self._update(messages)
            return self._sum

    def _update(self, messages: Sequence[Mapping[str, Any]]) -> None:
        listed = _as_list(messages)
        seen, counts = self._seen, self._counts
        keep = len(seen) - 1  # the last message seen is counted again: it may have grown
        if 0 < keep < len(listed):
            # The messages seen are compared with the new list whole (by identity first, then
            # by value) once the new ones have joined them, so that no copy of the history is
            # made; the last one seen is the same object when it was written in place.
            seen.extend(listed[keep + 1 :])
            if seen == listed:
                self._sum -= counts.pop()
                for message in seen[keep:]:
                    count = self.count(message)
                    counts.append(count)
                    self._sum += count
                return
            del seen[keep + 1 :]
        self._rewritten(listed)

    def _rewritten(self, messages: list[Any]) -> None:
        """Count a list that is not the last one grown: each message seen before (a sliding
        window, a truncation, a compaction keep most of them) keeps its count."""
        found = seen_again(self._seen, messages)[0] if self._seen else [-1] * len(messages)
        before, count = self._counts, self.count
        counts = [
            before[at] if at >= 0 else count(message)
            for at, message in zip(found, messages, strict=True)
        ]
        self._seen, self._counts, self._sum = messages.copy(), counts, sum(counts)
