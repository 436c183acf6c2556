"""The one guard that keeps this package's internal errors out of the host.

Instrumentation never breaks the application it watches: a fault of the ledger, of a span or of
a metric is logged and the application goes on. Every place that could meet one wraps its own
work, and only that, in ``with internal_errors("doing x"):``.
"""

from __future__ import annotations

import logging
from types import TracebackType

__all__ = ["internal_errors"]

_log = logging.getLogger("otel_compaction")


class internal_errors:  # lower case, as `contextlib.suppress`: it reads as a phrase
    """``with internal_errors("doing x"):`` keeps an internal fault out of the host.

    An `Exception` raised inside is logged once on the ``otel_compaction`` logger, as
    ``otel-compaction: doing x failed`` with its traceback (the message names the step, never
    content), and execution goes on after the block; whatever the block did not get to set
    keeps the value it had. Other `BaseException`s (a cancellation, an interrupt) pass. A block
    wraps this package's own work only, never the host's code, so the host's exceptions never
    meet one.

    Example:
        >>> with internal_errors("dividing"):
        ...     1 / 0
        >>> "the host goes on"
        'the host goes on'
    """

    __slots__ = ("_what",)

    def __init__(self, what: str) -> None:
        self._what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if not isinstance(error, Exception):
            return False
        _log.exception("otel-compaction: %s failed", self._what, exc_info=error)
        return True
