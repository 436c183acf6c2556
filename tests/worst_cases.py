"""Hostile inputs for the policy's patterns, shared by the tests and `benchmarks/patterns.py`."""

from __future__ import annotations

import base64
import os
from typing import Any

WORST_CASES = {
    "80 KB of 'a.' (the e-mail shape)": "a." * 40_000,
    "80 KB of 'a.' then '@'": "a." * 40_000 + "@",
    "400 KB base64url blob": base64.urlsafe_b64encode(os.urandom(300_000)).decode(),
    "a path of 40,000 parts": "a/" * 40_000,
    "80 KB non-ASCII": "é." * 40_000,
}
"""Texts on which a backtracking engine, or a pattern applied to one huge run, goes quadratic."""

CATASTROPHIC = (
    ("(a+)+$", "a" * 40 + "!", "re2"),
    ("(a|aa)+(?=b)\\\\1", "a" * 60 + "c", "bounded"),
)
"""User patterns (as written in YAML single quotes), a text that makes Python's `re`
backtrack for minutes on them, and the engine that runs each instead."""


def conversation(text: str) -> list[dict[str, Any]]:
    """A call, its result, and replies, all carrying `text`."""
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": text},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "next " + text[:2000]},
        {"role": "assistant", "content": "ok"},
    ]


def user_policy_yaml(pattern: str) -> str:
    """A policy whose only negative-result pattern is `pattern`."""
    return f"patterns:\n  null_result:\n    patterns: ['{pattern}']\n"
