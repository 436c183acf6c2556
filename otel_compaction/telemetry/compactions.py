"""Compactions applied in this process, noted per conversation until a model request says so.

`GuardedCompactor` notes each compaction it applies (`note`, under the decision's conversation);
the auto-instrumentation takes the note (`take`) when that conversation's next model request
starts and sets ``gen_ai.conversation.compacted`` ``true`` on the request's inference span. A
note is taken once: only the first request after the compaction is marked, and a request is
never marked ``false``. A compaction without a conversation (no id given, no
`otel_compaction.conversation` scope) is not noted; passive detection still sees the
transcript shrink. Bounded (the oldest notes are forgotten first) and thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

__all__ = ["note", "take"]

_MAX_NOTES = 10_000
_notes: OrderedDict[str, None] = OrderedDict()
_lock = threading.Lock()


def note(conversation_id: str | None) -> None:
    """A compaction was applied to `conversation_id`'s transcript (nothing without an id)."""
    if not conversation_id:
        return
    with _lock:
        _notes[conversation_id] = None
        _notes.move_to_end(conversation_id)
        while len(_notes) > _MAX_NOTES:
            _notes.popitem(last=False)


def take(conversation_id: str) -> bool:
    """Whether a compaction was noted for `conversation_id` since the last `take`; the note
    is cleared.

    Example:
        >>> note("conv-9")
        >>> take("conv-9"), take("conv-9")
        (True, False)
    """
    with _lock:
        if conversation_id not in _notes:
            return False
        del _notes[conversation_id]
        return True
