"""Optional agent frameworks in tests: skip when one is missing, fail instead under ``CI=true``.

A test module imports its framework in a ``try`` block, keeps the ``ImportError`` and calls
`require_framework` at module level, so every test in it skips with the reason (and the
install command) on a laptop without the framework, and the module fails under CI, where a
missing dependency is a defect and never a silent skip.
"""

from __future__ import annotations

import pytest
from conftest import running_in_ci


def require_framework(missing: ImportError | None, framework: str, extra: str) -> None:
    """Skip the calling module when `missing` is set; fail it instead under ``CI=true``."""
    if missing is None:
        return
    install = f"pip install 'otel-compaction[{extra}]'"
    reason = f"{framework} is not importable ({missing}); install it with: {install}"
    if running_in_ci():
        pytest.fail(f"{reason} (CI=true, so this is an error, not a skip)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)
