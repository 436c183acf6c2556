"""`verify` (the check every summary must pass) and the model-free `ExtractiveSummarizer`.

`verify` accepts a summary only when every identifier to carry appears verbatim and every
negative result is stated: a line names the call id, or names the tool and negates on that
same line (the contradiction probe: the summary alone says what was not the case).
"""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Any

import pytest

import otel_compaction
from otel_compaction import CompactionGate
from otel_compaction.analysis import Negative
from otel_compaction.rules import ObligationRef
from otel_compaction.summarizers import (
    ExtractiveSummarizer,
    Summarizer,
    SummaryRequest,
    Verification,
    retry_request,
    verify,
)

Message = dict[str, Any]

LOGS = Negative(7, "call_logs_1", "search_logs", "no matches in the last 24h")
CERT = Negative(9, "call_cert_1", "check_certificate", "error: file not found")
HANDLE = "arc_0123456789abcdef01234567"


def request(
    *,
    identifiers: tuple[str, ...] = (),
    negatives: tuple[Negative, ...] = (),
    messages: list[Message] | None = None,
    span: tuple[int, int] = (1, 2),
    pending: tuple[ObligationRef, ...] = (),
    archive_handle: str | None = None,
    missing: tuple[str, ...] = (),
) -> SummaryRequest:
    return SummaryRequest(
        messages=messages if messages is not None else [{"role": "user", "content": "hi"}],
        span=span,
        pending=pending,
        identifiers=identifiers,
        negatives=negatives,
        archive_handle=archive_handle,
        missing=missing,
    )


def example_messages() -> list[Message]:
    path = Path(otel_compaction.__file__).parent / "examples" / "deploy_agent.json"
    messages: list[Message] = json.loads(path.read_text(encoding="utf-8"))["messages"]
    return messages


# --------------------------------------------------------------------------------------------
# verify: identifiers
# --------------------------------------------------------------------------------------------


def test_nothing_to_carry_accepts_any_summary() -> None:
    verification = verify("", request())
    assert verification == Verification()
    assert verification.ok is True
    assert verification.describe() == ()


@pytest.mark.parametrize(
    ("summary", "missing"),
    [
        ("Booked ZFA04Y for mia_li_3668.", ()),
        ("Booked (ref:ZFA04Y) for mia_li_3668", ()),
        ("Booked zfa04y for mia_li_3668.", ("ZFA04Y",)),  # case matters
        ("Booked ZFA 04Y for mia_li_3668.", ("ZFA04Y",)),
        ("Booked ZFA0\n4Y for mia_li_3668.", ("ZFA04Y",)),
        ("Booked a flight for Mia.", ("ZFA04Y", "mia_li_3668")),
        ("Booked ZFA04Y for mia li 3668.", ("mia_li_3668",)),
    ],
)
def test_identifiers_must_appear_verbatim(summary: str, missing: tuple[str, ...]) -> None:
    verification = verify(summary, request(identifiers=("ZFA04Y", "mia_li_3668")))
    assert verification.missing_identifiers == missing
    assert verification.missing_negatives == ()
    assert verification.ok is (not missing)


# --------------------------------------------------------------------------------------------
# verify: negative results (the contradiction probe)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "summary",
    [
        "search_logs found no matches.",
        "search_logs returned nothing for TLS handshake errors",
        "- search_logs: NO errors in the last 24h",
        "search_logs didn't find any TLS errors.",
        "Earlier:\nsearch_logs came back empty.\nThen the restart.",
        "The log search (call_logs_1) was run.",  # naming the call id is enough
    ],
)
def test_a_stated_negative_passes(summary: str) -> None:
    assert verify(summary, request(negatives=(LOGS,))).ok


@pytest.mark.parametrize(
    "summary",
    [
        "",
        "The agent searched the logs for TLS errors.",
        "No TLS errors were found in the logs.",  # the negation, but not the tool
        "search_logs was run.",  # the tool, but no negation
        "search_logs was run.\nNothing was found.",  # negation on another line
        "Nothing was found.\nsearch_logs was run.",
        "search_logs output was annotated by a knot-tying bot.",  # 'not' inside words
        "search_logs: nonetheless, errorless.",
        "The log search (call_logs_2) found no matches.",  # another call's id
    ],
)
def test_an_omitted_negative_is_caught(summary: str) -> None:
    verification = verify(summary, request(negatives=(LOGS,)))
    assert verification.missing_negatives == (LOGS,)
    assert verification.ok is False


def test_only_the_missing_items_are_reported_in_order() -> None:
    summary = "check_certificate failed: file not found.\nBooked ZFA04Y."
    verification = verify(
        summary, request(identifiers=("ZFA04Y", "/srv/app.yaml"), negatives=(LOGS, CERT))
    )
    assert (verification.missing_identifiers, verification.missing_negatives) == (
        ("/srv/app.yaml",),
        (LOGS,),
    )
    assert (verification.carried_identifiers, verification.carried_negatives) == (
        ("ZFA04Y",),
        (CERT,),
    )
    assert verification.describe() == (
        "identifier '/srv/app.yaml' must appear verbatim",
        "negative result of search_logs (call_logs_1) must be stated: no matches in the last 24h",
    )


def test_a_negative_without_a_tool_name_needs_its_call_id() -> None:
    orphan = Negative(4, "call_9", "", "(empty result)")
    assert not verify("Nothing was returned.", request(negatives=(orphan,))).ok
    assert verify("call_9 returned nothing.", request(negatives=(orphan,))).ok
    assert Verification((), (orphan,)).describe() == (
        "negative result of tool (call_9) must be stated: (empty result)",
    )


def test_retry_request_names_what_was_missing_and_keeps_the_rest() -> None:
    first = request(identifiers=("ZFA04Y",), negatives=(LOGS,), archive_handle=HANDLE)
    verification = verify("Booked ZFA04Y.", first)
    retry = retry_request(first, verification)
    assert retry.missing == (
        "negative result of search_logs (call_logs_1) must be stated: no matches in the last 24h",
    )
    assert (retry.messages, retry.span, retry.identifiers, retry.negatives) == (
        first.messages,
        first.span,
        first.identifiers,
        first.negatives,
    )
    assert retry.archive_handle == HANDLE
    assert first.missing == ()
    with pytest.raises(FrozenInstanceError):
        first.missing = ("x",)  # type: ignore[misc]


def test_request_json_is_the_structured_input() -> None:
    pending = (ObligationRef("tool_call", "call_restart_1", 11, "restart_service"),)
    req = request(
        identifiers=("/etc/ssl/payments.pem",),
        negatives=(LOGS,),
        pending=pending,
        archive_handle=HANDLE,
        span=(1, 8),
        missing=("identifier 'X' must appear verbatim",),
        messages=[{"role": "user", "content": "héllo"}],
    )
    assert json.loads(req.to_json()) == {
        "span": {"first_message": 1, "last_message": 7},
        "archive_handle": HANDLE,
        "pending_obligations": [
            {"kind": "tool_call", "id": "call_restart_1", "name": "restart_service"}
        ],
        "identifiers_to_keep_verbatim": ["/etc/ssl/payments.pem"],
        "abandoned_calls": [],
        "negative_results_to_state": [
            {
                "tool": "search_logs",
                "call_id": "call_logs_1",
                "result": "no matches in the last 24h",
            }
        ],
        "previous_summary_was_missing": ["identifier 'X' must appear verbatim"],
        "messages": [{"role": "user", "content": "héllo"}],
    }
    assert "héllo" in req.to_json()


# --------------------------------------------------------------------------------------------
# ExtractiveSummarizer
# --------------------------------------------------------------------------------------------


def example_request() -> SummaryRequest:
    """The bundled example's messages 1..7 with what the gate says a summary must carry."""
    messages = example_messages()
    decision = CompactionGate("default").evaluate(messages, 1, 8, addressable=True)
    assert (decision.action, decision.span) == ("compact", (1, 8))
    return SummaryRequest(
        messages=messages[1:8],
        span=decision.span,
        pending=decision.must_carry.pending,
        identifiers=decision.must_carry.identifiers,
        negatives=decision.must_carry.negatives,
        archive_handle=HANDLE,
    )


def test_extractive_summary_of_the_bundled_example_carries_everything() -> None:
    req = example_request()
    assert req.identifiers == ("/etc/ssl/payments.pem",)
    assert [(n.message_index, n.call_id, n.tool, n.text) for n in req.negatives] == [
        (LOGS.message_index, LOGS.call_id, LOGS.tool, LOGS.text)
    ]
    # What the search was about, by which a summary may name it.
    assert req.negatives[0].subjects == ("TLS handshake error", "svc-payments")
    # The restart call comes after the span: nothing is pending at its cut.
    assert req.pending == ()

    summary = ExtractiveSummarizer().summarize(req)
    lines = summary.splitlines()

    assert lines[0] == "[Summary of compacted messages 1..7]"
    assert lines[1] == (
        f"The original messages are archived verbatim as {HANDLE} (recall_archived_span) "
        "and can be read back exactly."
    )
    assert "- Switch svc-payments to port 8443 with TLS on, then restart it." in lines
    calls = lines.index("Tool calls and their outcomes:")
    assert [line.split(" [")[1].split("]")[0] for line in lines[calls + 1 : calls + 4]] == [
        "call_read_1",
        "call_write_1",
        "call_logs_1",
    ]
    assert lines[calls + 2].endswith("-> result: wrote 3 lines to /srv/payments/config.yaml")
    negatives = lines.index("Established negatives (what was NOT the case):")
    assert lines[negatives + 1] == (
        "- search_logs (call_logs_1) returned no positive result: no matches in the last 24h"
    )
    assert "Identifiers still in use: /etc/ssl/payments.pem" in lines
    # The call after the span is the kept part's: the summary does not speak of it.
    assert "call_restart_1" not in summary
    assert "Still pending, NOT completed (do not assume a result):" not in lines
    assert verify(summary, req).ok


def test_extractive_summary_is_deterministic() -> None:
    req = example_request()
    first = ExtractiveSummarizer().summarize(req)
    assert ExtractiveSummarizer().summarize(req) == first
    assert ExtractiveSummarizer().summarize(example_request()) == first


def test_extractive_summary_says_what_the_span_does_not_resolve() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "Check the cert and restart."},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "c1", "name": "check_certificate", "input": {}},
                {"type": "tool_use", "id": "r1", "name": "restart_service", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "c1",
                    "is_error": True,
                    "content": "permission denied",
                }
            ],
        },
    ]
    summary = ExtractiveSummarizer().summarize(request(messages=messages, span=(4, 7)))
    assert summary.splitlines() == [
        "[Summary of compacted messages 4..6]",
        "User requests:",
        "- Check the cert and restart.",
        "Tool calls and their outcomes:",
        "- check_certificate({}) [c1] -> error: permission denied",
        "- restart_service({}) [r1] -> no result in this span",
    ]


def test_extractive_summary_shortens_long_text_and_adds_what_a_retry_names() -> None:
    req = request(
        messages=[{"role": "user", "content": "word " * 100}],
        missing=("identifier 'ZFA04Y' must appear verbatim",),
    )
    summary = ExtractiveSummarizer(excerpt_chars=20, header="Earlier").summarize(req)
    assert summary.splitlines() == [
        "[Earlier 1..1]",
        "User requests:",
        "- word word word word…",
        "Also carried:",
        "- identifier 'ZFA04Y' must appear verbatim",
    ]
    assert len("word word word word…") == 20


def test_extractive_summarizer_is_a_summarizer() -> None:
    assert isinstance(ExtractiveSummarizer(), Summarizer)
