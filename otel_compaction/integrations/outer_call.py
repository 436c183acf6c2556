"""The framework tool call whose tool is running, for the calls the tool makes inside it.

A framework layer marks its call current while the tool runs: LangChain's callback handler from
``on_tool_start`` to ``on_tool_end`` / ``on_tool_error``, the Agents SDK processor from a
function span's start to its end. The MCP layer, recording a ``call_tool`` made inside such a
tool, joins the marked call instead of opening an obligation of its own: one model call, one
obligation, however many layers see it.

The mark is a context variable, so it follows the tool into the tasks and threads it starts with
its context copied, concurrent tools each see their own, and a nested tool's mark gives way to
its parent's when it ends. It holds a function rather than a handle, so a layer that binds its
call late (the Agents SDK processor, once it knows the arguments) is asked at the moment of use.
Nothing here raises: a failing lookup is logged and reads as no outer call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextvars import ContextVar, Token

from otel_compaction._internal_errors import internal_errors
from otel_compaction.recorder import ToolCallHandle

__all__ = ["Mark", "OuterCall", "current", "enter", "leave"]

OuterCall = Callable[[], ToolCallHandle | None]
"""The running tool's call, looked up when needed (None once the layer let it go)."""

Mark = Token[OuterCall | None]
"""What `enter` gives and `leave` takes back."""

_CURRENT: ContextVar[OuterCall | None] = ContextVar("otel_compaction_outer_call", default=None)


def enter(call: OuterCall) -> Mark:
    """Mark `call` as the running tool's; give the token to `leave` when the tool ends."""
    return _CURRENT.set(call)


def leave(token: Mark) -> None:
    """The tool ended: the mark before `enter` is current again. A tool that ends in another
    context than it started in leaves the starting one marked; a resolved call reads as none."""
    with contextlib.suppress(ValueError):
        _CURRENT.reset(token)


def current() -> ToolCallHandle | None:
    """The open call of the tool running in this context, if a framework layer marked one."""
    call = _CURRENT.get()
    if call is None:
        return None
    handle = None
    with internal_errors("looking up the running tool's call"):
        handle = call()
    return handle if handle is not None and not handle.resolved else None
