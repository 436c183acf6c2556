"""The fake model server as the tests import it: ``examples/fake_model_server.py``, plus the
``fake_llm_server`` pytest fixture (``conftest.py`` loads this module as a plugin)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_model_server import (
    LOOPBACK,
    Api,
    Dynamic,
    ErrorReply,
    FakeLLMServer,
    ProducedResponse,
    RawReply,
    RecordedRequest,
    Reply,
    Scripted,
    ToolCall,
)
from loopback import bypass_proxies

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
    "fake_llm_server_fixture",
]


@pytest.fixture(name="fake_llm_server")
def fake_llm_server_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    """A running :class:`FakeLLMServer`, stopped after the test."""
    bypass_proxies(monkeypatch)
    with FakeLLMServer() as server:
        yield server
    assert not server.errors, "FakeLLMServer failed while serving:\n" + "\n".join(server.errors)
