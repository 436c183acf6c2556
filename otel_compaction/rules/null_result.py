"""``null_result``: a negative result in the span: "searched, found nothing" must survive as a
negative, or its absence reads as "never searched" (seed 2).

A negative says something was not the case: an absence (not found, no matches, an empty
search result), a failure, or a rejection (see `otel_compaction.outcomes` for how a result is
judged; a command that stopped at a prompt nobody answered failed). A command that succeeded
with no output is silent success, and a call cancelled before it ran (a parallel sibling
errored, the user interrupted) taught nothing about its subject: neither is a negative.
Tools whose output means nothing (a scratchpad) are ignored.

A later answer to the same call (the same tool, with the same arguments but for the words
that only describe it: a description, a justification) supersedes a transient failure (a
timeout, a 503, a sandbox that could not start the command): the retry got past it. A retry
that changed how the call runs (a longer timeout, escalated sandbox permissions) is another
call: the failure is what taught that change (every later command of a session whose sandbox
runner fails runs escalated), so it stands. Any other negative stands too (a test that failed
before a fix still failed), unless the same call answers negatively again: then only the
latest of them is kept.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Final

from otel_compaction.outcomes import RESULT_HEAD, exit_status, unanswered_prompt
from otel_compaction.rules.base import Discharge, Finding, ObligationRef, Rule, SpanView

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis, Negative
    from otel_compaction.transcript import ToolCall

# Arguments that change neither what a call does nor how it runs (its words for the reader,
# how much of its output comes back): a retry may change them and still be the same call.
_DESCRIPTIVE: Final = frozenset({"description", "justification", "max_output_tokens"})


# A failure of the moment, which the same call may get past when retried: a timeout, a rate
# limit, a server or connection error, a command the sandbox could not start.
_TRANSIENT: Final = re.compile(
    r"""(?ix)\b(?:timed\ out|time-?out|rate[\ -]limit(?:ed)?|too\ many\ requests|overloaded
    |service\ unavailable|temporarily\ unavailable|internal\ server\ error|bad\ gateway
    |connection\ (?:reset|refused|aborted)|econnreset|etimedout|http\ 5\d\d|\b50[0234]\b
    |execution\ error|sandbox)"""
)
# Where a failure that matches none of the policy's patterns says what went wrong (a build's
# "Build error occurred" after its warnings).
_FAILURE_WORDS: Final = re.compile(
    r"(?i)\b(?:error|failed|failure|fatal|exception|denied|cannot|not recognized)\b"
)


class _Negatives:
    """The negatives so far by result ordinal (in order), the latest answer's ordinal to
    each call (tool and what it is asked) while that answer is a negative, and which of those
    are transient failures."""

    __slots__ = ("found", "latest", "transient", "upto")

    def __init__(self) -> None:
        self.upto = 0  # results read
        self.found: dict[int, Negative] = {}
        self.latest: dict[tuple[str, str], int] = {}
        self.transient: set[int] = set()  # the failures a retry may get past


def scan(analysis: Analysis) -> list[Negative]:
    """Every negative result no later answer to its call superseded, with what its call was
    about, in order."""
    from otel_compaction.analysis import NEGATIVE_OUTCOMES, Negative

    ignored = set(analysis.policy.patterns.null_result.ignore_tools)
    transcript = analysis.transcript
    outcomes = analysis.outcomes
    results = transcript.results
    fold = analysis.scans.fold("null_result", _Negatives, len(results))
    for result in results[fold.upto :]:
        outcome = outcomes[result.ordinal]
        if outcome == "cancelled":
            continue  # it never ran: it answers nothing
        call = transcript.call_of(result)
        key = (call.name, asked(call)) if call is not None else None
        negative = outcome in NEGATIVE_OUTCOMES
        if key is not None:
            earlier = fold.latest.pop(key, None)
            if earlier is not None and (negative or earlier in fold.transient):
                del fold.found[earlier]
        if not negative:
            continue
        tool = call.name if call is not None else ""
        if tool in ignored:
            continue
        excerpt = _excerpt(analysis, result.text) or "(empty result)"
        subjects = analysis.scans.subjects(call)
        fold.found[result.ordinal] = Negative(
            result.message_index, result.call_id, tool, excerpt, subjects, outcome
        )
        if key is not None:
            fold.latest[key] = result.ordinal
            if outcome == "failure" and _TRANSIENT.search(result.text[:RESULT_HEAD]):
                fold.transient.add(result.ordinal)
    fold.upto = len(results)
    return list(fold.found.values())


def asked(call: ToolCall) -> str:
    """What `call` asks and how it runs, in one canonical form: its arguments but for those
    that only describe it. Two calls with the same tool and the same `asked` are one call
    made again (its latest negative answer stands for the earlier ones)."""
    try:
        value: Any = json.loads(call.arguments)
    except (TypeError, ValueError):
        return " ".join(call.arguments.split())
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in _DESCRIPTIVE}
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _excerpt(analysis: Analysis, text: str) -> str:
    """About 200 characters of the result around what makes it negative (a tool's preamble,
    such as a shell's exit-status header, is not what the summary must say; a failure with
    nothing to say is named by its exit code)."""
    code, body = exit_status(text)
    flat = " ".join(body.split())
    if not flat and code:
        return f"exit code {code}"
    prompt = unanswered_prompt(body)
    if prompt is not None:
        return f"stopped at a prompt nobody answered: {prompt[:160]}"
    policy = analysis.policy
    for regex in (policy.rejection_regex, policy.null_regex, policy.error_regex):
        match = regex.search(flat) if regex is not None else None
        if match is not None:
            return _around(flat, match.start())
    named = _FAILURE_WORDS.search(flat)
    return _around(flat, named.start()) if named is not None else flat[:200]


def _around(flat: str, at: int) -> str:
    start = max(0, at - 60)
    return ("…" if start else "") + flat[start : start + 200]


def check(view: SpanView) -> list[Finding]:
    """Negative results in the span."""
    analysis = view.analysis
    severity = analysis.severities(view.addressable)["null_result"]

    def findings() -> list[Finding]:
        return [
            Finding(
                "null_result", n.message_index,
                f"{n.tool or 'tool'} ({n.call_id}) returned a negative result: {n.text}",
                severity,
                ObligationRef("negative_result", n.call_id, n.message_index, n.tool),
            )
            for n in analysis.negatives
        ]  # fmt: skip

    # One finding per negative per analysis, at the policy's severity (a later answer may
    # supersede a negative, so the list is not kept as the conversation grows).
    found = analysis.span_memo(("null_result findings", severity), findings)
    return found[slice(*analysis.negatives_between(view.start, view.end))]


RULE = Rule(
    name="null_result",
    kind="quiescence",
    summary='a negative result ("not found", empty search, error, rejection) to keep as one',
    severities={"default": "carry", "strict": "block", "lenient": "warn"},
    check=check,
    scan=scan,
    discharge=Discharge("negative_result", None),
)
