"""``pending_retry``: a failed call whose retry chain is still open (seed 1's retry counter).

A chain opens at a failure the model may still retry: a transient one (a timeout, a rate
limit, an unavailable service), an input error (the call's arguments were rejected, or named
what does not exist: "flight X not available on date D"), or any other failure of a call (a
command that exited non-zero). A not-found opens one when the call holds an identifier no
message before it supplied (the model mistyped or made it up). It does not open at a negative
answer ("user not found" of the id the user gave is a result), a rejection (the user
declined: "do not retry"), or a refusal by the tool's own rules ("non-delivered order cannot
be returned", "not enough seats", a permission not granted): those are answers, which only
the negative-result rule keeps.

A retry is a later call with the same intent, not byte-equal arguments (`same_intent`): a shell
command by its program, subcommand and primary operand (``git push`` and ``git push
--set-upstream origin main`` are one); a file tool by the path; any other tool by its arguments
without the cosmetic ones (a description, a timeout). After an input error the next call of the
same tool is the retry, whatever its arguments: they are what the retry corrects. The chain
closes:

* ``succeeded``: a retry returns something other than a failure;
* ``given_up``: the model moves on: it says so ("I'll move on to the next order", "let's try a
  different approach"), or ends its turn (text, and no retry before the response ends) without
  promising to retry; or the user speaks first, which gives the chain up where the model's turn
  ended, before the user's message (a span never takes that message in to close it);
* ``stale``: after the policy's ``stale_after``; or ``given_up`` through `force_terminal`.

A command or file tool that finds nothing ("No such file or directory") opens a chain only when
the model works at the same target again before it gives up: the missing path was an obstacle;
a probe whose absence the model accepts is an answer.

Each failed retry is held with its chain (opened at its own failure, resolved where the chain
is): a cut after it still owes the call.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import TYPE_CHECKING, Any, Final

from otel_compaction.rules.base import Discharge, Finding, Rule, SpanView, Tracked, unclosed

if TYPE_CHECKING:
    from otel_compaction.analysis import Analysis
    from otel_compaction.transcript import ToolCall, ToolResult, Transcript

__all__ = ["RULE", "Target", "failure_kind", "same_intent", "target", "target_of"]

# How a failure reads, judged on the head of its text. A transient failure is retried as it was;
# an input error with corrected arguments; a refusal is the tool's answer, never retried.
_HEAD: Final = 2_000
_TRANSIENT: Final = re.compile(
    r"(?i)\b(?:timed?[ -]?out|time-out|rate[ -]?limit(?:ed)?|too many requests|temporar(?:y|ily)"
    r"|try again|retry (?:later|after|in)|(?:service )?unavailable|overloaded|server (?:is )?busy"
    r"|connection (?:refused|reset|closed|aborted|error)|unreachable|cannot be reached"
    r"|could not (?:connect|resolve)|network (?:error|is unreachable)|ECONNRESET|ETIMEDOUT"
    r"|(?:HTTP |status |code )(?:429|50[0234])|internal server error|bad gateway)\b"
)
_INPUT_ERROR: Final = re.compile(
    r"(?i)\b(?:validation errors?|InputValidationError|field required"
    r"|(?:missing|required) (?:required )?(?:parameter|argument|field|property|key)s?"
    r"|(?:is|are) (?:a )?required(?: (?:parameter|argument|field|property))?"
    r"|invalid (?:arguments?|parameters?|input|value|type|json)"
    r"|unexpected (?:keyword )?argument|(?:unknown|unrecognized) (?:parameter|argument|option)"
    r"|should be a valid|must be (?:a|an|one of|of type)"
    r"|(?:does not|doesn't|do not|don't) add up|mismatch(?:ed)?"
    # An argument names what does not exist at another ("flight X not available on date D").
    r"|not available (?:on|at|for|in))\b"
)
_REFUSAL: Final = re.compile(
    r"(?i)\b(?:cannot|can ?not|can't|may not|could not) be (?:\w+ed|\w+en|done|undone|used)\b"
    r"|\bnot (?:allowed|permitted|eligible|authori[sz]ed|possible|supported)\b"
    r"|\b(?:is |are )?not (?:enough|sufficient|available)\b|\binsufficient\b"
    r"|\balready (?:been )?(?:\w+ed|exists?)\b"
    r"|\b(?:against|violates?|per) (?:the )?polic(?:y|ies)\b"
    r"|\b(?:haven't|have not|has not|hasn't|not) (?:yet )?(?:been )?granted\b"
    r"|\bpermission (?:denied|required)\b|\brequires? (?:approval|permission)\b"
)

# A lookup that found nothing; with an identifier nothing before the call supplied, the model
# mistyped or made it up, and a corrected call is owed.
_NOT_FOUND: Final = re.compile(r"(?i)\bnot found\b|\bno such\b|\bdoes(?: not|n't) exist\b")
_IDENTIFIER: Final = re.compile(r"[A-Za-z0-9][\w.-]*")

# What the model says when it abandons the failed approach.
_GIVE_UP: Final = re.compile(
    r"(?i)\bmov(?:e|ing) on\b|\bgiv(?:e|ing) up\b|\binstead\b"
    r"|\b(?:try|trying|take|taking|use|using|go|going) (?:with )?(?:a |an )?"
    r"(?:different|another|alternative|other) (?:approach|way|method|route|strategy|tack|tool)\b"
    r"|\bskip(?:ping)? (?:this|that|it)\b|\b(?:won't|will not|not going to) (?:retry|try again)\b"
    r"|\btransfer(?:ring)? you to (?:a |an )?(?:human|live|another)\b"  # handed to a person
)

# Arguments that change how a call runs or is shown, not what it is about.
_COSMETIC: Final = frozenset(
    {
        "description", "timeout", "timeout_ms", "run_in_background", "explanation",
        "justification", "yield_time_ms", "max_output_tokens", "sandbox_permissions",
        "with_escalated_permissions",
    }
)  # fmt: skip
_COMMAND_KEYS: Final = ("command", "cmd", "script")
_PATH_KEYS: Final = ("file_path", "path", "notebook_path", "filename", "file")
# A file tool call that carries new content changes the file (an edit, a write, a patch).
_CONTENT_KEYS: Final = frozenset(
    {"content", "new_string", "old_string", "edits", "file_text", "new_str", "insert_text",
     "new_source", "patch", "diff"}
)  # fmt: skip
_SHELLS: Final = frozenset({"bash", "sh", "zsh", "dash", "fish", "pwsh", "powershell", "cmd"})
_PREAMBLE: Final = frozenset({"cd", "pushd", "export", "set", "source", ".", "unset"})
_WRAPPERS: Final = frozenset({"sudo", "env", "time", "nohup", "command", "exec", "timeout", "nice"})
_SEGMENT: Final = re.compile(r"&&|\|\||[;|\n]")


def failure_kind(text: str) -> str:
    """``transient``, ``input``, ``refusal`` or ``other``: how a failed result's text reads.

    Example:
        >>> failure_kind("Error: non-delivered order cannot be returned")
        'refusal'
    """
    head = text[:_HEAD]
    if _TRANSIENT.search(head):
        return "transient"
    if _INPUT_ERROR.search(head):
        return "input"
    if _REFUSAL.search(head):
        return "refusal"
    return "other"


Target = tuple[str, ...]


def target(call: ToolCall) -> Target:
    """What `call` acts on (see `target_of`)."""
    try:
        value: Any = json.loads(call.arguments) if call.arguments else {}
    except (TypeError, ValueError):
        return ("args", " ".join(call.arguments.split()))
    return target_of(value)


def target_of(value: Any) -> Target:
    """What a call with (decoded) arguments `value` acts on: ``("shell", program, subcommand,
    operand)`` for a command (empty strings for what it lacks), ``("file",
    path, "changes" or "")`` for a file tool, else ``("args", the arguments without the cosmetic
    ones)``. The families are told apart by the arguments' shape, not by the tool's name."""
    if not isinstance(value, dict):
        return ("args", json.dumps(value, sort_keys=True))
    for key in _COMMAND_KEYS:
        command = _command_text(value.get(key))
        if command is not None:
            return ("shell", *_command_parts(command))
    for key in _PATH_KEYS:
        path = value.get(key)
        if isinstance(path, str) and path.strip():
            changes = "changes" if _CONTENT_KEYS.intersection(value) else ""
            return ("file", path.strip().rstrip("/"), changes)
    kept = {k: v for k, v in value.items() if k not in _COSMETIC}
    return ("args", json.dumps(kept, sort_keys=True, separators=(",", ":")))


def same_intent(name: str, failed: Target, other_name: str, other: Target) -> bool:
    """Whether a call of tool `other_name` on `other` retries a failed call of `name` on
    `failed` (targets as `target` reads them).

    Example:
        >>> push = target_of({"command": "git push"})
        >>> upstream = target_of({"command": "git push --set-upstream origin main"})
        >>> same_intent("Bash", push, "Bash", upstream)
        True
    """
    if failed[0] != other[0]:
        return False
    if failed[0] == "shell":
        # The program must match; a missing subcommand or operand matches any.
        return (name, failed[1]) == (other_name, other[1]) and all(
            a == b or not a or not b for a, b in zip(failed[2:], other[2:], strict=True)
        )
    if failed[0] == "file":
        # Another tool that changes the same file retries an edit (Edit, then Write).
        return failed[1] == other[1] and (name == other_name or failed[2] == other[2] != "")
    return name == other_name and failed == other


def _command_text(value: Any) -> str | None:
    """The command line a ``command`` argument holds (a string, or an argv list)."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        # ["bash", "-lc", "git push"]: the script the shell is handed.
        if len(value) >= 3 and _program(value[0]) in _SHELLS and value[-2].startswith("-"):
            return str(value[-1])
        return " ".join(value)
    return None


def _program(word: str) -> str:
    return word.replace("\\", "/").rsplit("/", 1)[-1].lower()


def _command_parts(command: str) -> tuple[str, str, str]:
    """The program, subcommand and primary operand of the first step of `command` that is not
    a preamble (``cd dir && git push`` is ``git push``); the words that are not options."""
    for segment in _SEGMENT.split(command):
        try:
            words = shlex.split(segment, comments=True)
        except ValueError:
            words = segment.split()
        while words and ("=" in words[0] and not words[0].startswith("-")):
            words = words[1:]  # FOO=1 cmd
        while words and _program(words[0]) in _WRAPPERS:
            words = words[1:]
            while words and (words[0].startswith("-") or words[0][:1].isdigit()):
                words = words[1:]  # sudo -u x, timeout 30
        if not words or _program(words[0]) in _PREAMBLE:
            continue
        # Options, redirections and quoted prose (a commit message) name no target.
        rest = [
            w for w in words[1:]
            if not w.startswith(("-", ">", "<", "2>", "&")) and not any(c.isspace() for c in w)
        ]  # fmt: skip
        rest += ["", ""]
        return _program(words[0]), rest[0], rest[1]
    return " ".join(command.split()), "", ""


class _Chains:
    """The chains no later message can change, and where to read on from."""

    __slots__ = ("final", "in_chain", "resume", "targets", "upto")

    def __init__(self) -> None:
        self.upto = 0  # results seen
        self.resume = 0  # the first result not yet settled into `final`
        self.final: list[Tracked] = []
        self.in_chain: set[int] = set()  # answers of settled chains
        self.targets: dict[int, Target] = {}  # by call ordinal

    def target(self, call: ToolCall) -> Target:
        found = self.targets.get(call.ordinal)
        if found is None:
            found = self.targets[call.ordinal] = target(call)
        return found


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
        outcome = analysis.outcomes[result.ordinal]
        if outcome == "failure":
            kind = failure_kind(result.text)
        elif outcome == "absence" and _unsupplied(transcript, fold, result):
            kind = "input"
        elif outcome == "absence" and fold.target(transcript.calls[result.call])[0] != "args":
            kind = "probe"  # a path or command that found nothing: a chain if it is retried
        else:
            continue
        if kind == "refusal":
            continue
        answers: list[int] = []
        chain = _chain(analysis, fold, result, kind == "input", answers)
        settled = chain.status == "succeeded" or (
            chain.resolved is not None and chain.resolved < last
        )
        if kind == "probe" and not answers:
            # Nothing found, and the model has not worked at it again: an answer so far.
            if settling and not settled:
                settling = False
                fold.resume = result.ordinal
            continue
        in_chain.update(answers)
        held = [chain, *_failed_retries(analysis, chain, answers)]
        out += held
        if settling and settled:
            fold.final += held
            fold.in_chain.update(answers)
            fold.resume = result.ordinal + 1
        elif settling:
            settling = False
            fold.resume = result.ordinal
    if settling:
        fold.resume = len(results)
    fold.upto = len(results)
    return out


def _failed_retries(analysis: Analysis, chain: Tracked, answers: list[int]) -> list[Tracked]:
    """Each failed retry of `chain` (its `answers`) is held with it: a failed call whose chain
    is still open, resolved where the chain is."""
    results, calls = analysis.transcript.results, analysis.transcript.calls
    held = []
    for ordinal in answers:
        answer = results[ordinal]
        if analysis.outcomes[ordinal] == "failure" and answer.call is not None:
            call = calls[answer.call]
            subjects = analysis.scans.subjects(call)
            at = answer.message_index
            tracked = Tracked(
                "pending_retry", "retry", call.id, call.name, at, chain.resolved, chain.status,
                subjects,
            )  # fmt: skip
            held.append(tracked)
    return held


def _unsupplied(transcript: Transcript, fold: _Chains, result: ToolResult) -> bool:
    """Whether `result` says not found of a call (arguments, not a command or a file) holding
    an identifier that no message or result before the call wrote: the model's own typo."""
    call = transcript.calls[result.call or 0]
    if fold.target(call)[0] != "args" or not _NOT_FOUND.search(result.text[:_HEAD]):
        return False
    try:
        value: Any = json.loads(call.arguments)
    except (TypeError, ValueError):
        return False
    values = [v for v in _leaves(value) if _IDENTIFIER.fullmatch(v) and _coined(v)]
    if not values:
        return False
    before = [e.text for e in transcript.entries[: call.message_index]]
    before += [r.text for r in transcript.results if r.message_index < call.message_index]
    seen = "\n".join(before)
    return any(v not in seen for v in values)


def _leaves(value: Any) -> list[str]:
    """The strings a decoded argument value holds, at any depth."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    return []


def _coined(word: str) -> bool:
    """Whether `word` reads as an identifier: a code with a digit or upper-case letters only,
    not a date or a plain word."""
    if re.fullmatch(r"[\d.-]+", word):
        return False  # a number or a date
    return any(c.isdigit() for c in word) or (len(word) >= 5 and word.isupper())


def _chain(
    analysis: Analysis, fold: _Chains, result: ToolResult, any_arguments: bool, answers: list[int]
) -> Tracked:
    """The chain a failed `result` opens, its retries' answers added to `answers`; with
    `any_arguments` the next call of the same tool is its retry."""
    transcript = analysis.transcript
    calls, results, entries = transcript.calls, transcript.results, transcript.entries
    call = calls[result.call or 0]
    failed = fold.target(call)
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
                if (any_arguments and calls[c].name == call.name)
                or same_intent(call.name, failed, calls[c].name, fold.target(calls[c]))
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
        text = entry.text.replace("\u2019", "'") if entry.role == "assistant" else ""
        if text and _GIVE_UP.search(text):
            resolved, status = entry.index, "given_up"
            break
        turn_ends = index >= len(entries) or entries[index].role != "assistant"
        if text.strip() and not entry.calls and turn_ends:
            if analysis.scans.promises(entry):
                promised = True
                continue
            resolved, status = entry.index, "given_up"
            break
        if entry.role == "user" and not entry.only_results and not promised:
            # Given up where the model's turn ended: the user's message is not the chain's.
            resolved, status = entry.index - 1, "given_up"
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
