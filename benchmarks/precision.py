"""Precision and recall of the rules against the hand-labelled items of ``labels/*.jsonl``.

Each item points into the real data (see ``labels/README.md``): a call, an assistant quote or
an identifier at a cut, labelled true when it is a real obligation (or owed item) of its kind.
Every conversation is analysed under the default policy and each item's anchor resolved on
the parsed conversation; the rule that answers for the item's kind either fires on it or not.
The table per kind gives labelled true and false, TP, FP, FN, precision, recall and how many
detections in the same conversations no item labels (new detections show, uncounted).

The user-level line asks, of every conversation of the labelled sources, whether a compaction
of everything but the last turn would be blocked, and how many of those blocks are caused only
by items labelled false.

Usage: ``python benchmarks/precision.py [--data DIR] [--format text|json] [--list fp|fn|all]
[--kind K]``. An anchor that does not resolve is an error naming the label's file and line.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import itertools
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from otel_compaction.analysis import NEGATIVE_OUTCOMES, Analysis, call_target
from otel_compaction.errors import TranscriptError
from otel_compaction.gate import CompactionGate, must_carry
from otel_compaction.policy import Policy
from otel_compaction.rules.base import SpanView, Tracked
from otel_compaction.rules.null_result import asked
from otel_compaction.rules.registry import RULES
from otel_compaction.sessions import parse_session, read_session
from otel_compaction.transcript import ToolCall, ToolResult, Transcript

DATA_ENV = "OTEL_COMPACTION_DATA"
"""Environment variable naming the data root (``transcripts/``, ``sessions/``)."""

LABELS = Path(__file__).resolve().parent / "labels"
_REPO_ROOT = Path(__file__).resolve().parents[1]

KIND_RULES: dict[str, tuple[str, ...]] = {
    "retry": ("pending_retry",),
    "commitment": ("dangling_commitment",),
    "negative": ("null_result",),
    "reference": ("unresolved_reference",),
    "open_call": ("open_tool_call",),
    "orphan": ("orphan_result", "unmatched_result"),
    "background": ("open_background_task",),
    "interim": ("open_tool_call",),
    "approval": (),  # any obligation rule that reports the call open
}
"""Which rules answer for each kind of item (``approval``: every rule of kind obligation)."""

# How each kind reads "the rule fires on the item":
#   retry, commitment, background: the rule tracks an obligation opened there and still
#     open at the cut after that message (one kept in its own message is open at no cut);
#     a failed retry of the same call inside an open chain is held by that chain;
#   negative: the result is among the analysis's negatives, or a later negative answer to
#     the same call made again is (null_result keeps the latest of them);
#   reference: the identifier is among the must-carry identifiers of the span head..cut;
#   open_call, approval: the call is still open at the end of the conversation (for
#     open_call, also one discharged as abandoned: it has no result either);
#   interim: the call is still open just after its first result;
#   orphan: the result answers no earlier unanswered call.
_OBLIGATION_KINDS = ("retry", "commitment", "background")

Key = tuple[Any, ...]
"""What a detection is, within one conversation: items and detections compare by key."""


class LabelError(ValueError):
    """A label file that cannot be read or an anchor that does not resolve."""


@dataclass(frozen=True, slots=True)
class Item:
    """One labelled item, with where it was written."""

    file: str
    line: int
    source: str
    record: str | None
    kind: str
    anchor: dict[str, Any]
    label: bool
    reason: str
    closes: Any = None
    sidechain: str | None = None
    """The uuid of the first record of a subagent thread written inline in a session file."""

    @property
    def where(self) -> str:
        """``file:line`` of the label."""
        return f"{self.file}:{self.line}"


@dataclass(slots=True)
class Conversation:
    """One parsed and analysed conversation, with the detections of each kind by key."""

    name: str
    transcript: Transcript
    analysis: Analysis
    detections: dict[str, dict[Key, str]] = field(default_factory=dict)
    """Per kind: each detection's key, with a line saying what it is."""


@dataclass(slots=True)
class Verdict:
    """An item and what the rules made of it."""

    item: Item
    conversation: str
    fired: bool
    key: Key
    context: str
    closes_agree: bool | None = None

    @property
    def outcome(self) -> str:
        """``tp``, ``fp``, ``fn`` or ``tn``."""
        if self.fired:
            return "tp" if self.item.label else "fp"
        return "fn" if self.item.label else "tn"


@dataclass(slots=True)
class Row:
    """One line of the table."""

    kind: str
    rules: str
    labelled_true: int = 0
    labelled_false: int = 0
    tp: int = 0
    fp: int = 0
    fn: int = 0
    unlabelled_fired: int = 0
    closes_agree: int = 0
    closes_labelled: int = 0

    @property
    def precision(self) -> float | None:
        """TP / (TP + FP), None with nothing fired."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        """TP / (TP + FN), None with nothing labelled true."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None


@dataclass(slots=True)
class Blocks:
    """The user-level figures: compactions of all but the last turn."""

    conversations: int = 0
    blocked: int = 0
    only_false: int = 0
    unlabelled: int = 0
    """Blocks caused by at least one obligation no item labels."""


# -- loading ---------------------------------------------------------------------------------


def default_data_root() -> Path:
    """``$OTEL_COMPACTION_DATA``, else ``shared/data`` beside the repository root."""
    from_env = os.environ.get(DATA_ENV)
    return Path(from_env) if from_env else _REPO_ROOT.parent / "shared" / "data"


def load_items(paths: Iterable[Path]) -> list[Item]:
    """Every item of every label file, in file and line order."""
    items: list[Item] = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path.name}:{number}"
            try:
                raw = json.loads(line)
                item = Item(
                    path.name, number, raw["source"], raw.get("record"), raw["kind"],
                    raw["anchor"], bool(raw["label"]), raw["reason"], raw.get("closes"),
                    raw.get("sidechain"),
                )  # fmt: skip
            except (ValueError, KeyError, TypeError) as exc:
                raise LabelError(f"{where}: not a label item: {exc}") from None
            if item.kind not in KIND_RULES:
                raise LabelError(f"{where}: unknown kind {item.kind!r}")
            items.append(item)
    return items


class Loader:
    """Reads and analyses each conversation the items point into, once."""

    def __init__(self, data: Path, policy: Policy, handmade: Path = LABELS / "handmade") -> None:
        self.data = data
        self.handmade = handmade
        self.policy = policy
        self._records: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self._conversations: dict[tuple[str, str | None, str | None], Conversation] = {}

    def records(self, source: str) -> dict[str, list[dict[str, Any]]]:
        """The messages of every record of a ``transcripts.jsonl`` source, by record id."""
        found = self._records.get(source)
        if found is None:
            found = {}
            try:
                with (self.data / source).open(encoding="utf-8") as handle:
                    for line in handle:
                        if line.strip():
                            raw = json.loads(line)
                            found[raw["id"]] = raw["messages"]
            except OSError as exc:
                raise LabelError(f"{source}: cannot read under {self.data}: {exc}") from None
            self._records[source] = found
        return found

    def conversation(
        self, source: str, record: str | None, sidechain: str | None = None
    ) -> Conversation:
        """The conversation `source` names (its `record`, or its subagent thread starting at
        `sidechain`), parsed and analysed."""
        key = (source, record, sidechain)
        found = self._conversations.get(key)
        if found is None:
            messages = self._messages(source, record, sidechain)
            transcript = Transcript.parse(messages)
            analysis = Analysis.build(transcript, self.policy)
            name = (
                source + (f"#{record}" if record else "") + (f"@{sidechain}" if sidechain else "")
            )
            found = self._conversations[key] = Conversation(name, transcript, analysis)
            found.detections = detections(found)
        return found

    def _messages(
        self, source: str, record: str | None, sidechain: str | None
    ) -> list[dict[str, Any]]:
        if source.startswith("handmade/"):
            path = self.handmade / source.removeprefix("handmade/")
            try:
                return list(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError) as exc:
                raise LabelError(f"{source}: {exc}") from None
        if source.endswith("transcripts.jsonl"):
            if record is None:
                raise LabelError(f"{source}: a transcripts.jsonl source needs a record")
            try:
                return self.records(source)[record]
            except KeyError:
                raise LabelError(f"{source}: no record {record!r}") from None
        path = (_REPO_ROOT if source.startswith("tests/") else self.data) / source
        try:
            if sidechain is None:
                return read_session(path).messages
            return parse_session(_thread(path, sidechain), str(path)).messages
        except (OSError, TranscriptError) as exc:
            raise LabelError(str(exc)) from None

    def all_of(self, items: Iterable[Item]) -> list[Conversation]:
        """Every conversation of the items' sources: each record of a ``transcripts.jsonl``,
        each session and each subagent thread an item names."""
        out: list[Conversation] = []
        for source, sidechain in dict.fromkeys((i.source, i.sidechain) for i in items):
            if source.endswith("transcripts.jsonl"):
                out += [self.conversation(source, r) for r in self.records(source)]
            else:
                out.append(self.conversation(source, None, sidechain))
        return out


def _thread(path: Path, first: str) -> list[dict[str, Any]]:
    """The inline subagent thread of a Claude Code session file: the sidechain records whose
    ``parentUuid`` chain leads back to the record `first`, in file order."""
    records = [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    side = [r for r in records if r.get("isSidechain") is True]
    parent = {r.get("uuid"): r.get("parentUuid") for r in side}
    leads: dict[Any, bool] = {first: True}

    def reaches(uuid: Any) -> bool:
        trail = []
        while uuid not in leads and uuid is not None and uuid in parent:
            trail.append(uuid)
            uuid = parent[uuid]
        found = leads.get(uuid, False)
        leads.update(dict.fromkeys(trail, found))
        return found

    thread = [r for r in side if reaches(r.get("uuid"))]
    if not thread:
        raise LabelError(f"{path}: no sidechain thread starts at {first!r}")
    return thread


# -- anchors and detections ------------------------------------------------------------------


def nth_call(t: Transcript, anchor: dict[str, Any]) -> ToolCall:
    """The `occurrence`-th call carrying `call_id`."""
    calls = [c for c in t.calls if c.id == anchor["call_id"]]
    occurrence = int(anchor.get("occurrence", 0))
    if not 0 <= occurrence < len(calls):
        raise LookupError(f"no call {anchor['call_id']!r} #{occurrence} ({len(calls)} carry it)")
    return calls[occurrence]


def approval_request(t: Transcript, request_id: str) -> int:
    """The message holding the Responses ``mcp_approval_request`` item `request_id` (not a
    call: the model asks, and the client answers with an ``mcp_approval_response``)."""
    for entry in t.entries:
        if entry.item == "mcp_approval_request" and t.messages[entry.index].get("id") == request_id:
            return entry.index
    raise LookupError(f"no call or mcp_approval_request {request_id!r}")


def nth_result(t: Transcript, anchor: dict[str, Any]) -> ToolResult:
    """The `occurrence`-th result carrying `call_id`."""
    results = [r for r in t.results if r.call_id == anchor["call_id"]]
    occurrence = int(anchor.get("occurrence", 0))
    if not 0 <= occurrence < len(results):
        raise LookupError(f"no result {anchor['call_id']!r} #{occurrence}")
    return results[occurrence]


def quoted(t: Transcript, quote: str) -> int:
    """The one assistant message whose text holds `quote`."""
    at = [e.index for e in t.entries if e.role == "assistant" and quote in e.text]
    count = sum(t.entries[i].text.count(quote) for i in at)
    if count != 1:
        raise LookupError(f"quote {quote!r} is in {count} places, not one")
    return at[0]


def result_message(t: Transcript, call: ToolCall) -> int:
    """The message of `call`'s result."""
    if call.result is None:
        raise LookupError(f"call {call.id!r} at message {call.message_index} has no result")
    return t.results[call.result].message_index


def first_result_after(t: Transcript, call: ToolCall) -> ToolResult | None:
    """The first result carrying `call`'s id after it (an interim one, perhaps)."""
    return next(
        (r for r in t.results if r.call_id == call.id and r.message_index > call.message_index),
        None,
    )


def _call_of_result(t: Transcript, call_id: str, message_index: int) -> ToolCall | None:
    """The call answered by the result carrying `call_id` in message `message_index`."""
    for r in t.results:
        if r.call_id == call_id and r.message_index == message_index and r.call is not None:
            return t.calls[r.call]
    return None


def _launch_of(t: Transcript, o: Tracked) -> ToolCall | None:
    """The call that started background task `o`: a call of its tool answered in the message
    where the task opens, whose result names the task's handle (its name is the tool's)."""
    return next(
        (
            c
            for c in t.calls
            if c.name == o.name
            and c.result is not None
            and t.results[c.result].message_index == o.opened
            and o.id in t.results[c.result].text
        ),
        None,
    )


def _call_at(t: Transcript, call_id: str, message_index: int) -> ToolCall | None:
    """The call carrying `call_id` made in message `message_index`."""
    entry = t.entries[message_index]
    return next((t.calls[c] for c in entry.calls if t.calls[c].id == call_id), None)


def tracked_key(t: Transcript, o: Tracked) -> tuple[str, Key] | None:
    """The kind and key of an obligation the rules track, or None for other kinds."""
    if o.kind == "retry":
        call = _call_of_result(t, o.id, o.opened)
        return ("retry", ("call", call.ordinal)) if call else None
    if o.kind == "commitment":
        return "commitment", ("message", o.opened, o.name)
    if o.kind == "background_task":
        call = _launch_of(t, o)
        return ("background", ("call", call.ordinal)) if call else None
    if o.kind == "tool_call" and o.call >= 0:
        return "open_call", ("call", o.call)
    return None


def _named_call(t: Transcript, o: Tracked) -> ToolCall | None:
    """The call an obligation is about: its own ordinal, else the call or the result carrying
    its id where it opens (a rule of any kind may report a call this way)."""
    if o.call >= 0:
        return t.calls[o.call]
    return _call_at(t, o.id, o.opened) or _call_of_result(t, o.id, o.opened)


def _chained(t: Transcript, first: ToolCall, resolved: int | None) -> list[ToolCall]:
    """The retries of `first` (same tool, same target) answered before its chain resolves:
    the chain holds their failures too."""
    target = call_target(first)
    end = len(t) if resolved is None else resolved
    return [
        c
        for c in t.calls[first.ordinal + 1 :]
        if c.name == first.name
        and c.result is not None
        and t.results[c.result].message_index <= end
        and call_target(c) == target
    ]


def _repeated_negatives(t: Transcript, a: Analysis, found: dict[Key, str]) -> dict[Key, str]:
    """The negative answers `null_result` folds into a later negative answer to the same call
    made again (the same tool and `asked`): the latest stands for them, as a failed retry is
    held by its chain."""
    answers: dict[tuple[str, str], list[ToolResult]] = {}
    for r in t.results:
        call = t.call_of(r)
        if call is not None and a.outcomes[r.ordinal] != "cancelled":
            answers.setdefault((call.name, asked(call)), []).append(r)
    out: dict[Key, str] = {}
    for same in answers.values():
        for at, r in enumerate(same):
            if a.outcomes[r.ordinal] not in NEGATIVE_OUTCOMES or ("call", r.call) in found:
                continue
            for later in same[at + 1 :]:
                if a.outcomes[later.ordinal] not in NEGATIVE_OUTCOMES:
                    break
                if ("call", later.call) in found:
                    out[("call", r.call)] = f"held by its repeat at message {later.message_index}"
                    break
    return out


def same_words(name: str, quote: str) -> bool:
    """Whether a commitment's name (its whole sentence) and a label's quote (a verbatim part
    of the message) are one promise: either holds the other, case, spacing and typographic
    apostrophes aside."""
    a, b = (" ".join(x.replace("\u2019", "'").lower().split()) for x in (name, quote))
    return a in b or b in a


def response_end(t: Transcript, index: int) -> int:
    """The last message of the response `index` is part of: the end of the split response
    (a Responses message and the calls that follow it) holding it, else `index` itself. No
    cut falls inside a response."""
    ends = [u.last for u in t.units if u.kind == "split_response" and u.first <= index <= u.last]
    return max(ends, default=index)


def detections(conv: Conversation) -> dict[str, dict[Key, str]]:
    """Every detection of every call-based kind and of commitments, by key."""
    t, a = conv.transcript, conv.analysis
    out: dict[str, dict[Key, str]] = {kind: {} for kind in KIND_RULES}
    for o in a.obligations:
        found = tracked_key(t, o)
        if found is None or found[0] not in _OBLIGATION_KINDS:
            continue
        kind, key = found
        if o.resolved is not None and o.resolved <= response_end(t, o.opened):
            continue  # kept in the message (the response) that made it: open at no cut
        if o.rule in KIND_RULES[kind]:
            out[kind][key] = f"{o.rule} {o.name} at message {o.opened} ({o.status})"
            if kind == "retry":
                for later in _chained(t, t.calls[key[1]], o.resolved):
                    out[kind].setdefault(("call", later.ordinal), f"in the chain of {o.id}")
    for n in a.negatives:
        call = _call_of_result(t, n.call_id, n.message_index)
        if call is not None:
            out["negative"][("call", call.ordinal)] = f"{n.outcome}: {_short(n.text)}"
    out["negative"].update(_repeated_negatives(t, a, out["negative"]))
    obligation_rules = {name for name, rule in RULES.items() if rule.kind == "obligation"}
    for o in a.obligations:
        if o.rule == "open_tool_call" and o.status == "abandoned":
            # No result at the end, and none will come: discharged where it arose (the
            # `abandoned_call` rule carries it), yet the call is unanswered all the same.
            out["open_call"][("call", o.call)] = f"{o.name} unanswered, discharged abandoned"
            continue
        if o.resolved is not None or o.rule not in obligation_rules:
            continue
        if o.kind == "approval":
            out["approval"][("approval", o.opened)] = f"{o.rule} {o.name} open at the end"
            continue
        named = _named_call(t, o)
        if named is None:
            continue
        out["approval"][("call", named.ordinal)] = f"{o.rule} open at the end"
        if o.rule == "open_tool_call":
            out["open_call"][("call", named.ordinal)] = f"{named.name} open at the end"
    open_calls = {o.call: o for o in a.obligations if o.rule == "open_tool_call"}
    for call in t.calls:
        first = first_result_after(t, call)
        tracked = open_calls.get(call.ordinal)
        if first is None or tracked is None:
            continue
        if tracked.resolved is None or tracked.resolved > first.message_index:
            out["interim"][("call", call.ordinal)] = f"{call.name} open after its first result"
    for r in t.results:
        if r.call is None:
            out["orphan"][("result", r.ordinal)] = f"result {r.call_id} answers no call"
    return out


def reference_cut(t: Transcript, anchor: dict[str, Any]) -> int:
    """The cut just after the result of the anchor's call."""
    return result_message(t, nth_call(t, anchor["cut_after_call"])) + 1


def owed_at(a: Analysis, cut: int) -> frozenset[str]:
    """The identifiers a summary of head..cut must carry."""
    start = a.head
    if cut <= start:
        return frozenset()
    from otel_compaction.rules.unresolved_reference import check

    findings = check(SpanView(a, start, cut))
    carried = must_carry(a, findings, start, cut, levels=("carry", "block", "warn"))
    return frozenset(carried.identifiers)


def resolve(item: Item, conv: Conversation) -> Verdict:
    """What the rules made of `item` in `conv`."""
    t, a = conv.transcript, conv.analysis
    anchor = item.anchor
    try:
        if item.kind == "commitment":
            at = quoted(t, anchor["quote"])
            names = [k[2] for k in conv.detections["commitment"] if k[1] == at]
            name = next((n for n in names if same_words(n, anchor["quote"])), None)
            key: Key = ("message", at, name)
            context = t.entries[at].text
        elif item.kind == "reference":
            cut = reference_cut(t, anchor)
            value = anchor["identifier"]
            key = ("reference", cut, value)
            if not _appears(t, value):
                raise LookupError(f"identifier {value!r} appears nowhere")
            fired = value in owed_at(a, cut)
            context = f"{value!r} at cut {cut} of {len(t)}; next written {_next_use(t, value, cut)}"
            return Verdict(item, conv.name, fired, key, context)
        elif item.kind == "orphan":
            result = nth_result(t, anchor)
            key = ("result", result.ordinal)
            context = result.text
        elif item.kind == "approval" and not any(c.id == anchor["call_id"] for c in t.calls):
            at = approval_request(t, anchor["call_id"])
            key = ("approval", at)
            context = t.entries[at].item
        else:
            call = nth_call(t, anchor)
            key = ("call", call.ordinal)
            context = f"{call.name}({call.arguments})"
            if call.result is not None:
                context += f" -> {t.results[call.result].text}"
    except (LookupError, TypeError) as exc:
        raise LabelError(f"{item.where}: {conv.name}: {exc}") from None
    fired = key in conv.detections[item.kind]
    agree = _closes_agree(item, conv, key) if item.closes is not None and fired else None
    return Verdict(item, conv.name, fired, key, context, agree)


def _next_use(t: Transcript, value: str, cut: int) -> str:
    """Where `value` is next written after `cut`: the message and what carries it."""
    for e in t.entries[cut:]:
        if value in e.text:
            return f"at message {e.index} ({e.role} text)"
        if any(value in t.calls[c].arguments for c in e.calls):
            return f"at message {e.index} (call arguments)"
        if any(value in t.results[r].text for r in e.results):
            return f"at message {e.index} (tool result)"
    return "nowhere"


def _appears(t: Transcript, value: str) -> bool:
    """Whether `value` is written anywhere: in a text, or in a call's JSON arguments or a
    result (where it may stand escaped)."""
    escaped = json.dumps(value)[1:-1]
    texts = itertools.chain(
        (e.text for e in t.entries),
        (c.arguments for c in t.calls),
        (r.text for r in t.results),
    )
    return any(value in text or escaped in text for text in texts)


def _closes_agree(item: Item, conv: Conversation, key: Key) -> bool | None:
    """Whether the rule's resolution stands where the label says the obligation closes."""
    t, a = conv.transcript, conv.analysis
    tracked = [o for o in a.obligations if (found := tracked_key(t, o)) and found[1] == key]
    tracked = [o for o in tracked if o.rule in KIND_RULES[item.kind]]
    if not tracked:
        return None
    resolved = tracked[0].resolved
    closes = item.closes
    try:
        if closes == "never":
            return resolved is None
        if closes == "user_turn":
            opened = tracked[0].opened
            turn = next((u for u in a.user_turns if u > opened), None)
            return resolved == turn
        if "quote" in closes:
            return resolved == quoted(t, closes["quote"])
        if item.kind == "commitment":  # kept by the promised call, where it is made
            return resolved == nth_call(t, closes).message_index
        return resolved == result_message(t, nth_call(t, closes))
    except (LookupError, TypeError) as exc:
        raise LabelError(f"{item.where}: closes: {exc}") from None


# -- the figures -----------------------------------------------------------------------------


@dataclass(slots=True)
class Evaluation:
    """The table rows (kinds in `KIND_RULES` order), each item's verdict, every conversation
    of the labelled sources, and the detections no item labels (kind, conversation, what)."""

    rows: list[Row]
    verdicts: list[Verdict]
    conversations: list[Conversation]
    unlabelled: list[tuple[str, str, str]]


def evaluate(items: Sequence[Item], loader: Loader) -> Evaluation:
    """Resolve every item and count, per kind, what the rules made of them."""
    verdicts = []
    for item in items:
        try:
            conv = loader.conversation(item.source, item.record, item.sidechain)
        except LabelError as exc:
            raise LabelError(f"{item.where}: {exc}") from None
        verdicts.append(resolve(item, conv))
    conversations = loader.all_of(items)
    rows: dict[str, Row] = {}
    labelled: dict[str, set[tuple[str, Key]]] = {}
    for v in verdicts:
        row = rows.setdefault(v.item.kind, Row(v.item.kind, _rules(v.item.kind)))
        if v.item.label:
            row.labelled_true += 1
        else:
            row.labelled_false += 1
        row.tp += v.outcome == "tp"
        row.fp += v.outcome == "fp"
        row.fn += v.outcome == "fn"
        if v.closes_agree is not None:
            row.closes_labelled += 1
            row.closes_agree += v.closes_agree
        labelled.setdefault(v.item.kind, set()).add((v.conversation, v.key))
    unlabelled: list[tuple[str, str, str]] = []
    by_name = {c.name: c for c in conversations}
    for kind, row in rows.items():
        seen = labelled[kind]
        if kind == "reference":  # at the labelled cuts only
            found = [
                (name, ("reference", cut, value), f"{value!r} owed at cut {cut}")
                for name, cut in sorted({(name, key[1]) for name, key in seen})
                for value in sorted(owed_at(by_name[name].analysis, cut))
            ]
        else:
            found = [
                (conv.name, key, what)
                for conv in conversations
                for key, what in conv.detections[kind].items()
            ]
        new = [(kind, name, what) for name, key, what in found if (name, key) not in seen]
        row.unlabelled_fired = len(new)
        unlabelled += new
    ordered = [rows[k] for k in KIND_RULES if k in rows]
    return Evaluation(ordered, verdicts, conversations, unlabelled)


def _rules(kind: str) -> str:
    return "|".join(KIND_RULES[kind]) or "any obligation rule"


# The label kinds that may name an obligation of each kind the gate reports (a call-based
# obligation of a kind not listed here, a pending approval say, is looked up as ``approval``).
_REF_KINDS = {
    "retry": ("retry",),
    "commitment": ("commitment",),
    "tool_call": ("open_call", "interim", "approval"),
    "background_task": ("background", "approval"),
}


def blocks(conversations: Sequence[Conversation], verdicts: Sequence[Verdict]) -> Blocks:
    """Of each conversation: is a compaction of all but its last turn blocked, and is every
    obligation that blocks it an item labelled false."""
    gate = CompactionGate("default", incremental=False)
    label = {(v.item.kind, v.conversation, v.key): v.item.label for v in verdicts}
    out = Blocks()
    for conv in conversations:
        a, t = conv.analysis, conv.transcript
        users = [u for u in a.user_turns if u > a.head]
        if not users:
            continue
        out.conversations += 1
        decision = gate.evaluate(a, a.head, users[-1], raise_on_refuse=False)
        if decision.action == "compact":
            continue
        out.blocked += 1
        labels: list[bool | None] = []
        for ref in decision.obligations:
            key = _ref_key(t, ref.kind, ref.id, ref.name, ref.message_index)
            kinds = _REF_KINDS.get(ref.kind, ("approval",))
            found = [label.get((k, conv.name, key)) for k in kinds] if key else []
            labels.append(next((f for f in found if f is not None), None))
        if labels and all(f is False for f in labels):
            out.only_false += 1
        if any(f is None for f in labels):
            out.unlabelled += 1
    return out


def _ref_key(t: Transcript, kind: str, id: str, name: str, at: int | None) -> Key | None:
    """The key of an obligation the gate names, by its kind, id, name and message."""
    if at is None:
        return None
    if kind == "commitment":
        return ("message", at, name)
    if kind == "retry":
        call = _call_of_result(t, id, at)
    else:
        call = _call_at(t, id, at) or _call_of_result(t, id, at)
    return ("call", call.ordinal) if call else None


def _short(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(rows: Sequence[Row]) -> str:
    """The rows as a text table."""
    head = (
        f"{'kind':<11} {'rules':<32} {'true':>5} {'false':>5} {'TP':>4} {'FP':>4} {'FN':>4} "
        f"{'prec':>5} {'recall':>6} {'unlabelled':>10} {'closes':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        closes = f"{r.closes_agree}/{r.closes_labelled}" if r.closes_labelled else "-"
        lines.append(
            f"{r.kind:<11} {r.rules:<32} {r.labelled_true:>5} {r.labelled_false:>5} {r.tp:>4} "
            f"{r.fp:>4} {r.fn:>4} {_figure(r.precision):>5} {_figure(r.recall):>6} "
            f"{r.unlabelled_fired:>10} {closes:>7}"
        )
    return "\n".join(lines)


def listing(evaluation: Evaluation, which: str) -> str:
    """The misclassified items (`which`: fp, fn or all), one line of context each; with
    ``all``, the detections no item labels as well."""
    wanted = {"fp": {"fp"}, "fn": {"fn"}, "all": {"fp", "fn"}}[which]
    lines = []
    for v in evaluation.verdicts:
        if v.outcome in wanted:
            lines.append(f"{v.outcome.upper()} {v.item.where} {v.item.kind}: {v.item.reason}")
            lines.append(f"    {_short(v.context, 150)}")
    if which == "all":
        for kind, name, what in evaluation.unlabelled:
            lines.append(f"NEW {kind} {name}: {what}")
    return "\n".join(lines)


def _verifier() -> ModuleType | None:
    """The summary verifier's evaluation module (``_verifier_eval``), when it is present."""
    try:
        return importlib.import_module("_verifier_eval")
    except ModuleNotFoundError:
        return None


# Label files of other benchmarks (each read by its own script), not obligation items.
_OTHER_BENCHMARKS: Final = frozenset({"reissues.jsonl"})


def label_files(verifier: ModuleType | None) -> list[Path]:
    """The label files: every ``labels/*.jsonl`` but the verifier's own cases (a set of
    summaries, read by its module) and those of the other benchmarks (re-issues)."""
    own = getattr(verifier, "LABELS", None)
    return [
        p
        for p in sorted(LABELS.glob("*.jsonl"))
        if (own is None or p != Path(own)) and p.name not in _OTHER_BENCHMARKS
    ]


def verifier_table(verifier: ModuleType, data: Path) -> tuple[list[Any], str]:
    """The verifier's rows on `data`, and its table (its own `format_table` if it has one)."""
    evaluate_verifier: Callable[[Path], list[Any]] = verifier.evaluate
    rows = evaluate_verifier(data)
    format_rows: Callable[[list[Any]], str] | None = getattr(verifier, "format_table", None)
    if format_rows is not None:
        return rows, format_rows(rows)
    lines = ["  ".join(f"{k}={v}" for k, v in _as_dict(row).items()) for row in rows]
    return rows, "\n".join(lines)


def _as_dict(row: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        return dataclasses.asdict(row)
    if isinstance(row, dict):
        return row
    return dict(vars(row))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="the data root")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--list", choices=("fp", "fn", "all"), default=None)
    parser.add_argument("--kind", choices=tuple(KIND_RULES), default=None)
    args = parser.parse_args(argv)
    data = args.data or default_data_root()
    verifier = _verifier()
    try:
        items = load_items(label_files(verifier))
        if args.kind:
            items = [i for i in items if i.kind == args.kind]
        loader = Loader(data, Policy.load("default").compile())
        evaluation = evaluate(items, loader)
    except LabelError as exc:
        print(f"precision: {exc}", file=sys.stderr)
        return 2
    rows, verdicts = evaluation.rows, evaluation.verdicts
    user = blocks(evaluation.conversations, verdicts)
    checked = verifier_table(verifier, data) if verifier is not None else None
    if args.format == "json":
        out: dict[str, Any] = {
            "rows": [
                {**dataclasses.asdict(r), "precision": r.precision, "recall": r.recall}
                for r in rows
            ],
            "blocks": dataclasses.asdict(user),
        }
        if args.list:
            wanted = {"fp": {"fp"}, "fn": {"fn"}, "all": {"fp", "fn"}}[args.list]
            out["misclassified"] = [
                {"where": v.item.where, "outcome": v.outcome, "kind": v.item.kind,
                 "reason": v.item.reason, "context": _short(v.context, 150)}
                for v in verdicts if v.outcome in wanted
            ]  # fmt: skip
            if args.list == "all":
                out["unlabelled"] = [
                    {"kind": k, "conversation": n, "what": w} for k, n, w in evaluation.unlabelled
                ]
        if checked is not None:
            out["verifier"] = [_as_dict(r) for r in checked[0]]
        print(json.dumps(out, indent=2))
        return 0
    count = len(evaluation.conversations)
    print(f"{len(items)} labelled items, {count} conversations, data {data}")
    print(table(rows))
    print(
        f"\nall but the last turn compacted: {user.blocked} of {user.conversations} "
        f"conversations blocked; {user.only_false} only by items labelled false, "
        f"{user.unlabelled} by at least one obligation nobody labelled"
    )
    if checked is not None:
        print("\nsummary verifier:\n" + checked[1])
    if args.list:
        print("\n" + listing(evaluation, args.list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
