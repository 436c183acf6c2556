"""One trace per agent run: the ``invoke_agent`` span that the run's model calls, tool calls
and compaction decisions sit under.

Without it every tool call and every gate decision is a root span of its own, and a trace UI
shows one trace per call. `agent_run` opens the GenAI conventions' agent span
(``invoke_agent {gen_ai.agent.name}``, with ``gen_ai.operation.name``, ``gen_ai.agent.name``
and ``gen_ai.conversation.id``, and ``openinference.span.kind`` ``AGENT`` for Phoenix), makes it
current, and, with a conversation id, scopes the conversation too (`conversation`), so that
everything the recorder, the gate and the compactor start inside the block is its child. A run
that continues in another process (a CLI hook, a fleet worker) links back to it with `links`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider

from otel_compaction.context import conversation
from otel_compaction.telemetry import semconv
from otel_compaction.telemetry.scope import package_tracer

__all__ = ["agent_run"]


@contextmanager
def agent_run(
    name: str | None = None,
    *,
    conversation_id: str | None = None,
    tracer_provider: TracerProvider | None = None,
    links: Sequence[Link] = (),
) -> Iterator[Span]:
    """Open the run's ``invoke_agent`` span for the ``with`` block, current inside it.

    `name` is the agent's name (``gen_ai.agent.name``); `conversation_id` the run's
    conversation, also made the current one; `tracer_provider` the provider to record with
    (the global one when None); `links` the spans of other processes this run continues. An
    exception leaving the block marks the span as an error (``error.type``) and propagates.

    Example:
        >>> with agent_run("deploy-agent", conversation_id="conv-7") as run:  # doctest: +SKIP
        ...     call = telemetry.recorder.call("restart", "call_1")
    """
    tracer = package_tracer(tracer_provider or trace.get_tracer_provider())
    attributes: dict[str, str] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.INVOKE_AGENT,
        semconv.OPENINFERENCE_SPAN_KIND: "AGENT",
    }
    if name:
        attributes[semconv.GEN_AI_AGENT_NAME] = name
    if conversation_id:
        attributes[semconv.GEN_AI_CONVERSATION_ID] = conversation_id
    span_name = f"{semconv.INVOKE_AGENT} {name}" if name else semconv.INVOKE_AGENT
    span = tracer.start_span(span_name, kind=SpanKind.INTERNAL, attributes=attributes, links=links)
    with ExitStack() as scope:
        scope.enter_context(trace.use_span(span, end_on_exit=True, record_exception=False))
        if conversation_id:
            scope.enter_context(conversation(conversation_id))
        try:
            yield span
        except BaseException as error:
            span.set_attribute(semconv.ERROR_TYPE, type(error).__qualname__)
            span.set_status(Status(StatusCode.ERROR, type(error).__qualname__))
            raise
