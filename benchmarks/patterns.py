"""Worst-case inputs for the policy's patterns: how long the gate takes on each.

Each case is a conversation whose tool result and replies hold one hostile text: 80 KB of
"a." (quadratic for a backtracking e-mail shape), the same ending in "@", a 400 KB base64url
blob, a path of 40,000 parts, 80 KB of non-ASCII text; and a user policy whose negative
pattern is ``(a+)+$`` (RE2) or ``(a|aa)+(?=b)\\1`` (which only the bounded backtracking scan
can run), on 40 to 60 characters that make Python's `re` backtrack for minutes. Printed: the
seconds of one evaluation under the default policy (or that user policy), and the seconds of
a plain message of the same length for scale. The exit status is 0: this is a report.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from time import perf_counter

from otel_compaction import CompactionGate, Policy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from worst_cases import CATASTROPHIC, WORST_CASES, conversation, user_policy_yaml


def seconds(gate: CompactionGate, text: str) -> float:
    """One evaluation of the oldest span, without the incremental state."""
    started = perf_counter()
    gate.evaluate(conversation(text), 1, 4, raise_on_refuse=False)
    return perf_counter() - started


def user_policy(directory: Path, pattern: str) -> Policy:
    path = directory / "policy.yaml"
    path.write_text(user_policy_yaml(pattern), encoding="utf-8")
    return Policy.load(path)


def main() -> int:
    default = CompactionGate("default", incremental=False)
    cases = WORST_CASES
    print("Worst-case inputs, one evaluation each (default policy)\n")
    print(f"  {'input':<34}{'seconds':>9}{'plain text, same length':>26}")
    for name, text in cases.items():
        plain = "word " * (len(text) // 5)
        print(f"  {name:<34}{seconds(default, text):>9.3f}{seconds(default, plain):>26.3f}")
    with tempfile.TemporaryDirectory() as directory:
        print("\nA catastrophic user pattern (Python's re backtracks for minutes on these)\n")
        for pattern, text, engine in CATASTROPHIC:
            policy = user_policy(Path(directory), pattern)
            gate = CompactionGate(policy, incremental=False)
            shown = pattern.replace("\\\\", "\\")
            took = seconds(gate, text)
            print(f"  {shown:<22} on {len(text)} chars ({engine}): {took:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
