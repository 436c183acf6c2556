"""This package's instrumentation scope: its tracer, and whether content may go on spans."""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.trace import TracerProvider

from otel_compaction._internal_errors import internal_errors
from otel_compaction.telemetry import semconv

__all__ = ["capture_content_enabled", "package_tracer"]

_TRUE = frozenset({"1", "true", "yes", "on"})


def capture_content_enabled() -> bool:
    """Whether arguments and results are put on spans: the GenAI content-capture switch,
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``."""
    return os.environ.get(semconv.CAPTURE_CONTENT_ENV, "").strip().lower() in _TRUE


def package_tracer(tracer_provider: TracerProvider | None = None) -> trace.Tracer:
    """This package's tracer from `tracer_provider` (the global one when None); a no-op
    tracer when the provider fails, so that telemetry never breaks the host."""
    from otel_compaction import __version__

    with internal_errors("getting a tracer"):
        provider = tracer_provider or trace.get_tracer_provider()
        return provider.get_tracer(semconv.SCOPE, __version__)
    return trace.NoOpTracer()
