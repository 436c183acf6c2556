"""One line instead of the exporters' retries when no OTLP endpoint was configured and nothing
listens at the default one.

A first run without a backend exports over OTLP to ``localhost`` (the SDK's default), where
nothing listens: the SDK's exporters then log every failed attempt and every dropped batch,
with their errors, on stderr. When the endpoint is only that default (no
``OTEL_EXPORTER_OTLP_ENDPOINT`` or per-signal endpoint is set), `NothingListens` replaces
those messages with one line saying where the telemetry would have gone and how to see it. An
endpoint the user configured keeps the SDK's messages as they are: there a failure is news.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

__all__ = [
    "ENDPOINT_ENVS", "UNREACHABLE_EXPORT_TIMEOUT_S", "NothingListens", "default_endpoint",
    "listening",
]  # fmt: skip

UNREACHABLE_EXPORT_TIMEOUT_S: Final = 0.5
"""The export timeout when nothing listened at the default endpoint at start: enough for a
Collector started later on the same machine, short enough that exit does not stall."""

ENDPOINT_ENVS: Final = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)
"""The variables that name an OTLP endpoint; with none set, the SDK's default is used."""

_EXPORTER_LOGGERS: Final = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",  # the HTTP client logs as these
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.common.http",  # and as itself when given no logger
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
)
_NOT_REACHED: Final = ("Transient error", "Failed to export")
"""How the exporters' messages about an export that reached no endpoint begin."""
_ANSWERED: Final = "batch code:"
"""An HTTP endpoint that answered with an error status: news even at the default endpoint."""

_log = logging.getLogger(__name__)


def default_endpoint(environ: Mapping[str, str], http: bool) -> str | None:
    """The SDK's default OTLP endpoint when `environ` names none, else None."""
    if any(environ.get(name, "").strip() for name in ENDPOINT_ENVS):
        return None
    return "http://localhost:4318" if http else "localhost:4317"


def listening(endpoint: str, timeout_s: float = 0.2) -> bool:
    """Whether something accepts TCP connections at `endpoint` (``host:port`` or a URL)."""
    parts = urlsplit(endpoint if "//" in endpoint else f"//{endpoint}")
    try:
        with socket.create_connection(
            (parts.hostname or "localhost", parts.port or 4318), timeout_s
        ):
            return True
    except OSError:
        return False


class NothingListens(logging.Filter):
    """Drops the OTLP exporters' messages about exports that reached nothing, saying once, in
    their place, that telemetry is not exported and how to see it.

    `install` attaches it to the exporters' loggers; `remove` detaches it.
    """

    def __init__(self, endpoint: str) -> None:
        """Speak for exports to `endpoint`, the default nobody configured."""
        super().__init__()
        self.endpoint = endpoint
        self._said = False
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        """False (dropped) for a message about an export that reached nothing."""
        message = str(record.msg)
        if not message.startswith(_NOT_REACHED) or _ANSWERED in message:
            return True
        with self._lock:
            first, self._said = not self._said, True
        if first:
            _log.warning(
                "otel-compaction: nothing listens at %s (the OTLP default; no "
                "OTEL_EXPORTER_OTLP_ENDPOINT is set), so spans and metrics are not exported; "
                "point OTEL_EXPORTER_OTLP_ENDPOINT at a Collector, or set "
                "OTEL_TRACES_EXPORTER=console to print the spans",
                self.endpoint,
            )
        return False

    def install(self) -> NothingListens:
        """Attach to the exporters' loggers; returns itself."""
        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(self)
        return self

    def remove(self) -> None:
        """Detach from the exporters' loggers."""
        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).removeFilter(self)
