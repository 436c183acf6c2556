"""Summarizers take structured input, not prose, and their output is verified.

A summarizer that reads only the transcript paraphrases an unresolved call as a completed action
("the agent wrote the file"), because narrative favours the past tense. So every summarizer
here receives a `SummaryRequest`: the span's messages, the table of obligations still pending,
the identifiers the rest of the transcript still uses, the negative results established in the
span, and the archive handle of the verbatim original.

* `ExtractiveSummarizer` needs no model and is the embedded default: the calls made with their
  outcomes, negatives stated as such, identifiers verbatim, pending obligations named as
  pending, and the handle to recall the original.
* `ModelSummarizer` drives a user's OpenAI-compatible or Anthropic client with that structured
  input as JSON.

`verify` (from `otel_compaction.verification`) is the check every summary must pass before it
may replace a span: every identifier that must be carried appears, every negative result is
stated (the contradiction probe: the summary alone answers "what did we establish was not the
case"), and every pending obligation is stated as pending.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from otel_compaction.analysis import Negative
from otel_compaction.rules import ObligationRef
from otel_compaction.transcript import Transcript
from otel_compaction.verification import Verification, verify

__all__ = [
    "ExtractiveSummarizer",
    "ModelSummarizer",
    "Summarizer",
    "SummaryRequest",
    "Verification",
    "verify",
]

_EXCERPT = 160


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """Everything a summarizer is given about the span it replaces."""

    messages: Sequence[Mapping[str, Any]]
    span: tuple[int, int]
    pending: tuple[ObligationRef, ...] = ()
    identifiers: tuple[str, ...] = ()
    negatives: tuple[Negative, ...] = ()
    archive_handle: str | None = None
    abandoned: tuple[ObligationRef, ...] = ()
    """Calls forced to a terminal state: they will never get a result."""
    missing: tuple[str, ...] = ()
    """On a retry: what the previous summary failed to carry, named for the summarizer."""

    def to_json(self) -> str:
        """The structured input as JSON, as a model-backed summarizer sends it."""
        return json.dumps(
            {
                "span": {"first_message": self.span[0], "last_message": self.span[1] - 1},
                "archive_handle": self.archive_handle,
                "pending_obligations": [
                    {"kind": p.kind, "id": p.id, "name": p.name} for p in self.pending
                ],
                "identifiers_to_keep_verbatim": list(self.identifiers),
                "abandoned_calls": [
                    {"kind": a.kind, "id": a.id, "name": a.name} for a in self.abandoned
                ],
                "negative_results_to_state": [
                    {"tool": n.tool, "call_id": n.call_id, "result": n.text} for n in self.negatives
                ],
                "previous_summary_was_missing": list(self.missing),
                "messages": list(self.messages),
            },
            ensure_ascii=False,
            default=str,
        )


@runtime_checkable
class Summarizer(Protocol):
    """Turns a `SummaryRequest` into summary text."""

    def summarize(self, request: SummaryRequest) -> str:
        """Return the summary of ``request.messages``."""
        ...


def retry_request(request: SummaryRequest, verification: Verification) -> SummaryRequest:
    """The request again, with what the last summary missed named."""
    return replace(request, missing=verification.describe())


@dataclass
class ExtractiveSummarizer:
    """A deterministic summary built from the structured input alone; no model needed."""

    excerpt_chars: int = _EXCERPT
    header: str = "Summary of compacted messages"

    def summarize(self, request: SummaryRequest) -> str:
        """Calls with outcomes, negatives as negatives, identifiers verbatim, what is pending."""
        transcript = Transcript.parse(list(request.messages))
        start, end = request.span
        lines = [f"[{self.header} {start}..{end - 1}]"]
        if request.archive_handle:
            lines.append(
                f"The original messages are archived verbatim as {request.archive_handle} "
                "(recall_archived_span) and can be read back exactly."
            )
        earlier = [e.text for e in transcript.entries if self._is_summary(e.text)]
        for text in earlier:
            lines.append("Carried from an earlier summary:")
            lines.extend(self._carried(text))
        asks = [
            e.text
            for e in transcript.entries
            if e.role == "user" and e.text.strip() and not self._is_summary(e.text)
        ]
        if asks:
            lines.append("User requests:")
            lines.extend(f"- {self._excerpt(text)}" for text in asks)
        if transcript.calls:
            lines.append("Tool calls and their outcomes:")
            for call in transcript.calls:
                lines.append(f"- {self._call_line(transcript, call.ordinal, request.abandoned)}")
        if request.negatives:
            lines.append("Established negatives (what was NOT the case):")
            lines.extend(
                f"- {n.tool or 'tool'} ({n.call_id}) returned no positive result: {n.text}"
                for n in request.negatives
            )
        if request.identifiers:
            lines.append("Identifiers still in use: " + ", ".join(request.identifiers))
        if request.pending:
            lines.append("Still pending, NOT completed (do not assume a result):")
            lines.extend(f"- {p.describe()}" for p in request.pending)
        said = [e.text for e in transcript.entries if e.role == "assistant" and e.text.strip()]
        if said:
            lines.append(f"Last assistant statement: {self._excerpt(said[-1])}")
        if request.missing:
            lines.append("Also carried:")
            lines.extend(f"- {item}" for item in request.missing)
        return "\n".join(lines)

    def _is_summary(self, text: str) -> bool:
        return text.startswith(f"[{self.header} ")

    def _carried(self, text: str) -> list[str]:
        """An earlier summary's lines, kept whole: what it established must survive this one.
        Its pending list and last statement are dropped: they were true then, not now."""
        kept: list[str] = []
        skipping = False
        for line in text.splitlines()[1:]:
            if line.startswith(("Still pending", "Last assistant statement")):
                skipping = line.startswith("Still pending")
                continue
            if skipping and line.startswith("- "):
                continue
            skipping = False
            if line.startswith(("The original messages are archived", "Carried from")):
                continue
            kept.append(line)
        return kept

    def _call_line(
        self, transcript: Transcript, ordinal: int, abandoned: tuple[ObligationRef, ...] = ()
    ) -> str:
        call = transcript.calls[ordinal]
        result = transcript.result_of(call)
        head = f"{call.name}({self._excerpt(call.arguments)}) [{call.id}]"
        if result is None:
            if any(a.id == call.id for a in abandoned):
                return f"{head} -> abandoned: no result will come"
            return f"{head} -> no result in this span"
        outcome = "error" if result.status == "error" else "result"
        return f"{head} -> {outcome}: {self._excerpt(result.text) or '(empty)'}"

    def _excerpt(self, text: str) -> str:
        flat = " ".join(text.split())
        if len(flat) <= self.excerpt_chars:
            return flat
        return flat[: self.excerpt_chars - 1] + "…"


_INSTRUCTIONS = """\
You compact part of an AI agent's transcript into a faithful summary that will replace it.
You get JSON with the messages and structured state. Rules:
- Keep every entry of identifiers_to_keep_verbatim exactly as written.
- State every entry of negative_results_to_state as a negative, naming its tool and call_id
  (what was searched or attempted and NOT found / failed).
- List pending_obligations as still pending; never describe them as done.
- State abandoned_calls as abandoned: they never got a result and never will.
- Mention archive_handle if present, so the original can be recalled.
- If previous_summary_was_missing is not empty, make sure each listed item is now included.
Reply with the summary text only."""


class ModelSummarizer:
    """Summarizes with a model through the user's own client.

    Works with ``openai.OpenAI`` (or any OpenAI-compatible client: ``chat.completions``) and
    ``anthropic.Anthropic`` (``messages``); the kind is detected from the client.

    Example:
        >>> import openai  # doctest: +SKIP
        >>> summarizer = ModelSummarizer(openai.OpenAI(), model="gpt-4o-mini")  # doctest: +SKIP
    """

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        max_tokens: int = 1024,
        instructions: str = _INSTRUCTIONS,
    ) -> None:
        """Create a summarizer.

        Args:
            client: a synchronous OpenAI-compatible or Anthropic client object.
            model: the model name to call.
            max_tokens: the summary's token limit.
            instructions: the system prompt; the default states the carrying rules.
        """
        messages_api = getattr(client, "messages", None)
        chat = getattr(getattr(client, "chat", None), "completions", None)
        if chat is not None and hasattr(chat, "create"):
            self.provider = "openai"
            create = chat.create
        elif messages_api is not None and hasattr(messages_api, "create"):
            self.provider = "anthropic"
            create = messages_api.create
        else:
            raise TypeError(
                "ModelSummarizer needs an OpenAI-compatible client (chat.completions.create) "
                f"or an Anthropic client (messages.create), got {type(client).__name__}"
            )
        if inspect.iscoroutinefunction(inspect.unwrap(create)):
            raise TypeError(_ASYNC_CLIENT.format(type(client).__name__))
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.instructions = instructions

    def summarize(self, request: SummaryRequest) -> str:
        """Send the structured request; return the model's text."""
        payload = request.to_json()
        if self.provider == "openai":
            response = self.client.chat.completions.create(
                model=self.model,
                max_tokens=self.max_tokens,
                messages=[
                    {"role": "system", "content": self.instructions},
                    {"role": "user", "content": payload},
                ],
            )
            _reject_awaitable(response, self.client)
            choices = response.choices
            text = choices[0].message.content if choices else None
        else:
            response = self.client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                system=self.instructions,
                messages=[{"role": "user", "content": payload}],
            )
            _reject_awaitable(response, self.client)
            text = "".join(
                getattr(block, "text", "")
                for block in response.content
                if getattr(block, "type", "") == "text"
            )
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"the {self.provider} model {self.model!r} returned no summary text")
        return text


_ASYNC_CLIENT = (
    "ModelSummarizer needs a synchronous client (openai.OpenAI, anthropic.Anthropic), "
    "got the asynchronous {}"
)


def _reject_awaitable(response: Any, client: Any) -> None:
    """An async client slipped through detection: close its coroutine, raise TypeError."""
    if inspect.isawaitable(response):
        close = getattr(response, "close", None)
        if callable(close):
            close()  # never awaited: no "coroutine was never awaited" warning
        raise TypeError(_ASYNC_CLIENT.format(type(client).__name__))
