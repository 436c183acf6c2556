"""Every span, event, attribute and metric name this package emits, in one place.

GenAI semantic-convention names are reused where they exist (``gen_ai.*``, ``error.type``);
this package's own names live under ``compaction.*``. No other module spells a telemetry name.
Metric attributes never carry call or conversation ids (cardinality).
"""

from __future__ import annotations

from typing import Final

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv.attributes import error_attributes

# -- instrumentation scope --------------------------------------------------------------------
SCOPE: Final = "otel_compaction"

# -- GenAI semantic conventions -----------------------------------------------------------------
# Taken from `opentelemetry-semantic-conventions` (the incubating GenAI attributes), so that a
# renamed convention shows up as an import error here and not as a silently wrong name.
GEN_AI_OPERATION_NAME: Final = gen_ai_attributes.GEN_AI_OPERATION_NAME
GEN_AI_TOOL_NAME: Final = gen_ai_attributes.GEN_AI_TOOL_NAME
GEN_AI_TOOL_CALL_ID: Final = gen_ai_attributes.GEN_AI_TOOL_CALL_ID
GEN_AI_TOOL_TYPE: Final = gen_ai_attributes.GEN_AI_TOOL_TYPE
GEN_AI_TOOL_CALL_ARGUMENTS: Final = gen_ai_attributes.GEN_AI_TOOL_CALL_ARGUMENTS
GEN_AI_TOOL_CALL_RESULT: Final = gen_ai_attributes.GEN_AI_TOOL_CALL_RESULT
GEN_AI_CONVERSATION_ID: Final = gen_ai_attributes.GEN_AI_CONVERSATION_ID
GEN_AI_AGENT_NAME: Final = gen_ai_attributes.GEN_AI_AGENT_NAME
GEN_AI_PROVIDER_NAME: Final = gen_ai_attributes.GEN_AI_PROVIDER_NAME
GEN_AI_REQUEST_MODEL: Final = gen_ai_attributes.GEN_AI_REQUEST_MODEL
GEN_AI_RESPONSE_ID: Final = gen_ai_attributes.GEN_AI_RESPONSE_ID
GEN_AI_CONVERSATION_COMPACTED: Final[str] = getattr(
    gen_ai_attributes, "GEN_AI_CONVERSATION_COMPACTED", "gen_ai.conversation.compacted"
)
"""``true`` on the first inference span after a compaction of its conversation (semantic
conventions for GenAI, compaction); never ``false``. Spelled here until the installed
conventions package has it."""
ERROR_TYPE: Final = error_attributes.ERROR_TYPE
ERROR_TYPE_OTHER: Final = "_OTHER"
"""``error.type`` of a failure whose type is not known."""

EXECUTE_TOOL: Final = gen_ai_attributes.GenAiOperationNameValues.EXECUTE_TOOL.value
"""``gen_ai.operation.name`` of a tool execution; tool-call spans are ``execute_tool {tool}``."""

CHAT: Final = gen_ai_attributes.GenAiOperationNameValues.CHAT.value
"""``gen_ai.operation.name`` of a model request (Chat Completions, Responses, Messages)."""
TEXT_COMPLETION: Final = gen_ai_attributes.GenAiOperationNameValues.TEXT_COMPLETION.value
GENERATE_CONTENT: Final = gen_ai_attributes.GenAiOperationNameValues.GENERATE_CONTENT.value
INVOKE_AGENT: Final = gen_ai_attributes.GenAiOperationNameValues.INVOKE_AGENT.value
"""``gen_ai.operation.name`` of an agent run; its span, ``invoke_agent {agent}``, is the parent
of the run's model calls, tool calls and compaction decisions (`telemetry.runs.agent_run`)."""

# -- other GenAI instrumentations' names: read to find their inference span; the span kind is
# also written on this package's own spans, which is how Phoenix shows a span's kind -----------
OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
OPENINFERENCE_LLM: Final = "LLM"
OPENINFERENCE_INPUT: Final = "input.value"
OPENINFERENCE_OUTPUT: Final = "output.value"
OPENLLMETRY_REQUEST_TYPE: Final = "llm.request.type"

CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

# -- span names ---------------------------------------------------------------------------------
TOOL_RESULT_SPAN: Final = "tool_result"
"""A result's own span, ``tool_result {tool}``, linked to its call span."""
EVALUATE_SPAN: Final = "compaction.evaluate"
"""One span per gate evaluation."""
TRANSACTION_SPAN: Final = "compaction.transaction"
RETRY_SPAN: Final = "compaction.retry"

# -- this package's attributes ----------------------------------------------------------------
OBLIGATION_KIND: Final = "compaction.obligation.kind"
OBLIGATION_STATUS: Final = "compaction.obligation.status"
OBLIGATION_ID: Final = "compaction.obligation.id"
OBLIGATION_RESOLUTION: Final = "compaction.obligation.resolution"
"""How a user resolved open work with ``hook resolve``: ``done`` or ``abandoned``."""
OBLIGATION_IDS: Final = "compaction.obligation.ids"
OBLIGATION_KINDS: Final = "compaction.obligation.kinds"
RETRY_ATTEMPT: Final = "compaction.retry.attempt"
ABANDON_REASON: Final = "compaction.abandon.reason"
ABANDON_REASON_EVICTED: Final = "evicted"
"""The reason of a call abandoned because the ledger's bound dropped its obligation."""
ABANDON_REASON_RUN_ENDED: Final = "run_ended"
"""The reason of a call the transcript proves will never be answered: its run ended without
its result (the ``abandoned_call`` rule); an event on the evaluation span (kind, id, reason)."""

ACTION: Final = "compaction.action"
RULE: Final = "compaction.rule"
RULES: Final = "compaction.rules"
POLICY: Final = "compaction.policy"
CRITICAL: Final = "compaction.critical"
EXTENDED: Final = "compaction.extended"
SPAN_START: Final = "compaction.span.start"
SPAN_END: Final = "compaction.span.end"
REQUESTED_START: Final = "compaction.requested.start"
REQUESTED_END: Final = "compaction.requested.end"
MESSAGES: Final = "compaction.transcript.messages"
HELD_TOKENS: Final = "compaction.tokens.held"
MUST_CARRY_IDENTIFIERS: Final = "compaction.must_carry.identifiers"
MUST_CARRY_NEGATIVES: Final = "compaction.must_carry.negatives"

# -- events -------------------------------------------------------------------------------------
EVENT_COMPACTED: Final = "compaction.compacted"
EVENT_EXTENDED: Final = "compaction.extended"
EVENT_DEFERRED: Final = "compaction.deferred"
EVENT_REFUSED: Final = "compaction.refused"
EVENT_ABANDONED: Final = "compaction.obligation.abandoned"
EVENT_DISCHARGED: Final = "compaction.obligation.discharged"
"""An obligation forced to a terminal state by `force_terminal` or ``hook resolve`` (kind, id,
status); the id of an obligation whose id is content is shown only with capture on."""
EVENT_STALE: Final = "compaction.obligation.stale"
"""An obligation older than the policy's ``stale_after`` in an evaluated span (kind, id)."""
FORCE_TERMINAL_SPAN: Final = "compaction.force_terminal"
"""The orchestrator's remedy for a refusal: one span, one discharge event per obligation."""
EVENT_RETRY_ATTEMPT: Final = "compaction.retry.attempt"

# -- metrics --------------------------------------------------------------------------------------
METRIC_OPEN_OBLIGATIONS: Final = "compaction.obligations.open"
METRIC_OBLIGATION_AGE: Final = "compaction.obligation.age"
"""Age at terminal resolution, one point per resolution: by kind and status, a tool call's also
by ``gen_ai.tool.name``, an error's by ``error.type``. A tool call's age is its duration."""
METRIC_OLDEST_OBLIGATION_AGE: Final = "compaction.obligation.oldest_age"
METRIC_DECISIONS: Final = "compaction.decisions"
METRIC_HELD_TOKENS: Final = "compaction.deferral.held_tokens"
METRIC_DUPLICATE_CALLS: Final = "compaction.tool_calls.duplicate"
METRIC_REISSUED_CALLS: Final = "compaction.tool_calls.reissued"
METRIC_SEVERED: Final = "compaction.obligations.severed"
METRIC_LEDGER_OVERFLOW: Final = "compaction.ledger.overflow"
METRIC_ORPHANED_OBLIGATIONS: Final = "compaction.obligations.orphaned"
"""Open obligations of a shared ledger whose owner stopped heartbeating (the fleet's count)."""
METRIC_HOOK_EXPORTS_DROPPED: Final = "compaction.hook.exports.dropped"
"""Hook runs whose telemetry was dropped (the endpoint did not take it in time), cumulative."""
METRIC_SOURCE_DISAGREEMENTS: Final = "compaction.sources.disagreements"
"""Obligations an engine (an obligation source) and the ledger disagree about, counted once."""
SOURCE_NAME: Final = "compaction.source.name"
"""The obligation source: ``langgraph``, ``openai_agents``, ``temporal``."""
SOURCE_DISAGREEMENT: Final = "compaction.source.disagreement"
"""``ledger_open`` (the engine shows it closed) or ``source_open`` (the ledger does)."""

# -- auto-instrumentation: model requests and passive detection ---------------------------------
MODEL_REQUEST_SPAN: Final = "compaction.model_request"
"""This package's span for an instrumented model request, made only when no other GenAI
instrumentation's inference span is current for it (that span carries the bookkeeping then);
``gen_ai.operation.name`` ``chat`` only when no inference span started inside it either.
Tool-call spans link to the request span that emitted them, result spans are children of the
request span that carried them, whichever span that is."""
REQUEST_API: Final = "compaction.request.api"
"""Which API was called: ``chat.completions``, ``responses`` or ``messages``."""
REQUEST_STREAM: Final = "compaction.request.stream"
REQUEST_RESOLVED: Final = "compaction.request.resolved"
"""How many open tool calls the request's tool results resolved."""
RESPONSE_TOOL_CALLS: Final = "compaction.response.tool_calls"
"""How many tool calls the model emitted in its response."""
CONVERSATION_SOURCE: Final = "compaction.conversation.source"
"""Where ``gen_ai.conversation.id`` came from: ``agents`` (an Agents SDK trace's ``group_id``),
``explicit``, ``baggage``, ``provider``, ``continued`` or ``derived``."""
MESSAGE_INDEX: Final = "compaction.message.index"
DUPLICATE_OF: Final = "compaction.tool_call.duplicate_of"
"""The id of the earlier, resolved call that a duplicate repeats."""

EVENT_SEVERED: Final = "compaction.obligation.severed"
"""A request no longer carries the call of an open obligation (compaction cut it)."""
EVENT_ORPHANED: Final = "compaction.tool_result.orphaned"
"""A request carries a tool result whose call is gone."""
EVENT_DUPLICATE: Final = "compaction.tool_call.duplicate"
"""The model emitted a call identical (tool and arguments) to one already resolved."""
EVENT_REISSUE: Final = "compaction.reissue"
"""The model emitted a call repeating a side effect a compaction removed from context."""
REISSUE_OF: Final = "compaction.reissue.of"
"""The id of the earlier call with side effects that a re-issue repeats."""
REISSUE_OUTCOME: Final = "compaction.reissue.outcome"
"""The earlier call's outcome (``success``)."""
REISSUE_KIND: Final = "compaction.reissue.kind"
"""What the earlier call changed: ``file``, ``vcs``, ``install``, ``http``, ``deploy``,
``publish``, ``message`` or ``tool``."""

METRIC_ORPHANED: Final = "compaction.tool_results.orphaned"

POLICY_ENV: Final = "OTEL_COMPACTION_POLICY"
DETECTION_ENV: Final = "OTEL_COMPACTION_DETECTION"
AGENT_NAME_ENV: Final = "OTEL_COMPACTION_AGENT_NAME"
FRAMEWORKS_ENV: Final = "OTEL_COMPACTION_FRAMEWORKS"

# Instrumentation layers recording tool calls (`ToolCallRecorder.call`'s ``layer``): a call
# seen by two of them is one obligation.
LAYER_SDK: Final = "sdk"
LAYER_LANGCHAIN: Final = "langchain"
LAYER_AGENTS: Final = "agents"
LAYER_MCP: Final = "mcp"

# -- compaction applied -----------------------------------------------------------------------
APPLY_SPAN: Final = "compaction.apply"
"""One span per compaction applied by the guarded compactor."""
TOKENS_BEFORE: Final = "compaction.tokens.before"
TOKENS_AFTER: Final = "compaction.tokens.after"
COMPACTED: Final = "compaction.compacted"
HOLD_REASON: Final = "compaction.hold.reason"
"""Why a ``compaction.apply`` replaced nothing (``compaction.compacted`` false): the span was
held verbatim because its summary failed verification or would not have been smaller."""
OUTCOME: Final = "compaction.outcome"
"""What a ``compaction.apply`` did, in one word (`CompactionResult.outcome`): ``compacted``,
``deferred``, ``held`` or ``not needed``."""
SUMMARY_ATTEMPTS: Final = "compaction.summary.attempts"
VERIFIED: Final = "compaction.summary.verified"
MISSING: Final = "compaction.summary.missing"
ARCHIVE_HANDLE: Final = "compaction.archive.handle"
EVENT_SUMMARY_REJECTED: Final = "compaction.summary.rejected"
