"""Wrapping SDK methods with wrapt, and taking the wrappers out again.

`traced_method` turns a description of one API (how to read its request, its response and its
stream) into a wrapt wrapper, sync or async. The wrapper calls the SDK exactly once with the
caller's arguments and returns what it returned (a stream wrapped in a transparent proxy); the
SDK's own exceptions pass through unchanged. When the runtime is shut down the wrapper is a
plain pass-through, so a wrapper that cannot be taken out (another instrumentation wrapped over
it) stays harmless.

`Patches.wrap` puts the wrapper next to the SDK method: beneath the wrapt wrappers already on it
(a GenAI instrumentation's, such as opentelemetry-instrumentation-openai-v2), as it is beneath
those installed after it. So it always runs inside their inference span, whichever
instrumentation was installed first, and their ``uninstrument()`` takes out their own wrapper.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import wrapt

from otel_compaction.instrumentation._requests import ModelRequest, ModelResponse
from otel_compaction.instrumentation._runtime import Runtime
from otel_compaction.instrumentation._streams import StreamObserver

__all__ = ["Api", "Patches", "Wrapper", "traced_method"]

_log = logging.getLogger(__name__)

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]
"""A wrapt function wrapper: ``(wrapped, instance, args, kwargs) -> result``."""


@dataclass(frozen=True, slots=True)
class Api:
    """How to read one API: its request from the call's keyword arguments, a complete response
    object, and a stream (a fresh observer per stream)."""

    read: Callable[[Mapping[str, Any]], ModelRequest]
    extract: Callable[[Any], ModelResponse | None]
    observer: Callable[[], StreamObserver]


def traced_method(runtime: Runtime, api: Api, *, is_async: bool) -> Wrapper:
    """A wrapper recording each call of an SDK method as one exchange of `runtime`."""
    if is_async:

        async def traced_async(
            wrapped: Callable[..., Any],
            instance: Any,
            args: tuple[Any, ...],
            kwargs: dict[str, Any],
        ) -> Any:
            if not runtime.active:
                return await wrapped(*args, **kwargs)
            exchange = runtime.begin(lambda: api.read(kwargs))
            with exchange.activated():
                try:
                    result = await wrapped(*args, **kwargs)
                except BaseException as error:
                    exchange.fail(error)
                    raise
            return exchange.complete(result, api.extract, api.observer, is_async=True)

        return traced_async

    def traced(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if not runtime.active:
            return wrapped(*args, **kwargs)
        exchange = runtime.begin(lambda: api.read(kwargs))
        with exchange.activated():
            try:
                result = wrapped(*args, **kwargs)
            except BaseException as error:
                exchange.fail(error)
                raise
        return exchange.complete(result, api.extract, api.observer, is_async=False)

    return traced


class Patches:
    """The wrappers one instrumentation installed, so that `remove` can restore the SDK."""

    def __init__(self) -> None:
        """Nothing installed yet."""
        self._installed: list[tuple[type[Any], str, Any, bool]] = []

    def wrap(self, owner: type[Any], name: str, wrapper: Wrapper) -> None:
        """Wrap the method `name` of class `owner` once (skipped when it does not exist),
        beneath the wrapt wrappers already on it."""
        if any(o is owner and n == name for o, n, _, _ in self._installed):
            return
        if not callable(getattr(owner, name, None)):
            _log.debug("otel-compaction: %s.%s not found; not instrumented", owner, name)
            return
        own = name in vars(owner)
        installed = _beneath(vars(owner).get(name), wrapper)
        if installed is None:
            wrapt.wrap_function_wrapper(owner, name, wrapper)
            installed = vars(owner)[name]
        self._installed.append((owner, name, installed, own))

    def remove(self) -> None:
        """Restore every wrapped method; a wrapper another instrumentation wrapped over is
        taken out of the chain (or, if that fails, stays as a pass-through)."""
        for owner, name, installed, own in reversed(self._installed):
            current = vars(owner).get(name)
            if _is(current, installed):
                if own:
                    setattr(owner, name, installed.__wrapped__)
                else:
                    delattr(owner, name)
                continue
            outer = current
            while outer is not None:
                inner = getattr(outer, "__wrapped__", None)
                if _is(inner, installed):
                    try:
                        outer.__wrapped__ = installed.__wrapped__
                    except (AttributeError, TypeError):
                        _log.debug("otel-compaction: %s.%s stays wrapped", owner, name)
                    break
                outer = inner
        self._installed.clear()


def _beneath(found: Any, wrapper: Wrapper) -> Any:
    """`wrapper` installed beneath the innermost of the wrapt wrappers `found` is made of (the
    method as another instrumentation wrapped it); None when it is not wrapped that way."""
    innermost = None
    while isinstance(found, wrapt.FunctionWrapper):
        innermost, found = found, found.__wrapped__
    if innermost is None:
        return None
    installed = wrapt.FunctionWrapper(found, wrapper)
    try:
        innermost.__wrapped__ = installed
    except (AttributeError, TypeError):
        _log.debug("otel-compaction: cannot wrap beneath %r; wrapping over it", innermost)
        return None
    return installed


def _is(found: Any, installed: Any) -> bool:
    """`found` is our wrapper, or our wrapper bound to its class (which is what another
    instrumentation puts back when it unwraps by ``getattr``)."""
    return found is installed or (
        found is not None and getattr(found, "_self_parent", None) is installed
    )
