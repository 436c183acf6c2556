"""LangChain and LangGraph: tool calls as obligations, and summarization behind the gate.

* `ObligationCallbackHandler` (in `callbacks`): the tool calls of LangChain and
  LangGraph runs become obligations (``execute_tool`` / ``tool_result`` spans, ledger records).
* `GuardedSummarizationMiddleware` and `ChatModelSummarizer` (in `summarization`):
  a ``create_agent`` middleware that summarizes through the gate and the guarded compactor in
  place of a token cut.
* `guard_builtin_summarization` / `unguard_builtin_summarization`: LangChain's own
  ``SummarizationMiddleware`` moves or refuses any cut the gate does not allow.
* `interrupt_on_reissue` (in `approval`): ``HumanInTheLoopMiddleware`` entries that ask the
  reviewer exactly when a call repeats a side effect a compaction removed from context.
* `instrument` / `uninstrument`: the handler for every run in the process, injected through
  LangChain's configure hooks so existing agents need no code change; and the built-in
  middleware guarded too when ``OTEL_COMPACTION_GUARD_LANGCHAIN_SUMMARIZATION=true``.

Importing this module never imports LangChain: the classes load on first use (an
`ImportError` naming the extra to install when ``langchain>=1.0`` and ``langgraph>=1.0`` are
missing), and `instrument` returns False without them.

Example:
    >>> from otel_compaction import configure  # doctest: +SKIP
    >>> from otel_compaction.integrations import langchain  # doctest: +SKIP
    >>> langchain.instrument(configure())  # every run now feeds the ledger  # doctest: +SKIP
    True
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, cast

from otel_compaction._internal_errors import internal_errors

if TYPE_CHECKING:
    from contextvars import ContextVar

    from otel_compaction.integrations.langchain.approval import interrupt_on_reissue
    from otel_compaction.integrations.langchain.callbacks import ObligationCallbackHandler
    from otel_compaction.integrations.langchain.messages import SUMMARY_TAG, to_openai_messages
    from otel_compaction.integrations.langchain.summarization import (
        ChatModelSummarizer,
        ContextSize,
        GuardedSummarizationMiddleware,
        OnRefuse,
        builtin_summarization_guarded,
        guard_builtin_summarization,
        unguard_builtin_summarization,
    )
    from otel_compaction.policy import Policy
    from otel_compaction.telemetry.configuration import Telemetry

__all__ = [
    "GUARD_SUMMARIZATION_ENV",
    "SUMMARY_TAG",
    "ChatModelSummarizer",
    "ContextSize",
    "GuardedSummarizationMiddleware",
    "ObligationCallbackHandler",
    "OnRefuse",
    "builtin_summarization_guarded",
    "guard_builtin_summarization",
    "instrument",
    "interrupt_on_reissue",
    "is_instrumented",
    "to_openai_messages",
    "unguard_builtin_summarization",
    "uninstrument",
]

_log = logging.getLogger(__name__)

GUARD_SUMMARIZATION_ENV = "OTEL_COMPACTION_GUARD_LANGCHAIN_SUMMARIZATION"
"""``true`` makes `instrument` guard the built-in ``SummarizationMiddleware`` too."""

_TRUE = frozenset({"1", "true", "yes", "on"})
_APPROVAL = "otel_compaction.integrations.langchain.approval"
_CALLBACKS = "otel_compaction.integrations.langchain.callbacks"
_MESSAGES = "otel_compaction.integrations.langchain.messages"
_SUMMARIZATION = "otel_compaction.integrations.langchain.summarization"
_LAZY = {
    "interrupt_on_reissue": _APPROVAL,
    "ObligationCallbackHandler": _CALLBACKS,
    "to_openai_messages": _MESSAGES,
    "SUMMARY_TAG": _MESSAGES,
    "ChatModelSummarizer": _SUMMARIZATION,
    "ContextSize": _SUMMARIZATION,
    "GuardedSummarizationMiddleware": _SUMMARIZATION,
    "OnRefuse": _SUMMARIZATION,
    "builtin_summarization_guarded": _SUMMARIZATION,
    "guard_builtin_summarization": _SUMMARIZATION,
    "unguard_builtin_summarization": _SUMMARIZATION,
}
_INSTALL_HINT = "pip install 'otel-compaction[langchain]'"


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as missing:
        raise ImportError(
            f"otel_compaction.integrations.langchain.{name} needs langchain>=1.0 and "
            f"langgraph>=1.0 ({missing}); install them with: {_INSTALL_HINT}"
        ) from missing


class _State:
    """What `instrument` installed. LangChain's configure hook reads the handler through
    `get`, as it reads a context variable; this one has the same value in every thread and
    task, so every run started anywhere in the process gets the handler."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.handler: ObligationCallbackHandler | None = None
        self.hooked = False
        self.guarding = False  # `instrument` guarded the built-in middleware

    def get(self) -> ObligationCallbackHandler | None:
        """The installed handler, or None."""
        return self.handler


_STATE = _State()


def instrument(
    telemetry: Telemetry,
    *,
    guard_summarization: bool | None = None,
    policy: Policy | str | None = None,
    on_refuse: OnRefuse = "raise",
) -> bool:
    """Record the tool calls of every LangChain and LangGraph run through `telemetry`.

    Idempotent: instrumenting again with the same telemetry changes nothing; with another
    one, runs started afterwards record into it. Never raises.

    Args:
        telemetry: the configured telemetry (its recorder, ledger and gate).
        guard_summarization: also guard the built-in ``SummarizationMiddleware``; from
            ``OTEL_COMPACTION_GUARD_LANGCHAIN_SUMMARIZATION`` when None.
        policy: the policy the guarded built-in middleware asks the gate with; the
            telemetry's when None.
        on_refuse: what the guarded built-in middleware does on a refusal.

    Returns:
        False when LangChain or LangGraph is not installed (nothing is changed then).
    """
    try:
        from langchain_core.tracers.context import register_configure_hook

        from otel_compaction.integrations.langchain.callbacks import ObligationCallbackHandler
    except ImportError:
        _log.debug("otel-compaction: langchain is not installed; its tool calls are not recorded")
        return False
    if guard_summarization is None:
        guard_summarization = os.environ.get(GUARD_SUMMARIZATION_ENV, "").strip().lower() in _TRUE
    with internal_errors("instrumenting LangChain"), _STATE.lock:
        if not _STATE.hooked:
            hook = cast("ContextVar[ObligationCallbackHandler | None]", _STATE)
            register_configure_hook(hook, inheritable=True)
            _STATE.hooked = True
        handler = _STATE.handler
        if handler is None or handler.recorder is not telemetry.recorder:
            _STATE.handler = ObligationCallbackHandler(telemetry.recorder)
        _summarization(telemetry, guard_summarization, policy, on_refuse)
        return True
    return False


def _summarization(
    telemetry: Telemetry | None, guard: bool, policy: Policy | str | None, on_refuse: OnRefuse
) -> None:
    """Install the middleware's default telemetry, and guard or unguard the built-in one
    (lock held). LangGraph alone, without ``langchain``'s agents, has neither."""
    try:
        summarization = importlib.import_module(_SUMMARIZATION)
    except ImportError:
        if guard:
            _log.warning("otel-compaction: langchain>=1.0 is not installed; nothing to guard")
        return
    summarization.install_telemetry(telemetry)
    if guard and telemetry is not None:
        _STATE.guarding = summarization.guard_builtin_summarization(
            policy, telemetry=telemetry, on_refuse=on_refuse
        )
    elif _STATE.guarding:
        _STATE.guarding = False
        summarization.unguard_builtin_summarization()


def uninstrument() -> None:
    """Stop recording new runs (those in flight finish through the handler they hold) and
    restore the built-in ``SummarizationMiddleware`` if `instrument` guarded it. Never
    raises."""
    with _STATE.lock:
        _STATE.handler = None
        if not _STATE.hooked:
            return
        with internal_errors("uninstrumenting LangChain"):
            _summarization(None, False, None, "raise")


def is_instrumented() -> bool:
    """Whether the tool calls of LangChain runs are being recorded."""
    return _STATE.handler is not None
