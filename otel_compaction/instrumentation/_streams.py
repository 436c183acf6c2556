"""Transparent proxies over streamed model responses (sync and async).

Every chunk passes through unchanged and in order; the proxy only shows it to an observer that
accumulates the tool calls. Bookkeeping finishes exactly once, whichever comes first: the
stream ends, it is closed (``close()``, leaving ``with`` / ``async with``), it raises (the
error passes through unchanged), or the proxy's iterator is finalised (an SDK helper stopped
reading it). Everything else (attributes, ``response``, ``isinstance``) is the wrapped
stream's, through `wrapt.ObjectProxy`. A failing observer is logged and ignored.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any, Protocol

import wrapt

from otel_compaction._internal_errors import internal_errors
from otel_compaction.instrumentation._requests import ModelResponse

__all__ = ["AsyncTracedStream", "Finisher", "StreamObserver", "TracedStream"]

# The guards hold no state, so one of each serves every stream (a chunk costs no allocation).
_READING = internal_errors("reading a streamed chunk")
_FINISHING = internal_errors("finishing a stream")


class StreamObserver(Protocol):
    """Accumulates a streamed response."""

    def add(self, chunk: Any) -> None:
        """See one chunk (event) of the stream."""

    def response(self) -> ModelResponse | None:
        """The response, with its calls only if it completed."""


class Finisher(Protocol):
    """Where a stream's outcome goes (the exchange of its request)."""

    def respond(self, response: ModelResponse | None) -> None:
        """The stream ended or was closed."""

    def fail(self, error: BaseException) -> None:
        """The stream raised `error`."""


class _Tracker:
    """The bookkeeping of one stream. Kept apart from the proxy so that the proxy's iterator
    does not refer back to the proxy: a stream the application drops is then finalised at
    once (reference counting), not at the next garbage collection."""

    __slots__ = ("done", "finisher", "observer")

    def __init__(self, observer: StreamObserver, finisher: Finisher) -> None:
        self.observer: StreamObserver | None = observer
        self.finisher = finisher
        self.done = False

    def observe(self, chunk: Any) -> None:
        observer = self.observer
        if observer is None:
            return
        with _READING:  # a failure: the stream is not tracked from here on
            observer.add(chunk)
            return
        self.observer = None

    def finish(self, error: BaseException | None = None) -> None:
        if self.done:
            return
        self.done = True
        with _FINISHING:
            if error is not None:
                self.finisher.fail(error)
                return
            observer = self.observer
            self.finisher.respond(None if observer is None else observer.response())


def _chunks(stream: Any, tracker: _Tracker) -> Iterator[Any]:
    observe = tracker.observe
    try:
        for chunk in stream:
            observe(chunk)
            yield chunk
    except GeneratorExit:  # abandoned by whoever was reading: closed early
        tracker.finish()
        raise
    except BaseException as error:
        tracker.finish(error)
        raise
    tracker.finish()


async def _async_chunks(stream: Any, tracker: _Tracker) -> AsyncIterator[Any]:
    observe = tracker.observe
    try:
        async for chunk in stream:
            observe(chunk)
            yield chunk
    except GeneratorExit:
        tracker.finish()
        raise
    except BaseException as error:
        tracker.finish(error)
        raise
    tracker.finish()


class _Tracked(wrapt.ObjectProxy[Any]):
    """What both proxies share; attributes are ``_self_``-prefixed so that they live on the
    proxy, not on the wrapped stream."""

    _self_tracker: _Tracker

    def __init__(self, stream: Any, observer: StreamObserver, finisher: Finisher) -> None:
        """Wrap `stream`; show its chunks to `observer`; report to `finisher`."""
        super().__init__(stream)
        self._self_tracker = _Tracker(observer, finisher)

    def __del__(self) -> None:
        # A stream dropped before it was read: finish as closed.
        with contextlib.suppress(Exception):
            self._self_tracker.finish()


class TracedStream(_Tracked):
    """A synchronous stream, observed."""

    _self_chunks: Iterator[Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        if self._self_chunks is None:
            self._self_chunks = _chunks(self.__wrapped__, self._self_tracker)
        return self._self_chunks

    def __next__(self) -> Any:
        return next(self.__iter__())

    def __enter__(self) -> TracedStream:
        self.__wrapped__.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Any:
        try:
            return self.__wrapped__.__exit__(exc_type, exc, tb)
        finally:
            self._self_tracker.finish()

    def close(self) -> None:
        """Close the wrapped stream and finish the bookkeeping."""
        try:
            self.__wrapped__.close()
        finally:
            self._self_tracker.finish()


class AsyncTracedStream(_Tracked):
    """An asynchronous stream, observed."""

    _self_chunks: AsyncIterator[Any] | None = None

    def __aiter__(self) -> AsyncIterator[Any]:
        if self._self_chunks is None:
            self._self_chunks = _async_chunks(self.__wrapped__, self._self_tracker)
        return self._self_chunks

    async def __anext__(self) -> Any:
        return await self.__aiter__().__anext__()

    async def __aenter__(self) -> AsyncTracedStream:
        await self.__wrapped__.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Any:
        try:
            return await self.__wrapped__.__aexit__(exc_type, exc, tb)
        finally:
            self._self_tracker.finish()

    async def close(self) -> None:
        """Close the wrapped stream and finish the bookkeeping."""
        try:
            await self.__wrapped__.close()
        finally:
            self._self_tracker.finish()
