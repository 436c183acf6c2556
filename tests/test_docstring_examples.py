"""The examples in the public docstrings run as written."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import otel_compaction

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(otel_compaction.__path__, "otel_compaction.")
    if not info.name.endswith("__main__")
    and ".instrumentation" not in info.name
    and ".integrations" not in info.name
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    failed, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failed == 0, f"{name}: {failed} docstring example(s) failed"
