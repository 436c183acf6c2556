"""The one guard that keeps this package's internal errors out of the host.

Instrumentation never breaks the application it watches: a fault of the ledger, of a span or of
a metric is logged and the application goes on. Every place that could meet one wraps its own
work, and only that, in ``with internal_errors("doing x"):``, or a whole function in
``@internal_errors("doing x")`` (the cheaper form, for what runs per call or per span). The
hottest steps keep a guard made once and report through it from their own
``except Exception as error: GUARD.failed(error)``, which costs nothing while nothing fails.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from types import TracebackType
from typing import ParamSpec, TypeVar

__all__ = ["internal_errors"]

P = ParamSpec("P")
R = TypeVar("R")

_log = logging.getLogger("otel_compaction")


class internal_errors:  # lower case, as `contextlib.suppress`: it reads as a phrase
    """``with internal_errors("doing x"):`` keeps an internal fault out of the host.

    An `Exception` raised inside is logged once on the ``otel_compaction`` logger, as
    ``otel-compaction: doing x failed`` with its traceback (the message names the step, never
    content), and execution goes on after the block; whatever the block did not get to set
    keeps the value it had. Other `BaseException`s (a cancellation, an interrupt) pass. A block
    wraps this package's own work only, never the host's code, so the host's exceptions never
    meet one. As a decorator it guards every call of a function, which then returns None when
    it failed.

    Example:
        >>> with internal_errors("dividing"):
        ...     1 / 0
        >>> @internal_errors("halving")
        ... def half(n: int) -> float:
        ...     return n / 2
        >>> half(3), half("three")
        (1.5, None)
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
        _logged(self._what, error)
        return True

    def failed(self, error: Exception) -> None:
        """Log `error` as this step's failure, as leaving the ``with`` block would."""
        _logged(self._what, error)

    def __call__(self, function: Callable[P, R]) -> Callable[P, R | None]:
        what = self._what

        @functools.wraps(function)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R | None:
            try:
                return function(*args, **kwargs)
            except Exception as error:
                _logged(what, error)
                return None

        return guarded


def _logged(what: str, error: Exception) -> None:
    _log.exception("otel-compaction: %s failed", what, exc_info=error)
