"""MCP client tool calls as obligations: ``ClientSession.call_tool`` from request to response.

`instrument` wraps ``mcp.ClientSession.call_tool`` (with wrapt). Before the ``tools/call``
request is sent, the call is opened as an obligation through the `ToolCallRecorder` (an
``execute_tool {tool}`` span and a ledger record); it ends in exactly one resolution:

* a response: ``result``, or ``error`` (``error.type`` ``tool_error``) when the server says
  ``isError``: the tool ran and failed;
* an ``McpError`` (a JSON-RPC error) or any other exception: ``error``;
* no response in time (``read_timeout_seconds``, or the session's read timeout, which the
  client reports as an ``McpError`` with code 408; or a ``TimeoutError``): ``abandoned``,
  reason ``timeout``;
* the calling task cancelled (including by an outer ``asyncio.timeout`` or anyio cancel
  scope, which cancel it): ``abandoned``, reason ``cancelled``.

A ``call_tool`` made inside a framework's tool call (a LangChain tool, an Agents SDK function
tool: `outer_call`) is part of that call: it joins its obligation (layer ``mcp``) and opens no
obligation or span of its own, and the framework resolves the call when its tool ends (the tool
may do more after the response, or answer the model differently). A ``call_tool`` outside any
framework tool call is its own obligation, as above.

The host sees exactly what it would without instrumentation: the same result object, the same
exception, re-raised unchanged. A failure of the telemetry is logged and never reaches the host.

A call's id is ``mcp-{session}-{request}``: the JSON-RPC id of its ``tools/call`` request,
prefixed with a random tag per ``ClientSession`` because every session numbers its requests from
zero. Each call's state lives in its own coroutine frame; the module keeps only the recorder to
report to and a weak map of session tags, so concurrent calls on one session, on many sessions
and from several event loops do not interfere.

Importing this module never imports ``mcp``; `instrument` returns False when it is missing.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
import uuid
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from otel_compaction._internal_errors import internal_errors
from otel_compaction.integrations import outer_call
from otel_compaction.recorder import ToolCallHandle, ToolCallRecorder
from otel_compaction.telemetry import semconv

if TYPE_CHECKING:
    from otel_compaction.telemetry.configuration import Telemetry

__all__ = ["TIMEOUT_CODE", "TOOL_ERROR", "instrument", "is_instrumented", "uninstrument"]

_log = logging.getLogger(__name__)

TOOL_ERROR = "tool_error"
"""``error.type`` of a call whose result came back with ``isError``."""
TIMEOUT_CODE = 408
"""The JSON-RPC error code the MCP client raises when a request times out."""

_MODULE = "mcp.client.session"
_TARGET = "ClientSession.call_tool"


class _State:
    """What `instrument` installed: the recorder calls report to, and the wrapper."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.recorder: ToolCallRecorder | None = None
        self.wrapper: Any = None
        self.tags: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


_STATE = _State()


def instrument(telemetry: Telemetry) -> bool:
    """Record every ``ClientSession.call_tool`` through `telemetry`'s recorder.

    Idempotent: calling it again only changes the recorder calls report to. Returns False
    (and changes nothing) when ``mcp`` is not installed; never raises.
    """
    try:
        import wrapt

        session_module = importlib.import_module(_MODULE)
    except ImportError:
        _log.debug("otel-compaction: mcp is not installed; MCP calls are not recorded")
        return False
    with internal_errors("instrumenting the MCP client"), _STATE.lock:
        _STATE.recorder = telemetry.recorder
        if _STATE.wrapper is None:  # still installed (maybe under another wrapper): reuse
            _STATE.wrapper = wrapt.wrap_function_wrapper(session_module, _TARGET, _call_tool)
        return True
    return False


def uninstrument() -> None:
    """Stop recording MCP calls; calls in flight still resolve. Never raises."""
    with _STATE.lock:
        _STATE.recorder = None
        if _STATE.wrapper is None:
            return
        # On a failure ours is left in place (another wrapper may sit on top): it only passes
        # calls through.
        with internal_errors("removing the MCP client wrapper"):
            session_module = importlib.import_module(_MODULE)
            if _installed(session_module):
                original = _STATE.wrapper.__wrapped__
                session_module.ClientSession.call_tool = original
                _STATE.wrapper = None


def is_instrumented() -> bool:
    """Whether MCP calls are being recorded."""
    return _STATE.recorder is not None


def _installed(session_module: Any) -> bool:
    """Our wrapper is the outermost ``call_tool`` (another wrapper on top of it is kept)."""
    current = session_module.ClientSession.__dict__.get("call_tool")
    return _STATE.wrapper is not None and current is _STATE.wrapper


async def _call_tool(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The wrapper: open before the request, resolve on whatever ends it, change nothing."""
    recorder = _STATE.recorder
    handle = _open(recorder, instance, args, kwargs) if recorder is not None else None
    if handle is None:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        _raised(handle, exc)
        raise
    _returned(handle, result)
    return result


@internal_errors("recording an MCP tool call")
def _open(
    recorder: ToolCallRecorder, session: Any, args: Any, kwargs: Any
) -> ToolCallHandle | None:
    outer = outer_call.current()
    if outer is not None and recorder.join(outer, semconv.LAYER_MCP):
        return None  # the framework's call: it resolves it
    name, arguments = _bind(*args, **kwargs)
    return recorder.call(
        str(name),
        _call_id(session),
        arguments=arguments,
        tool_type="extension",
        layer=semconv.LAYER_MCP,
    )


def _bind(name: Any, arguments: Any = None, *_: Any, **__: Any) -> tuple[Any, Any]:
    """``call_tool``'s tool name and arguments, however they were passed."""
    return name, arguments


def _call_id(session: Any) -> str:
    """``mcp-{session tag}-{JSON-RPC id}``. The id is read just before ``call_tool`` runs: it
    assigns the request id before its first suspension, so no other request can take it."""
    request_id = getattr(session, "_request_id", None)
    try:
        tag = _STATE.tags.get(session)
        if tag is None:
            tag = _STATE.tags.setdefault(session, uuid.uuid4().hex[:8])
    except TypeError:  # not weak-referenceable: a tag of its own
        tag = uuid.uuid4().hex[:8]
    if isinstance(request_id, int):
        return f"mcp-{tag}-{request_id}"
    return f"mcp-{tag}-{uuid.uuid4().hex[:12]}"


def _returned(handle: ToolCallHandle, result: Any) -> None:
    with internal_errors("recording an MCP tool result"):
        content = _result_content(result)
        if getattr(result, "isError", False):
            handle.error(TOOL_ERROR, content=content)
        else:
            handle.result(content)


def _raised(handle: ToolCallHandle, exc: BaseException) -> None:
    with internal_errors("recording an MCP tool failure"):
        if _is_timeout(exc):
            handle.abandon("timeout")
        elif _is_cancellation(exc):
            handle.abandon("cancelled")
        elif isinstance(exc, Exception):
            handle.error(exc)
        else:  # KeyboardInterrupt, SystemExit, GeneratorExit: no result will come
            handle.abandon(type(exc).__name__)


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError):
        return True
    from mcp.shared.exceptions import McpError

    return isinstance(exc, McpError) and getattr(exc.error, "code", None) == TIMEOUT_CODE


def _is_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, asyncio.CancelledError):
        return True
    try:  # another async backend (trio) has its own cancellation exception
        import anyio

        return isinstance(exc, anyio.get_cancelled_exc_class())
    except Exception:
        return False


def _result_content(result: Any) -> Any:
    """What the tool returned, as text: structured content when there is some, else the text
    blocks, else every block as JSON."""
    structured = getattr(result, "structuredContent", None)
    if isinstance(structured, Mapping):
        return dict(structured)
    blocks = list(getattr(result, "content", None) or ())
    texts = [block.text for block in blocks if isinstance(getattr(block, "text", None), str)]
    if len(texts) == len(blocks):
        return "\n".join(texts)
    return [block.model_dump(mode="json", exclude_none=True) for block in blocks]
