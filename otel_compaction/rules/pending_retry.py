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

from otel_compaction.rules.base import Finding, Rule, SpanView, Tracked, unclosed

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis


def scan(analysis: Analysis) -> list[Tracked]:
    """Every retry chain, from its first failure to where it succeeds or is given up."""
    from otel_compaction.analysis import call_target

    transcript = analysis.transcript
    calls, results, entries = transcript.calls, transcript.results, transcript.entries
    in_chain: set[int] = set()
    out: list[Tracked] = []
    for result in results:
        if result.ordinal in in_chain or result.call is None:
            continue
        if analysis.outcomes[result.ordinal] != "failure":
            continue
        call = calls[result.call]
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
                in_chain.add(answer.ordinal)
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
        out.append(
            Tracked(
                "pending_retry", "retry", call.id, call.name, result.message_index, resolved,
                status, analysis.scans.subjects(call),
            )
        )  # fmt: skip
    return out


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
)
