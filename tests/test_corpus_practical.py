"""The gate is practical on real transcripts: asked to compact the oldest half, it almost
always lets a span be compacted, that span covers most of what was asked, and it never
severs a call from its result where a plain cut at the same point would.

The request, for each transcript of the corpus: from the protected head (the leading system
prompt, never compacted) to the first cut where the running total of ``Entry.chars`` after
the head reaches half of all characters after the head. Coverage is the requested characters
inside the span the gate lets compact, over the requested characters (0 for a refusal).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from conftest import Transcript as Record

from otel_compaction import CompactionGate, Decision, ExtractiveSummarizer, GuardedCompactor, Policy
from otel_compaction.analysis import Analysis
from otel_compaction.transcript import Transcript

ALLOWED_AIM = 0.95
COVERAGE_AIM = 0.80
POLICIES = (("default", False), ("strict", True), ("lenient", False))
"""Built-in policies with the ``addressable`` flag they are evaluated with."""


@dataclass(frozen=True)
class Request:
    """One transcript's request and the gate's decision on it."""

    label: str
    transcript: Transcript
    span: tuple[int, int]
    decision: Decision

    @property
    def chars(self) -> list[int]:
        """Characters of each message."""
        return [entry.chars for entry in self.transcript.entries]

    @property
    def action(self) -> str:
        """compact, extend (a compaction with its end moved), defer or refuse."""
        extended = self.decision.action == "compact" and self.decision.extended
        return "extend" if extended else self.decision.action

    @property
    def coverage(self) -> float:
        """Fraction of the requested characters the compacted span covers."""
        if self.decision.action == "refuse":
            return 0.0
        chars = self.chars
        (start, end), (lo, hi) = self.decision.span, self.span
        return sum(chars[max(start, lo) : min(end, hi)]) / sum(chars[lo:hi])


def oldest_half(analysis: Analysis) -> tuple[int, int] | None:
    """``[head, end)``: the first cut where the characters after the head reach half."""
    chars = [entry.chars for entry in analysis.transcript.entries]
    head = analysis.head
    total = sum(chars[head:])
    running = 0
    for index in range(head, len(chars)):
        running += chars[index]
        if 2 * running >= total > 0:
            return head, index + 1
    return None


def evaluate(
    corpus: Sequence[Record], policy: str, addressable: bool, *, critical: bool = False
) -> list[Request]:
    """The oldest-half request of every transcript, decided under `policy`."""
    gate = CompactionGate(policy)
    requests: list[Request] = []
    for record in corpus:
        analysis = gate.analyse(record.messages)
        span = oldest_half(analysis)
        if span is None:
            continue
        decision = gate.evaluate(
            analysis, *span, critical=critical, addressable=addressable, raise_on_refuse=False
        )
        requests.append(Request(record.label, analysis.transcript, span, decision))
    return requests


@pytest.fixture(scope="module")
def decided(corpus: list[Record]) -> dict[str, list[Request]]:
    """Requests decided under each built-in policy."""
    return {name: evaluate(corpus, name, addressable) for name, addressable in POLICIES}


def test_default_gate_lets_the_oldest_half_be_compacted(
    decided: dict[str, list[Request]], corpus: list[Record]
) -> None:
    """At least 95% of requests are compacted, extended or deferred; median coverage >= 80%."""
    requests = decided["default"]
    assert len(requests) >= 0.9 * len(corpus), "expected a request for most corpus transcripts"
    refused = [r for r in requests if r.decision.action == "refuse"]
    allowed = 1 - len(refused) / len(requests)
    assert allowed >= ALLOWED_AIM, (
        f"only {allowed:.1%} of {len(requests)} requests allowed; refused:\n"
        + "\n".join(f"{r.label}: {r.decision.describe()}" for r in refused[:10])
    )
    median = statistics.median(r.coverage for r in requests)
    assert median >= COVERAGE_AIM, f"median coverage {median:.1%} below {COVERAGE_AIM:.0%}"


def test_allowed_spans_never_sever_a_call(decided: dict[str, list[Request]]) -> None:
    """Under every policy a compacted span is pairing-closed; a compaction starts where asked
    and ends at or past the requested end; a deferral stays inside the request."""
    for name, requests in decided.items():
        for r in requests:
            action, (start, end) = r.decision.action, r.decision.span
            where = f"{name}: {r.label}: {r.decision.describe()} (requested {r.span})"
            if action == "refuse":
                continue
            assert r.transcript.is_closed(start), where
            assert r.transcript.is_closed(end), where
            assert start == r.span[0] < end, where
            if action == "compact":
                assert end >= r.span[1], where
                assert r.decision.extended == (end != r.span[1]), where
            else:
                assert end < r.span[1], where


def test_the_naive_cut_severs_calls_that_the_gate_keeps_whole(
    decided: dict[str, list[Request]],
) -> None:
    """The plain cut at the requested end severs a call in some real transcripts (the problem
    exists in this corpus); for each of those the gate moved the cut."""
    requests = decided["default"]
    severed = [r for r in requests if not r.transcript.is_closed(r.span[1])]
    assert severed, "expected some oldest-half cuts in the corpus to sever a call"
    for r in severed:
        assert r.decision.span[1] != r.span[1], f"{r.label}: {r.decision.describe()}"
        assert r.action in ("extend", "defer", "refuse"), r.label


def test_policy_outcomes(
    decided: dict[str, list[Request]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Report compact/extend/defer/refuse per policy; lenient lets through at least as much
    as default, and every request gets exactly one outcome."""
    actions = ("compact", "extend", "defer", "refuse")
    counts = {name: Counter(r.action for r in requests) for name, requests in decided.items()}
    lines = [f"{'policy':<26}" + "".join(f"{a:>9}" for a in actions) + f"{'median cov':>12}"]
    for (name, addressable), requests in zip(POLICIES, decided.values(), strict=True):
        label = f"{name} (addressable)" if addressable else name
        median = statistics.median(r.coverage for r in requests)
        lines.append(
            f"{label:<26}" + "".join(f"{counts[name][a]:>9}" for a in actions) + f"{median:>12.1%}"
        )
        assert sum(counts[name].values()) == len(requests) == len(decided["default"]), name
        assert set(counts[name]) <= set(actions), name
    with capsys.disabled():
        print("\noldest-half requests on the corpus, per policy:\n" + "\n".join(lines))
    assert counts["lenient"]["refuse"] <= counts["default"]["refuse"]


# Characters where Unicode and ASCII regex semantics part: case folding onto ASCII letters
# (long s, Kelvin sign, dotless and dotted i), Unicode-only whitespace and separators.
_TRICKY = ("\u017f", "\u212a", "\u0131", "\u0130", "\x1c", "\x1f", "\x85", "\xa0", "\u2028", "\xe9")
_WORDS = ("Not Found", "no such", "ERROR", "I'll check", "LET ME VERIFY", "ABC123", "[]", "s", "k")


def test_linear_engine_finds_what_the_policy_regex_finds(corpus: list[Record]) -> None:
    """The analysis runs policy patterns on RE2 where that reads them as Python does and on
    the bounded scan elsewhere; on every text of the corpus, and on text built around the
    characters where ASCII and Unicode semantics part, it finds exactly what Python's `re`
    finds with the policy's own patterns."""
    texts: list[str] = []
    for record in corpus[::4]:
        transcript = Transcript.parse(record.messages)
        texts += [entry.text for entry in transcript.entries]
        texts += [call.arguments for call in transcript.calls]
        texts += [result.text for result in transcript.results]
    pieces = _TRICKY + _WORDS + (" ", "\n")
    texts += [
        "".join(pieces[(i * 7 + j * 3) % len(pieces)] for j in range(i % 9)) for i in range(600)
    ]
    texts += [f"{a}{b}" for a in pieces for b in pieces]
    texts += [f"{word}\n" for word in _WORDS]  # Python's $ also matches before a last newline
    checked = 0
    for name in ("default", "strict", "lenient"):
        policy = Policy.load(name)
        for scan in (
            policy.identifier_regex,
            policy.null_regex,
            policy.error_regex,
            policy.commitment_regex,
            policy.commitment_conditional_regex,
            policy.rejection_regex,
        ):
            if scan is None:
                continue
            regex = re.compile(scan.source)  # what the policy's author wrote, in Python's re
            for text in texts:
                want, got = regex.search(text), scan.search(text)
                assert (want and want.span()) == (got and got.span()), (regex.pattern, text)
                full_want, full_got = regex.fullmatch(text), scan.fullmatch(text)
                assert (full_want and full_want.span()) == (full_got and full_got.span())
                checked += 1
    assert checked > 10_000


# -- at a critical budget ------------------------------------------------------------------------

CRITICAL_COVERAGE_AIM = 0.95


@pytest.fixture(scope="module")
def decided_critically(corpus: list[Record]) -> list[Request]:
    """The oldest-half request of every transcript under `default` at a critical budget."""
    return evaluate(corpus, "default", False, critical=True)


def test_a_critical_request_always_compacts_something(
    decided_critically: list[Request], corpus: list[Record], capsys: pytest.CaptureFixture[str]
) -> None:
    """At a critical budget the gate may not defer: it compacts (extending as far as needed)
    or refuses; every refusal is resolved by `compact_or_force`, and median coverage is at
    least 95%."""
    by_label = {record.label: record for record in corpus}
    refused = [r for r in decided_critically if r.decision.action == "refuse"]
    for r in refused:
        compactor = GuardedCompactor(ExtractiveSummarizer(), budget=1_000)
        result = compactor.compact_or_force(
            by_label[r.label].messages, critical=True, force=True, end=r.span[1]
        )
        assert result.compacted, f"{r.label}: {r.decision.describe()}: {result.reason}"
    median = statistics.median(r.coverage for r in decided_critically)
    counts = Counter(r.action for r in decided_critically)
    with capsys.disabled():
        print(
            f"\ncritical oldest-half requests: {dict(counts)}, median coverage {median:.1%}, "
            f"{len(refused)} refusals resolved by compact_or_force"
        )
    assert median >= CRITICAL_COVERAGE_AIM


def test_no_allowed_span_severs_a_pair_by_an_independent_check(
    decided: dict[str, list[Request]], decided_critically: list[Request], corpus: list[Record]
) -> None:
    """Both ends of every span the gate lets compact are closed cuts of the naive reference
    pairing in ``test_check_corpus`` (which shares no code with the gate)."""
    from test_check_corpus import reference

    references = {record.label: reference(record) for record in corpus}
    checked = 0
    for requests in (*decided.values(), decided_critically):
        for r in requests:
            if r.decision.action == "refuse":
                continue
            start, end = r.decision.span
            cuts = set(references[r.label].closed_cuts)
            assert start in cuts and end in cuts, f"{r.label}: {r.decision.describe()}"
            checked += 1
    assert checked >= 2 * len(corpus), f"only {checked} spans checked"
