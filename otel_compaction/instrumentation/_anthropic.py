"""The Anthropic SDK: Messages, sync and async, streamed and not.

Wrapped: ``create``, ``parse`` and ``stream`` of ``messages`` on the sync and async resources.
``create(stream=True)`` returns the raw event stream, which is wrapped; ``stream()`` returns a
manager that sends the request only when entered, so the manager's request is wrapped instead
and the request is recorded when it is really sent (an SDK whose manager is shaped otherwise
keeps working, only without tracking its streams). Tool calls are the ``tool_use`` content
blocks (server tools run and resolve inside the response, so they owe nothing). A streamed
message opens its calls once a ``stop_reason`` arrived.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from otel_compaction.instrumentation._requests import ModelRequest, ModelResponse
from otel_compaction.instrumentation._runtime import Runtime
from otel_compaction.instrumentation._wrapping import Api, Patches, Wrapper, traced_method
from otel_compaction.instrumentation.detection import EmittedCall

__all__ = ["MODULE", "instrument"]

MODULE = "anthropic"
"""The module whose import triggers `instrument`."""

_log = logging.getLogger(__name__)

_PROVIDER = "anthropic"
_SYNC_REQUEST = "_MessageStreamManager__api_request"
_ASYNC_REQUEST = "_AsyncMessageStreamManager__api_request"


def instrument(runtime: Runtime, patches: Patches) -> None:
    """Wrap the Messages methods of the installed SDK."""
    from anthropic.resources.messages import AsyncMessages, Messages

    for owner, is_async in ((Messages, False), (AsyncMessages, True)):
        for method in ("create", "parse"):
            patches.wrap(owner, method, traced_method(runtime, MESSAGES, is_async=is_async))
    patches.wrap(Messages, "stream", _stream_manager(runtime, is_async=False))
    patches.wrap(AsyncMessages, "stream", _stream_manager(runtime, is_async=True))


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _request(kwargs: Mapping[str, Any], *, stream: bool | None = None) -> ModelRequest:
    return ModelRequest(
        api="messages",
        provider=_PROVIDER,
        model=_str(kwargs.get("model")),
        stream=kwargs.get("stream") is True if stream is None else stream,
        messages=kwargs.get("messages"),
        instructions=kwargs.get("system"),
    )


def _response(message: Any) -> ModelResponse:
    calls = tuple(
        EmittedCall(block.id, block.name, getattr(block, "input", None))
        for block in getattr(message, "content", None) or ()
        if getattr(block, "type", None) == "tool_use"
    )
    return ModelResponse(_str(getattr(message, "id", None)), calls)


class _MessageEvents:
    """Joins ``tool_use`` blocks from ``content_block_start`` and ``input_json_delta`` events."""

    def __init__(self) -> None:
        self.response_id: str | None = None
        self.blocks: dict[int, tuple[Any, list[str]]] = {}  # index -> (start block, json parts)
        self.finished = False

    def add(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind == "message_start":
            self.response_id = _str(getattr(getattr(event, "message", None), "id", None))
        elif kind == "content_block_start":
            block = getattr(event, "content_block", None)
            if getattr(block, "type", None) == "tool_use":
                self.blocks[event.index] = (block, [])
        elif kind == "content_block_delta":
            delta = getattr(event, "delta", None)
            entry = self.blocks.get(getattr(event, "index", -1))
            if entry is not None and getattr(delta, "type", None) == "input_json_delta":
                entry[1].append(str(getattr(delta, "partial_json", "")))
        elif kind == "message_delta":
            if getattr(getattr(event, "delta", None), "stop_reason", None):
                self.finished = True
        elif kind == "message_stop":
            self.finished = True

    def response(self) -> ModelResponse:
        if not self.finished:
            return ModelResponse(self.response_id)
        calls = tuple(
            EmittedCall(block.id, block.name, "".join(parts) or getattr(block, "input", None))
            for _, (block, parts) in sorted(self.blocks.items())
        )
        return ModelResponse(self.response_id, calls)


MESSAGES = Api(read=_request, extract=_response, observer=_MessageEvents)


def _stream_manager(runtime: Runtime, *, is_async: bool) -> Wrapper:
    """Wrap ``messages.stream``: record the request when its manager sends it."""

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        manager = wrapped(*args, **kwargs)
        if not runtime.active:
            return manager
        try:
            if is_async:
                original = getattr(manager, _ASYNC_REQUEST)
                setattr(manager, _ASYNC_REQUEST, _sent_async(runtime, kwargs, original))
            else:
                original = getattr(manager, _SYNC_REQUEST)
                setattr(manager, _SYNC_REQUEST, _sent(runtime, kwargs, original))
        except Exception:
            _log.debug("otel-compaction: stream manager not recognised", exc_info=True)
        return manager

    return wrapper


def _sent(
    runtime: Runtime, kwargs: Mapping[str, Any], send: Callable[[], Any]
) -> Callable[[], Any]:
    def request() -> Any:
        if not runtime.active:
            return send()
        exchange = runtime.begin(lambda: _request(kwargs, stream=True))
        with exchange.activated():
            try:
                raw = send()
            except BaseException as error:
                exchange.fail(error)
                raise
        return exchange.complete(raw, _response, _MessageEvents, is_async=False)

    return request


async def _sent_async(runtime: Runtime, kwargs: Mapping[str, Any], send: Awaitable[Any]) -> Any:
    if not runtime.active:
        return await send
    exchange = runtime.begin(lambda: _request(kwargs, stream=True))
    with exchange.activated():
        try:
            raw = await send
        except BaseException as error:
            exchange.fail(error)
            raise
    return exchange.complete(raw, _response, _MessageEvents, is_async=True)
