"""``pending_retry``: a failed call whose retry chain is still open (seed 1's retry counter).

A chain opens at a transient failure (an error result, or one that asks to be retried), not at
a negative answer ("user not found" is a result) nor at a rejection (the user declined: "do not
retry"). It is keyed by tool and target (the call's arguments) and closes:

* ``succeeded``: a later call of the same tool and target returns a result;
* ``given_up``: the model moves on: it ends its turn (text, and no call of that target before
  the response ends) without promising to retry, or the user speaks first;
* ``stale``: after the policy's ``stale_after``; or ``given_up`` through `force_terminal`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_compaction.rules.base import Discharge, Finding, Rule, SpanView, Tracked, unclosed

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis
    from otel_compaction.transcript import ToolResult


class _Chains:
    """The chains no later message can change, and where to read on from."""

    __slots__ = ("final", "in_chain", "resume", "upto")

    def __init__(self) -> None:
        self.upto = 0  # results seen
        self.resume = 0  # the first result not yet settled into `final`
        self.final: list[Tracked] = []
        self.in_chain: set[int] = set()  # answers of settled chains


def scan(analysis: Analysis) -> list[Tracked]:
    """Every retry chain, from its first failure to where it succeeds or is given up.

    A chain that succeeded, or was given up before the last message, is settled: no message
    appended later changes it, so a growing conversation reads on from the first chain
    still open."""
    transcript = analysis.transcript
    results = transcript.results
    fold = analysis.scans.fold("pending_retry", _Chains, len(results))
    last = len(transcript) - 1
    in_chain = set(fold.in_chain)
    out = list(fold.final)
    settling = True
    for result in results[fold.resume :]:
        if result.ordinal in in_chain or result.call is None:
            continue
        if analysis.outcomes[result.ordinal] != "failure":
            continue
        answers: list[int] = []
        chain = _chain(analysis, result, answers)
        in_chain.update(answers)
        out.append(chain)
        settled = chain.status == "succeeded" or (
            chain.resolved is not None and chain.resolved < last
        )
        if settling and settled:
            fold.final.append(chain)
            fold.in_chain.update(answers)
            fold.resume = result.ordinal + 1
        elif settling:
            settling = False
            fold.resume = result.ordinal
    if settling:
        fold.resume = len(results)
    fold.upto = len(results)
    return out


def _chain(analysis: Analysis, result: ToolResult, answers: list[int]) -> Tracked:
    """The chain a failed `result` opens, its retries' answers added to `answers`."""
    from otel_compaction.analysis import call_target

    transcript = analysis.transcript
    calls, results, entries = transcript.calls, transcript.results, transcript.entries
    call = calls[result.call or 0]
    target = call_target(call)
    resolved: int | None = None
    status = "open"
    promised = False
    index = result.message_index + 1
    while index < len(entries):
        entry = entries[index]
        index += 1
        attempt = next(
            (
                calls[c]
                for c in reversed(entry.calls)
                if calls[c].name == call.name and call_target(calls[c]) == target
            ),
            None,
        )
        if attempt is not None:
            if attempt.result is None:
                break  # the retry is in flight: the chain stays open
            answer = results[attempt.result]
            answers.append(answer.ordinal)
            if analysis.outcomes[answer.ordinal] != "failure":
                resolved, status = answer.message_index, "succeeded"
                break
            promised = False
            index = answer.message_index + 1
            continue
        turn_ends = index >= len(entries) or entries[index].role != "assistant"
        if entry.role == "assistant" and not entry.calls and entry.text.strip() and turn_ends:
            if analysis.scans.promises(entry):
                promised = True
                continue
            resolved, status = entry.index, "given_up"
            break
        if entry.role == "user" and not entry.only_results and not promised:
            resolved, status = entry.index, "given_up"
            break
    return Tracked(
        "pending_retry", "retry", call.id, call.name, result.message_index, resolved,
        status, analysis.scans.subjects(call),
    )  # fmt: skip


def check(view: SpanView) -> list[Finding]:
    """Chains opened in the span and not closed in it, and those only the ledger holds."""
    return unclosed(view, "pending_retry", "failed call", ledger_kind="retry")


RULE = Rule(
    name="pending_retry",
    kind="obligation",
    summary="a failed call whose retry has not succeeded and that the model has not given up",
    severities={"default": "block", "strict": "block", "lenient": "warn"},
    check=check,
    scan=scan,
    discharge=Discharge(
        "retry",
        "given_up",
        "retry until it succeeds, or force_terminal() records the chain given up",
    ),
)
