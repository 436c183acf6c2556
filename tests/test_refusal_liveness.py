"""A refusal names what actually blocks, so that discharging it lets the next compaction
proceed: `compact_or_force` always ends in a compaction when the blockers are obligations.

The case: the requested span ends between two parallel calls and their results, so closing it
means extending it; a retry chain opened in those results (a transient failure, never retried
and never given up) stops the extension. The calls' results stand in the transcript, so the
refusal must name the retry, not the calls: discharging a call that already has its result
changes nothing, and the same refusal would come back forever.
"""

from __future__ import annotations

import pytest
from transcript_builders import CHAT, FORMATS, Call, Message, Script

from otel_compaction import CompactionGate, CompactionRefused
from otel_compaction.compactor import GuardedCompactor
from otel_compaction.summarizers import ExtractiveSummarizer


def retry_stops_the_extension(fmt: str = CHAT) -> list[Message]:
    s = Script(fmt)
    s.user("Find my profile and a flight from JFK.")
    s.call(
        Call("c1", "get_user", {"user_id": "mia_li_3668"}),
        Call("c2", "search_flights", {"origin": "JFK"}),
    )
    s.result("c2", "Error: service unavailable", error=True)
    s.result("c1", '{"name": "Mia"}')
    s.call(Call("c3", "get_reservation", {"reservation_id": "ZFA04Y"}))
    s.result("c3", '{"status": "ok"}')
    s.call(Call("c4", "get_user_details", {"user_id": "mia_li_3668"}))
    s.result("c4", "{}")
    return s.messages


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_refusal_names_the_retry_that_stops_the_extension_not_answered_calls(fmt: str) -> None:
    messages = retry_stops_the_extension(fmt)
    end = (
        2 if fmt == CHAT else next(i for i, m in enumerate(messages) if "Error: service" in str(m))
    )
    decision = CompactionGate().evaluate(messages, 0, end, critical=True, raise_on_refuse=False)
    assert decision.action == "refuse"
    assert [(o.kind, o.id) for o in decision.obligations] == [("retry", "c2")]


def test_compact_or_force_ends_in_a_compaction_when_a_retry_stops_the_extension() -> None:
    messages = retry_stops_the_extension()
    compactor = GuardedCompactor(ExtractiveSummarizer(), budget=100, token_counter=lambda text: 10)
    actions: list[str] = []
    compactor.gate.add_observer(lambda decision, analysis, started: actions.append(decision.action))
    with pytest.raises(CompactionRefused):
        compactor.compact(messages, force=True, critical=True, end=2)

    result = compactor.compact_or_force(messages, force=True, critical=True, end=2)

    assert result.compacted is True
    assert result.span == (0, 4)
    assert actions == ["refuse", "refuse", "compact"]
    assert [(o.kind, o.id, o.status) for o in compactor.ledger.snapshot(None).obligations] == [
        ("retry", "c2", "given_up")
    ]
