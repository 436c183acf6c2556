"""The OpenAI Agents SDK: function tools as obligations, and its compaction session guarded.

The SDK's own ``Runner`` runs an ``Agent`` whose model is a scripted fake implementing the SDK's
``Model`` interface (function calls, then a final text) and whose tools are real
``@function_tool`` functions. The tracing processor is the only one registered, so nothing is
exported anywhere. The compaction session is the SDK's ``OpenAIResponsesCompactionSession``
over an in-memory ``SQLiteSession``; only its ``responses.compact`` client is a recording fake.
A tool given `approve_reissues` pauses the run for approval when it repeats a post the Runner's
compaction removed from context.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest
from frameworks import require_framework
from opentelemetry.trace import StatusCode
from telemetry_harness import Pipeline, ledger_rows, make_pipeline

from otel_compaction import OpenObligationError, TranscriptError, conversation
from otel_compaction.integrations import openai_agents
from otel_compaction.telemetry import semconv as sc

try:
    from agents import (
        Agent,
        RunConfig,
        Runner,
        SQLiteSession,
        function_tool,
        set_trace_processors,
        set_tracing_disabled,
    )
    from agents.memory import OpenAIResponsesCompactionSession
    from agents_sdk import ScriptedModel, call, text
    from openai import AsyncOpenAI
    from openai.types.responses import ResponseFunctionToolCall

    from otel_compaction.integrations.openai_agents import (
        CompactionGuardSession,
        ObligationTracingProcessor,
        approve_reissues,
        reissue_reason,
    )
except ImportError as missing:
    AGENTS_MISSING: ImportError | None = missing
else:
    AGENTS_MISSING = None

require_framework(AGENTS_MISSING, "the OpenAI Agents SDK (openai-agents)", "agents")

SUMMARY = {"type": "message", "role": "assistant", "content": "Earlier: a deploy of web-7."}


# -- the fake model and the fake compaction endpoint ---------------------------------------------


@dataclass
class CompactEndpoint:
    """``client.responses.compact``: records each request, answers with one summary item."""

    requests: list[dict[str, Any]] = field(default_factory=list)

    async def compact(self, **request: Any) -> Any:
        self.requests.append(request)
        return SimpleNamespace(output=[dict(SUMMARY)], usage=None)


def compaction_session(session_id: str, endpoint: CompactEndpoint) -> Any:
    """The SDK's compaction session over SQLite, compacting whenever the Runner asks."""
    client = cast(AsyncOpenAI, SimpleNamespace(responses=endpoint))
    return OpenAIResponsesCompactionSession(
        session_id,
        SQLiteSession(session_id),
        client=client,
        should_trigger_compaction=lambda context: True,
    )


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(name="pipeline")
def pipeline_fixture(request: pytest.FixtureRequest) -> Iterator[Pipeline]:
    """In-memory telemetry; the obligation processor is the SDK's only trace processor.
    Content capture is on unless a test parametrizes the fixture with False."""
    made = make_pipeline(capture_content=getattr(request, "param", True))
    set_tracing_disabled(False)
    set_trace_processors([ObligationTracingProcessor(made.recorder)])
    yield made
    set_trace_processors([])
    made.shutdown()


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@function_tool
def explode(reason: str) -> str:
    """Fail with `reason`."""
    raise RuntimeError(reason)


# -- the tracing processor ---------------------------------------------------------------------


def test_function_tools_are_obligations_from_span_start_to_end(pipeline: Pipeline) -> None:
    seen_open: list[list[str]] = []

    @function_tool
    def lookup(host: str) -> str:
        """Look a host up."""
        seen_open.append([o.name for o in pipeline.ledger.open_obligations("conv-run")])
        return f"{host} is up"

    model = ScriptedModel(
        [call("c1", "lookup", host="web-7"), call("c2", "explode", reason="disk full")],
        [text("web-7 is up; the other check failed")],
    )
    agent = Agent(name="ops", model=model, tools=[lookup, explode])

    result = asyncio.run(Runner.run(agent, "check", run_config=RunConfig(group_id="conv-run")))

    assert result.final_output == "web-7 is up; the other check failed"
    assert seen_open == [["lookup", "explode"]]  # both parallel calls open while one runs
    rows = ledger_rows(pipeline.ledger, "conv-run")
    assert [(row[0], row[2], row[3], row[5]) for row in rows] == [
        ("tool_call", "lookup", "conv-run", "result"),
        ("tool_call", "explode", "conv-run", "error"),
    ]
    assert all(str(row[1]).startswith("span_") for row in rows)  # keyed by the SDK span id
    assert pipeline.ledger.open_obligations() == ()
    # The model saw both outputs: the tool error reached it as a result, not a crash.
    assert [item.get("call_id") for item in model.inputs[1] if "output" in item] == ["c1", "c2"]

    lookup_call = pipeline.span(f"{sc.EXECUTE_TOOL} lookup")
    lookup_result = pipeline.span(f"{sc.TOOL_RESULT_SPAN} lookup")
    assert dict(lookup_call.attributes or {}) == {
        sc.GEN_AI_OPERATION_NAME: sc.EXECUTE_TOOL,
        sc.GEN_AI_TOOL_NAME: "lookup",
        sc.GEN_AI_TOOL_CALL_ID: rows[0][1],
        sc.GEN_AI_TOOL_TYPE: "function",
        sc.GEN_AI_CONVERSATION_ID: "conv-run",
        sc.GEN_AI_TOOL_CALL_ARGUMENTS: '{"host": "web-7"}',  # set by the SDK once running
        sc.OBLIGATION_STATUS: "result",
    }
    assert (lookup_result.attributes or {})[sc.OBLIGATION_STATUS] == "result"
    assert [link.context.span_id for link in lookup_result.links] == [lookup_call.context.span_id]
    failed_call = pipeline.span(f"{sc.EXECUTE_TOOL} explode")
    failed_result = pipeline.span(f"{sc.TOOL_RESULT_SPAN} explode")
    assert (failed_result.attributes or {})[sc.OBLIGATION_STATUS] == "error"
    assert (failed_result.attributes or {})[sc.ERROR_TYPE] == "Error running tool (non-fatal)"
    assert failed_call.status.status_code == StatusCode.ERROR


def test_run_sync_files_calls_under_the_conversation_scope(pipeline: Pipeline) -> None:
    agent = Agent(
        name="calc", model=ScriptedModel([call("c1", "add", a=2, b=3)], [text("5")]), tools=[add]
    )

    with conversation("conv-sync"):
        result = Runner.run_sync(agent, "2 + 3?")

    assert result.final_output == "5"
    rows = ledger_rows(pipeline.ledger, "conv-sync")
    assert [(row[2], row[5]) for row in rows] == [("add", "result")]
    assert pipeline.ledger.open_obligations() == ()


def test_a_cancelled_run_abandons_its_tool_calls(pipeline: Pipeline) -> None:
    async def cancel_mid_call() -> None:
        started = asyncio.Event()

        @function_tool
        async def migrate() -> str:
            """Run a long migration."""
            started.set()
            await asyncio.sleep(30)
            return "migrated"

        agent = Agent(name="ops", model=ScriptedModel([call("c1", "migrate")]), tools=[migrate])
        run = asyncio.create_task(
            Runner.run(agent, "migrate", run_config=RunConfig(group_id="conv-cancel"))
        )
        await started.wait()
        assert [o.name for o in pipeline.ledger.open_obligations("conv-cancel")] == ["migrate"]
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(cancel_mid_call())

    assert [row[5] for row in ledger_rows(pipeline.ledger, "conv-cancel")] == ["abandoned"]
    abandoned = pipeline.span(f"{sc.TOOL_RESULT_SPAN} migrate")
    assert (abandoned.attributes or {})[sc.ABANDON_REASON] == "cancelled"


# -- tools that need approval -------------------------------------------------------------------


def approval_run(
    pipeline: Pipeline, decide: dict[str, bool], *calls: ResponseFunctionToolCall
) -> tuple[list[Any], list[list[tuple[Any, ...]]], list[str]]:
    """A run whose model calls ``delete_branch`` (which needs approval) with `calls`; at the
    pause each call's approval item is approved or rejected as `decide` says by call id, and
    the run resumed from its state. The interruptions' call ids, the conversation's ledger rows
    at the pause and after the resumed run, and the branches the tool deleted."""
    deleted: list[str] = []

    @function_tool(needs_approval=True)
    def delete_branch(branch: str) -> str:
        """Delete a git branch."""
        deleted.append(branch)
        return f"{branch} deleted"

    model = ScriptedModel(list(calls), [text("done")])
    agent = Agent(name="git", model=model, tools=[delete_branch])
    config = RunConfig(group_id="conv-approve")

    async def scenario() -> tuple[list[Any], list[list[tuple[Any, ...]]]]:
        paused = await Runner.run(agent, "clean up the branches", run_config=config)
        assert paused.final_output is None
        rows = [ledger_rows(pipeline.ledger, "conv-approve")]
        state = paused.to_state()
        for item in paused.interruptions:
            if decide[str(item.call_id)]:
                state.approve(item)
            else:
                state.reject(item)
        resumed = await Runner.run(agent, state, run_config=config)
        assert resumed.final_output == "done"
        rows.append(ledger_rows(pipeline.ledger, "conv-approve"))
        return [item.call_id for item in paused.interruptions], rows

    interrupted, rows = asyncio.run(scenario())
    return interrupted, rows, deleted


def call_spans(pipeline: Pipeline) -> list[tuple[Any, ...]]:
    """Each ``execute_tool delete_branch`` span: its call id, arguments and status."""
    return sorted(
        (
            str((s.attributes or {})[sc.GEN_AI_TOOL_CALL_ID]),
            (s.attributes or {}).get(sc.GEN_AI_TOOL_CALL_ARGUMENTS),
            (s.attributes or {}).get(sc.OBLIGATION_STATUS),
        )
        for s in pipeline.spans(f"{sc.EXECUTE_TOOL} delete_branch")
    )


def test_a_call_waiting_for_approval_stays_open_and_resolves_when_it_runs(
    pipeline: Pipeline,
) -> None:
    interrupted, (paused, resumed), deleted = approval_run(
        pipeline, {"c1": True}, call("c1", "delete_branch", branch="release-7")
    )

    assert interrupted == ["c1"]
    # The run paused with the tool not run: its call is open, not resolved as a result.
    [(kind, span_id, name, conversation, _, status)] = paused
    assert (kind, name, conversation, status) == (
        "tool_call",
        "delete_branch",
        "conv-approve",
        None,
    )
    # Approved, the tool ran in a new function span, which took the same call: one obligation,
    # one call span and one result span.
    assert deleted == ["release-7"]
    assert resumed == [(kind, span_id, name, conversation, 0, "result")]
    assert pipeline.ledger.open_obligations() == ()
    assert call_spans(pipeline) == [(span_id, '{"branch": "release-7"}', "result")]
    [outcome] = pipeline.spans(f"{sc.TOOL_RESULT_SPAN} delete_branch")
    assert (outcome.attributes or {})[sc.OBLIGATION_STATUS] == "result"


def test_a_rejected_call_is_resolved_as_an_error_and_never_runs(pipeline: Pipeline) -> None:
    interrupted, (paused, resumed), deleted = approval_run(
        pipeline, {"c1": False}, call("c1", "delete_branch", branch="release-7")
    )

    assert interrupted == ["c1"]
    assert [row[5] for row in paused] == [None]
    assert deleted == []
    assert [row[1:] for row in resumed] == [
        (paused[0][1], "delete_branch", "conv-approve", 0, "error")
    ]
    assert pipeline.ledger.open_obligations() == ()
    assert [status for _, _, status in call_spans(pipeline)] == ["error"]
    [outcome] = pipeline.spans(f"{sc.TOOL_RESULT_SPAN} delete_branch")
    assert (outcome.attributes or {})[sc.ERROR_TYPE] == "rejected"


def test_a_call_the_sdk_rejects_at_once_is_resolved_as_rejected(pipeline: Pipeline) -> None:
    # Rejected for good at the pause, the tool's next call is rejected by the SDK in its span,
    # with the rejection's text as the span's error: that text is content, not an error type.
    deleted: list[str] = []

    @function_tool(needs_approval=True)
    def delete_branch(branch: str) -> str:
        """Delete a git branch."""
        deleted.append(branch)
        return f"{branch} deleted"

    model = ScriptedModel(
        [call("c1", "delete_branch", branch="main")],
        [call("c2", "delete_branch", branch="release-7")],
        [text("done")],
    )
    agent = Agent(name="git", model=model, tools=[delete_branch])
    config = RunConfig(group_id="conv-never")

    async def scenario() -> None:
        paused = await Runner.run(agent, "clean up", run_config=config)
        state = paused.to_state()
        [item] = paused.interruptions
        state.reject(item, always_reject=True, rejection_message="Never delete DO-NOT-LEAK.")
        assert (await Runner.run(agent, state, run_config=config)).final_output == "done"

    asyncio.run(scenario())

    assert deleted == []
    assert [(row[4], row[5]) for row in ledger_rows(pipeline.ledger, "conv-never")] == [
        (0, "error"),
        (1, "error"),
    ]
    outcomes = pipeline.spans(f"{sc.TOOL_RESULT_SPAN} delete_branch")
    assert [(s.attributes or {})[sc.ERROR_TYPE] for s in outcomes] == ["rejected", "rejected"]


def test_parallel_calls_waiting_for_approval_keep_their_own_obligations(
    pipeline: Pipeline,
) -> None:
    # The resumed run's function span takes the oldest waiting call of its tool, then the
    # SDK's approval step names the model's call: the approved second call is the one that ran.
    interrupted, (paused, resumed), deleted = approval_run(
        pipeline,
        {"c1": False, "c2": True},
        call("c1", "delete_branch", branch="main"),
        call("c2", "delete_branch", branch="release-7"),
    )

    assert interrupted == ["c1", "c2"]
    assert [row[5] for row in paused] == [None, None]
    assert deleted == ["release-7"]
    assert [(row[4], row[5]) for row in resumed] == [(0, "error"), (1, "result")]
    first, second = paused[0][1], paused[1][1]
    assert call_spans(pipeline) == sorted(
        [(first, '{"branch": "main"}', "error"), (second, '{"branch": "release-7"}', "result")]
    )


def test_instrument_registers_one_processor_and_uninstrument_removes_it() -> None:
    pipeline = make_pipeline()
    set_tracing_disabled(False)
    set_trace_processors([])

    def run(group: str) -> None:
        model = ScriptedModel([call("c1", "add", a=1, b=1)], [text("2")])
        agent = Agent(name="calc", model=model, tools=[add])
        Runner.run_sync(agent, "1 + 1?", run_config=RunConfig(group_id=group))

    try:
        assert openai_agents.instrument(pipeline.telemetry)
        assert openai_agents.instrument(pipeline.telemetry)
        assert openai_agents.is_instrumented()
        run("once")
        assert [row[5] for row in ledger_rows(pipeline.ledger, "once")] == ["result"]

        openai_agents.uninstrument()
        assert not openai_agents.is_instrumented()
        run("off")
        assert ledger_rows(pipeline.ledger, "off") == []

        assert openai_agents.instrument(pipeline.telemetry)
        run("again")
        assert [row[5] for row in ledger_rows(pipeline.ledger, "again")] == ["result"]
    finally:
        openai_agents.uninstrument()
        set_trace_processors([])
        pipeline.shutdown()


# -- the compaction guard ----------------------------------------------------------------------


def decisions(pipeline: Pipeline) -> list[tuple[Any, list[str], tuple[str, ...]]]:
    """Each recorded gate decision: action, event names, obligation ids of its last event."""
    found = []
    for span in pipeline.spans(sc.EVALUATE_SPAN):
        events = list(span.events)
        ids: Any = (events[-1].attributes or {}).get(sc.OBLIGATION_IDS, ()) if events else ()
        action = (span.attributes or {})[sc.ACTION]
        found.append((action, [e.name for e in events], tuple(str(i) for i in ids)))
    return found


def test_the_guard_defers_while_a_tool_call_runs_and_compacts_once_it_resolved(
    pipeline: Pipeline,
) -> None:
    endpoint = CompactEndpoint()
    inner = compaction_session("chat-7", endpoint)
    guarded = CompactionGuardSession(inner, pipeline.telemetry.gate("default"))

    async def scenario() -> tuple[list[Any], list[Any]]:
        started, release = asyncio.Event(), asyncio.Event()

        @function_tool
        async def deploy(service: str) -> str:
            """Deploy a service."""
            started.set()
            await release.wait()
            return f"{service} deployed"

        model = ScriptedModel([call("c1", "deploy", service="web-7")], [text("web-7 deployed")])
        agent = Agent(name="ops", model=model, tools=[deploy])
        run = asyncio.create_task(
            Runner.run(
                agent, "deploy web-7", session=guarded, run_config=RunConfig(group_id="chat-7")
            )
        )
        await started.wait()
        # Mid-call: something (a context-budget monitor) asks the session to compact.
        await guarded.run_compaction({"force": True})
        held = await guarded.get_items()
        release.set()
        await run
        before = await guarded.get_items()
        await guarded.run_compaction({"force": True})
        return held, before

    held, before = asyncio.run(scenario())

    in_flight = pipeline.ledger.snapshot("chat-7").obligations[0]
    assert held == [{"content": "deploy web-7", "role": "user"}]  # untouched
    assert guarded.deferrals == 1
    assert guarded.compactions == 1
    assert decisions(pipeline) == [
        ("defer", [sc.EVENT_DEFERRED], (in_flight.id,)),
        ("compact", [sc.EVENT_COMPACTED], ()),
    ]
    assert [item.get("type") for item in before] == [
        None,
        "function_call",
        "function_call_output",
        "message",
    ]
    assert len(endpoint.requests) == 1  # the deferred compaction never reached the endpoint
    assert endpoint.requests[0]["input"][1]["call_id"] == "c1"
    assert asyncio.run(guarded.get_items()) == [SUMMARY]


def test_the_runners_own_compaction_passes_through_the_guard(pipeline: Pipeline) -> None:
    endpoint = CompactEndpoint()
    guarded = CompactionGuardSession(
        compaction_session("chat-8", endpoint), pipeline.telemetry.gate("default")
    )
    model = ScriptedModel([call("c1", "add", a=4, b=5)], [text("9")], response_ids=True)
    agent = Agent(name="calc", model=model, tools=[add])

    result = asyncio.run(
        Runner.run(agent, "4 + 5?", session=guarded, run_config=RunConfig(group_id="chat-8"))
    )

    assert result.final_output == "9"
    assert guarded.compactions == 1
    assert guarded.deferrals == 0
    assert endpoint.requests == [{"model": "gpt-4.1", "previous_response_id": "resp_2"}]
    assert asyncio.run(guarded.get_items()) == [SUMMARY]


def test_the_runners_compaction_is_deferred_while_a_background_job_is_open(
    pipeline: Pipeline,
) -> None:
    endpoint = CompactEndpoint()
    guarded = CompactionGuardSession(
        compaction_session("chat-9", endpoint), pipeline.telemetry.gate("default")
    )
    jobs = []

    @function_tool
    def start_export(table: str) -> str:
        """Start exporting a table; the export finishes later."""
        jobs.append(pipeline.recorder.call("export", "job-1", conversation_id="chat-9"))
        return f"export of {table} started as job-1"

    model = ScriptedModel(
        [call("c1", "start_export", table="orders")], [text("started job-1")], response_ids=True
    )
    agent = Agent(name="ops", model=model, tools=[start_export])

    asyncio.run(
        Runner.run(agent, "export", session=guarded, run_config=RunConfig(group_id="chat-9"))
    )

    assert guarded.deferrals == 1
    assert endpoint.requests == []
    assert guarded.last_decision is not None
    assert [(ref.kind, ref.id) for ref in guarded.last_decision.obligations] == [
        ("tool_call", "job-1")
    ]
    assert len(asyncio.run(guarded.get_items())) == 4  # user, call, output, answer: verbatim

    jobs[0].result("orders.csv written")
    asyncio.run(guarded.run_compaction({"force": True}))

    assert guarded.compactions == 1
    assert len(endpoint.requests) == 1
    assert asyncio.run(guarded.get_items()) == [SUMMARY]


@pytest.mark.parametrize("on_open", ["defer", "refuse"])
def test_a_stored_call_without_output_defers_or_refuses(pipeline: Pipeline, on_open: str) -> None:
    endpoint = CompactEndpoint()
    inner = compaction_session("chat-10", endpoint)
    guarded = CompactionGuardSession(
        inner,
        pipeline.telemetry.gate("default"),
        on_open="refuse" if on_open == "refuse" else "defer",
    )
    # The state mid-call, constructed: the call is stored, its result is not there yet.
    mid_call = [
        {"role": "user", "content": "what is the status of order 1182?"},
        call("c9", "order_status", order=1182).model_dump(exclude_none=True),
    ]
    asyncio.run(guarded.add_items(mid_call))
    handle = pipeline.recorder.call("order_status", "c9", conversation_id="chat-10")

    if on_open == "refuse":
        with pytest.raises(OpenObligationError) as refused:
            asyncio.run(guarded.run_compaction({"force": True}))
        assert [(ref.kind, ref.id, ref.message_index) for ref in refused.value.obligations] == [
            ("tool_call", "c9", 1)
        ]
        assert decisions(pipeline) == [("refuse", [sc.EVENT_REFUSED], ("c9",))]
    else:
        asyncio.run(guarded.run_compaction({"force": True}))
        assert guarded.deferrals == 1
        assert decisions(pipeline) == [("defer", [sc.EVENT_DEFERRED], ("c9",))]
    assert endpoint.requests == []
    assert asyncio.run(guarded.get_items()) == mid_call

    handle.result("shipped")
    asyncio.run(
        guarded.add_items([{"type": "function_call_output", "call_id": "c9", "output": "shipped"}])
    )
    asyncio.run(guarded.run_compaction({"force": True}))
    assert guarded.compactions == 1
    assert asyncio.run(guarded.get_items()) == [SUMMARY]


def test_an_unreadable_history_is_held_not_compacted(
    pipeline: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = CompactEndpoint()
    guarded = CompactionGuardSession(
        compaction_session("chat-11", endpoint), pipeline.telemetry.gate("default")
    )
    unreadable = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": 7, "name": "x"},
    ]
    asyncio.run(guarded.add_items(unreadable))

    with pytest.raises(TranscriptError, match="message 1: function_call has an id of type int"):
        asyncio.run(guarded.evaluate())
    asyncio.run(guarded.run_compaction({"force": True}))  # the Runner's call must not fail

    assert guarded.deferrals == 1
    assert endpoint.requests == []
    assert asyncio.run(guarded.get_items()) == unreadable
    assert "session chat-11: compaction deferred" in caplog.text


def test_the_guard_needs_a_session_that_compacts(pipeline: Pipeline) -> None:
    with pytest.raises(TypeError, match="SQLiteSession has no run_compaction"):
        CompactionGuardSession(SQLiteSession("plain"), pipeline.telemetry.gate("default"))


# -- the re-issue approval -----------------------------------------------------------------------

POSTS = "chat-post"


def _scenario(pipeline: Pipeline, second: str) -> tuple[list[str | None], list[str]]:
    """Post "web-7 is deployed", let the Runner compact, then post `second`, rejecting any
    interruption: the interruptions' reasons and what the tool posted."""
    posted: list[str] = []

    @function_tool
    def post_message(channel: str, text: str) -> str:
        """Post a message to a channel."""
        posted.append(text)
        return f"posted to #{channel}"

    guarded_tool = approve_reissues(post_message, pipeline.recorder)
    assert post_message.needs_approval is False  # the tool given is left as it was
    session = CompactionGuardSession(
        compaction_session(POSTS, CompactEndpoint()),
        pipeline.telemetry.gate(),
        recorder=pipeline.recorder,
    )
    model = ScriptedModel(
        [call("c1", "post_message", channel="ops", text="web-7 is deployed")],
        [text("Posted.")],
        [call("c2", "post_message", channel="ops", text=second)],
        [text("Done.")],
        response_ids=True,  # the Runner compacts after a turn with a response id
    )
    agent = Agent(name="ops", model=model, tools=[guarded_tool])
    config = RunConfig(group_id=POSTS)

    async def run() -> list[str | None]:
        await Runner.run(agent, "Tell #ops web-7 is deployed.", session=session, run_config=config)
        assert await session.get_items() == [SUMMARY]  # the Runner compacted the post away
        result = await Runner.run(agent, "Did the team hear?", session=session, run_config=config)
        reasons = [reissue_reason(i, pipeline.recorder, conversation_id=POSTS)
                   for i in result.interruptions]  # fmt: skip
        if result.interruptions:
            state = result.to_state()
            for item in result.interruptions:
                state.reject(item)
            result = await Runner.run(agent, state, session=session, run_config=config)
        assert result.final_output == "Done."
        return reasons

    return asyncio.run(run()), posted


@pytest.mark.parametrize("pipeline", [False], indirect=True)  # no content capture needed
def test_the_same_post_after_compaction_waits_for_approval(pipeline: Pipeline) -> None:
    reasons, posted = _scenario(pipeline, "web-7 is deployed")

    [reason] = reasons
    assert reason is not None
    assert reason.startswith("otel-compaction: this call repeats post_message `")
    assert "(call c1), which already ran at " in reason
    assert reason.endswith(
        "before the last compaction, with outcome success: posted to #ops. A compaction "
        "removed it from the agent's context: approve only if it is to run again."
    )
    assert posted == ["web-7 is deployed"]  # rejected: the repeat never ran


def test_another_post_after_compaction_runs_without_approval(pipeline: Pipeline) -> None:
    reasons, posted = _scenario(pipeline, "web-8 is next")

    assert reasons == []
    assert posted == ["web-7 is deployed", "web-8 is next"]
