"""A scripted, in-process fake of the OpenAI and Anthropic HTTP APIs on loopback.

:class:`FakeLLMServer` answers the way the providers do, closely enough for the real ``openai``
and ``anthropic`` SDK clients (pointed at it with ``base_url``) to parse its answers, sync and
async, streamed and not:

* OpenAI Chat Completions, ``POST /v1/chat/completions``: a ``chat.completion`` object, or with
  ``"stream": true`` server-sent ``data: {chunk}`` events ending in ``data: [DONE]``, tool calls
  streamed as ``index``/``id``/``function.name`` deltas followed by ``function.arguments``
  fragments (and a final usage chunk when ``stream_options.include_usage`` is set);
* OpenAI Responses, ``POST /v1/responses``: a ``response`` object, or the typed event stream
  (``response.created``, ``response.in_progress``, ``response.output_item.added``,
  ``response.content_part.added``, ``response.output_text.delta``/``.done``,
  ``response.function_call_arguments.delta``/``.done``, ``response.content_part.done``,
  ``response.output_item.done``, ``response.completed``), each with its ``type`` and an
  increasing ``sequence_number``;
* Anthropic Messages, ``POST /v1/messages``: a ``message`` object, or the event stream
  (``message_start``, ``ping``, ``content_block_start``, ``content_block_delta`` with
  ``text_delta``, ``thinking_delta``/``signature_delta`` or ``input_json_delta``,
  ``content_block_stop``, ``message_delta``, ``message_stop``).

A :class:`Reply` with ``thinking`` answers with reasoning first, as reasoning models do: a
``thinking`` block (with an opaque ``signature``) opening an Anthropic message, a ``reasoning``
item (``rs_...``, its text as a ``summary_text``, streamed with the
``response.reasoning_summary_*`` events) opening a response's ``output``. Chat Completions
carries no reasoning and ignores it.

Nothing is generated: the test scripts what the "model" answers next, per API, and every
request is recorded (parsed JSON body and headers) before it is answered::

    with FakeLLMServer() as server:
        server.enqueue("chat", "Hello!")
        server.enqueue("messages", tool_calls=[ToolCall("search", {"q": "oslo"}, id="toolu_1")])
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0)
        client.chat.completions.create(model="gpt-test", messages=[...])
        assert server.last("chat").body["model"] == "gpt-test"

A request that finds nothing scripted for its API is answered with HTTP 500 in the provider's
error format (the SDK raises ``InternalServerError`` naming the problem); an
:class:`ErrorReply` scripts a provider error on purpose, and a :class:`RawReply` any JSON body.
A :class:`Dynamic` answer is computed from the request when it arrives, for clients that put
ids of their own making in the history (an agent CLI's background task id, say) that the next
answer must quote::

    server.enqueue_reply("messages", Dynamic(lambda request: Reply("seen " + task_id(request))))

The usage an answer reports is estimated from the sizes of the request and the answer; a
:class:`Reply` with ``input_tokens`` reports that many input tokens instead (a huge count makes
an agent CLI believe its context is full, and compact it).

With ``FakeLLMServer(validate=True)`` the server also enforces the providers' rules on the
history a request carries (a tool call answered by its result, a result answered to a call,
reasoning kept with the output it preceded; see ``provider_rules``): a request breaking one is
answered with HTTP 400 ``invalid_request_error`` and the provider's own message, as the real
API would (the SDK raises ``BadRequestError``), without consuming the scripted answer. Its
:attr:`RecordedRequest.rejection` holds that message, and :attr:`FakeLLMServer.rejections`
lists the rejected requests::

    server = FakeLLMServer(validate=True)
    ...
    [rejected] = server.rejections
    assert rejected.rejection.startswith("messages.0.content.0: unexpected `tool_use_id`")

The tests use it as the ``fake_llm_server`` pytest fixture (``tests/fake_llm_server.py``),
which also keeps proxy settings away so the clients really talk to loopback. The module needs
only the standard library and the ``loopback_service`` and ``provider_rules`` modules beside it.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import socket
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypeAlias, get_args
from urllib.parse import urlsplit

from loopback_service import LOOPBACK, LoopbackService, serve_in_background
from provider_rules import (
    ProducedItem,
    ProducedResponse,
    anthropic_messages_error,
    chat_completions_error,
    responses_error,
)

__all__ = [
    "LOOPBACK",
    "Api",
    "Dynamic",
    "ErrorReply",
    "FakeLLMServer",
    "ProducedResponse",
    "RawReply",
    "RecordedRequest",
    "Reply",
    "Scripted",
    "ToolCall",
]

Api: TypeAlias = Literal["chat", "responses", "messages"]
"""Which API a reply is scripted for: OpenAI Chat Completions, OpenAI Responses, or Anthropic
Messages."""

API_PATHS: dict[str, Api] = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
}
"""The endpoint of each API."""

_APIS: tuple[Api, ...] = get_args(Api)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the fake model makes.

    ``arguments`` is a JSON object (a mapping, encoded compactly) or its JSON text as is. For
    Anthropic, whose ``tool_use.input`` is an object, text arguments must be a JSON object.
    ``id`` is generated (``call_fake_<n>`` or ``toolu_fake_<n>``) when not given.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        """The arguments as the JSON text the OpenAI APIs carry."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), separators=(",", ":"), ensure_ascii=False)

    @property
    def arguments_object(self) -> dict[str, Any]:
        """The arguments as the JSON object Anthropic's ``tool_use.input`` carries."""
        if not isinstance(self.arguments, str):
            return dict(self.arguments)
        value = json.loads(self.arguments)
        if not isinstance(value, dict):
            raise ValueError(f"tool call arguments must be a JSON object, got {self.arguments!r}")
        return value


@dataclass(frozen=True, slots=True)
class Reply:
    """What the fake model answers to one request: text, tool calls, or both.

    ``model`` overrides the model name echoed back (by default the request's ``model``).
    ``thinking`` is the reasoning the model produced before answering: an Anthropic
    ``thinking`` block, a Responses ``reasoning`` item; Chat Completions ignores it.
    ``input_tokens`` is the input token count the answer's ``usage`` reports (by default an
    estimate from the request's size).
    """

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    model: str | None = None
    thinking: str | None = None
    input_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An HTTP error answered in the provider's error format (the SDK raises its
    ``APIStatusError`` subclass for ``status``)."""

    status: int
    message: str
    type: str = "api_error"


@dataclass(frozen=True, slots=True)
class RawReply:
    """A JSON body sent verbatim (with ``status``), streamed or not: for answers a provider may
    give that :class:`Reply` cannot express, such as a chat completion with no choices."""

    body: Any
    status: int = 200


@dataclass(frozen=True, slots=True)
class Dynamic:
    """An answer computed when its request arrives: ``respond`` gets the recorded request
    and returns the :class:`Reply`, :class:`ErrorReply` or :class:`RawReply` to send.

    ``respond`` runs on the server's handler thread; an exception it raises is recorded in
    :attr:`FakeLLMServer.errors` and the client gets no answer.
    """

    respond: Callable[[RecordedRequest], Reply | ErrorReply | RawReply]


Scripted: TypeAlias = "Reply | ErrorReply | RawReply | Dynamic"
"""Anything that can be scripted as the next answer of an API."""


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the server received, recorded before it was answered."""

    api: Api | None
    """The API the path belongs to; None for an unknown path."""
    method: str
    path: str
    """The path without the query string."""
    query: str
    headers: Mapping[str, str]
    """Header names lower-cased."""
    raw_body: bytes
    body: Any
    """The parsed JSON body (None when the body is empty or not JSON)."""
    rejection: str | None = None
    """With validation on, the provider's message this request was rejected with (HTTP 400
    ``invalid_request_error``); None when it was not rejected."""

    @property
    def stream(self) -> bool:
        """True when the request asked for a streamed answer."""
        return isinstance(self.body, dict) and self.body.get("stream") is True

    @property
    def json(self) -> dict[str, Any]:
        """The body as a JSON object; fails the test when it is not one."""
        assert isinstance(self.body, dict), f"request body is not a JSON object: {self.raw_body!r}"
        return self.body


class FakeLLMServer(LoopbackService):
    """A threaded HTTP server on ``127.0.0.1`` (an ephemeral port) faking three LLM APIs.

    Start and stop it with ``with`` (or :meth:`start` and :meth:`stop`). Script answers with
    :meth:`enqueue` (or :meth:`enqueue_reply`, :meth:`enqueue_error`); they are consumed in
    order, per API. Read what was sent with :attr:`requests`, :meth:`requests_to` and
    :meth:`last`.

    Streamed text and tool arguments are cut into fragments of ``chunk_chars`` characters, so a
    client has to join several deltas to get the whole value.

    With :attr:`validate` on, requests whose history breaks the provider's rules are rejected
    the way the provider rejects them (see the module docstring); read them with
    :attr:`rejections`.
    """

    def __init__(
        self,
        *,
        chunk_chars: int = 4,
        validate: bool = False,
        port: int = 0,
        responder: Callable[[RecordedRequest], Reply | ErrorReply | RawReply] | None = None,
    ) -> None:
        """Create a stopped server.

        Args:
            chunk_chars: the length of each streamed text or argument fragment.
            validate: reject, with the provider's HTTP 400, requests whose history the
                provider would refuse (off by default: most tests send partial histories on
                purpose). Can be changed later through :attr:`validate`.
            port: the port to listen on; 0 for an ephemeral one.
            responder: answers every request that finds nothing scripted for its API (a
                scenario, such as ``deploy_scenario``); without one such a request gets
                HTTP 500.
        """
        if chunk_chars <= 0:
            raise ValueError(f"chunk_chars must be positive, got {chunk_chars}")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be 0..65535, got {port}")
        self.chunk_chars = chunk_chars
        self.validate = validate
        """Whether requests are checked against the providers' rules before being answered."""
        self.responder = responder
        """Answers what nothing scripted answers; None: HTTP 500."""
        self._port = port
        self._lock = threading.Lock()
        self._queues: dict[Api, deque[Scripted]] = {api: deque() for api in _APIS}
        self._requests: list[RecordedRequest] = []
        # What each Responses answer produced, oldest first: the Responses rules tie a
        # replayed item to the reasoning item generated before it, which only the server knows.
        self._produced: list[ProducedResponse] = []
        self._errors: list[str] = []
        self._counter = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeLLMServer:
        """Bind an ephemeral port on loopback and serve on a background thread."""
        if self._server is not None:
            raise RuntimeError("FakeLLMServer is already running")
        server = _Server((LOOPBACK, self._port), _Handler)
        server.fake = self
        self._server = server
        self._thread = serve_in_background(server, f"fake-llm-server:{server.server_address[1]}")
        return self

    def stop(self) -> None:
        """Stop serving, close every open connection and release the port."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.close_connections()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    @property
    def port(self) -> int:
        """The port the server listens on."""
        if self._server is None:
            raise RuntimeError("FakeLLMServer is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the base URL for ``anthropic.Anthropic``."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def anthropic_base_url(self) -> str:
        """The ``base_url`` for ``anthropic.Anthropic`` / ``AsyncAnthropic``."""
        return self.url

    @property
    def openai_base_url(self) -> str:
        """The ``base_url`` for ``openai.OpenAI`` / ``AsyncOpenAI`` (ends in ``/v1``)."""
        return f"{self.url}/v1"

    # -- scripting ---------------------------------------------------------------------------

    def enqueue(
        self,
        api: Api,
        text: str | None = None,
        *,
        tool_calls: Iterable[ToolCall] = (),
        model: str | None = None,
        thinking: str | None = None,
        input_tokens: int | None = None,
    ) -> Reply:
        """Script the next answer of ``api``: ``text``, ``tool_calls``, or both, after
        ``thinking`` if given, reporting ``input_tokens`` if given; return it."""
        reply = Reply(text, tuple(tool_calls), model, thinking, input_tokens)
        self.enqueue_reply(api, reply)
        return reply

    def enqueue_reply(self, api: Api, *replies: Scripted) -> None:
        """Script the next answers of ``api``, in order."""
        if api not in self._queues:
            raise ValueError(f"unknown API {api!r}; expected one of {_APIS}")
        with self._lock:
            self._queues[api].extend(replies)

    def enqueue_error(
        self, api: Api, status: int, message: str, *, type: str = "api_error"
    ) -> ErrorReply:
        """Script an HTTP error as the next answer of ``api``; return it."""
        error = ErrorReply(status, message, type)
        self.enqueue_reply(api, error)
        return error

    def pending(self, api: Api | None = None) -> int:
        """How many scripted answers (of ``api``, or of all APIs) are not consumed yet."""
        with self._lock:
            if api is not None:
                return len(self._queues[api])
            return sum(len(queue) for queue in self._queues.values())

    def reset(self) -> None:
        """Forget every scripted answer, recorded request and produced response."""
        with self._lock:
            for queue in self._queues.values():
                queue.clear()
            self._requests.clear()
            self._produced.clear()

    # -- recorded requests -------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    def requests_to(self, api: Api) -> list[RecordedRequest]:
        """The requests received by ``api``, oldest first."""
        return [request for request in self.requests if request.api == api]

    def last(self, api: Api) -> RecordedRequest:
        """The latest request received by ``api``; fails the test when there is none."""
        received = self.requests_to(api)
        assert received, f"FakeLLMServer received no {api} request"
        return received[-1]

    @property
    def rejections(self) -> list[RecordedRequest]:
        """The requests rejected by validation, oldest first; each one's
        :attr:`RecordedRequest.rejection` is the message it was answered with."""
        return [request for request in self.requests if request.rejection is not None]

    @property
    def produced_responses(self) -> list[ProducedResponse]:
        """The output items of every Responses answer produced so far, oldest first (a copy):
        which reasoning item preceded which message and function-call items."""
        with self._lock:
            return list(self._produced)

    @property
    def errors(self) -> list[str]:
        """Tracebacks of exceptions raised while serving (a copy); empty when all went well.

        Clients hanging up are not errors. The pytest fixture fails the test when this is not
        empty at its end.
        """
        with self._lock:
            return list(self._errors)

    # -- serving (called on the handler threads) ---------------------------------------------

    def _record_error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)

    def _record_and_take(
        self, request: RecordedRequest
    ) -> tuple[RecordedRequest, Scripted | None, int]:
        """Record ``request`` (with its rejection, when validation rejects it) and take the
        next scripted answer of its API, unless it was rejected: the model never saw it."""
        with self._lock:
            self._counter += 1
            if self.validate and request.api is not None and isinstance(request.body, dict):
                rejection = self._violation(request.api, request.body)
                if rejection is not None:
                    request = dataclasses.replace(request, rejection=rejection)
            self._requests.append(request)
            if request.api is None or request.rejection is not None:
                return request, None, self._counter
            queue = self._queues[request.api]
            if queue:
                return request, queue.popleft(), self._counter
            responder = self.responder
            return request, (Dynamic(responder) if responder else None), self._counter

    def _violation(self, api: Api, body: dict[str, Any]) -> str | None:
        """The provider's message rejecting ``body``, or None; called holding the lock."""
        if api == "messages":
            return anthropic_messages_error(body)
        if api == "responses":
            return responses_error(body, self._produced)
        return chat_completions_error(body)

    def _remember(self, produced: ProducedResponse) -> None:
        with self._lock:
            self._produced.append(produced)

    def _fragments(self, text: str) -> list[str]:
        size = self.chunk_chars
        return [text[i : i + size] for i in range(0, len(text), size)]


# --------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeLLMServer

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore clients that hang up; record anything else for the test to see."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        self.fake._record_error("".join(traceback.format_exception(error)))

    def close_connections(self) -> None:
        """Unblock handler threads waiting on kept-alive connections."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the client
                connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 30  # never let a stuck client hold a thread forever

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def do_GET(self) -> None:
        """Every GET is an unknown endpoint."""
        self._handle()

    def do_POST(self) -> None:
        """Answer one API request."""
        self._handle()

    def _handle(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        parts = urlsplit(self.path)
        request = RecordedRequest(
            api=API_PATHS.get(parts.path) if self.command == "POST" else None,
            method=self.command,
            path=parts.path,
            query=parts.query,
            headers={name.lower(): value for name, value in self.headers.items()},
            raw_body=raw,
            body=body,
        )
        request, scripted, number = fake._record_and_take(request)
        api = request.api
        if api is None:
            self._error(None, HTTPStatus.NOT_FOUND, f"FakeLLMServer: no endpoint {self.path}")
            return
        if not isinstance(body, dict):
            self._error(api, HTTPStatus.BAD_REQUEST, "FakeLLMServer: body is not a JSON object")
            return
        if request.rejection is not None:
            self._error(api, HTTPStatus.BAD_REQUEST, request.rejection, "invalid_request_error")
            return
        reply = scripted.respond(request) if isinstance(scripted, Dynamic) else scripted
        if reply is None:
            self._error(
                api,
                HTTPStatus.INTERNAL_SERVER_ERROR,
                f"FakeLLMServer: no reply scripted for the {api} API",
            )
            return
        if isinstance(reply, ErrorReply):
            self._error(api, reply.status, reply.message, reply.type)
            return
        if isinstance(reply, RawReply):
            self._send_json(reply.status, reply.body)
            return
        builder = _Builder(fake, body, reply, number)
        if api == "responses":  # before answering: the client may replay the items right away
            fake._remember(builder.produced())
        if request.stream:
            events = {
                "chat": builder.chat_stream,
                "responses": builder.responses_stream,
                "messages": builder.messages_stream,
            }[api]()
            self._send_stream(events)
        else:
            payload = {
                "chat": builder.chat_completion,
                "responses": builder.response,
                "messages": builder.message,
            }[api]()
            self._send_json(HTTPStatus.OK, payload)

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", "req_fake")
        self.send_header("request-id", "req_fake")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_stream(self, events: Iterable[tuple[str | None, str]]) -> None:
        """Send ``(event name, data)`` pairs as server-sent events, chunk-encoded."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", "req_fake")
        self.send_header("request-id", "req_fake")
        self.end_headers()
        for name, data in events:
            frame = (f"event: {name}\n" if name else "") + f"data: {data}\n\n"
            encoded = frame.encode()
            self.wfile.write(f"{len(encoded):x}\r\n".encode() + encoded + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _error(self, api: Api | None, status: int, message: str, kind: str = "api_error") -> None:
        if api == "messages":
            payload: dict[str, Any] = {
                "type": "error",
                "error": {"type": kind, "message": message},
                "request_id": "req_fake",
            }
        else:
            payload = {"error": {"message": message, "type": kind, "param": None, "code": None}}
        self._send_json(status, payload)


# --------------------------------------------------------------------------
# Provider payloads
# --------------------------------------------------------------------------


def _json(payload: Mapping[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def _token_estimate(text: str) -> int:
    return max(1, len(text) // 4)


class _Builder:
    """The answer to one request, in each provider's JSON and streaming shapes."""

    def __init__(self, fake: FakeLLMServer, body: dict[str, Any], reply: Reply, number: int):
        self.fake = fake
        self.body = body
        self.reply = reply
        self.number = number
        self.model = reply.model or str(body.get("model") or "fake-model")
        self.created = int(time.time())
        self.input_tokens = (
            reply.input_tokens
            if reply.input_tokens is not None
            else _token_estimate(json.dumps(body))
        )
        produced = (reply.text or "") + "".join(c.arguments_json for c in reply.tool_calls)
        # Reasoning is billed as output, as the providers do.
        self.reasoning_tokens = _token_estimate(reply.thinking) if reply.thinking else 0
        self.output_tokens = (_token_estimate(produced) if produced else 0) + self.reasoning_tokens

    def call_id(self, index: int, prefix: str) -> str:
        call = self.reply.tool_calls[index]
        return call.id if call.id is not None else f"{prefix}_fake_{self.number}_{index}"

    @property
    def signature(self) -> str:
        """An opaque thinking signature, base64 like Anthropic's, unique to this answer."""
        return base64.b64encode(f"fake-thinking-signature:{self.number}".encode()).decode()

    # -- OpenAI Chat Completions -------------------------------------------------------------

    def _chat_base(self, kind: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-fake-{self.number}",
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
        }

    def _chat_finish(self) -> str:
        return "tool_calls" if self.reply.tool_calls else "stop"

    def _chat_usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.input_tokens,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
        }

    def chat_completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self.reply.text,
            "refusal": None,
            "annotations": [],
        }
        if self.reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": self.call_id(i, "call"),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json},
                }
                for i, call in enumerate(self.reply.tool_calls)
            ]
        return {
            **self._chat_base("chat.completion"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self._chat_finish(),
                }
            ],
            "usage": self._chat_usage(),
        }

    def chat_stream(self) -> Iterator[tuple[str | None, str]]:
        base = self._chat_base("chat.completion.chunk")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[str | None, str]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return None, _json({**base, "choices": [choice]})

        yield chunk({"role": "assistant", "content": "", "refusal": None})
        for fragment in self.fake._fragments(self.reply.text or ""):
            yield chunk({"content": fragment})
        for index, call in enumerate(self.reply.tool_calls):
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": self.call_id(index, "call"),
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
            for fragment in self.fake._fragments(call.arguments_json):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
        yield chunk({}, self._chat_finish())
        options = self.body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            yield None, _json({**base, "choices": [], "usage": self._chat_usage()})
        yield None, "[DONE]"

    # -- OpenAI Responses --------------------------------------------------------------------

    def _message_item(self, text: str, status: str) -> dict[str, Any]:
        content = (
            [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
            if status == "completed"
            else []
        )
        return {
            "id": f"msg_fake_{self.number}",
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }

    @property
    def _reasoning_id(self) -> str:
        return f"rs_fake_{self.number}"

    def _function_item_id(self, index: int) -> str:
        return f"fc_fake_{self.number}_{index}"

    def _reasoning_item(self, done: bool) -> dict[str, Any]:
        # The text is the summary (what the Responses API shows of the reasoning); the
        # encrypted content is there only when the request asks for it with ``include``.
        summary = [{"type": "summary_text", "text": self.reply.thinking or ""}] if done else []
        include = self.body.get("include")
        encrypted = (
            base64.b64encode(f"fake-encrypted-reasoning:{self.number}".encode()).decode()
            if done and isinstance(include, list) and "reasoning.encrypted_content" in include
            else None
        )
        return {
            "id": self._reasoning_id,
            "type": "reasoning",
            "summary": summary,
            "encrypted_content": encrypted,
        }

    def produced(self) -> ProducedResponse:
        """What this Responses answer produces, for the rules tying items to reasoning."""
        items: list[ProducedItem] = []
        if self.reply.thinking is not None:
            items.append(ProducedItem("reasoning", self._reasoning_id))
        if self.reply.text is not None:
            items.append(ProducedItem("message", f"msg_fake_{self.number}"))
        items.extend(
            ProducedItem("function_call", self._function_item_id(i), self.call_id(i, "call"))
            for i in range(len(self.reply.tool_calls))
        )
        return ProducedResponse(f"resp_fake_{self.number}", tuple(items))

    def _function_item(self, index: int, arguments: str, status: str) -> dict[str, Any]:
        call = self.reply.tool_calls[index]
        return {
            "id": self._function_item_id(index),
            "type": "function_call",
            "call_id": self.call_id(index, "call"),
            "name": call.name,
            "arguments": arguments,
            "status": status,
        }

    def _output(self) -> list[dict[str, Any]]:
        output: list[dict[str, Any]] = []
        if self.reply.thinking is not None:
            output.append(self._reasoning_item(done=True))
        if self.reply.text is not None:
            output.append(self._message_item(self.reply.text, "completed"))
        output.extend(
            self._function_item(i, call.arguments_json, "completed")
            for i, call in enumerate(self.reply.tool_calls)
        )
        return output

    def response(self, *, status: str = "completed") -> dict[str, Any]:
        done = status == "completed"
        tools = self.body.get("tools") or []
        return {
            "id": f"resp_fake_{self.number}",
            "object": "response",
            "created_at": float(self.created),
            "completed_at": float(self.created) if done else None,
            "status": status,
            "model": self.model,
            "output": self._output() if done else [],
            "error": None,
            "incomplete_details": None,
            "instructions": self.body.get("instructions"),
            "metadata": self.body.get("metadata") or {},
            "parallel_tool_calls": bool(self.body.get("parallel_tool_calls", True)),
            "temperature": self.body.get("temperature"),
            "top_p": self.body.get("top_p"),
            "tool_choice": self.body.get("tool_choice", "auto"),
            "tools": tools,
            "max_output_tokens": self.body.get("max_output_tokens"),
            "previous_response_id": self.body.get("previous_response_id"),
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "usage": (
                {
                    "input_tokens": self.input_tokens,
                    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                    "output_tokens": self.output_tokens,
                    "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
                    "total_tokens": self.input_tokens + self.output_tokens,
                }
                if done
                else None
            ),
        }

    def responses_stream(self) -> Iterator[tuple[str | None, str]]:
        sequence = 0

        def event(kind: str, **fields: Any) -> tuple[str | None, str]:
            nonlocal sequence
            payload = {"type": kind, "sequence_number": sequence, **fields}
            sequence += 1
            return kind, _json(payload)

        yield event("response.created", response=self.response(status="in_progress"))
        yield event("response.in_progress", response=self.response(status="in_progress"))
        index = 0
        if self.reply.thinking is not None:
            thinking = self.reply.thinking
            place = {"item_id": self._reasoning_id, "output_index": index, "summary_index": 0}
            yield event(
                "response.output_item.added",
                output_index=index,
                item=self._reasoning_item(done=False),
            )
            empty_summary = {"type": "summary_text", "text": ""}
            yield event("response.reasoning_summary_part.added", **place, part=empty_summary)
            for fragment in self.fake._fragments(thinking):
                yield event("response.reasoning_summary_text.delta", **place, delta=fragment)
            yield event("response.reasoning_summary_text.done", **place, text=thinking)
            yield event(
                "response.reasoning_summary_part.done",
                **place,
                part={**empty_summary, "text": thinking},
            )
            yield event(
                "response.output_item.done",
                output_index=index,
                item=self._reasoning_item(done=True),
            )
            index += 1
        if self.reply.text is not None:
            text = self.reply.text
            item_id = f"msg_fake_{self.number}"
            place = {"item_id": item_id, "output_index": index, "content_index": 0}
            yield event(
                "response.output_item.added",
                output_index=index,
                item=self._message_item("", "in_progress"),
            )
            empty_part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield event("response.content_part.added", **place, part=empty_part)
            for fragment in self.fake._fragments(text):
                yield event("response.output_text.delta", **place, delta=fragment, logprobs=[])
            yield event("response.output_text.done", **place, text=text, logprobs=[])
            yield event("response.content_part.done", **place, part={**empty_part, "text": text})
            yield event(
                "response.output_item.done",
                output_index=index,
                item=self._message_item(text, "completed"),
            )
            index += 1
        for call_index, call in enumerate(self.reply.tool_calls):
            arguments = call.arguments_json
            item_id = self._function_item_id(call_index)
            yield event(
                "response.output_item.added",
                output_index=index,
                item=self._function_item(call_index, "", "in_progress"),
            )
            for fragment in self.fake._fragments(arguments):
                yield event(
                    "response.function_call_arguments.delta",
                    item_id=item_id,
                    output_index=index,
                    delta=fragment,
                )
            yield event(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=index,
                name=call.name,
                arguments=arguments,
            )
            yield event(
                "response.output_item.done",
                output_index=index,
                item=self._function_item(call_index, arguments, "completed"),
            )
            index += 1
        yield event("response.completed", response=self.response())

    # -- Anthropic Messages ------------------------------------------------------------------

    def _stop_reason(self) -> str:
        return "tool_use" if self.reply.tool_calls else "end_turn"

    def _message_base(self, content: list[dict[str, Any]], *, done: bool) -> dict[str, Any]:
        return {
            "id": f"msg_fake_{self.number}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self._stop_reason() if done else None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens if done else 1,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }

    def message(self) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if self.reply.thinking is not None:
            content.append(
                {"type": "thinking", "thinking": self.reply.thinking, "signature": self.signature}
            )
        if self.reply.text is not None:
            content.append({"type": "text", "text": self.reply.text, "citations": None})
        content.extend(
            {
                "type": "tool_use",
                "id": self.call_id(i, "toolu"),
                "name": call.name,
                "input": call.arguments_object,
            }
            for i, call in enumerate(self.reply.tool_calls)
        )
        return self._message_base(content, done=True)

    def messages_stream(self) -> Iterator[tuple[str | None, str]]:
        def event(kind: str, **fields: Any) -> tuple[str | None, str]:
            return kind, _json({"type": kind, **fields})

        def block(
            index: int, start: dict[str, Any], deltas: Iterable[dict[str, Any]]
        ) -> Iterator[tuple[str | None, str]]:
            yield event("content_block_start", index=index, content_block=start)
            for delta in deltas:
                yield event("content_block_delta", index=index, delta=delta)
            yield event("content_block_stop", index=index)

        yield event("message_start", message=self._message_base([], done=False))
        yield event("ping")
        index = 0
        if self.reply.thinking is not None:
            # Anthropic opens the block empty, streams the text, then the signature just
            # before the block stops.
            yield from block(
                index,
                {"type": "thinking", "thinking": "", "signature": ""},
                [
                    *(
                        {"type": "thinking_delta", "thinking": fragment}
                        for fragment in self.fake._fragments(self.reply.thinking)
                    ),
                    {"type": "signature_delta", "signature": self.signature},
                ],
            )
            index += 1
        if self.reply.text is not None:
            yield from block(
                index,
                {"type": "text", "text": "", "citations": None},
                (
                    {"type": "text_delta", "text": fragment}
                    for fragment in self.fake._fragments(self.reply.text)
                ),
            )
            index += 1
        for call_index, call in enumerate(self.reply.tool_calls):
            arguments = json.dumps(call.arguments_object, separators=(",", ":"))
            yield from block(
                index,
                {
                    "type": "tool_use",
                    "id": self.call_id(call_index, "toolu"),
                    "name": call.name,
                    "input": {},
                },
                (
                    {"type": "input_json_delta", "partial_json": fragment}
                    for fragment in ["", *self.fake._fragments(arguments)]
                ),
            )
            index += 1
        yield event(
            "message_delta",
            delta={"stop_reason": self._stop_reason(), "stop_sequence": None},
            usage={"output_tokens": self.output_tokens},
        )
        yield event("message_stop")


# --------------------------------------------------------------------------
# Running it as a program
# --------------------------------------------------------------------------

_USAGE = """\
A fake of the OpenAI (Chat Completions, Responses) and Anthropic (Messages) APIs on
127.0.0.1, for pointing a real SDK, framework or agent at without a key or a network.

By default it plays the built-in "deploy" scenario (deploy_scenario.py), the one the example
agents run: the model calls tools while its reported usage climbs past half and then 90% of
a 16,000-token window, so that an agent compacting on usage gets one compaction deferred and
one refused. --script FILE answers from a JSON file first, in order, per API:

  {"chat": [{"tool_calls": [{"name": "restart", "arguments": {"service": "web-7"}}]},
            {"text": "web-7 is restarted.", "input_tokens": 12000}],
   "messages": [{"error": {"status": 429, "message": "slow down"}}]}

(a reply has "text", "tool_calls" with "name", "arguments" and an optional "id",
"thinking", "input_tokens", "model"; or "error" with "status", "message" and "type").
With --scenario none, a request that finds nothing scripted gets HTTP 500.
"""


def load_script(path: str) -> dict[Api, list[Scripted]]:
    """The replies a ``--script`` JSON file scripts, per API, in order.

    Raises:
        ValueError: the file is not such a JSON object (the message says where).
    """
    with open(path, encoding="utf-8") as file:
        document = json.load(file)
    if not isinstance(document, dict):
        raise ValueError(f"{path}: expected a JSON object of APIs, got {type(document).__name__}")
    script: dict[Api, list[Scripted]] = {}
    for api, replies in document.items():
        if api not in _APIS:
            raise ValueError(f"{path}: unknown API {api!r}; expected one of {', '.join(_APIS)}")
        if not isinstance(replies, list):
            raise ValueError(f"{path}: {api} must be a list of replies")
        script[api] = [_scripted(reply, f"{path}: {api}[{i}]") for i, reply in enumerate(replies)]
    return script


def _scripted(reply: Any, where: str) -> Scripted:
    if not isinstance(reply, dict):
        raise ValueError(f"{where}: a reply is a JSON object")
    try:
        if "error" in reply:
            error = reply["error"]
            return ErrorReply(
                int(error["status"]), str(error["message"]), error.get("type", "api_error")
            )
        calls = tuple(
            ToolCall(call["name"], call.get("arguments", {}), call.get("id"))
            for call in reply.get("tool_calls", ())
        )
        return Reply(
            reply.get("text"),
            calls,
            reply.get("model"),
            reply.get("thinking"),
            reply.get("input_tokens"),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error!r} in {reply!r}") from None


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted; print the base URLs to set first."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python examples/fake_model_server.py",
        description=_USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000; 0: any free one)"
    )
    parser.add_argument(
        "--scenario",
        choices=("deploy", "none"),
        default="deploy",
        help="what answers requests nothing scripted answers (default: deploy)",
    )
    parser.add_argument("--script", metavar="FILE", help="JSON replies to answer first, per API")
    parser.add_argument(
        "--validate",
        action="store_true",
        help="reject histories the providers would reject (a tool call without its result, ...)"
        " with their HTTP 400",
    )
    args = parser.parse_args(argv)
    try:
        script = load_script(args.script) if args.script else {}
    except (OSError, ValueError) as error:
        parser.error(str(error))
    responder = None
    if args.scenario == "deploy":
        from deploy_scenario import deploy_scenario

        responder = deploy_scenario
    server = FakeLLMServer(validate=args.validate, port=args.port, responder=responder)
    for api, replies in script.items():
        server.enqueue_reply(api, *replies)
    try:
        server.start()
    except OSError as error:
        parser.exit(1, f"fake model server: cannot listen on {LOOPBACK}:{args.port}: {error}\n")
    print(f"fake model server on {server.url} (Ctrl-C stops it); set:", flush=True)
    print(f"  export OPENAI_BASE_URL={server.openai_base_url} OPENAI_API_KEY=fake", flush=True)
    print(
        f"  export ANTHROPIC_BASE_URL={server.anthropic_base_url} ANTHROPIC_API_KEY=fake",
        flush=True,
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        for failure in server.errors:
            print(failure, file=sys.stderr)
    return 0


if __name__ == "__main__":
    # Run as the importable module, so the scenario's replies are of the classes served here.
    from fake_model_server import main as run

    sys.exit(run())
