"""The auto-instrumentation's settings, read from the environment once per `instrument()`.

* ``OTEL_COMPACTION_POLICY`` (``default``): policy name or YAML path of the instrumentor's gate;
* ``OTEL_COMPACTION_DETECTION`` (``true``): report severed calls, orphaned results, duplicates;
* ``OTEL_COMPACTION_AGENT_NAME`` (unset): ``gen_ai.agent.name`` on tool-call spans;
* ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (``false``): tool arguments and
  results on spans, as in the GenAI instrumentations.

Keyword arguments to ``instrument()`` override the environment. A bad value is logged and its
default used: settings never stop the host application from starting.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otel_compaction import semconv
from otel_compaction.policy import Policy

__all__ = ["Settings"]

_log = logging.getLogger(__name__)

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


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


def _policy(value: Any) -> Policy:
    if isinstance(value, Policy):
        return value
    try:
        return Policy.load(str(value))
    except Exception:
        _log.exception("otel-compaction: policy %r cannot be loaded; using 'default'", value)
        return Policy.load("default")
