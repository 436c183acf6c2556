"""An auto-instrumented agent loop over the real SDK clients and the fake LLM server.

The ``instrumented`` fixture (every test module has it: ``conftest.py`` loads this module as a
plugin) is a `CompactionInstrumentor` recording into in-memory pipelines (never the global
providers), taken out after the test.

`Agent` keeps one conversation's transcript the way agent loops do (the SDK's own response
objects appended when not streamed, dicts joined from the stream otherwise) and sends it with
the real ``openai`` or ``anthropic`` client of one API, sync or async, streamed or not. Tests
script what the model answers on the `FakeLLMServer` and rewrite `Agent.history` to play the
compactor.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from conftest import unavailable
from fake_llm_server import Api, FakeLLMServer, ToolCall
from llm_clients import (
    anthropic_client,
    async_anthropic_client,
    async_openai_client,
    openai_client,
    require_sdks,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from telemetry_harness import Pipeline, make_pipeline, number_points

from otel_compaction.instrumentation import CompactionInstrumentor
from otel_compaction.telemetry import semconv as sc

__all__ = [
    "APIS",
    "MODEL",
    "SYSTEM",
    "USER",
    "Agent",
    "Beside",
    "Instrumented",
    "Mode",
    "Style",
    "bookkeeping_on_their_chat_spans",
    "each_taken_out",
    "instrumented_fixture",
    "request_spans",
    "their_chat_spans_open_no_obligations",
    "unavailable",
]

Mode = Literal["sync", "async"]
Style = Literal["json", "stream", "helper"]
"""Not streamed; ``create(stream=True)``; the SDK's ``.stream()`` helper."""

APIS: tuple[Api, ...] = ("chat", "responses", "messages")
MODEL = "model-test"
SYSTEM = "You operate the service fleet."
USER = "Restart the api service, then check it."
SUMMARY = "Summary: the api service was restarted."


@dataclass
class Instrumented:
    """The instrumentor, instrumented into `pipeline`."""

    instrumentor: CompactionInstrumentor
    pipeline: Pipeline

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """Finished spans (named `name`), in the order they ended."""
        return self.pipeline.spans(name)


@pytest.fixture(name="instrumented")
def instrumented_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Instrumented]:
    """The SDKs instrumented, detection on, content capture off, for one test."""
    require_sdks()
    for name in (sc.CAPTURE_CONTENT_ENV, sc.POLICY_ENV, sc.DETECTION_ENV, sc.AGENT_NAME_ENV):
        monkeypatch.delenv(name, raising=False)
    pipeline = make_pipeline()
    instrumentor = CompactionInstrumentor()
    instrumentor.instrument(telemetry=pipeline.telemetry)
    try:
        yield Instrumented(instrumentor, pipeline)
    finally:
        instrumentor.uninstrument()
        pipeline.shutdown()


class Beside:
    """otel-compaction and `other`, another instrumentor of the same SDK methods, on one
    in-memory pipeline, instrumented in either order (`compaction_first` or not), on the same
    tracer provider (the other's metrics are kept apart). `close` takes out whichever is still
    in and puts `methods` (``(class, name)`` pairs) back as they were found, so that what an
    unwrap left behind reaches no other test."""

    def __init__(
        self, other: Any, methods: list[tuple[type[Any], str]], *, compaction_first: bool
    ) -> None:
        self.pipeline = make_pipeline()
        self.compaction = CompactionInstrumentor()
        self.other = other
        self.original = [(owner, name, owner.__dict__[name]) for owner, name in methods]
        steps = [
            lambda: self.compaction.instrument(telemetry=self.pipeline.telemetry),
            lambda: other.instrument(
                tracer_provider=self.pipeline.tracer_provider, meter_provider=MeterProvider()
            ),
        ]
        for step in steps if compaction_first else reversed(steps):
            step()

    @property
    def instrumented(self) -> Instrumented:
        """otel-compaction's side."""
        return Instrumented(self.compaction, self.pipeline)

    def restored(self) -> bool:
        """Whether every method is the one found before either instrumented it."""
        return all(owner.__dict__[name] is found for owner, name, found in self.original)

    def ours_left(self) -> list[str]:
        """The methods with an otel-compaction wrapper still somewhere in their chain."""
        left = []
        for owner, name, _ in self.original:
            found = owner.__dict__[name]
            while found is not None:
                wrapper = getattr(found, "_self_wrapper", None)
                if getattr(wrapper, "__module__", "").startswith("otel_compaction"):
                    left.append(f"{owner.__name__}.{name}")
                    break
                found = getattr(found, "__wrapped__", None)
        return left

    def close(self) -> None:
        """Both out, the methods as found, the pipeline shut down."""
        for instrumentor in (self.compaction, self.other):
            if instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.uninstrument()
        for owner, name, found in self.original:
            setattr(owner, name, found)
        self.pipeline.shutdown()


def bookkeeping_on_their_chat_spans(
    both: Beside,
    agent: Agent,
    ids: ScenarioIds,
    their_span: tuple[str, str],
    *,
    their_events: frozenset[str] = frozenset(),
) -> None:
    """`run_compaction_scenario` beside another instrumentation: every call is one obligation,
    every detection one report, on the other instrumentation's chat spans (`their_span`: name
    and instrumentation scope; `their_events` the events it adds of its own), one per request:
    the results are their children, the calls link to them and start beside them, and
    otel-compaction makes no span of its own."""
    run_compaction_scenario(agent, both.instrumented, ids)

    summary = scenario_summary(both.instrumented)
    for request in summary["requests"]:
        theirs = {name for name, _ in request["events"] if not name.startswith("compaction.")}
        assert theirs <= their_events
        request["events"] = [e for e in request["events"] if e[0].startswith("compaction.")]
    assert summary == expected_scenario(agent.api, ids, streamed=agent.style != "json")
    spans = both.pipeline.spans()
    chats = sorted(
        (s for s in spans if (s.attributes or {}).get(sc.GEN_AI_OPERATION_NAME) == "chat"),
        key=lambda s: s.start_time or 0,
    )
    name, scope = their_span
    assert [
        (s.name, s.kind, s.instrumentation_scope.name)  # type: ignore[union-attr]
        for s in chats
    ] == [(name, SpanKind.CLIENT, scope)] * 4
    assert request_spans(spans) == chats
    assert both.pipeline.spans(sc.MODEL_REQUEST_SPAN) == []


def their_chat_spans_open_no_obligations(both: Beside, agent: Agent, their_span: str) -> None:
    """Two requests without tool calls beside another instrumentation: its two chat spans
    (named `their_span`) open no obligation."""
    agent.script(text="Nothing to do.")
    agent.ask()
    agent.script(text="Still nothing.")
    agent.ask()

    assert len(both.pipeline.spans(their_span)) == 2
    ledger = both.pipeline.ledger
    assert [ledger.snapshot(c).obligations for c in ledger.conversations()] == []
    assert ledger.open_counts() == {}


def each_taken_out(both: Beside, agent: Agent, *, other_first: bool) -> None:
    """Uninstrument both, one after the other (the other instrumentation first when
    `other_first`): after each the client works, streams included, and otel-compaction's
    wrappers are gone (the other's ``uninstrument()`` unwraps whatever wrapper is outermost,
    and otel-compaction's is beneath it in either order: each takes out its own)."""
    first, second = (both.other, both.compaction) if other_first else (both.compaction, both.other)
    for instrumentor in (first, second):
        instrumentor.uninstrument()
        agent.script(ToolCall("search", {"q": "x"}))
        assert agent.ask().calls[0][1] == "search"

    assert len(request_spans(both.pipeline.spans())) == int(other_first)
    assert both.ours_left() == []


def request_spans(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    """The spans carrying a model request's bookkeeping (``compaction.request.api``), in the
    order they started: otel-compaction's own ``compaction.model_request`` spans, or another
    instrumentation's inference spans."""
    found = [s for s in spans if sc.REQUEST_API in (s.attributes or {})]
    return sorted(found, key=lambda s: s.start_time or 0)


@dataclass
class Turn:
    """What one request got back: the calls as ``(id, name, arguments object)``."""

    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    text: str = ""


class Agent:
    """One conversation through the real client of `api`."""

    def __init__(
        self,
        server: FakeLLMServer,
        api: Api,
        mode: Mode = "sync",
        style: Style = "json",
        *,
        system: str = SYSTEM,
        user: str = USER,
    ) -> None:
        """Start a conversation: `system` as the instruction, `user` as the first message."""
        self.server, self.api, self.mode, self.style = server, api, mode, style
        self.system = system
        self.history: list[Any] = [{"role": "user", "content": user}]
        self.extra: dict[str, Any] = {}

    # -- scripting and transcript items --------------------------------------------------------

    def script(self, *calls: ToolCall, text: str | None = None) -> None:
        """What the model answers next."""
        self.server.enqueue(self.api, text, tool_calls=calls)

    def result(self, call_id: str, text: str, *, error: bool = False) -> dict[str, Any]:
        """A tool result in this API's format."""
        if self.api == "chat":
            return {"role": "tool", "tool_call_id": call_id, "content": text}
        if self.api == "responses":
            return {"type": "function_call_output", "call_id": call_id, "output": text}
        block = {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": error}
        return {"role": "user", "content": [block]}

    def summary(self, text: str = SUMMARY) -> dict[str, Any]:
        """An assistant summary, as a compactor writes it."""
        return {"role": "assistant", "content": text}

    def user(self, text: str) -> dict[str, Any]:
        """A user message."""
        return {"role": "user", "content": text}

    # -- requests ------------------------------------------------------------------------------

    def ask(self) -> Turn:
        """Send the history; append the model's answer to it; return the answer."""
        if self.mode == "async":
            turn, items = asyncio.run(self._ask_async())
        else:
            turn, items = self._ask_sync()
        self.history.extend(items)
        return turn

    def _chat_kwargs(self) -> dict[str, Any]:
        return {
            "model": MODEL,
            "messages": [{"role": "system", "content": self.system}, *self.history],
            **self.extra,
        }

    def _responses_kwargs(self) -> dict[str, Any]:
        return {"model": MODEL, "instructions": self.system, "input": self.history, **self.extra}

    def _messages_kwargs(self) -> dict[str, Any]:
        return {
            "model": MODEL,
            "max_tokens": 256,
            "system": self.system,
            "messages": self.history,
            **self.extra,
        }

    def _ask_sync(self) -> tuple[Turn, list[Any]]:
        style = self.style
        if self.api == "chat":
            with openai_client(self.server) as client:
                if style == "json":
                    return _chat_message(client.chat.completions.create(**self._chat_kwargs()))
                if style == "helper":
                    with client.chat.completions.stream(**self._chat_kwargs()) as events:
                        for _ in events:
                            pass
                        return _chat_message(events.get_final_completion())
                with client.chat.completions.create(**self._chat_kwargs(), stream=True) as chunks:
                    return _chat_chunks(list(chunks))
        if self.api == "responses":
            with openai_client(self.server) as client:
                if style == "json":
                    return _response(client.responses.create(**self._responses_kwargs()))
                if style == "helper":
                    with client.responses.stream(**self._responses_kwargs()) as events:
                        for _ in events:
                            pass
                        return _response(events.get_final_response())
                kwargs = self._responses_kwargs()
                with client.responses.create(**kwargs, stream=True) as stream_events:
                    return _response_events(list(stream_events))
        with anthropic_client(self.server) as client:
            if style == "json":
                return _message(client.messages.create(**self._messages_kwargs()))
            if style == "helper":
                with client.messages.stream(**self._messages_kwargs()) as events:
                    for _ in events:
                        pass
                    return _message(events.get_final_message())
            with client.messages.create(**self._messages_kwargs(), stream=True) as raw:
                return _message_events(list(raw))

    async def _ask_async(self) -> tuple[Turn, list[Any]]:
        style = self.style
        if self.api == "chat":
            async with async_openai_client(self.server) as client:
                if style == "json":
                    completion = await client.chat.completions.create(**self._chat_kwargs())
                    return _chat_message(completion)
                if style == "helper":
                    async with client.chat.completions.stream(**self._chat_kwargs()) as events:
                        async for _ in events:
                            pass
                        return _chat_message(await events.get_final_completion())
                chunks = await client.chat.completions.create(**self._chat_kwargs(), stream=True)
                async with chunks:
                    return _chat_chunks([chunk async for chunk in chunks])
        if self.api == "responses":
            async with async_openai_client(self.server) as client:
                kwargs = self._responses_kwargs()
                if style == "json":
                    return _response(await client.responses.create(**kwargs))
                if style == "helper":
                    async with client.responses.stream(**kwargs) as events:
                        async for _ in events:
                            pass
                        return _response(await events.get_final_response())
                stream_events = await client.responses.create(**kwargs, stream=True)
                async with stream_events:
                    return _response_events([event async for event in stream_events])
        async with async_anthropic_client(self.server) as client:
            kwargs = self._messages_kwargs()
            if style == "json":
                return _message(await client.messages.create(**kwargs))
            if style == "helper":
                async with client.messages.stream(**kwargs) as events:
                    async for _ in events:
                        pass
                    return _message(await events.get_final_message())
            raw = await client.messages.create(**kwargs, stream=True)
            async with raw:
                return _message_events([event async for event in raw])


# -- reading answers the way applications do ----------------------------------------------------


def _chat_message(completion: Any) -> tuple[Turn, list[Any]]:
    message = completion.choices[0].message
    calls = [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []
    ]
    return Turn(calls, message.content or ""), [message]  # the SDK object, as agents append it


def _chat_chunks(chunks: list[Any]) -> tuple[Turn, list[Any]]:
    joined: dict[int, list[str]] = {}
    text = ""
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                entry = joined.setdefault(call.index, ["", "", ""])
                entry[0] = call.id or entry[0]
                entry[1] = (call.function and call.function.name) or entry[1]
                entry[2] += (call.function and call.function.arguments) or ""
    calls = [(e[0], e[1], json.loads(e[2])) for _, e in sorted(joined.items())]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ]
    return Turn(calls, text), [message]


def _response(response: Any) -> tuple[Turn, list[Any]]:
    calls = [
        (item.call_id, item.name, json.loads(item.arguments))
        for item in response.output
        if item.type == "function_call"
    ]
    return Turn(calls), list(response.output)  # the SDK's output items


def _response_events(events: list[Any]) -> tuple[Turn, list[Any]]:
    items = [e.item for e in events if e.type == "response.output_item.done"]
    calls = [
        (i.call_id, i.name, json.loads(i.arguments)) for i in items if i.type == "function_call"
    ]
    return Turn(calls), [item.model_dump(exclude_none=True) for item in items]


def _message(message: Any) -> tuple[Turn, list[Any]]:
    calls = [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"]
    return Turn(calls), [{"role": "assistant", "content": list(message.content)}]  # SDK blocks


def _message_events(events: list[Any]) -> tuple[Turn, list[Any]]:
    blocks: dict[int, dict[str, Any]] = {}
    parts: dict[int, str] = {}
    for event in events:
        if event.type == "content_block_start" and event.content_block.type == "tool_use":
            block = event.content_block
            blocks[event.index] = {"type": "tool_use", "id": block.id, "name": block.name}
            parts[event.index] = ""
        elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            parts[event.index] += event.delta.partial_json
    content = [{**blocks[i], "input": json.loads(parts[i] or "{}")} for i in sorted(blocks)]
    calls = [(b["id"], b["name"], b["input"]) for b in content]
    return Turn(calls), [{"role": "assistant", "content": content}]


# -- the compaction scenario both SDK test modules run -------------------------------------------

RESTART = "restart_service"
CHECK = "check_health"
RESTART_ARGS = {"service": "api", "mode": "rolling"}
CHECK_ARGS = {"service": "api"}


@dataclass(frozen=True)
class ScenarioIds:
    """The call ids the fake model emits: a restart, a health check, the restart again."""

    restart: str
    check: str
    again: str


def run_compaction_scenario(agent: Agent, instrumented: Instrumented, ids: ScenarioIds) -> None:
    """Four requests inside an ``agent run`` span:

    1. the model calls ``restart_service`` (A);
    2. A's result goes back; the model calls ``check_health`` (B);
    3. a compactor replaced everything after the first user message with a summary, cutting B
       while it is still owed; the model calls ``restart_service`` with A's arguments again (C);
    4. C's result and, late, B's result go back: B's call is gone.
    """
    tracer = instrumented.pipeline.tracer_provider.get_tracer("agent-test")
    with tracer.start_as_current_span("agent run"):
        agent.script(ToolCall(RESTART, RESTART_ARGS, id=ids.restart))
        agent.ask()
        agent.history.append(agent.result(ids.restart, "restarted"))
        agent.script(ToolCall(CHECK, CHECK_ARGS, id=ids.check))
        agent.ask()
        agent.history[1:] = [agent.summary()]
        # The same arguments, another key order: still the same call.
        agent.script(ToolCall(RESTART, '{"mode": "rolling", "service": "api"}', id=ids.again))
        agent.ask()
        agent.history += [agent.result(ids.again, "restarted"), agent.result(ids.check, "healthy")]
        agent.script(text="The api service is restarted and healthy.")
        agent.ask()


def scenario_summary(instrumented: Instrumented) -> dict[str, Any]:
    """The scenario's telemetry as plain data: request spans (attributes and events), tool-call
    and result spans (status, events, links and parents named by span), the ledger, and the
    detection metrics."""
    spans = instrumented.spans()
    requests = request_spans(spans)
    [root] = [s for s in spans if s.name == "agent run"]
    label: dict[int, str] = {root.context.span_id: "agent run"}
    label.update({s.context.span_id: f"request {i + 1}" for i, s in enumerate(requests)})
    calls = sorted(
        (s for s in spans if s.name.startswith(sc.EXECUTE_TOOL + " ")),
        key=lambda s: s.start_time or 0,
    )
    label.update({s.context.span_id: f"call {_call_id(s)}" for s in calls})

    def named(span_id: int | None) -> str:
        return label.get(span_id or 0, "?")

    def events(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
        return [(e.name, dict(e.attributes or {})) for e in span.events]

    request_keys = (
        sc.GEN_AI_OPERATION_NAME,
        sc.GEN_AI_PROVIDER_NAME,
        sc.GEN_AI_REQUEST_MODEL,
        sc.GEN_AI_CONVERSATION_ID,
        sc.CONVERSATION_SOURCE,
        sc.REQUEST_API,
        sc.REQUEST_STREAM,
        sc.REQUEST_RESOLVED,
        sc.RESPONSE_TOOL_CALLS,
        sc.GEN_AI_CONVERSATION_COMPACTED,
    )
    metrics = instrumented.pipeline.metrics()
    return {
        "requests": [
            {
                "parent": named(s.parent.span_id if s.parent else None),
                "attributes": {k: v for k, v in (s.attributes or {}).items() if k in request_keys},
                "response id": bool((s.attributes or {}).get(sc.GEN_AI_RESPONSE_ID)),
                "events": events(s),
            }
            for s in requests
        ],
        "calls": [
            {
                "name": s.name,
                "id": _call_id(s),
                "status": (s.attributes or {}).get(sc.OBLIGATION_STATUS),
                "parent": named(s.parent.span_id if s.parent else None),
                "links": [
                    (named(link.context.span_id), dict(link.attributes or {})) for link in s.links
                ],
                "events": [name for name, _ in events(s)],
            }
            for s in calls
        ],
        "results": sorted(
            (
                s.name,
                _call_id(s),
                named(s.parent.span_id if s.parent else None),
                [(named(link.context.span_id), dict(link.attributes or {})) for link in s.links],
            )
            for s in spans
            if s.name.startswith(sc.TOOL_RESULT_SPAN + " ")
        ),
        "ledger": [
            (o.id, o.name, o.status)
            for o in instrumented.pipeline.ledger.snapshot(
                _only_conversation(instrumented)
            ).obligations
        ],
        "detections": {
            name: {tuple(sorted(k)): v for k, v in number_points(metrics[name]).items()}
            for name in (sc.METRIC_SEVERED, sc.METRIC_DUPLICATE_CALLS, sc.METRIC_ORPHANED)
            if name in metrics
        },
    }


def _call_id(span: ReadableSpan) -> str:
    return str((span.attributes or {}).get(sc.GEN_AI_TOOL_CALL_ID))


def _only_conversation(instrumented: Instrumented) -> str:
    [conversation] = instrumented.pipeline.ledger.conversations()
    return conversation


def expected_scenario(
    api: Api, ids: ScenarioIds, *, streamed: bool, claims_chat: bool = True
) -> dict[str, Any]:
    """What `scenario_summary` must be after `run_compaction_scenario` on `api`; without
    `claims_chat`, the request spans have no ``gen_ai.operation.name`` (another
    instrumentation's inference span started inside each: that one is the ``chat`` span)."""
    from otel_compaction.instrumentation.conversation import derived_id

    base = {
        **({sc.GEN_AI_OPERATION_NAME: "chat"} if claims_chat else {}),
        sc.GEN_AI_PROVIDER_NAME: "anthropic" if api == "messages" else "openai",
        sc.GEN_AI_REQUEST_MODEL: MODEL,
        sc.GEN_AI_CONVERSATION_ID: derived_id(SYSTEM, USER),
        sc.CONVERSATION_SOURCE: "derived",
        sc.REQUEST_API: {"chat": "chat.completions", "responses": "responses"}.get(api, api),
        sc.REQUEST_STREAM: streamed,
    }
    severed = {
        sc.GEN_AI_TOOL_CALL_ID: ids.check,
        sc.GEN_AI_TOOL_NAME: CHECK,
        sc.OBLIGATION_KIND: "tool_call",
    }
    duplicate = {
        sc.GEN_AI_TOOL_CALL_ID: ids.again,
        sc.GEN_AI_TOOL_NAME: RESTART,
        sc.DUPLICATE_OF: ids.restart,
    }
    # Request 4 is [instruction, user, summary, call C, result C, result B]: B's is message 5.
    orphaned = {sc.GEN_AI_TOOL_CALL_ID: ids.check, sc.MESSAGE_INDEX: 5, sc.GEN_AI_TOOL_NAME: CHECK}

    def request(events: list[Any], **attributes: Any) -> dict[str, Any]:
        return {
            "parent": "agent run",
            "attributes": {**base, **attributes},
            "response id": True,
            "events": events,
        }

    def call(call_id: str, name: str, request_no: int, events: list[str]) -> dict[str, Any]:
        return {
            "name": f"execute_tool {name}",
            "id": call_id,
            "status": "result",
            "parent": "agent run",
            "links": [(f"request {request_no}", {sc.GEN_AI_TOOL_CALL_ID: call_id})],
            "events": events,
        }

    def result(call_id: str, name: str, request_no: int) -> tuple[Any, ...]:
        link = (f"call {call_id}", {sc.GEN_AI_TOOL_CALL_ID: call_id})
        return (f"tool_result {name}", call_id, f"request {request_no}", [link])

    return {
        "requests": [
            request([], **{sc.RESPONSE_TOOL_CALLS: 1}),
            request([], **{sc.REQUEST_RESOLVED: 1, sc.RESPONSE_TOOL_CALLS: 1}),
            request(  # the first request after the compaction: its transcript shrank
                [(sc.EVENT_SEVERED, severed), (sc.EVENT_DUPLICATE, duplicate)],
                **{sc.RESPONSE_TOOL_CALLS: 1, "gen_ai.conversation.compacted": True},
            ),
            request(
                [(sc.EVENT_ORPHANED, orphaned)],
                **{sc.REQUEST_RESOLVED: 2, sc.RESPONSE_TOOL_CALLS: 0},
            ),
        ],
        "calls": [
            call(ids.restart, RESTART, 1, []),
            call(ids.check, CHECK, 2, [sc.EVENT_SEVERED]),
            call(ids.again, RESTART, 3, []),
        ],
        "results": sorted(
            [
                result(ids.restart, RESTART, 2),
                result(ids.again, RESTART, 4),
                result(ids.check, CHECK, 4),
            ]
        ),
        "ledger": [
            (ids.restart, RESTART, "result"),
            (ids.check, CHECK, "result"),
            (ids.again, RESTART, "result"),
        ],
        "detections": {
            sc.METRIC_SEVERED: {
                ((sc.OBLIGATION_KIND, "tool_call"), (sc.GEN_AI_TOOL_NAME, CHECK)): 1
            },
            sc.METRIC_DUPLICATE_CALLS: {((sc.GEN_AI_TOOL_NAME, RESTART),): 1},
            sc.METRIC_ORPHANED: {((sc.GEN_AI_TOOL_NAME, CHECK),): 1},
        },
    }
