"""A webhook receiver on loopback for the Alertmanager tests: it records every JSON body
POSTed to it, the way an on-call tool would receive Alertmanager's notifications.

    with WebhookReceiver() as receiver:
        ...  # an Alertmanager whose receiver posts to receiver.url
        wait_until(lambda: receiver.notifications(), timeout=30, message="nothing arrived")

A body that is not a JSON object is answered with 400 and kept in `rejected`, so that a test
can show what arrived. Needs only the standard library.
"""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from loopback import LOOPBACK, LoopbackService, serve_in_background

__all__ = ["WebhookReceiver"]

PATH = "/alerts"
"""Where the receiver takes notifications; other paths get 404."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    receiver: WebhookReceiver


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output free of access logs."""

    def do_POST(self) -> None:
        """Record the notification, then answer 200 (Alertmanager retries anything else)."""
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != PATH:
            self._reply(HTTPStatus.NOT_FOUND)
            return
        try:
            notification = json.loads(body)
        except ValueError:
            notification = None
        if not isinstance(notification, dict):
            self.server.receiver._reject(body.decode("utf-8", "replace"))
            self._reply(HTTPStatus.BAD_REQUEST)
            return
        self.server.receiver._record(notification)
        self._reply(HTTPStatus.OK)

    def _reply(self, status: HTTPStatus) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


class WebhookReceiver(LoopbackService):
    """Records the JSON notifications POSTed to `url`, in arrival order; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notifications: list[dict[str, Any]] = []
        self._rejected: list[str] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def start(self) -> WebhookReceiver:
        """Listen on an ephemeral port of loopback; `url` says where."""
        server = _Server((LOOPBACK, 0), _Handler)
        server.receiver = self
        self._server = server
        self.url = f"http://{LOOPBACK}:{server.server_address[1]}{PATH}"
        self._thread = serve_in_background(server, "webhook-receiver")
        return self

    def stop(self) -> None:
        """Stop listening (idempotent); what arrived stays readable."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def notifications(self) -> list[dict[str, Any]]:
        """Every notification received so far."""
        with self._lock:
            return list(self._notifications)

    def rejected(self) -> list[str]:
        """The bodies that were not JSON objects."""
        with self._lock:
            return list(self._rejected)

    def describe(self) -> str:
        """What arrived, for failure messages."""
        arrived = json.dumps(self.notifications(), indent=1)[:4000]
        return f"webhook notifications: {arrived}\nrejected bodies: {self.rejected()}"

    def _record(self, notification: dict[str, Any]) -> None:
        with self._lock:
            self._notifications.append(notification)

    def _reject(self, body: str) -> None:
        with self._lock:
            self._rejected.append(body)
