"""`ModelSummarizer` with the real ``openai`` and ``anthropic`` clients, against a fake server.

What the model is sent is asserted exactly, by parsing the recorded request body: the model
name, ``max_tokens``, the instructions as the system prompt, and the `SummaryRequest` as JSON
in the user message (pending obligations, identifiers, negatives, the archive handle, and on a
retry what the previous summary missed). The model's text comes back unchanged; an empty
answer is a ValueError naming provider and model; a client that is not a synchronous OpenAI or
Anthropic client is a TypeError. End to end, `GuardedCompactor` retries a summary that dropped
a must-carry identifier, naming it to the model.

The tests skip when ``openai`` or ``anthropic`` cannot be imported, and fail instead when the
``CI`` environment variable is ``true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from fake_llm_server import (
    Api,
    FakeLLMServer,
    RawReply,
    RecordedRequest,
    ToolCall,
)
from llm_clients import (
    API_KEY,
    anthropic_client,
    openai_client,
)

from otel_compaction import Archive, GuardedCompactor, ModelSummarizer
from otel_compaction.analysis import Negative
from otel_compaction.rules import ObligationRef
from otel_compaction.summarizers import SummaryRequest

with contextlib.suppress(ImportError):  # every test skips (or fails under CI) without them
    import anthropic
    import openai

pytestmark = pytest.mark.usefixtures("sdks")

Provider = Literal["openai", "anthropic"]
PROVIDERS: tuple[Provider, ...] = ("openai", "anthropic")
API_OF: dict[Provider, Api] = {"openai": "chat", "anthropic": "messages"}
MODEL_OF: dict[Provider, str] = {"openai": "gpt-summary-test", "anthropic": "claude-summary-test"}


@pytest.fixture(name="clients")
def clients_fixture(fake_llm_server: FakeLLMServer) -> Iterator[dict[Provider, Any]]:
    """Real sync clients of both providers pointed at the fake server, closed after the test."""
    with openai_client(fake_llm_server) as gpt, anthropic_client(fake_llm_server) as claude:
        yield {"openai": gpt, "anthropic": claude}


def user_payload(request: RecordedRequest) -> dict[str, Any]:
    """The structured JSON the summarizer sent as its (only) user message."""
    [message] = [m for m in request.json["messages"] if m["role"] == "user"]
    payload = json.loads(message["content"])
    assert isinstance(payload, dict)
    return payload


# --------------------------------------------------------------------------
# The request, exactly
# --------------------------------------------------------------------------

SPAN_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "Book Oslo for mia_li_3668 and charge the card."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_search_1",
                "type": "function",
                "function": {"name": "search_flights", "arguments": '{"day":"Friday"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_search_1", "content": "No flights found on Friday."},
    {"role": "assistant", "content": "SK4417 flies Saturday; charging the card — ünïcode ok."},
]
REQUEST = SummaryRequest(
    messages=SPAN_MESSAGES,
    span=(2, 6),
    pending=(ObligationRef("tool_call", "call_pay_7", 5, "charge_card"),),
    identifiers=("SK4417", "mia_li_3668"),
    negatives=(Negative(4, "call_search_1", "search_flights", "No flights found on Friday."),),
    archive_handle="arch_0f3a9c",
    missing=("identifier 'SK4417' must appear verbatim",),
)
EXPECTED_PAYLOAD: dict[str, Any] = {
    "span": {"first_message": 2, "last_message": 5},
    "archive_handle": "arch_0f3a9c",
    "pending_obligations": [{"kind": "tool_call", "id": "call_pay_7", "name": "charge_card"}],
    "identifiers_to_keep_verbatim": ["SK4417", "mia_li_3668"],
    "abandoned_calls": [],
    "negative_results_to_state": [
        {
            "tool": "search_flights",
            "call_id": "call_search_1",
            "result": "No flights found on Friday.",
        }
    ],
    "previous_summary_was_missing": ["identifier 'SK4417' must appear verbatim"],
    "messages": SPAN_MESSAGES,
}
SUMMARY = (
    "[Summary 2..5] search_flights (call_search_1): no flights on Friday.\n"
    "SK4417 flies Saturday for mia_li_3668. Still pending, NOT done: charge_card (call_pay_7).\n"
    "Original: arch_0f3a9c — ünïcode kept."
)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_request_carries_model_limits_instructions_and_structured_json(
    fake_llm_server: FakeLLMServer, clients: dict[Provider, Any], provider: Provider
) -> None:
    """The whole request body is exactly what the provider's API expects, and the model's
    text is returned unchanged."""
    api, model = API_OF[provider], MODEL_OF[provider]
    fake_llm_server.enqueue(api, SUMMARY)
    summarizer = ModelSummarizer(
        clients[provider], model=model, max_tokens=321, instructions="Summarize faithfully."
    )
    assert summarizer.provider == provider

    assert summarizer.summarize(REQUEST) == SUMMARY

    request = fake_llm_server.last(api)
    body = request.json
    content = body["messages"][-1]["content"]
    assert json.loads(content) == EXPECTED_PAYLOAD
    assert "ünïcode" in content  # sent as UTF-8, not \\u-escaped
    if provider == "openai":
        assert request.path == "/v1/chat/completions"
        assert body == {
            "model": model,
            "max_tokens": 321,
            "messages": [
                {"role": "system", "content": "Summarize faithfully."},
                {"role": "user", "content": content},
            ],
        }
    else:
        assert request.path == "/v1/messages"
        assert body == {
            "model": model,
            "max_tokens": 321,
            "system": "Summarize faithfully.",
            "messages": [{"role": "user", "content": content}],
        }
    assert len(fake_llm_server.requests) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_default_instructions_are_the_system_prompt(
    fake_llm_server: FakeLLMServer, clients: dict[Provider, Any], provider: Provider
) -> None:
    """By default the system prompt states the carrying rules, naming every JSON key the
    model must act on; a first request says nothing was missing."""
    api = API_OF[provider]
    fake_llm_server.enqueue(api, "summary")
    summarizer = ModelSummarizer(clients[provider], model=MODEL_OF[provider])
    first_try = SummaryRequest(messages=SPAN_MESSAGES, span=(0, 4))

    assert summarizer.summarize(first_try) == "summary"

    body = fake_llm_server.last(api).json
    system = body["messages"][0]["content"] if provider == "openai" else body["system"]
    assert system == summarizer.instructions
    for key in (
        "identifiers_to_keep_verbatim",
        "negative_results_to_state",
        "pending_obligations",
        "abandoned_calls",
        "archive_handle",
        "previous_summary_was_missing",
    ):
        assert key in system
    assert body["max_tokens"] == 1024
    assert user_payload(fake_llm_server.last(api)) == {
        "span": {"first_message": 0, "last_message": 3},
        "archive_handle": None,
        "pending_obligations": [],
        "identifiers_to_keep_verbatim": [],
        "abandoned_calls": [],
        "negative_results_to_state": [],
        "previous_summary_was_missing": [],
        "messages": SPAN_MESSAGES,
    }


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------

EMPTY_CHOICES = {
    "id": "chatcmpl-empty",
    "object": "chat.completion",
    "created": 1,
    "model": MODEL_OF["openai"],
    "choices": [],
}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("answer", ["empty", "whitespace", "tool_call_only", "no_choices"])
def test_empty_answer_is_a_value_error_naming_provider_and_model(
    fake_llm_server: FakeLLMServer, clients: dict[Provider, Any], provider: Provider, answer: str
) -> None:
    """No summary text, however the model says nothing, raises ValueError."""
    api, model = API_OF[provider], MODEL_OF[provider]
    if answer == "empty":
        fake_llm_server.enqueue(api, "")
    elif answer == "whitespace":
        fake_llm_server.enqueue(api, " \n\t ")
    elif answer == "tool_call_only":
        fake_llm_server.enqueue(api, tool_calls=[ToolCall("recall_archived_span", {"h": "x"})])
    elif provider == "openai":
        fake_llm_server.enqueue_reply(api, RawReply(EMPTY_CHOICES))
    else:  # Anthropic's counterpart: a message with no content blocks
        fake_llm_server.enqueue(api)
    summarizer = ModelSummarizer(clients[provider], model=model)

    with pytest.raises(ValueError, match=f"the {provider} model '{model}' returned no summary"):
        summarizer.summarize(REQUEST)
    assert len(fake_llm_server.requests_to(api)) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_api_errors_propagate(
    fake_llm_server: FakeLLMServer, clients: dict[Provider, Any], provider: Provider
) -> None:
    """A provider error is the SDK's own exception, not swallowed or retried."""
    api = API_OF[provider]
    fake_llm_server.enqueue_error(api, 400, "max_tokens too large", type="invalid_request_error")
    summarizer = ModelSummarizer(clients[provider], model=MODEL_OF[provider])
    error = openai.BadRequestError if provider == "openai" else anthropic.BadRequestError
    with pytest.raises(error, match="max_tokens too large"):
        summarizer.summarize(REQUEST)
    assert len(fake_llm_server.requests) == 1


class _ChatOnly:
    """Has ``chat`` but no ``completions.create``: not a client."""

    chat = object()


@pytest.mark.parametrize(
    "client",
    [None, "gpt-4o-mini", 42, object(), _ChatOnly()],
    ids=["none", "model-name", "int", "object", "chat-without-completions"],
)
def test_wrong_client_type_is_a_type_error(client: object) -> None:
    """Anything but an OpenAI-compatible or Anthropic client is refused at construction."""
    with pytest.raises(TypeError, match=f"got {type(client).__name__}$"):
        ModelSummarizer(client, model="m")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_async_client_is_a_type_error(fake_llm_server: FakeLLMServer, provider: Provider) -> None:
    """`ModelSummarizer` is synchronous: an async client is refused up front, not accepted
    only to fail with "'coroutine' object has no attribute ..." on the first summary."""
    client: Any = (
        openai.AsyncOpenAI(base_url=fake_llm_server.openai_base_url, api_key=API_KEY)
        if provider == "openai"
        else anthropic.AsyncAnthropic(base_url=fake_llm_server.anthropic_base_url, api_key=API_KEY)
    )
    expected = f"synchronous client .* got the asynchronous {type(client).__name__}$"
    try:
        with pytest.raises(TypeError, match=expected):
            ModelSummarizer(client, model=MODEL_OF[provider])
    finally:
        asyncio.run(client.close())
    assert fake_llm_server.requests == []


class _SyncFacade:
    """A sync-looking client that hands back the async client's coroutine: detection by
    signature cannot see through it."""

    def __init__(self, inner: Any) -> None:
        self.chat = self
        self.completions = self
        self._inner = inner

    def create(self, **kwargs: Any) -> Any:
        return self._inner.chat.completions.create(**kwargs)


def test_coroutine_answer_is_a_type_error_without_warnings(
    fake_llm_server: FakeLLMServer,
) -> None:
    """If a client still returns a coroutine, it is closed unawaited (nothing sent, no
    "never awaited" warning) and a TypeError says why."""
    inner = openai.AsyncOpenAI(base_url=fake_llm_server.openai_base_url, api_key=API_KEY)
    summarizer = ModelSummarizer(_SyncFacade(inner), model="m")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(TypeError, match=r"synchronous client .* got the asynchronous"):
                summarizer.summarize(REQUEST)
            gc.collect()
    finally:
        asyncio.run(inner.close())
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert fake_llm_server.requests == []


# --------------------------------------------------------------------------
# End to end: GuardedCompactor retries a summary that dropped an identifier
# --------------------------------------------------------------------------


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a travel agent."},
    {"role": "user", "content": "Find me a flight to Oslo on Friday and book it."},
    _call("call_search_1", "search_flights", {"to": "OSL", "day": "Friday"}),
    {"role": "tool", "tool_call_id": "call_search_1", "content": "No flights found on Friday."},
    _call("call_search_2", "search_flights", {"to": "OSL", "day": "Saturday"}),
    {
        "role": "tool",
        "tool_call_id": "call_search_2",
        "content": "Found flight SK4417 on Saturday at 09:10; fare NOK 1290, one bag included.",
    },
    {"role": "assistant", "content": "Nothing on Friday; SK4417 flies Saturday at 09:10."},
    {"role": "user", "content": "Book SK4417 then."},
    {"role": "assistant", "content": "Booking SK4417 now."},
]
"""Messages 1..5 get compacted (ten tokens a message, budget 90: usage 90 must come down to
45); SK4417 is first seen in message 5 and used after it, so the summary must carry it, and
call_search_1 found nothing, which it must state."""
BUDGET = 90


def ten_tokens(text: str) -> int:
    """Ten tokens a message, whatever it says: the span picked does not depend on wording."""
    return 10


OMITS_IDENTIFIER = (
    "The user wants Oslo. search_flights (call_search_1) found no flights on Friday; "
    "a Saturday flight at 09:10 was found."
)
CARRIES_IDENTIFIER = (
    "The user wants Oslo. search_flights (call_search_1) found no flights on Friday; "
    "SK4417 flies Saturday at 09:10."
)
MISSING_LINE = "identifier 'SK4417' must appear verbatim"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_compactor_retries_a_summary_that_dropped_an_identifier(
    fake_llm_server: FakeLLMServer,
    clients: dict[Provider, Any],
    provider: Provider,
    tmp_path: Path,
) -> None:
    """First summary omits SK4417, second carries it: compacted after 2 attempts, and the
    second request names the missing identifier."""
    api, model = API_OF[provider], MODEL_OF[provider]
    fake_llm_server.enqueue(api, OMITS_IDENTIFIER)
    fake_llm_server.enqueue(api, CARRIES_IDENTIFIER)
    original = json.loads(json.dumps(TRANSCRIPT))
    with Archive(tmp_path / "archive.sqlite3") as archive:
        compactor = GuardedCompactor(
            ModelSummarizer(clients[provider], model=model),
            budget=BUDGET,
            token_counter=ten_tokens,
            archive=archive,
        )
        result = compactor.compact(TRANSCRIPT)
        assert result.archive_handle is not None
        assert archive.recall(result.archive_handle) == TRANSCRIPT[1:6]

    assert result.compacted is True
    assert result.attempts == 2
    assert result.span == (1, 6)
    assert result.summary == CARRIES_IDENTIFIER
    assert result.verification is not None and result.verification.ok
    assert result.messages == [
        TRANSCRIPT[0],
        {"role": "user", "content": CARRIES_IDENTIFIER},
        *TRANSCRIPT[6:],
    ]
    assert original == TRANSCRIPT  # the caller's list is untouched

    first, second = fake_llm_server.requests_to(api)
    assert fake_llm_server.pending() == 0
    for request in (first, second):
        assert request.json["model"] == model
        payload = user_payload(request)
        assert payload["span"] == {"first_message": 1, "last_message": 5}
        assert payload["messages"] == TRANSCRIPT[1:6]
        assert payload["identifiers_to_keep_verbatim"] == ["SK4417"]
        assert payload["negative_results_to_state"] == [
            {
                "tool": "search_flights",
                "call_id": "call_search_1",
                "result": "No flights found on Friday.",
            }
        ]
        assert payload["pending_obligations"] == []
        assert payload["archive_handle"] == result.archive_handle
    assert user_payload(first)["previous_summary_was_missing"] == []
    assert user_payload(second)["previous_summary_was_missing"] == [MISSING_LINE]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_compactor_holds_the_span_when_every_summary_drops_it(
    fake_llm_server: FakeLLMServer, clients: dict[Provider, Any], provider: Provider
) -> None:
    """Both summaries omit SK4417: nothing is replaced (the default policy defers)."""
    api = API_OF[provider]
    fake_llm_server.enqueue(api, OMITS_IDENTIFIER)
    fake_llm_server.enqueue(api, OMITS_IDENTIFIER)
    compactor = GuardedCompactor(
        ModelSummarizer(clients[provider], model=MODEL_OF[provider]),
        budget=BUDGET,
        token_counter=ten_tokens,
    )
    result = compactor.compact(TRANSCRIPT)

    assert result.span == (1, 6)
    assert result.compacted is False
    assert result.attempts == 2
    assert result.messages == TRANSCRIPT
    assert result.verification is not None
    assert result.verification.missing_identifiers == ("SK4417",)
    assert len(fake_llm_server.requests_to(api)) == 2
