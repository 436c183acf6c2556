"""The guarded compactor: picks the span, asks the gate, obeys the decision, never loses data.

`GuardedCompactor.compact` counts the transcript's tokens against a budget, picks the oldest
span after the protected head that brings usage down to the policy's target, and asks the
gate. It then compacts the (possibly extended) span, compacts the older span on a deferral
while holding the live one verbatim, or raises the refusal. The original span is archived
before the summary is written when an archive is configured; the summary must pass `verify`
(retried once with the missing items named) before it may replace anything.

The caller's list is never modified: a new transcript is returned, so any failure (a
summarizer error, an unverified summary, a crash mid-way) leaves the transcript exactly as it
was, and the archive only ever holds whole, content-addressed spans.

`GuardedCompactor.force_terminal` is the orchestrator's remedy for a refusal: it discharges
every obligation the refusal names (a call abandoned, a retry given up, a commitment withdrawn,
a transaction rolled back, a stray result absorbed) through the ledger, so a retry proceeds.

Deciding and applying runs under the ledger's `decision_lock` for the conversation: a lock
in this process for the in-memory ledger; on a shared ledger a lock across the fleet that
also remembers which transcript states were compacted, so that two workers holding the same
transcript never both compact it (the second returns ``compacted=False`` and says why). To
commit that only together with writing the new transcript back to the conversation's store,
hold ``ledger.decision_lock(conversation_id)`` around both (the lock is re-entrant).

An applied compaction is noted for its conversation (`otel_compaction.telemetry.compactions`): the
conversation's next auto-instrumented model request gets ``gen_ai.conversation.compacted``.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from otel_compaction.analysis import Analysis
from otel_compaction.archive import Archive
from otel_compaction.context import current_conversation_id
from otel_compaction.errors import CompactionError, CompactionRefused, LiveSpanCompactionError
from otel_compaction.gate import CompactionGate, Decision, refusal_error, shown_id
from otel_compaction.ledger import (
    DEFAULT_CONVERSATION,
    DecisionTurn,
    LedgerSnapshot,
    ObligationKind,
    ObligationLedger,
    ResolutionStatus,
    default_ledger,
)
from otel_compaction.policy import Policy
from otel_compaction.rules import DISCHARGE, ObligationRef
from otel_compaction.stores import StoreError
from otel_compaction.summarizers import (
    ExtractiveSummarizer,
    Summarizer,
    SummaryRequest,
    Verification,
    retry_request,
    verify,
)
from otel_compaction.telemetry import compactions, semconv
from otel_compaction.telemetry.configuration import Telemetry
from otel_compaction.telemetry.scope import capture_content_enabled
from otel_compaction.tokens import (
    MessageTokens,
    TokenCounter,
    char_estimate,
    counter_name,
    default_token_counter,
    message_text,
)
from otel_compaction.transcript import OPENAI_RESPONSES, Transcript

__all__ = [
    "CompactionResult",
    "GuardedCompactor",
    "SummaryRejected",
    "TokenCounter",
    "char_estimate",
    "default_token_counter",
]

_log = logging.getLogger(__name__)

_COMPACTED_ELSEWHERE = (
    "another worker already compacted this transcript state; read the conversation again"
)
_MAX_HELD = 64  # spans remembered as held; a transcript rarely has more than a few
_NO_SMALLER = "the summary is no smaller than the span"
_THINKING_BLOCKS = ("thinking", "redacted_thinking")


class SummaryRejected(LiveSpanCompactionError):
    """Every summary failed verification and the policy says refuse."""

    def __init__(self, decision: Decision, verification: Verification) -> None:
        self.verification = verification
        super().__init__(decision)
        self.args = (
            f"{decision.describe()}; the summary failed verification: "
            + "; ".join(verification.describe()),
        )


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What one compaction did. ``messages`` is the new transcript; the input is untouched.

    ``compacted`` is False when nothing was replaced: below the trigger, nothing compactable,
    or the span was held verbatim because every summary failed verification or the summary
    was not smaller, in tokens, than the span it would replace; ``reason`` says which.
    """

    messages: list[Any]
    compacted: bool
    decision: Decision | None = None
    span: tuple[int, int] | None = None
    summary: str | None = None
    archive_handle: str | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    verification: Verification | None = None
    attempts: int = 0
    reason: str = ""
    """Why nothing was replaced, when ``compacted`` is False."""

    @property
    def outcome(self) -> Literal["compacted", "deferred", "held", "not needed"]:
        """What happened, in one word: ``compacted`` (the gate's span, extended or not),
        ``deferred`` (an older closed span compacted, the live one held verbatim), ``held``
        (the gate allowed a span but it was kept verbatim: its summary failed verification or
        was no smaller, or another worker compacted it) or ``not needed`` (below the trigger,
        or nothing compactable)."""
        if self.compacted:
            deferred = self.decision is not None and self.decision.action == "defer"
            return "deferred" if deferred else "compacted"
        return "held" if self.decision is not None else "not needed"


class GuardedCompactor:
    """Compacts transcripts only where the gate allows it.

    Example:
        >>> compactor = GuardedCompactor(budget=2_000)
        >>> messages = [{"role": "user", "content": "word " * 3_000}]
        >>> result = compactor.compact(messages + [{"role": "user", "content": "hi"}], force=True)
        >>> result.compacted, len(result.messages)
        (False, 2)
    """

    def __init__(
        self,
        summarizer: Summarizer | None = None,
        *,
        budget: int,
        policy: Policy | str | None = None,
        ledger: ObligationLedger | None = None,
        archive: Archive | None = None,
        token_counter: TokenCounter | None = None,
        telemetry: Telemetry | None = None,
        kept_thinking: Literal["keep", "drop"] = "keep",
    ) -> None:
        """Create a compactor.

        Args:
            summarizer: writes summaries; `ExtractiveSummarizer` (no model) when None.
            budget: the context budget in tokens.
            policy: thresholds, rules, summary checks and the side-effect table; the
                telemetry's policy when None and `telemetry` is given (another one becomes
                the telemetry's: `Telemetry.gate`), else ``default``.
            ledger: the live obligation ledger (the telemetry's when `telemetry` is given).
            archive: keeps each compacted span verbatim (reversible compaction) when given.
            token_counter: counts a text's tokens; tiktoken or a character estimate by default.
            telemetry: records decisions and compactions as spans, events and metrics.
            kept_thinking: the Anthropic ``thinking`` and ``redacted_thinking`` blocks of the
                messages kept after the summary: ``keep`` them (a model without preserved
                thinking, which needs the thinking of the tool loop in progress; or requests
                that set ``thinking.block_binding.prefix_mismatch_behavior`` to
                ``"drop_block"``, so that the API drops them), or ``drop`` them (a model with
                preserved thinking otherwise: a summary the client wrote changes what came
                before them, and the API rejects the request; see "Prefix checks on thinking
                blocks", https://platform.claude.com/docs/en/build-with-claude/preserved-thinking/prefix-checks).
        """
        if budget <= 0:
            raise ValueError(f"budget must be a positive number of tokens, got {budget}")
        self.summarizer = summarizer if summarizer is not None else ExtractiveSummarizer()
        self.budget = budget
        self.telemetry = telemetry
        if telemetry is not None:
            self.gate = telemetry.gate(policy)
        else:
            self.gate = CompactionGate(policy or "default", ledger=ledger or default_ledger())
        self.policy = self.gate.policy
        self.ledger: ObligationLedger = self.gate.ledger or ObligationLedger()
        self.archive = archive
        self.kept_thinking = kept_thinking
        self.count_tokens = token_counter or default_token_counter()
        self.token_counts = MessageTokens(self.count_tokens)
        """Each message's count kept between calls: a transcript that grew costs its new
        messages."""
        self._held: OrderedDict[tuple[int, ...], list[Any]] = OrderedDict()
        """Spans whose summary came out no smaller, by the identity of their messages (kept
        alive here, so the identities stay theirs): not summarized again while unchanged."""
        _log.info("otel-compaction: counting tokens with %s", counter_name(self.count_tokens))
        provider = (
            telemetry.tracer_provider if telemetry is not None else trace.get_tracer_provider()
        )
        from otel_compaction import __version__

        self._tracer = provider.get_tracer(semconv.SCOPE, __version__)

    # -- budget ------------------------------------------------------------------------------

    def message_tokens(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """Tokens of each message of the transcript, counted over its JSON form (each
        message once while the transcript only grows)."""
        return self.token_counts.per_message(messages)

    def tokens(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of the whole transcript (each message counted once while it only grows)."""
        return self.token_counts.total(messages)

    def should_compact(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """True when usage is above the policy's trigger fraction of the budget."""
        return self.tokens(messages) > self.policy.thresholds.trigger * self.budget

    # -- compaction --------------------------------------------------------------------------

    def compact(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        conversation_id: str | None = None,
        critical: bool | None = None,
        force: bool = False,
        end: int | None = None,
    ) -> CompactionResult:
        """Compact the oldest span the gate allows; return the new transcript.

        Args:
            messages: the transcript (not modified).
            conversation_id: whose ledger to cross-check (else the current scope).
            critical: the budget is critical; by default, usage above the critical fraction.
            force: compact even below the trigger.
            end: request the span from the protected head up to this cut (a framework's own
                planned cut) instead of the one that brings usage to the policy's target.

        Raises:
            CompactionRefused: the gate refused (as `OpenObligationError` or
                `LiveSpanCompactionError`), or `SummaryRejected` when every summary failed
                verification and the policy says refuse.
        """
        original = list(messages)
        per_message = self.message_tokens(original)
        before = sum(per_message)
        thresholds = self.policy.thresholds
        if not force and before <= thresholds.trigger * self.budget:
            return CompactionResult(
                original, False, tokens_before=before, tokens_after=before,
                reason="usage is below the trigger",
            )  # fmt: skip
        if critical is None:
            critical = before >= thresholds.critical * self.budget
        # One decision at a time per conversation: across the fleet on a shared ledger.
        key = conversation_id or current_conversation_id()
        with contextlib.ExitStack() as held:
            try:
                turn = held.enter_context(self.ledger.decision_lock(key))
                unavailable = None
            except StoreError as error:  # an outage: the gate refuses, never compacts blind
                turn, unavailable = DecisionTurn(), str(error)
            return self._decide_and_apply(
                original, per_message, before, turn, conversation_id, critical, end, unavailable
            )

    def _decide_and_apply(
        self,
        original: list[Any],
        per_message: list[int],
        before: int,
        turn: DecisionTurn,
        conversation_id: str | None,
        critical: bool,
        end: int | None,
        unavailable: str | None = None,
    ) -> CompactionResult:
        thresholds = self.policy.thresholds
        analysis = self.gate.analyse(original, conversation_id=conversation_id)
        if unavailable is not None:  # the ledger could not be locked: it cannot be trusted
            key = conversation_id or DEFAULT_CONVERSATION
            snapshot = LedgerSnapshot(key, (), unavailable=unavailable)
            analysis = Analysis.build(analysis.transcript, self.policy, snapshot)
        if end is None:
            span = self._pick_span(per_message, analysis.head, before)
        elif not 0 <= end <= len(original):
            raise ValueError(f"end must be a cut of the transcript (0..{len(original)}), got {end}")
        else:
            span = (analysis.head, end) if end > analysis.head else None
        if span is None:
            return CompactionResult(
                original, False, tokens_before=before, tokens_after=before,
                reason="nothing between the protected head and "
                + ("the kept recent messages" if end is None else "the requested end"),
            )  # fmt: skip
        decision = self._evaluate(analysis, span, critical, conversation_id)
        # The gate may extend the span to close a pairing break, but the last `keep_recent`
        # messages are kept verbatim: ask again for the span up to an earlier closed cut.
        # At a critical budget the extension stands: freeing tokens is what matters then, and
        # the alternative would be a refusal or a span too small to relieve the pressure.
        limit = len(original) - thresholds.keep_recent
        while not critical and decision.action == "compact" and decision.span[1] > limit:
            start, requested_end = decision.span[0], decision.requested[1]
            shorter = next(
                (c for c in range(requested_end - 1, start, -1) if analysis.pair_closed[c]), None
            )
            if shorter is None:
                return CompactionResult(
                    original, False, tokens_before=before, tokens_after=before,
                    reason="no closed span ends before the kept recent messages",
                )  # fmt: skip
            decision = self._evaluate(analysis, (start, shorter), critical, conversation_id)
        if decision.action == "refuse":
            raise refusal_error(decision)
        fingerprint = _fingerprint(original, decision.span[0]) if turn.shared else None
        capture = self._capture_content()
        with compactions.apply_span(self._tracer, capture) as telemetry_span:
            if fingerprint is not None and turn.compacted(fingerprint):
                result = CompactionResult(
                    original, False, decision, decision.span, tokens_before=before,
                    tokens_after=before, reason=_COMPACTED_ELSEWHERE,
                )  # fmt: skip
            else:
                result = self._apply(original, analysis.transcript, decision, before)
            telemetry_span.record(result)
        if result.compacted and self.telemetry is not None and result.span is not None:
            start, end = result.span
            self.telemetry.recorder.compacted(
                conversation_id or current_conversation_id(),
                (c.id for c in analysis.transcript.calls if start <= c.message_index < end),
            )
        if result.compacted and fingerprint is not None:
            turn.record(fingerprint)
        return result

    def force_terminal(
        self,
        obligations: CompactionRefused | Iterable[ObligationRef],
        *,
        conversation_id: str | None = None,
        reason: str = "forced terminal before compaction",
    ) -> int:
        """Discharge the named obligations (the orchestrator's remedy for a refusal); return
        how many were discharged.

        Each kind reaches its terminal state: a tool call ``abandoned``, a retry chain
        ``given_up``, a commitment ``withdrawn``, a transaction ``rolled_back``, a result with
        no call ``absorbed``. Each is recorded through the ledger (a tool call the recorder
        holds also as its abandonment span) and as a ``compaction.obligation.discharged``
        event on a ``compaction.force_terminal`` span. A severed call is left alone: the
        ledger already has its resolution, and a second one would hide the severance.
        """
        severed: set[ObligationRef | None] = set()
        if isinstance(obligations, CompactionRefused):
            refs: Iterable[ObligationRef] = obligations.obligations
            conversation_id = conversation_id or obligations.decision.conversation_id
            severed = {
                f.obligation
                for f in obligations.decision.findings
                if f.rule == "severed_obligation"
            }
        else:
            refs = obligations
        # The same conversation `compact` cross-checks: the current scope when none is named.
        conversation_id = conversation_id or current_conversation_id()
        discharged = 0
        capture = self._capture_content()
        with self._tracer.start_as_current_span(
            semconv.FORCE_TERMINAL_SPAN, kind=SpanKind.INTERNAL
        ) as span:
            for ref in refs:
                status = DISCHARGE.get(ref.kind)
                if status is None or ref in severed:
                    continue
                self._discharge(ref, status, conversation_id, reason)
                discharged += 1
                span.add_event(
                    semconv.EVENT_DISCHARGED,
                    {
                        semconv.OBLIGATION_KIND: ref.kind,
                        semconv.OBLIGATION_ID: ref.id if capture else shown_id(ref),
                        semconv.OBLIGATION_STATUS: status,
                    },
                )
        return discharged

    def _discharge(
        self, ref: ObligationRef, status: str, conversation_id: str | None, reason: str
    ) -> None:
        kind = cast("ObligationKind", ref.kind)
        terminal = cast("ResolutionStatus", status)
        if (
            kind == "tool_call"
            and self.telemetry is not None
            and self.telemetry.recorder.resolve(
                ref.id, reason, status="abandoned", conversation_id=conversation_id
            )
        ):
            return
        if self.ledger.resolve(conversation_id, ref.id, terminal, kind=kind) is None:
            # The ledger never saw it (it came from the transcript alone).
            self.ledger.open(conversation_id, kind, ref.id, name=ref.name)
            self.ledger.resolve(conversation_id, ref.id, terminal, kind=kind)

    def compact_or_force(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        conversation_id: str | None = None,
        critical: bool | None = None,
        force: bool = False,
        end: int | None = None,
    ) -> CompactionResult:
        """`compact`; on a refusal over open obligations, `force_terminal` what it names and
        ask again, until the gate compacts.

        Every round discharges at least one obligation no earlier round named (a refusal names
        what actually blocks, the obligation that stops an extension included), so it ends: in
        a compaction, or in the refusal that names nothing left to discharge (a rule that is
        not an obligation, such as a negative result that the policy blocks on), which is raised.
        A background task still running is never discharged here: recording it abandoned
        would not stop it, and the agent would lose track of work that goes on (only a policy
        that blocks on it names it in a refusal; that refusal then stands).
        """
        forced: set[ObligationRef] = set()
        while True:
            try:
                return self.compact(
                    messages,
                    conversation_id=conversation_id,
                    critical=critical,
                    force=force,
                    end=end,
                )
            except SummaryRejected:
                raise
            except CompactionRefused as refused:
                if any(ref.kind == "background_task" for ref in refused.obligations):
                    raise
                fresh = set(refused.obligations) - forced
                if not fresh or not self.force_terminal(refused, conversation_id=conversation_id):
                    raise
                forced |= fresh

    # -- internals ---------------------------------------------------------------------------

    def _capture_content(self) -> bool:
        if self.telemetry is not None:
            return self.telemetry.recorder.capture_content
        return capture_content_enabled()

    def _evaluate(
        self,
        analysis: Analysis,
        span: tuple[int, int],
        critical: bool,
        conversation_id: str | None,
    ) -> Decision:
        return self.gate.evaluate(
            analysis,
            span[0],
            span[1],
            critical=critical,
            conversation_id=conversation_id,
            addressable=self.archive is not None,
            raise_on_refuse=False,
        )

    def _pick_span(self, per_message: list[int], head: int, total: int) -> tuple[int, int] | None:
        """The oldest span after the head whose removal brings usage to the target."""
        limit = len(per_message) - self.policy.thresholds.keep_recent
        if limit <= head:
            return None
        excess = total - self.policy.thresholds.target * self.budget
        covered = 0
        end = head
        while end < limit and (covered < excess or end == head):
            covered += per_message[end]
            end += 1
        return head, end

    def _apply(
        self,
        original: list[Any],
        transcript: Transcript,
        decision: Decision,
        before: int,
    ) -> CompactionResult:
        start, end = decision.span
        span_messages = original[start:end]
        held = (start, *map(id, span_messages))
        if held in self._held:
            self._held.move_to_end(held)
            return CompactionResult(
                original, False, decision, (start, end), None, None, before, before, None, 0,
                _NO_SMALLER,
            )  # fmt: skip
        handle = None
        if self.archive is not None:
            handle = self.archive.put(
                span_messages,
                start=start,
                conversation_id=decision.conversation_id,
                policy=self.policy.name,
            ).handle
        request = SummaryRequest(
            # A copy: a summarizer that edits its input must not edit the caller's messages.
            messages=copy.deepcopy(span_messages),
            span=(start, end),
            pending=decision.must_carry.pending,
            identifiers=decision.must_carry.identifiers,
            negatives=decision.must_carry.negatives,
            abandoned=decision.must_carry.abandoned,
            archive_handle=handle,
        )
        summary, verification, attempts = self._summarize(request)
        if not verification.ok:
            if self.policy.summaries.on_unverified == "refuse":
                raise SummaryRejected(decision, verification)
            return CompactionResult(
                original, False, decision, (start, end), None, handle, before, before,
                verification, attempts, "the summary failed verification; span held verbatim",
            )  # fmt: skip
        replacement = _summary_message(summary, transcript.format)
        spanned = sum(self.message_tokens(original)[start:end])
        after = before - spanned + self.count_tokens(message_text(replacement))
        if after >= before:
            self._held[held] = span_messages
            while len(self._held) > _MAX_HELD:
                self._held.popitem(last=False)
            return CompactionResult(
                original, False, decision, (start, end), summary, handle, before, before,
                verification, attempts, _NO_SMALLER,
            )  # fmt: skip
        if handle is not None and self.archive is not None:
            self.archive.attach_summary(handle, summary)
        kept = original[end:]
        if self.kept_thinking == "drop":
            kept = [m for m in map(_without_thinking, kept) if m is not None]
        new = [*original[:start], replacement, *kept]
        return CompactionResult(
            new, True, decision, (start, end), summary, handle, before, after, verification,
            attempts,
        )  # fmt: skip

    def _summarize(self, request: SummaryRequest) -> tuple[str, Verification, int]:
        attempts = 0
        current = request
        while True:
            attempts += 1
            summary = self.summarizer.summarize(current)
            if not isinstance(summary, str):
                raise CompactionError(
                    f"summarizer {type(self.summarizer).__name__} returned "
                    f"{type(summary).__name__}, expected str"
                )
            verification = verify(summary, request)
            if verification.ok or attempts > self.policy.summaries.retries:
                return summary, verification, attempts
            current = retry_request(request, verification)


def _fingerprint(messages: Sequence[Any], start: int) -> str:
    """The transcript state a compaction from `start` replaces: its messages up to and
    including the first one compacted (a stale copy of the transcript has the same)."""
    text = json.dumps(messages[: start + 1], sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _without_thinking(message: Any) -> Any:
    """`message` without its thinking blocks (a copy when it had some); None for an assistant
    message that held nothing else."""
    content = message.get("content") if isinstance(message, Mapping) else None
    if message.get("role") != "assistant" or not isinstance(content, list):
        return message
    kept = [
        b for b in content if not (isinstance(b, Mapping) and b.get("type") in _THINKING_BLOCKS)
    ]
    if len(kept) == len(content):
        return message
    return {**message, "content": kept} if kept else None


def _summary_message(summary: str, transcript_format: str) -> dict[str, Any]:
    if transcript_format == OPENAI_RESPONSES:
        return {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": summary}],
        }
    return {"role": "user", "content": summary}
