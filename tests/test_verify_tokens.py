"""Verification matches identifiers and tool names as whole tokens, never inside longer ones."""

from __future__ import annotations

from otel_compaction.analysis import Negative
from otel_compaction.summarizers import SummaryRequest, verify


def _request(
    identifiers: tuple[str, ...] = (), negatives: tuple[Negative, ...] = ()
) -> SummaryRequest:
    return SummaryRequest(messages=[], span=(1, 3), identifiers=identifiers, negatives=negatives)


def test_identifier_inside_a_longer_code_is_not_carried() -> None:
    request = _request(identifiers=("ZFA04Y", "mia_li_3668"))
    assert verify("Booked ZFA04Y7 for mia_li_36689.", request).missing_identifiers == (
        "ZFA04Y",
        "mia_li_3668",
    )
    assert verify("Booked ZFA04Y (mia_li_3668).", request).ok


def test_negative_of_a_tool_is_not_stated_by_a_longer_tool_name() -> None:
    negative = Negative(4, "call_9", "search", "no matches")
    request = _request(negatives=(negative,))
    assert not verify("search_logs found no matches.", request).ok
    assert verify("search found no matches.", request).ok
    assert verify("The call call_9 came back empty-handed.", request).ok
    assert not verify("The call call_90 came back empty.", request).ok
