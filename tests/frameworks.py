"""Optional agent frameworks in tests: skip when one is missing, fail instead under ``CI=true``.

A test module imports its framework in a ``try`` block, keeps the ``ImportError`` and calls
`require_framework` at module level, so every test in it skips with the reason (and the
install command) on a laptop without the framework, and the module fails under CI, where a
missing dependency is a defect and never a silent skip. `integrations_off` turns every
framework integration off, before and after a test that turns them on.
"""

from __future__ import annotations

from conftest import unavailable

from otel_compaction.integrations import REGISTRY, Integration


def require_framework(missing: ImportError | None, framework: str, extra: str) -> None:
    """Skip the calling module when `missing` is set; fail it instead under ``CI=true``."""
    if missing is None:
        return
    install = f"pip install 'otel-compaction[{extra}]'"
    unavailable(f"{framework} is not importable ({missing}); install it with: {install}")


def integrations() -> dict[str, Integration]:
    """Every framework integration module, by its registry name (importing one never imports
    its framework)."""
    return {row.name: row.load() for row in REGISTRY}


def integrations_off() -> None:
    """Every framework integration uninstrumented: what a test left on is off."""
    for module in integrations().values():
        module.uninstrument()
