"""What the in-process test servers share: the loopback address, serving on a background
thread, the context-manager protocol, keeping clients away from proxies, and the raw HTTP and
socket checks their tests make.

Needs only the standard library and pytest.
"""

from __future__ import annotations

import http.client
import socket
from collections.abc import Mapping

import pytest
from loopback_service import LOOPBACK, LoopbackService, serve_in_background

__all__ = [
    "LOOPBACK",
    "LoopbackService",
    "assert_refused",
    "bypass_proxies",
    "http_request",
    "serve_in_background",
]


_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy")


def bypass_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make HTTP and gRPC clients connect to loopback directly, never through a proxy.

    Removes the proxy environment variables (``requests``, ``httpx`` and gRPC honour them)
    and sets ``no_proxy`` to the loopback names, for the rest of the test.
    """
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(name, f"{LOOPBACK},localhost")


def http_request(
    port: int,
    method: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    timeout: float,
) -> tuple[int, str, bytes]:
    """Send one raw HTTP request to ``port`` on loopback; return the status, the
    ``Content-Type`` (empty when absent) and the body."""
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=dict(headers))
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def assert_refused(port: int) -> None:
    """Fail unless a connection to ``port`` on loopback is refused (nothing listens there)."""
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((LOOPBACK, port), timeout=2).close()
