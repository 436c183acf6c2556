"""Facts about a transcript that every rule and every span evaluation reads.

`Analysis` is built once per (transcript, policy, ledger snapshot) in a single pass: the
obligations with where they open and where they resolve, the negative results, where each
identifier is first and last seen, and the cut-closedness that the gate uses. Span questions
are then answered by bisecting these tables, so evaluating many spans costs no re-scan.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from otel_compaction.ledger import LedgerSnapshot, Obligation
from otel_compaction.policy import Policy
from otel_compaction.transcript import ToolCall, ToolResult, Transcript, closed_cuts_of

__all__ = ["Analysis", "Identifier", "LedgerConflict", "Negative", "Tracked"]

# Negative-result and failure shapes are judged on the head of a result: an absence is
# stated up front, and scanning megabytes of payload for "not found" only finds noise.
_RESULT_HEAD = 2_000

# A non-ASCII character written as an escape: it may fold case onto an ASCII letter.
_WIDE_ESCAPE = re.compile(r"\\[uUN]")


class _Scan:
    """A policy regex that runs in ASCII mode on the text where that finds the same matches.

    Python's `re` matches str patterns with Unicode semantics; ASCII semantics run about twice
    as fast and find exactly the same matches when the text is ASCII without the separators
    U+001C..U+001F (the only ASCII characters Unicode ``\\s`` adds) and the pattern names no
    non-ASCII character (one could fold case onto an ASCII letter, as the Kelvin sign does
    onto ``k``). Everywhere else the policy's own regex runs.
    """

    __slots__ = ("_ascii", "_unicode")

    def __init__(self, regex: re.Pattern[str]) -> None:
        self._unicode = regex
        self._ascii: re.Pattern[str] | None = None
        source = regex.pattern
        if source.isascii() and _WIDE_ESCAPE.search(source) is None:
            try:
                self._ascii = re.compile(source, (regex.flags & ~re.UNICODE) | re.ASCII)
            except (re.error, ValueError):  # the pattern asks for Unicode itself: (?u)
                self._ascii = None

    def _for(self, text: str) -> re.Pattern[str]:
        if (
            self._ascii is not None
            and text.isascii()
            and "\x1c" not in text
            and "\x1d" not in text
            and "\x1e" not in text
            and "\x1f" not in text
        ):
            return self._ascii
        return self._unicode

    def search(self, text: str) -> re.Match[str] | None:
        """`re.Pattern.search` of the policy's regex."""
        return self._for(text).search(text)

    def findall(self, text: str) -> list[Any]:
        """`re.Pattern.findall` of the policy's regex."""
        return self._for(text).findall(text)


# Keyed by id(); each value holds its regex, so an id cannot be reused while it is cached.
_SCANS: dict[int, tuple[re.Pattern[str], _Scan]] = {}


def _scan(regex: re.Pattern[str] | None) -> _Scan | None:
    """The `_Scan` of a policy regex (None for none), built once per regex."""
    if regex is None:
        return None
    cached = _SCANS.get(id(regex))
    if cached is not None and cached[0] is regex:
        return cached[1]
    if len(_SCANS) >= 256:
        _SCANS.clear()
    scan = _Scan(regex)
    _SCANS[id(regex)] = (regex, scan)
    return scan


@dataclass(frozen=True, slots=True)
class Tracked:
    """One obligation found in the transcript.

    ``opened`` is the message index where it arises, ``resolved`` where its terminal
    resolution stands (None when it never does). ``rule`` names the rule that reports it.
    """

    rule: str
    kind: str
    id: str
    name: str
    opened: int
    resolved: int | None
    status: str = "open"


@dataclass(frozen=True, slots=True)
class Negative:
    """A negative or failed result: what the summary must still say was not the case."""

    message_index: int
    call_id: str
    tool: str
    text: str


@dataclass(frozen=True, slots=True)
class Identifier:
    """An identifier with the first and last message it appears in."""

    value: str
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class LedgerConflict:
    """The ledger and the transcript disagree about one obligation."""

    rule: str
    kind: str
    id: str
    name: str
    message_index: int | None
    detail: str


class Analysis:
    """Everything the rules need, computed once. Build with `Analysis.build`."""

    def __init__(
        self,
        transcript: Transcript,
        policy: Policy,
        ledger: LedgerSnapshot | None = None,
    ) -> None:
        self.transcript = transcript
        self.policy = policy
        self.ledger = ledger
        self.abandoned: set[int] = set()
        self.ledger_conflicts: list[LedgerConflict] = []
        self.ledger_only: list[Obligation] = []
        if ledger is not None:
            self._match_ledger(ledger)
        self.failed = [self._is_failure(r) for r in transcript.results]
        self.obligations = sorted(
            self._tool_call_obligations()
            + self._transactions()
            + self._retry_chains()
            + self._commitments(),
            key=lambda o: o.opened,
        )
        self.opened_at = [o.opened for o in self.obligations]
        self.negatives = self._negatives()
        self.negative_at = [n.message_index for n in self.negatives]
        self.identifiers = self._identifiers()
        self.identifier_first = [i.first for i in self.identifiers]
        self.pair_closed = self._pair_closed()
        self.head = self._protected_head()

    @classmethod
    def build(
        cls, transcript: Transcript, policy: Policy, ledger: LedgerSnapshot | None = None
    ) -> Analysis:
        """Analyse `transcript` under `policy`, cross-checked against `ledger` when given."""
        return cls(transcript, policy, ledger)

    # -- span queries ------------------------------------------------------------------------

    def obligations_index(self, start: int) -> int:
        """Position in `obligations` of the first obligation arising at or after `start`."""
        return bisect.bisect_left(self.opened_at, start)

    def obligations_opened_in(self, start: int, end: int) -> list[Tracked]:
        """Obligations arising in messages ``start..end-1``."""
        lo = bisect.bisect_left(self.opened_at, start)
        hi = bisect.bisect_left(self.opened_at, end)
        return self.obligations[lo:hi]

    def negatives_in(self, start: int, end: int) -> list[Negative]:
        """Negative results in messages ``start..end-1``."""
        lo = bisect.bisect_left(self.negative_at, start)
        return self.negatives[lo : bisect.bisect_left(self.negative_at, end)]

    def identifiers_bound_in(self, start: int, end: int) -> list[Identifier]:
        """Identifiers first seen in ``start..end-1`` and used again at or after `end`."""
        lo = bisect.bisect_left(self.identifier_first, start)
        hi = bisect.bisect_left(self.identifier_first, end)
        return [i for i in self.identifiers[lo:hi] if i.last >= end]

    # -- construction ------------------------------------------------------------------------

    def _is_failure(self, result: ToolResult) -> bool:
        if result.status == "error":
            return True
        regex = _scan(self.policy.error_regex)
        return regex is not None and regex.search(result.text[:_RESULT_HEAD]) is not None

    def _tool_call_obligations(self) -> list[Tracked]:
        results = self.transcript.results
        out: list[Tracked] = []
        for call in self.transcript.calls:
            if call.result is not None:
                result = results[call.result]
                resolved: int | None = result.message_index
                status = "error" if self.failed[result.ordinal] else "result"
            elif call.ordinal in self.abandoned:
                resolved, status = call.message_index, "abandoned"
            else:
                resolved, status = None, "open"
            out.append(
                Tracked(
                    "open_tool_call", "tool_call", call.id, call.name,
                    call.message_index, resolved, status,
                )
            )  # fmt: skip
        return out

    def _transactions(self) -> list[Tracked]:
        begin, end = self.policy.transaction_begin_regex, self.policy.transaction_end_regex
        if begin is None or end is None:
            return []
        out: list[Tracked] = []
        stack: list[ToolCall] = []
        for call in self.transcript.calls:
            if begin.search(call.name):
                stack.append(call)
            elif end.search(call.name) and stack:
                opened = stack.pop()
                out.append(
                    Tracked(
                        "open_transaction", "transaction", opened.id, opened.name,
                        opened.message_index, call.message_index, "result",
                    )
                )  # fmt: skip
        out.extend(
            Tracked(
                "open_transaction", "transaction", c.id, c.name, c.message_index, None
            )
            for c in stack
        )  # fmt: skip
        return out

    def _retry_chains(self) -> list[Tracked]:
        """A failure opens a retry chain when it asks for a retry or the tool is called again;
        the chain resolves at the tool's next successful result."""
        hint = _scan(self.policy.retry_hint_regex)
        calls = self.transcript.calls
        last_call_of: dict[str, int] = {}
        for call in calls:
            last_call_of[call.name] = call.message_index
        pending: dict[str, list[ToolResult]] = {}
        out: list[Tracked] = []
        for result in self.transcript.results:
            if result.call is None:
                continue
            name = calls[result.call].name
            if self.failed[result.ordinal]:
                pending.setdefault(name, []).append(result)
                continue
            for failure in pending.pop(name, ()):
                out.append(self._retry(failure, name, result.message_index))
        for name, failures in pending.items():
            for failure in failures:
                asks = hint is not None and hint.search(failure.text[:_RESULT_HEAD]) is not None
                if asks or last_call_of[name] > failure.message_index:
                    out.append(self._retry(failure, name, None))
        return out

    def _retry(self, failure: ToolResult, name: str, resolved: int | None) -> Tracked:
        return Tracked(
            "pending_retry", "retry", failure.call_id, name, failure.message_index, resolved,
            "result" if resolved is not None else "open",
        )  # fmt: skip

    def _commitments(self) -> list[Tracked]:
        regex = _scan(self.policy.commitment_regex)
        if regex is None:
            return []
        call_at = [c.message_index for c in self.transcript.calls]
        out: list[Tracked] = []
        for entry in self.transcript.entries:
            if entry.role != "assistant" or not entry.text:
                continue
            match = regex.search(entry.text)
            if match is None:
                continue
            # The next tool call, in this message or a later one, discharges the promise.
            following = bisect.bisect_left(call_at, entry.index)
            resolved = call_at[following] if following < len(call_at) else None
            out.append(
                Tracked(
                    "dangling_commitment", "commitment", f"m{entry.index}", match.group(0),
                    entry.index, resolved, "open" if resolved is None else "result",
                )
            )  # fmt: skip
        return out

    def _negatives(self) -> list[Negative]:
        policy = self.policy.patterns.null_result
        regex = _scan(self.policy.null_regex)
        ignored = set(policy.ignore_tools)
        calls = self.transcript.calls
        out: list[Negative] = []
        for result in self.transcript.results:
            tool = calls[result.call].name if result.call is not None else ""
            if tool in ignored:
                continue
            head = result.text[:_RESULT_HEAD]
            negative = (
                self.failed[result.ordinal]
                or (policy.empty and not head.strip())
                or (regex is not None and regex.search(head) is not None)
            )
            if negative:
                excerpt = " ".join(head.split())[:200] or "(empty result)"
                out.append(Negative(result.message_index, result.call_id, tool, excerpt))
        return out

    def _identifiers(self) -> list[Identifier]:
        regex = _scan(self.policy.identifier_regex)
        if regex is None:
            return []
        stop = set(self.policy.patterns.identifiers.stopwords)
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        calls, results = self.transcript.calls, self.transcript.results
        for entry in self.transcript.entries:
            texts = [entry.text]
            if entry.calls:
                texts += [calls[c].arguments for c in entry.calls]
            if entry.results:
                texts += [results[r].text for r in entry.results]
            index = entry.index
            for text in texts:
                if not text:
                    continue
                for value in regex.findall(text):
                    if stop and value in stop:
                        continue
                    if value not in first:
                        first[value] = index
                    last[value] = index
        # Sorted by (first, value), as (value, first) pairs: no key function per identifier.
        ordered = sorted(first.items(), key=itemgetter(1, 0))
        return [Identifier(value, at, last[value]) for value, at in ordered]

    def _pair_closed(self) -> bytearray:
        # Abandoned calls count as resolved where they were opened.
        return closed_cuts_of(
            len(self.transcript),
            ((o.opened, o.resolved) for o in self.obligations if o.kind == "tool_call"),
        )

    def _protected_head(self) -> int:
        head = self.policy.protected_head
        roles = set(head.roles)
        index = 0
        for entry in self.transcript.entries:
            if entry.role not in roles:
                break
            index += 1
        return min(len(self.transcript), index + head.messages)

    def _match_ledger(self, ledger: LedgerSnapshot) -> None:
        """Pair ledger tool-call records with transcript calls of the same id, newest with
        newest (older calls may already have been compacted out of the transcript)."""
        by_id: dict[str, list[ToolCall]] = {}
        for call in self.transcript.calls:
            by_id.setdefault(call.id, []).append(call)
        records: dict[str, list[Obligation]] = {}
        for record in ledger.obligations:
            if record.kind == "tool_call":
                records.setdefault(record.id, []).append(record)
            elif record.is_open:
                self.ledger_only.append(record)
        for call_id, recorded in records.items():
            calls = by_id.get(call_id, [])
            offset = len(calls) - len(recorded)
            for position, record in enumerate(recorded):
                index = offset + position
                self._compare(record, calls[index] if index >= 0 else None)

    def _compare(self, record: Obligation, call: ToolCall | None) -> None:
        if call is None:
            if record.is_open:
                self.ledger_conflicts.append(
                    LedgerConflict(
                        "ledger_mismatch", record.kind, record.id, record.name, None,
                        "open in the ledger, but its call is not in the transcript",
                    )
                )  # fmt: skip
            return
        in_transcript = call.result is not None
        if record.is_open and in_transcript:
            result = self.transcript.results[call.result or 0]
            self.ledger_conflicts.append(
                LedgerConflict(
                    "ledger_mismatch", record.kind, record.id, call.name, call.message_index,
                    f"open in the ledger, but the transcript has its result at message "
                    f"{result.message_index}",
                )
            )  # fmt: skip
        elif record.status == "abandoned" and not in_transcript:
            self.abandoned.add(call.ordinal)
        elif not record.is_open and not in_transcript:
            self.ledger_conflicts.append(
                LedgerConflict(
                    "severed_obligation", record.kind, record.id, call.name, call.message_index,
                    f"the ledger recorded its {record.status}, but the transcript has no result",
                )
            )  # fmt: skip
