"""Serving on loopback: the address, a server on a background thread, and the
context-manager protocol the in-process fake servers share. Standard library only."""

from __future__ import annotations

import socketserver
import threading
from types import TracebackType
from typing import TypeVar

__all__ = ["LOOPBACK", "LoopbackService", "serve_in_background"]

LOOPBACK = "127.0.0.1"
"""The only address the fake servers bind to."""

_ServiceT = TypeVar("_ServiceT", bound="LoopbackService")


def serve_in_background(server: socketserver.BaseServer, name: str) -> threading.Thread:
    """Run ``server.serve_forever`` on a started daemon thread called ``name``.

    A short poll interval makes ``server.shutdown()`` prompt: it waits for the next poll.
    """
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
    )
    thread.start()
    return thread


class LoopbackService:
    """A server with ``start()`` (returning itself) and ``stop()``, usable with ``with``."""

    def start(self: _ServiceT) -> _ServiceT:
        """Start serving; return ``self``."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop serving."""
        raise NotImplementedError

    def __enter__(self: _ServiceT) -> _ServiceT:
        """Start the server."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server."""
        self.stop()
