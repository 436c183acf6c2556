"""Guarded summarization for LangChain v1 agents: a middleware of our own, and a guard around
the built-in ``SummarizationMiddleware``.

`GuardedSummarizationMiddleware` replaces the built-in middleware's token cut. When its trigger
fires it plans the same cut (keep the last N messages or tokens), converts the state's messages
to the transcript the gate reads, and lets `GuardedCompactor` decide: compact the span up to
the cut, extended forward to the first cut that closes a call/result pair; compact an older
closed span and hold the live one verbatim (a deferral); or refuse. The new state is the head,
the verified summary as a ``HumanMessage`` and the kept messages as the original objects.

`guard_builtin_summarization` keeps the built-in middleware (and its summary model) but
checks the cut it planned with the gate before it summarizes: a cut that would sever a tool
call from its result, or fall inside a live span (an unkept promise, a retry not yet
successful), is moved to where the gate allows it, or refused. The built-in middleware
summarizes everything before its cut; guarded, it summarizes exactly the span the gate allowed,
and the protected head (the system message, whatever the policy protects) stays verbatim in
front of the summary: the new state is head, summary, kept messages.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, cast

import wrapt
from langchain.agents.middleware import AgentMiddleware, AgentState, SummarizationMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.runnables import RunnableConfig
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime

from otel_compaction.archive import Archive
from otel_compaction.compactor import CompactionResult, GuardedCompactor
from otel_compaction.errors import CompactionRefused
from otel_compaction.gate import CompactionGate, Decision, SpanError, refusal_error
from otel_compaction.integrations.langchain.messages import (
    SUMMARY_TAG,
    conversation_of,
    resolve_from_messages,
    to_openai_messages,
)
from otel_compaction.policy import Policy
from otel_compaction.summarizers import _INSTRUCTIONS, Summarizer, SummaryRequest
from otel_compaction.telemetry.configuration import Telemetry

__all__ = [
    "ChatModelSummarizer",
    "ContextSize",
    "GuardedSummarizationMiddleware",
    "OnRefuse",
    "guard_builtin_summarization",
    "unguard_builtin_summarization",
]

_log = logging.getLogger(__name__)

ContextSize: TypeAlias = (
    tuple[Literal["tokens"], int]
    | tuple[Literal["messages"], int]
    | tuple[Literal["fraction"], float]
)
"""How much context, as the built-in middleware spells it: ``("tokens", 3000)``,
``("messages", 20)`` or ``("fraction", 0.8)`` of the model's input limit."""

OnRefuse: TypeAlias = Literal["raise", "hold"]
"""On a refusal: raise `CompactionRefused`, or hold every message verbatim (the refusal is
still recorded by the gate and logged)."""

TokenCounter: TypeAlias = Callable[[Iterable[BaseMessage]], int]

_SUMMARY_SOURCE = {"lc_source": "summarization"}


class ChatModelSummarizer:
    """A `Summarizer` backed by a LangChain chat model: the model gets the structured
    `SummaryRequest` as JSON and the carrying rules as its system prompt.

    Example:
        >>> from langchain_core.language_models import GenericFakeChatModel
        >>> summarizer = ChatModelSummarizer(GenericFakeChatModel(messages=iter(["ok"])))
    """

    def __init__(self, model: BaseChatModel, *, instructions: str = _INSTRUCTIONS) -> None:
        """Create a summarizer.

        Args:
            model: any LangChain chat model; its runs are tagged `SUMMARY_TAG` and not streamed.
            instructions: the system prompt; the default states what a summary must carry.
        """
        self.model = model
        self.instructions = instructions

    def summarize(self, request: SummaryRequest) -> str:
        """Send the structured request; return the model's text."""
        config: RunnableConfig = {
            "tags": [SUMMARY_TAG, TAG_NOSTREAM],
            "metadata": dict(_SUMMARY_SOURCE),
        }
        prompt = [SystemMessage(self.instructions), HumanMessage(request.to_json())]
        text = str(self.model.invoke(prompt, config=config).text)
        if not text.strip():
            raise ValueError(f"the chat model {type(self.model).__name__} returned no summary text")
        return text


class _Installed:
    """What `instrument` installed: the telemetry of middlewares built without one, and the
    guard the wrapped built-in middleware consults."""

    telemetry: Telemetry | None = None
    guard: _BuiltinGuard | None = None


_installed = _Installed()


def install_telemetry(telemetry: Telemetry | None) -> None:
    """Make `telemetry` the default of middlewares constructed without one (None: none)."""
    _installed.telemetry = telemetry


class GuardedSummarizationMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Summarizes old messages when the context fills, where the compaction gate allows it.

    The trigger and keep sizes read as the built-in ``SummarizationMiddleware``'s. The cut that
    `keep` asks for is the requested end; the gate extends it forward to close a call/result
    pair (never into the policy's ``keep_recent`` messages unless the budget is critical),
    defers to an older closed span, or refuses. A refusal raises `CompactionRefused` unless
    ``on_refuse="hold"``, which keeps every message verbatim.

    Example:
        >>> from langchain.agents import create_agent  # doctest: +SKIP
        >>> agent = create_agent(
        ...     model, tools, middleware=[GuardedSummarizationMiddleware(("tokens", 4000))]
        ... )  # doctest: +SKIP
    """

    def __init__(
        self,
        trigger: ContextSize | list[ContextSize],
        keep: ContextSize = ("messages", 20),
        *,
        summarizer: Summarizer | BaseChatModel | None = None,
        policy: Policy | str | None = None,
        telemetry: Telemetry | None = None,
        archive: Archive | None = None,
        critical: ContextSize | None = None,
        max_input_tokens: int | None = None,
        token_counter: TokenCounter = count_tokens_approximately,
        on_refuse: OnRefuse = "raise",
    ) -> None:
        """Create the middleware.

        Args:
            trigger: when to summarize; a list fires when any of its sizes is reached.
            keep: how much recent context the cut keeps; the gate may move the cut.
            summarizer: writes the summary; a chat model is wrapped in `ChatModelSummarizer`;
                `ExtractiveSummarizer` (no model) when None.
            policy: the compaction policy (a name, a file or a `Policy`); the telemetry's
                when None (`configure`'s ``policy``), else ``default``.
            telemetry: records decisions and compactions and cross-checks its ledger; the one
                `instrument` installed when None.
            archive: keeps each summarized span verbatim (reversible compaction).
            critical: at or above this size the budget is critical: no deferral, the gate
                compacts (extending as far as it must) or refuses.
            max_input_tokens: the model's input limit, needed by ``"fraction"`` sizes.
            token_counter: counts the tokens of messages, as the built-in middleware does.
            on_refuse: ``"raise"`` the refusal or ``"hold"`` the messages verbatim.
        """
        super().__init__()
        triggers = trigger if isinstance(trigger, list) else [trigger]
        if not triggers:
            raise ValueError("trigger needs at least one size")
        if on_refuse not in ("raise", "hold"):
            raise ValueError(f"on_refuse must be 'raise' or 'hold', got {on_refuse!r}")
        self.trigger = [_checked(size, "trigger", max_input_tokens) for size in triggers]
        self.keep = _checked(keep, "keep", max_input_tokens)
        self.critical = (
            None if critical is None else _checked(critical, "critical", max_input_tokens)
        )
        self.max_input_tokens = max_input_tokens
        self.token_counter = token_counter
        self.on_refuse: OnRefuse = on_refuse
        self.summarizer: Summarizer | None = (
            ChatModelSummarizer(summarizer) if isinstance(summarizer, BaseChatModel) else summarizer
        )
        self.policy = policy if isinstance(policy, Policy | None) else Policy.load(policy)
        self.archive = archive
        self._telemetry = telemetry
        self._compactor: GuardedCompactor | None = None
        self._lock = threading.Lock()

    # -- the hooks ---------------------------------------------------------------------------

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Summarize, when the trigger fires, where the gate allows it."""
        messages = state["messages"]
        total = self.token_counter(messages)
        if not any(self._reached(size, messages, total) for size in self.trigger):
            return None
        cut = self.planned_cut(messages)
        if cut <= 0:
            return None
        critical = self.critical is not None and self._reached(self.critical, messages, total)
        result = self.compact(messages, cut, critical=critical)
        if result is None or not result.compacted or result.span is None:
            return None
        start, end = result.span
        for message in messages:  # the reducer needs ids to re-add the kept messages
            if message.id is None:
                message.id = str(uuid.uuid4())
        summary = HumanMessage(
            content=result.summary or "", additional_kwargs=dict(_SUMMARY_SOURCE)
        )
        return {
            "messages": [
                RemoveMessage(id=REMOVE_ALL_MESSAGES),
                *messages[:start],
                summary,
                *messages[end:],
            ]
        }

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """`before_model` off the event loop (the summarizer may call a model)."""
        return await asyncio.to_thread(self.before_model, state, runtime)

    # -- the parts ---------------------------------------------------------------------------

    def planned_cut(self, messages: Sequence[BaseMessage]) -> int:
        """The cut `keep` asks for, before the gate: the built-in middleware's token or
        message cut without its own tool-message adjustment."""
        kind, value = self.keep
        if kind == "messages":
            return max(len(messages) - int(value), 0)
        target = max(self._tokens_of(self.keep), 1)
        if self.token_counter(messages) <= target:
            return 0
        kept = 0
        for index in range(len(messages) - 1, -1, -1):
            kept += self.token_counter([messages[index]])
            if kept > target:
                return min(index + 1, len(messages) - 1)
        return 0

    def compact(
        self, messages: Sequence[BaseMessage], cut: int, *, critical: bool = False
    ) -> CompactionResult | None:
        """Ask the guarded compactor for messages ``0..cut-1``; None when it refused and
        `on_refuse` is ``"hold"``.

        Raises:
            CompactionRefused: the gate refused and `on_refuse` is ``"raise"``.
        """
        compactor = self._guarded_compactor()
        conversation = conversation_of()
        if compactor.telemetry is not None:
            # Results the tool callbacks never reported (a human-in-the-loop answer) must not
            # read as a ledger mismatch.
            resolve_from_messages(compactor.telemetry.recorder, messages, conversation)
        try:
            return compactor.compact(
                to_openai_messages(messages),
                end=cut,
                conversation_id=conversation,
                critical=critical,
                force=True,
            )
        except CompactionRefused as refused:
            if self.on_refuse == "raise":
                raise
            _log.warning(
                "otel-compaction: %s; holding every message verbatim", refused.decision.outline()
            )
            return None

    def _guarded_compactor(self) -> GuardedCompactor:
        telemetry = self._telemetry or _installed.telemetry
        with self._lock:
            compactor = self._compactor
            if compactor is None or compactor.telemetry is not telemetry:
                compactor = self._compactor = GuardedCompactor(
                    self.summarizer,
                    budget=self._budget(),
                    policy=self.policy,
                    telemetry=telemetry,
                    archive=self.archive,
                )
            return compactor

    def _budget(self) -> int:
        if self.max_input_tokens:
            return self.max_input_tokens
        tokens = [int(value) for kind, value in self.trigger if kind == "tokens"]
        return max(tokens, default=1)

    def _tokens_of(self, size: ContextSize) -> int:
        kind, value = size
        if kind == "fraction":
            return int((self.max_input_tokens or 0) * value)
        return int(value)

    def _reached(self, size: ContextSize, messages: Sequence[BaseMessage], total: int) -> bool:
        if size[0] == "messages":
            return len(messages) >= size[1]
        return total >= max(self._tokens_of(size), 1)


def _checked(size: ContextSize, parameter: str, max_input_tokens: int | None) -> ContextSize:
    kind, value = size
    if kind == "fraction":
        if not 0 < value <= 1:
            raise ValueError(f"{parameter}: a fraction must be in (0, 1], got {value}")
        if not max_input_tokens:
            raise ValueError(f"{parameter}: a fraction needs max_input_tokens")
    elif kind in ("tokens", "messages"):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{parameter}: {kind} must be a positive integer, got {value!r}")
    else:
        raise ValueError(f"{parameter}: unknown size {kind!r} (tokens, messages or fraction)")
    return size


# -- the built-in middleware, guarded -------------------------------------------------------


class _BuiltinGuard:
    """What the wrapped ``_determine_cutoff_index`` consults."""

    def __init__(self, gate: CompactionGate, telemetry: Telemetry | None, on_refuse: OnRefuse):
        self.gate = gate
        self.telemetry = telemetry
        self.on_refuse: OnRefuse = on_refuse

    def span(self, messages: Sequence[AnyMessage], planned: int) -> tuple[int, int]:
        """The span ``[start, end)`` the gate allows to summarize in place of ``[0, planned)``
        (``start`` past the protected head); an empty span holds every message."""
        conversation = conversation_of()
        if self.telemetry is not None:
            resolve_from_messages(self.telemetry.recorder, messages, conversation)
        analysis = self.gate.analyse(to_openai_messages(messages), conversation_id=conversation)
        limit = len(messages) - self.gate.policy.thresholds.keep_recent
        end = planned
        while True:
            try:
                decision = self.gate.evaluate(
                    analysis, 0, end, conversation_id=conversation, raise_on_refuse=False
                )
            except SpanError:  # nothing after the protected head
                return 0, 0
            if decision.action == "refuse":
                return self._refused(decision)
            if not (decision.extended and decision.span[1] > limit):
                return decision.span
            # The extension would eat the messages kept verbatim: an earlier closed cut.
            earlier = next((c for c in range(end - 1, 0, -1) if analysis.pair_closed[c]), None)
            if earlier is None:
                return 0, 0
            end = earlier

    def _refused(self, decision: Decision) -> tuple[int, int]:
        if self.on_refuse == "raise":
            raise refusal_error(decision)
        _log.warning("otel-compaction: %s; holding every message verbatim", decision.outline())
        return 0, 0


@dataclass
class _Plan:
    """The gate's span for one ``before_model`` of the built-in middleware, from its cut to
    its partition and its new messages: these are three methods called in turn on the same
    message list, within one context (thread or task)."""

    messages: Sequence[AnyMessage]
    start: int
    end: int
    partitioned: bool = False


_plan: ContextVar[_Plan | None] = ContextVar("otel_compaction_builtin_plan", default=None)


_guard_lock = threading.Lock()
_CUTOFF = "_determine_cutoff_index"
_PARTITION = "_partition_messages"
_NEW_MESSAGES = "_build_new_messages"


def guard_builtin_summarization(
    policy: Policy | str | None = None,
    *,
    telemetry: Telemetry | None = None,
    on_refuse: OnRefuse = "raise",
) -> bool:
    """Make every ``SummarizationMiddleware`` check its cut with the compaction gate.

    Idempotent: a second call replaces the policy, telemetry and refusal handling. Returns
    False when the installed LangChain has no cut to guard (nothing is wrapped then).

    Example:
        >>> guard_builtin_summarization("default")  # doctest: +SKIP
        True
    """
    if on_refuse not in ("raise", "hold"):
        raise ValueError(f"on_refuse must be 'raise' or 'hold', got {on_refuse!r}")
    gate = telemetry.gate(policy) if telemetry is not None else CompactionGate(policy or "default")
    guard = _BuiltinGuard(gate, telemetry, on_refuse)
    with _guard_lock:
        current = SummarizationMiddleware.__dict__.get(_CUTOFF)
        if current is None:
            _log.warning(
                "otel-compaction: this langchain's SummarizationMiddleware has no %s; "
                "the built-in summarization is not guarded",
                _CUTOFF,
            )
            return False
        if not isinstance(current, wrapt.FunctionWrapper):
            wrapt.wrap_function_wrapper(SummarizationMiddleware, _CUTOFF, _guarded_cutoff)
            # Without these two, the span's head is summarized with it (the cut is all the
            # built-in middleware knows); where they are missing, it still is.
            _wrap_if_present(_PARTITION, _guarded_partition)
            _wrap_if_present(_NEW_MESSAGES, _with_head)
        _installed.guard = guard
    return True


def _wrap_if_present(name: str, wrapper: Callable[..., Any]) -> None:
    if name in SummarizationMiddleware.__dict__:
        wrapt.wrap_function_wrapper(SummarizationMiddleware, name, wrapper)
    else:
        _log.warning(
            "otel-compaction: this langchain's SummarizationMiddleware has no %s; "
            "its summary covers the protected head too",
            name,
        )


def unguard_builtin_summarization() -> None:
    """Restore the built-in ``SummarizationMiddleware`` as LangChain ships it."""
    with _guard_lock:
        _installed.guard = None
        for name in (_CUTOFF, _PARTITION, _NEW_MESSAGES):
            current = SummarizationMiddleware.__dict__.get(name)
            if isinstance(current, wrapt.FunctionWrapper):
                setattr(SummarizationMiddleware, name, current.__wrapped__)


def builtin_summarization_guarded() -> bool:
    """True while `guard_builtin_summarization` is in force."""
    return _installed.guard is not None


def _guarded_cutoff(
    wrapped: Callable[..., int], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> int:
    _plan.set(None)
    planned = wrapped(*args, **kwargs)
    guard = _installed.guard
    if guard is None or planned <= 0:
        return planned
    messages = cast("Sequence[AnyMessage]", args[0] if args else kwargs["messages"])
    try:
        start, end = guard.span(messages, planned)
    except CompactionRefused:
        raise
    except Exception:  # the guard must never break the agent: fall back to the plain cut
        _log.exception("otel-compaction: guarding the built-in summarization failed")
        return planned
    if start >= end:
        return 0
    if start > 0:
        _plan.set(_Plan(messages, start, end))
    return end


def _guarded_partition(
    wrapped: Callable[..., tuple[list[AnyMessage], list[AnyMessage]]],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[list[AnyMessage], list[AnyMessage]]:
    """The gate's span to summarize, not the head before it."""
    summarized, preserved = wrapped(*args, **kwargs)
    plan = _plan.get()
    messages = args[0] if args else kwargs.get("conversation_messages")
    if plan is None or plan.messages is not messages or len(summarized) != plan.end:
        return summarized, preserved
    plan.partitioned = True
    return summarized[plan.start :], preserved


def _with_head(
    wrapped: Callable[..., list[BaseMessage]],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> list[BaseMessage]:
    """The summary message, with the protected head verbatim in front of it."""
    new_messages = wrapped(*args, **kwargs)
    plan = _plan.get()
    if plan is None or not plan.partitioned:
        return new_messages
    _plan.set(None)
    return [*plan.messages[: plan.start], *new_messages]
