"""The auto-instrumentation's settings, read from the environment once per `instrument()`.

* ``OTEL_COMPACTION_POLICY`` (``default``): policy name or YAML path of the instrumentor's gate;
* ``OTEL_COMPACTION_DETECTION`` (``true``): report severed calls, orphaned results, duplicates;
* ``OTEL_COMPACTION_AGENT_NAME`` (unset): ``gen_ai.agent.name`` on tool-call spans;
* ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (``false``): tool arguments and
  results on spans, as in the GenAI instrumentations;
* ``OTEL_COMPACTION_FRAMEWORKS`` (all): the framework integrations `CompactionInstrumentor`
  and auto-instrumentation turn on when their framework is installed, a comma list of
  ``langchain``, ``mcp``, ``agents``; ``none`` for none (`frameworks` reads it).

Keyword arguments to ``instrument()`` override the environment. A bad value is logged and its
default used: settings never stop the host application from starting.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otel_compaction.integrations import REGISTRY
from otel_compaction.policy import Policy
from otel_compaction.telemetry import semconv

__all__ = ["FRAMEWORKS", "Settings", "frameworks"]

_log = logging.getLogger(__name__)

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
FRAMEWORKS: tuple[str, ...] = tuple(row.name for row in REGISTRY)


@dataclass(frozen=True, slots=True)
class Settings:
    """What the instrumentor does. ``capture_content`` None means: ask the environment on
    every call, as the recorder does."""

    policy: Policy
    detection: bool = True
    capture_content: bool | None = None
    agent_name: str | None = None

    @classmethod
    def resolve(
        cls, overrides: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Settings from `overrides` (``instrument()``'s keyword arguments) over `environ`."""
        env = os.environ if environ is None else environ
        policy = overrides.get("policy", env.get(semconv.POLICY_ENV, "").strip() or "default")
        detection = overrides.get("detection")
        if not isinstance(detection, bool):
            detection = _flag(env.get(semconv.DETECTION_ENV), default=True)
        capture = overrides.get("capture_content")
        agent = overrides.get("agent_name", env.get(semconv.AGENT_NAME_ENV, "").strip() or None)
        return cls(
            policy=_policy(policy),
            detection=detection,
            capture_content=capture if isinstance(capture, bool) else None,
            agent_name=agent if isinstance(agent, str) and agent else None,
        )


def _flag(value: str | None, *, default: bool) -> bool:
    if value is None or not value.strip():
        return default
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    _log.warning("otel-compaction: %s=%r is not a boolean; using %s", semconv.DETECTION_ENV,
                 value, default)  # fmt: skip
    return default


def frameworks(value: Any = None, environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The frameworks named by `value`, a comma list or an iterable of names, else by
    ``OTEL_COMPACTION_FRAMEWORKS`` in `environ`; unset or blank is all of them, ``none`` none;
    unknown names are logged and ignored."""
    if value is None:
        value = (os.environ if environ is None else environ).get(semconv.FRAMEWORKS_ENV)
    if value is None:
        return frozenset(FRAMEWORKS)
    names = value.split(",") if isinstance(value, str) else value
    try:
        wanted = {str(name).strip().lower() for name in names} - {""}
    except TypeError:
        _log.warning("otel-compaction: frameworks=%r is not a list; using all", value)
        return frozenset(FRAMEWORKS)
    if not wanted:
        return frozenset(FRAMEWORKS)
    if "none" in wanted:
        return frozenset()
    unknown = wanted.difference(FRAMEWORKS)
    if unknown:
        _log.warning("otel-compaction: %s names unknown frameworks %s; known: %s",
                     semconv.FRAMEWORKS_ENV, sorted(unknown), ", ".join(FRAMEWORKS))  # fmt: skip
    return frozenset(wanted.intersection(FRAMEWORKS))


def _policy(value: Any) -> Policy:
    if isinstance(value, Policy):
        return value
    try:
        return Policy.load(str(value))
    except Exception:
        _log.exception("otel-compaction: policy %r cannot be loaded; using 'default'", value)
        return Policy.load("default")
