"""``unresolved_reference``: an identifier the retained part still refers to whose only
antecedent is in the span (seed 2's "verified by explicit binding").

An identifier is owed by a summary only when all of these hold: it appears in the span, it
appears nowhere before the span (the kept head binds it otherwise), and its first appearance
after the span *refers* to it (assistant text, tool-call arguments, user text). One that a tool
result after the span re-introduces before anyone uses it is bound there. Identifiers are whole
values (see `otel_compaction.identifiers`); a bulk listing is ranked by how often the retained
part uses each one and capped at ``max_identifiers``, the archive handle covering the rest.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from otel_compaction.identifiers import is_path
from otel_compaction.rules.base import Finding, ObligationRef, Rule, SpanView

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis


@dataclass(slots=True)
class Bindings:
    """Where each identifier appears: message indices ascending, and whether the appearance
    in that message refers to it (True) or introduces it (a tool result, the system prompt)."""

    values: list[str] = field(default_factory=list)
    first: list[int] = field(default_factory=list)
    at: list[list[int]] = field(default_factory=list)
    refers: list[list[bool]] = field(default_factory=list)


def scan(analysis: Analysis) -> Bindings:
    """Every identifier's appearances, sorted by first appearance."""
    bindings = Bindings()
    if analysis.policy.identifier_regex is None:
        return bindings
    transcript = analysis.transcript
    identifiers = analysis.scans.identifiers
    table: dict[str, tuple[list[int], list[bool]]] = {}
    for entry in transcript.entries:
        for value, refers in identifiers(transcript, entry):
            where = table.get(value)
            if where is None:
                table[value] = ([entry.index], [refers])
            else:
                where[0].append(entry.index)
                where[1].append(refers)
    _merge_relative_paths(table)
    for value, (at, flags) in sorted(table.items(), key=lambda kv: (kv[1][0][0], kv[0])):
        bindings.values.append(value)
        bindings.first.append(at[0])
        bindings.at.append(at)
        bindings.refers.append(flags)
    return bindings


def _merge_relative_paths(table: dict[str, tuple[list[int], list[bool]]]) -> None:
    """Fold a relative path into the one absolute path it is the tail of (``src/a.py`` and
    ``/home/dev/shop/src/a.py`` are one file), so that either form binds the other."""
    tails: dict[str, list[str]] = {}
    for value in table:
        if value.startswith(("/", "~")) and is_path(value):
            parts = value.split("/")
            for cut in range(1, len(parts) - 1):
                tails.setdefault("/".join(parts[cut:]), []).append(value)
    for value in list(table):
        if value.startswith(("/", "~")) or not is_path(value):
            continue
        targets = tails.get(value.lstrip("/"))
        if not targets or len(targets) != 1:
            continue  # not a tail of any absolute path, or ambiguous
        merged: dict[int, bool] = {}
        for index, refers in zip(*table[targets[0]], strict=True):
            merged[index] = refers
        for index, refers in zip(*table.pop(value), strict=True):
            merged[index] = merged.get(index, True) and refers
        ordered = sorted(merged.items())
        table[targets[0]] = ([i for i, _ in ordered], [r for _, r in ordered])


def owed(analysis: Analysis, start: int, end: int) -> tuple[list[tuple[str, int, int]], int]:
    """The identifiers a summary of ``[start, end)`` owes, as (value, first, first use after
    the span), ranked and capped; and how many the cap left out."""
    bindings: Bindings = analysis.facts.get("unresolved_reference") or Bindings()
    lo = bisect.bisect_left(bindings.first, start)
    hi = bisect.bisect_left(bindings.first, end)
    ranked: list[tuple[int, int, str, int]] = []
    for position in range(lo, hi):
        at, refers = bindings.at[position], bindings.refers[position]
        after = bisect.bisect_left(at, end)
        if after < len(at) and refers[after]:
            uses = sum(refers[after:])
            ranked.append((-uses, at[after], bindings.values[position], at[0]))
    ranked.sort()
    cap = analysis.policy.patterns.identifiers.max_identifiers
    kept = ranked if cap is None else ranked[:cap]
    chosen = sorted(((value, first, use) for _, use, value, first in kept), key=lambda t: t[1])
    return chosen, len(ranked) - len(kept)


def check(view: SpanView) -> list[Finding]:
    """Identifiers first seen in the span that the retained part refers to."""
    chosen, left_out = owed(view.analysis, view.start, view.end)
    out = [
        Finding(
            "unresolved_reference", first,
            f"{value!r} is first seen at message {first} and referred to at message {use}",
            obligation=ObligationRef("reference", value, first),
        )
        for value, first, use in chosen
    ]  # fmt: skip
    if left_out:
        out.append(
            Finding(
                "unresolved_reference", None,
                f"{left_out} more identifiers are referred to later than max_identifiers "
                "allows; the archive handle covers them",
            )
        )  # fmt: skip
    return out


RULE = Rule(
    name="unresolved_reference",
    kind="quiescence",
    summary="an identifier the retained part refers to whose only antecedent is in the span",
    severities={"default": "carry", "strict": "block", "lenient": "warn"},
    check=check,
    scan=scan,
)
