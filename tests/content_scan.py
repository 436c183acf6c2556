"""Where a marker string shows up in what a pipeline exported and what the package logged.

`places` reads every finished span (its name, attributes, events with their attributes, status
description and link attributes), every metric data point's attributes and every log record
(its message formatted with its arguments, and the exception and stack text) and returns
each place the marker appears in, case-insensitively. `LogRecords` keeps the records of the
package's loggers at DEBUG for the duration of a test.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics.export import MetricsData
from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["LogRecords", "Place", "logged", "places"]


@dataclass(frozen=True, order=True)
class Place:
    """One place the marker appears: the kind of signal, who carries it (span, metric or logger
    name) and where on it (attribute key, event name and key, ``description``, ``message``)."""

    signal: str
    owner: str
    key: str


class LogRecords(logging.Handler):
    """Keeps every record it is handed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def logged(name: str = "otel_compaction") -> Iterator[LogRecords]:
    """Every record of logger `name` and its children, at DEBUG, while inside."""
    logger = logging.getLogger(name)
    handler = LogRecords()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _texts(item)
    else:
        yield str(value)


def _found(marker: str, value: Any) -> bool:
    return any(marker in text.lower() for text in _texts(value))


def _attributes(marker: str, attributes: Mapping[str, Any] | None) -> Iterator[str]:
    for key, value in (attributes or {}).items():
        if marker in key.lower() or _found(marker, value):
            yield key


def places(
    marker: str,
    spans: Iterable[ReadableSpan],
    metrics: MetricsData | None = None,
    records: Iterable[logging.LogRecord] = (),
) -> set[Place]:
    """Every place `marker` appears in `spans`, `metrics` and `records`."""
    marker = marker.lower()
    found: set[Place] = set()
    formatter = logging.Formatter("%(message)s")
    for span in spans:
        name = span.name
        if _found(marker, name):
            found.add(Place("span name", name, ""))
        found.update(Place("span attribute", name, k) for k in _attributes(marker, span.attributes))
        for event in span.events:
            if _found(marker, event.name):
                found.add(Place("event name", name, event.name))
            found.update(
                Place("event attribute", name, f"{event.name} {k}")
                for k in _attributes(marker, event.attributes)
            )
        if span.status.description and _found(marker, span.status.description):
            found.add(Place("status", name, "description"))
        for link in span.links:
            found.update(
                Place("link attribute", name, k) for k in _attributes(marker, link.attributes)
            )
        if span.resource is not None:
            found.update(
                Place("resource", name, k) for k in _attributes(marker, span.resource.attributes)
            )
    if metrics is not None:
        for resource_metrics in metrics.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    for point in metric.data.data_points:
                        found.update(
                            Place("metric attribute", metric.name, k)
                            for k in _attributes(marker, point.attributes)
                        )
    for record in records:
        if _found(marker, formatter.format(record)):
            found.add(Place("log", record.name, str(record.msg)))
    return found
