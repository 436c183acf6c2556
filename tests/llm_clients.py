"""The real ``openai`` and ``anthropic`` SDK clients, pointed at a `FakeLLMServer`.

Tests that need the SDKs call `require_sdks` (or use the ``sdks`` fixture: import
``sdks_fixture`` into the test module to register it): they skip when ``openai`` or
``anthropic`` cannot be imported, and fail instead when the ``CI`` environment variable is
``true``. The clients never retry, time out after ten seconds and validate every response
strictly, so a malformed answer from the fake server fails the test.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import unavailable
from fake_llm_server import FakeLLMServer

try:
    import anthropic
    import openai
except ImportError as missing:  # the SDK tests skip (or fail under CI), see require_sdks
    SDK_IMPORT_ERROR: ImportError | None = missing
else:
    SDK_IMPORT_ERROR = None

API_KEY = "test-key-not-secret"


def require_sdks() -> None:
    """Skip when the openai or anthropic SDK is missing; fail instead under ``CI=true``.

    ``pytest.importorskip`` would skip under CI too, hiding the missing dependency.
    """
    if SDK_IMPORT_ERROR is None:
        return
    reason = (
        f"the real openai and anthropic SDKs are needed ({SDK_IMPORT_ERROR}); "
        "install them with: pip install 'openai>=1.66' 'anthropic>=0.40'"
    )
    unavailable(reason)


@pytest.fixture(name="sdks")
def sdks_fixture() -> None:
    """Apply `require_sdks` to a test."""
    require_sdks()


def _options(base_url: str) -> dict[str, Any]:
    """What every client here is constructed with."""
    return {
        "base_url": base_url,
        "api_key": API_KEY,
        "max_retries": 0,
        "timeout": 10,
        "_strict_response_validation": True,
    }


def openai_client(server: FakeLLMServer) -> openai.OpenAI:
    """A sync OpenAI client for ``server``."""
    return openai.OpenAI(**_options(server.openai_base_url))


def async_openai_client(server: FakeLLMServer) -> openai.AsyncOpenAI:
    """An async OpenAI client for ``server``."""
    return openai.AsyncOpenAI(**_options(server.openai_base_url))


def anthropic_client(server: FakeLLMServer) -> anthropic.Anthropic:
    """A sync Anthropic client for ``server``."""
    return anthropic.Anthropic(**_options(server.anthropic_base_url))


def async_anthropic_client(server: FakeLLMServer) -> anthropic.AsyncAnthropic:
    """An async Anthropic client for ``server``."""
    return anthropic.AsyncAnthropic(**_options(server.anthropic_base_url))
