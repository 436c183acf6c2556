"""Passive detection and conversation identity, as pure functions over transcripts and ledgers.

Severed calls, orphaned results and duplicate calls in all three transcript formats, each
reported once; a request shorter than the previous one as a compaction seen; resolution pairing
with reused ids; what is not judged when the provider keeps the history; the documented
derivation of conversation ids and the order of its sources; and the tolerant reading of
requests (SDK objects, iterators, unreadable messages).
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import baggage
from opentelemetry import context as otel_context
from pydantic import BaseModel

from otel_compaction import conversation
from otel_compaction.instrumentation._requests import parse_transcript, plain_messages
from otel_compaction.instrumentation.conversation import (
    ConversationIndex,
    Identity,
    derived_id,
    first_texts,
)
from otel_compaction.instrumentation.detection import (
    ConversationState,
    Duplicate,
    EmittedCall,
    Orphan,
    RequestFindings,
    Resolution,
    Severed,
    check_request,
    check_response,
    fingerprint,
)
from otel_compaction.ledger import ObligationLedger
from otel_compaction.telemetry import semconv as sc
from otel_compaction.transcript import Transcript

CONV = "conv-1"


def chat_call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }


def chat_result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": call_id, "name": name, "input": arguments}],
    }


def tool_result(call_id: str, text: str, *, error: bool = False) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": error}
        ],
    }


def function_call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def function_output(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


USER = {"role": "user", "content": "deploy the api"}
SUMMARY = {"role": "assistant", "content": "Summary: deploying."}


def ledger_with(*calls: tuple[str, str]) -> ObligationLedger:
    ledger = ObligationLedger()
    for call_id, name in calls:
        ledger.open(CONV, "tool_call", call_id, name=name)
    return ledger


def check(
    messages: list[dict[str, Any]],
    ledger: ObligationLedger,
    state: ConversationState | None = None,
    *,
    full_history: bool = True,
) -> RequestFindings:
    return check_request(
        Transcript.parse(messages),
        ledger.open_obligations(CONV),
        state if state is not None else ConversationState(),
        full_history=full_history,
    )


# -- resolutions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "result"),
    [
        (chat_call("c1", "deploy"), chat_result("c1", "done")),
        (tool_use("c1", "deploy", {}), tool_result("c1", "done")),
        (function_call("c1", "deploy"), function_output("c1", "done")),
    ],
    ids=["openai_chat", "anthropic", "openai_responses"],
)
def test_a_result_resolves_its_open_call_in_every_format(
    call: dict[str, Any], result: dict[str, Any]
) -> None:
    findings = check([USER, call, result], ledger_with(("c1", "deploy")))
    assert findings == RequestFindings(resolutions=(Resolution("c1", "result", "done", 2),))


def test_an_error_result_resolves_as_an_error() -> None:
    messages = [USER, tool_use("c1", "deploy", {}), tool_result("c1", "denied", error=True)]
    findings = check(messages, ledger_with(("c1", "deploy")))
    assert findings.resolutions == (Resolution("c1", "error", "denied", 2),)


def test_a_reused_id_resolves_only_its_latest_call() -> None:
    ledger = ledger_with(("call_0", "search"))
    ledger.resolve(CONV, "call_0")
    ledger.open(CONV, "tool_call", "call_0", name="fetch")  # the id is used again
    old_pair = [chat_call("call_0", "search"), chat_result("call_0", "found")]

    waiting = check([USER, *old_pair, chat_call("call_0", "fetch")], ledger)
    answered = check(
        [USER, *old_pair, chat_call("call_0", "fetch"), chat_result("call_0", "page")], ledger
    )

    assert waiting == RequestFindings()  # the old result answers the old call only
    assert answered.resolutions == (Resolution("call_0", "result", "page", 4),)


def test_results_of_calls_already_resolved_are_history() -> None:
    ledger = ledger_with(("c1", "deploy"))
    ledger.resolve(CONV, "c1")
    findings = check([USER, chat_call("c1", "deploy"), chat_result("c1", "done")], ledger)
    assert findings == RequestFindings()


# -- severed and orphaned ------------------------------------------------------------------------


def test_an_open_call_missing_from_the_request_is_severed_once() -> None:
    ledger = ledger_with(("c1", "deploy"), ("c2", "notify"))
    state = ConversationState()
    compacted = [USER, SUMMARY, chat_call("c2", "notify")]

    first = check(compacted, ledger, state)
    again = check(compacted, ledger, state)

    [record] = [o for o in ledger.snapshot(CONV).obligations if o.id == "c1"]
    assert first == RequestFindings(severed=(Severed("c1", "deploy", record.sequence),))
    assert again == RequestFindings()
    assert [o.id for o in ledger.open_obligations(CONV)] == ["c1", "c2"]  # still owed


def test_a_result_whose_call_is_gone_is_orphaned_and_still_resolves() -> None:
    ledger = ledger_with(("c1", "deploy"))
    state = ConversationState()
    messages = [USER, SUMMARY, tool_result("c1", "deployed")]

    first = check(messages, ledger, state)
    ledger.resolve(CONV, "c1")
    again = check(messages, ledger, state)

    assert first == RequestFindings(
        resolutions=(Resolution("c1", "result", "deployed", 2),),
        orphans=(Orphan("c1", "deploy", 2),),
    )
    assert again == RequestFindings()


def test_an_orphan_the_ledger_never_knew_has_no_tool_name() -> None:
    findings = check([USER, function_output("c9", "ok")], ObligationLedger())
    assert findings == RequestFindings(orphans=(Orphan("c9", "", 1),))


def test_without_the_whole_history_nothing_is_severed_or_orphaned() -> None:
    ledger = ledger_with(("c1", "deploy"), ("c2", "notify"))
    findings = check([function_output("c1", "ok")], ledger, full_history=False)
    assert findings == RequestFindings(resolutions=(Resolution("c1", "result", "ok", 0),))


def test_placeholder_ids_of_the_span_processor_are_never_severed() -> None:
    ledger = ledger_with(("span:00000000000000ab", "execute_tool"))
    assert check([USER], ledger) == RequestFindings()


# -- compaction seen -----------------------------------------------------------------------------


def test_a_request_shorter_than_the_previous_one_shows_a_compaction_once() -> None:
    ledger = ObligationLedger()
    state = ConversationState()
    turns = [USER, chat_call("c1", "deploy"), chat_result("c1", "done")]
    reply = {"role": "assistant", "content": "Deployed."}

    grown = [check(turns[:n], ledger, state).compacted for n in (1, 2, 3)]
    cut = check([USER, SUMMARY], ledger, state)  # a summary in place of the call and result
    after = check([USER, SUMMARY, reply], ledger, state)
    edited = check([USER, reply, reply], ledger, state)  # as long as before: not seen

    assert grown == [False, False, False]
    assert cut == RequestFindings(compacted=True)
    assert (after.compacted, edited.compacted) == (False, False)


def test_without_the_whole_history_a_shorter_request_is_no_compaction() -> None:
    ledger = ObligationLedger()
    state = ConversationState()
    check([USER, SUMMARY], ledger, state, full_history=False)
    assert check([USER], ledger, state, full_history=False) == RequestFindings()


# -- duplicates ----------------------------------------------------------------------------------


def test_a_call_repeating_a_resolved_call_is_a_duplicate() -> None:
    state = ConversationState()
    history = [USER, chat_call("c1", "restart", '{"service": "api", "mode": "rolling"}')]
    check([*history, chat_result("c1", "restarted")], ledger_with(("c1", "restart")), state)

    findings = check_response(
        [
            EmittedCall("c2", "restart", {"mode": "rolling", "service": "api"}),
            EmittedCall("c3", "restart", '{"service": "db"}'),
            EmittedCall("c4", "status", '{"service": "api", "mode": "rolling"}'),
        ],
        state,
    )

    assert findings == (Duplicate("c2", "restart", "c1"),)


def test_a_call_still_open_is_not_yet_a_duplicate_target() -> None:
    state = ConversationState()
    assert check_response([EmittedCall("c1", "restart", "{}")], state) == ()
    assert check_response([EmittedCall("c2", "restart", "{}")], state) == ()


def test_a_call_resolved_through_an_orphaned_result_counts_as_resolved() -> None:
    state = ConversationState()
    ledger = ledger_with(("c1", "restart"))
    check_response([EmittedCall("c1", "restart", '{"s": 1}')], state)
    check([USER, SUMMARY, chat_result("c1", "ok")], ledger, state)  # its call was cut
    assert check_response([EmittedCall("c2", "restart", '{"s":1}')], state) == (
        Duplicate("c2", "restart", "c1"),
    )


def test_fingerprints_compare_canonical_json() -> None:
    assert fingerprint("f", '{"b": 1, "a": [1, 2]}') == fingerprint("f", {"a": [1, 2], "b": 1})
    assert fingerprint("f", "{}") != fingerprint("g", "{}")
    assert fingerprint("f", "not json") == fingerprint("f", "not json")
    assert fingerprint("f", "not json") != fingerprint("f", "not json ")


def test_state_is_bounded() -> None:
    state = ConversationState(limit=3)
    for n in range(10):
        check_response([EmittedCall(f"c{n}", "f", {"n": n})], state)
    assert list(state.pending.items) == ["c7", "c8", "c9"]


# -- conversation identity -----------------------------------------------------------------------


def test_the_derived_id_is_documented_and_stable() -> None:
    import hashlib

    digest = hashlib.sha256(b"You book flights.\x00Oslo on Friday").hexdigest()
    assert derived_id("You book flights.", "Oslo on Friday") == "derived:" + digest[:16]
    assert derived_id("You book flights.", "Oslo on Friday") == "derived:dcf0bded37e0a967"


def test_first_texts_read_instructions_and_the_first_user_message_in_any_format() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image"}]},
        {"role": "user", "content": "later"},
    ]
    assert first_texts(messages) == ("Be brief.", "Hi")
    assert first_texts([]) == ("", "")


def test_identity_sources_in_their_documented_order() -> None:
    index = ConversationIndex()
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    derived = derived_id("S", "U")

    assert index.identify(messages, None) == Identity(derived, "derived")
    token = otel_context.attach(baggage.set_baggage(sc.GEN_AI_CONVERSATION_ID, "from-baggage"))
    try:
        assert index.identify(messages, None) == Identity("from-baggage", "baggage")
        with conversation("explicit-1"):
            assert index.identify(messages, None) == Identity("explicit-1", "explicit")
    finally:
        otel_context.detach(token)
    assert index.identify(messages, None, provider_conversation="conv_9") == Identity(
        "conv_9", "provider"
    )
    index.remember(derived, ["call_1"], "resp_1")
    assert index.identify([], None, previous_response_id="resp_1") == Identity(derived, "provider")
    unseen = index.identify([], None, previous_response_id="resp_unseen")
    assert unseen == Identity(derived_id("", "resp_unseen"), "derived")


def test_a_rewritten_conversation_continues_through_its_call_ids() -> None:
    index = ConversationIndex()
    original = [{"role": "user", "content": "U"}, chat_call("call_1", "f")]
    first = index.identify(original, Transcript.parse(original))
    index.remember(first.id, ["call_1"])
    rewritten = [{"role": "user", "content": "Summary"}, chat_call("call_1", "f")]

    assert index.identify(rewritten, Transcript.parse(rewritten)) == Identity(first.id, "continued")
    assert index.identify(rewritten, None) == Identity(first.id, "continued")  # remembered
    fresh = [{"role": "user", "content": "Something else"}]
    assert index.identify(fresh, Transcript.parse(fresh)).source == "derived"


# -- reading requests ----------------------------------------------------------------------------


class _Block(BaseModel):
    type: str
    id: str
    name: str
    input: dict[str, Any]


def test_sdk_objects_in_requests_are_read_as_dicts_without_touching_the_caller() -> None:
    block = _Block(type="tool_use", id="toolu_1", name="f", input={"a": 1})
    messages = [USER, {"role": "assistant", "content": (block,)}]
    snapshot = repr(messages)

    plain = plain_messages(messages, instructions="Be brief.")

    assert plain == [
        {"role": "system", "content": "Be brief."},
        USER,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}],
        },
    ]
    assert repr(messages) == snapshot
    assert plain_messages("just text") == [{"role": "user", "content": "just text"}]
    assert plain_messages(iter(messages)) is None  # an iterator is the SDK's to consume


def test_unreadable_messages_are_skipped_not_fatal() -> None:
    messages = [USER, {"role": "tool"}, {"shape": "unknown"}, chat_call("c1", "f")]
    transcript = parse_transcript(messages)
    assert transcript is not None
    assert [(c.id, c.message_index) for c in transcript.calls] == [("c1", 3)]
    assert parse_transcript(None) is None
