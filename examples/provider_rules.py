"""The structural rules the LLM providers enforce on a request's history, as pure functions.

Each function takes a parsed request body (the JSON object a client POSTs) and returns None
when the provider would accept the history, or the text of the HTTP 400
``invalid_request_error`` the provider answers with when it would not:

* :func:`anthropic_messages_error` for Anthropic Messages (``POST /v1/messages``);
* :func:`responses_error` for OpenAI Responses (``POST /v1/responses``), which also needs to
  know what earlier responses produced (:class:`ProducedResponse`), because its rules tie a
  replayed output item to the reasoning item it was generated after;
* :func:`chat_completions_error` for OpenAI Chat Completions (``POST /v1/chat/completions``).

The rules are the ones a compaction cut can break: a tool call separated from its result, a
result left without its call, a reasoning item or thinking block separated from the output it
preceded. They do not validate the schema of the body (field types, required fields, roles):
the SDKs' typed parameters already guard that, and a fake that rejected more than the providers
do would hide the difference a test wants to see. The messages copy the providers' own wording
(the source of each is noted beside it, as observed in the providers' real 400 answers), so
that code matching on them against the real APIs is exercised by the same strings; where a
message lists several ids, they are joined by ", " as the providers do.

Where a provider reports the first problem it finds, so do these functions: the history is
scanned from the start and the first broken rule is returned.

Needs only the standard library.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ProducedItem",
    "ProducedResponse",
    "anthropic_messages_error",
    "anthropic_prefix_error",
    "chat_completions_error",
    "responses_error",
]


# --------------------------------------------------------------------------
# Anthropic Messages
# --------------------------------------------------------------------------

# Anthropic's 400 when an assistant message's tool_use blocks are not all answered by
# tool_result blocks in the next message. ``messages.N`` is the message where the results
# were expected (the one after the assistant message): the indices in reported real answers
# point there (e.g. "messages.2" for [user, assistant(tool_use), user(text)]). For an
# assistant message that ends the history N is one past the end, which is this fake's choice.
# The ids are those left unanswered, in their order.
_ANTHROPIC_MISSING_RESULT = (
    "messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately "
    "after: {ids}. Each `tool_use` block must have a corresponding `tool_result` block in the "
    "next message."
)

# Anthropic's 400 when a tool_result block names a tool_use_id that the immediately preceding
# assistant message did not use (for instance when the first message left after a cut is a
# user message of tool results); the path points at that block.
_ANTHROPIC_UNEXPECTED_RESULT = (
    "messages.{index}.content.{block}: unexpected `tool_use_id` found in `tool_result` blocks: "
    "{id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous "
    "message."
)

# Anthropic's 400 when extended thinking is enabled and the assistant message opening the
# tool loop in progress does not start with its thinking block. Verbatim, including the
# provider's spelling of "preceeding".
_ANTHROPIC_THINKING_FIRST = (
    "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)

_THINKING_BLOCKS = ("thinking", "redacted_thinking")


def _blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The content blocks of an Anthropic message; a string content is one text block."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, Mapping)]


def _messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    return [message if isinstance(message, Mapping) else {} for message in messages]


def _tool_use_ids(message: Mapping[str, Any]) -> list[str]:
    if message.get("role") != "assistant":
        return []
    return [str(b.get("id")) for b in _blocks(message) if b.get("type") == "tool_use"]


def _is_tool_results_only(message: Mapping[str, Any]) -> bool:
    blocks = _blocks(message)
    return (
        message.get("role") == "user"
        and bool(blocks)
        and all(block.get("type") == "tool_result" for block in blocks)
    )


def anthropic_messages_error(body: Mapping[str, Any]) -> str | None:
    """Why Anthropic Messages would reject ``body`` with HTTP 400, or None if it would not.

    The rules:

    * every ``tool_use`` block of an assistant message is answered by a ``tool_result`` block
      (same id) in the next message, which must be a user message;
    * every ``tool_result`` block answers a ``tool_use`` of the immediately preceding
      assistant message;
    * with ``thinking`` of type ``enabled``, the assistant message that opens the final tool
      loop starts with a ``thinking`` or ``redacted_thinking`` block.

    The messages are taken as sent: Anthropic would merge consecutive messages of one role
    before applying the rules, which this does not do (no test here sends such histories).
    """
    messages = _messages(body)
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "user":
            previous = set(_tool_use_ids(messages[index - 1])) if index > 0 else set()
            for block_index, block in enumerate(_blocks(message)):
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in previous:
                    return _ANTHROPIC_UNEXPECTED_RESULT.format(
                        index=index, block=block_index, id=block.get("tool_use_id")
                    )
        uses = _tool_use_ids(message)
        if not uses:
            continue
        following = messages[index + 1] if index + 1 < len(messages) else {}
        answered = {
            block.get("tool_use_id")
            for block in _blocks(following)
            if following.get("role") == "user" and block.get("type") == "tool_result"
        }
        missing = [tool_use_id for tool_use_id in uses if tool_use_id not in answered]
        if missing:
            return _ANTHROPIC_MISSING_RESULT.format(index=index + 1, ids=", ".join(missing))
    return _anthropic_thinking_error(body, messages)


def _anthropic_thinking_error(
    body: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]
) -> str | None:
    """The thinking rule, checked once the tool pairing is known to be sound."""
    thinking = body.get("thinking")
    # Only manual extended thinking: with "adaptive" the model may decide not to think, so a
    # tool loop without a thinking block is a legitimate history there.
    if not (isinstance(thinking, Mapping) and thinking.get("type") == "enabled"):
        return None
    if not messages or not _is_tool_results_only(messages[-1]):
        return None  # no tool loop in progress: the last turn is the user's own
    opener: int | None = None
    index = len(messages) - 1
    # Walk back over the final tool loop (tool results, and the assistant tool_use messages
    # they answer); its first assistant message is the one that must carry the thinking.
    while index >= 0:
        message = messages[index]
        if message.get("role") == "assistant" and _tool_use_ids(message):
            opener = index
        elif not _is_tool_results_only(message):
            break
        index -= 1
    if opener is None:
        return None
    blocks = _blocks(messages[opener])
    first = str(blocks[0].get("type")) if blocks else "text"
    if first in _THINKING_BLOCKS:
        return None
    return _ANTHROPIC_THINKING_FIRST.format(index=opener, found=first)


# Anthropic's 400 when a thinking block sent back to a model with preserved thinking follows
# other messages than the ones it was produced after ("Prefix checks on thinking blocks",
# https://platform.claude.com/docs/en/build-with-claude/preserved-thinking/prefix-checks; the
# error the documentation names).
_ANTHROPIC_PREFIX_MISMATCH = (
    "messages.{index}.content.{block}: The block is bound to a different conversation."
)


def anthropic_prefix_error(
    body: Mapping[str, Any], prefixes: Mapping[str, Sequence[Mapping[str, Any]]]
) -> str | None:
    """The prefix check of a model with preserved thinking, or None if ``body`` passes it.

    ``prefixes`` gives, by ``signature``, the messages each thinking block was produced after
    (its prefix; ``system`` and ``tools`` are taken as unchanged). A block whose messages
    before it differ fails the check: HTTP 400, unless the request sets
    ``thinking.block_binding.prefix_mismatch_behavior`` to ``"drop_block"``, when the API drops
    the block instead ("Compaction and preserved thinking",
    https://platform.claude.com/docs/en/build-with-claude/compaction-thinking-blocks).
    """
    thinking = body.get("thinking")
    binding = thinking.get("block_binding") if isinstance(thinking, Mapping) else None
    if isinstance(binding, Mapping) and binding.get("prefix_mismatch_behavior") == "drop_block":
        return None
    messages = _messages(body)
    for index, message in enumerate(messages):
        for block_index, block in enumerate(_blocks(message)):
            if block.get("type") not in _THINKING_BLOCKS:
                continue
            prefix = prefixes.get(str(block.get("signature")))
            if prefix is not None and list(prefix) != messages[:index]:
                return _ANTHROPIC_PREFIX_MISMATCH.format(index=index, block=block_index)
    return None


# --------------------------------------------------------------------------
# OpenAI Responses
# --------------------------------------------------------------------------

# OpenAI's 400 when an output item the API generated after a reasoning item is replayed in
# ``input`` without that reasoning item right before it (only the items of the same response
# may stand between them). Observed for 'function_call' and 'message' items alike.
_RESPONSES_MISSING_REASONING = (
    "Item '{id}' of type '{type}' was provided without its required 'reasoning' item: "
    "'{reasoning}'."
)

# OpenAI's 400 when a replayed reasoning item is not followed by an item of its own response
# (the item it preceded was cut away).
_RESPONSES_REASONING_ALONE = (
    "Item '{id}' of type 'reasoning' was provided without its required following item."
)

# OpenAI's 400 (param "input") when a function_call_output answers a call_id that no earlier
# function_call item of the input carries, and no previous_response_id supplies it.
_RESPONSES_ORPHAN_OUTPUT = "No tool call found for function call output with call_id {call_id}."

# OpenAI's 400 when a function_call item of the input has no function_call_output after it.
_RESPONSES_MISSING_OUTPUT = "No tool output found for function call {call_id}."


@dataclass(frozen=True, slots=True)
class ProducedItem:
    """One output item of a response, as the server produced it."""

    type: str
    """``reasoning``, ``message``, ``function_call``..."""
    id: str
    """The item id (``rs_...``, ``msg_...``, ``fc_...``)."""
    call_id: str | None = None
    """The ``call_id`` of a ``function_call`` item."""


@dataclass(frozen=True, slots=True)
class ProducedResponse:
    """The output items of one response the server produced, in order.

    The Responses rules need these: an item generated after a reasoning item may only be
    replayed together with that reasoning item, which the request alone does not reveal.
    """

    response_id: str
    items: tuple[ProducedItem, ...]

    @property
    def reasoning_id(self) -> str | None:
        """The id of the reasoning item the other items were generated after, if any."""
        return next((item.id for item in self.items if item.type == "reasoning"), None)

    @property
    def call_ids(self) -> frozenset[str]:
        """The ``call_id`` of every function call of the response."""
        return frozenset(item.call_id for item in self.items if item.call_id is not None)

    def holds(self, item: Mapping[str, Any]) -> bool:
        """True when input ``item`` is one of this response's items other than its reasoning,
        or the output of one of its function calls (both may sit between the reasoning item
        and a later item of the response)."""
        if _item_type(item) == "function_call_output":
            return item.get("call_id") in self.call_ids
        return any(own.id == item.get("id") and own.type != "reasoning" for own in self.items)


def _item_type(item: Mapping[str, Any]) -> str:
    # An input item without "type" but with a "role" is an easy input message.
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return str(kind)


def _input_items(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    items = body.get("input")
    if not isinstance(items, list):
        return []  # a plain string input has no structure to break
    return [item if isinstance(item, Mapping) else {} for item in items]


def responses_error(
    body: Mapping[str, Any], produced: Iterable[ProducedResponse] = ()
) -> str | None:
    """Why OpenAI Responses would reject ``body`` with HTTP 400, or None if it would not.

    ``produced`` lists the responses generated so far (by the fake server), so that an item
    replayed in ``input`` can be traced to the reasoning item it was generated after. The
    rules, on the ``input`` items in order:

    * an item generated after a reasoning item is preceded by that reasoning item, with only
      items of the same response (or the outputs of its function calls) between them;
    * a reasoning item is immediately followed by an item of its own response;
    * a ``function_call_output`` answers a ``function_call`` earlier in the input (unchecked
      with ``previous_response_id``, whose stored items the request does not show);
    * a ``function_call`` is answered by a ``function_call_output`` later in the input.
    """
    owners: dict[str, ProducedResponse] = {}
    for response in produced:
        for own in response.items:
            owners[own.id] = response
    items = _input_items(body)
    chained = body.get("previous_response_id") is not None
    calls_before: set[Any] = set()
    for position, item in enumerate(items):
        kind = _item_type(item)
        owner = owners.get(str(item.get("id")))
        if owner is not None and kind == "reasoning":
            following = items[position + 1] if position + 1 < len(items) else {}
            if _item_type(following) == "function_call_output" or not owner.holds(following):
                return _RESPONSES_REASONING_ALONE.format(id=item.get("id"))
        elif owner is not None and owner.reasoning_id is not None:
            before = position - 1
            while before >= 0 and owner.holds(items[before]):
                before -= 1
            if before < 0 or items[before].get("id") != owner.reasoning_id:
                return _RESPONSES_MISSING_REASONING.format(
                    id=item.get("id"), type=kind, reasoning=owner.reasoning_id
                )
        if kind == "function_call":
            call_id = item.get("call_id")
            calls_before.add(call_id)
            answered = any(
                _item_type(later) == "function_call_output" and later.get("call_id") == call_id
                for later in items[position + 1 :]
            )
            if not answered:
                return _RESPONSES_MISSING_OUTPUT.format(call_id=call_id)
        elif (
            kind == "function_call_output"
            and not chained
            and item.get("call_id") not in calls_before
        ):
            return _RESPONSES_ORPHAN_OUTPUT.format(call_id=item.get("call_id"))
    return None


# --------------------------------------------------------------------------
# OpenAI Chat Completions
# --------------------------------------------------------------------------

# OpenAI's 400 (param "messages.[N].role") when an assistant message's tool_calls are not all
# answered by the tool messages that directly follow it.
_CHAT_MISSING_TOOL_MESSAGES = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)

# OpenAI's 400 when a tool message does not follow an assistant message with tool_calls (only
# other tool messages may stand between them). Verbatim, including "preceeding".
_CHAT_ORPHAN_TOOL_MESSAGE = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)

# OpenAI's 400 when a tool message follows an assistant message with tool_calls but answers
# an id that is not among them.
_CHAT_UNKNOWN_TOOL_CALL_ID = (
    "Invalid parameter: 'tool_call_id' of '{id}' not found in 'tool_calls' of previous message."
)


def chat_completions_error(body: Mapping[str, Any]) -> str | None:
    """Why OpenAI Chat Completions would reject ``body`` with HTTP 400, or None if it would not.

    The rules: an assistant message with ``tool_calls`` is directly followed by ``tool``
    messages answering each of its ids (and only those ids); a ``tool`` message belongs to
    such a run after an assistant message with ``tool_calls``.
    """
    messages = _messages(body)
    index = 0
    while index < len(messages):
        message = messages[index]
        role = message.get("role")
        calls = message.get("tool_calls") if role == "assistant" else None
        if role == "tool":
            return _CHAT_ORPHAN_TOOL_MESSAGE
        if not calls:
            index += 1
            continue
        ids = [call.get("id") for call in calls if isinstance(call, Mapping)]
        answered: set[Any] = set()
        index += 1
        while index < len(messages) and messages[index].get("role") == "tool":
            tool_call_id = messages[index].get("tool_call_id")
            if tool_call_id not in ids:
                return _CHAT_UNKNOWN_TOOL_CALL_ID.format(id=tool_call_id)
            answered.add(tool_call_id)
            index += 1
        missing = [str(call_id) for call_id in ids if call_id not in answered]
        if missing:
            return _CHAT_MISSING_TOOL_MESSAGES.format(ids=", ".join(missing))
    return None
