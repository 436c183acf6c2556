"""Compaction policy: a severity per rule and the patterns the heuristic rules use.

Policies are YAML files validated with pydantic. Three ship with the package (``default``,
``strict``, ``lenient``); `Policy.load` takes one of those names or a path. Every error names
the file, the key path inside it and what was expected, so a broken policy is fixed in one look.
Regular expressions are compiled once, when the policy is loaded.
"""

from __future__ import annotations

import threading
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from otel_compaction.errors import PolicyError
from otel_compaction.patterns import Scan, check_pattern, compile_patterns
from otel_compaction.rules.base import Severity
from otel_compaction.rules.registry import BUILTIN_POLICIES, RULE_NAMES, RULES, severities_of
from otel_compaction.side_effects import SideEffectTable

__all__ = ["BUILTIN_POLICIES", "RULE_NAMES", "Policy", "Severity", "builtin_policy_dir"]


_SCANS: Final = (
    "null_regex", "error_regex", "rejection_regex", "commitment_regex",
    "commitment_conditional_regex", "background_id_regex", "background_done_regex",
    "transaction_begin_regex", "transaction_end_regex", "identifier_regex",
)  # fmt: skip
"""The policy's compiled pattern lists, by property name."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Patterns(_Model):
    @field_validator("*", mode="after")
    @classmethod
    def _valid_regexes(cls, value: Any) -> Any:
        if isinstance(value, list) and all(isinstance(p, str) for p in value):
            for position, pattern in enumerate(value):
                try:
                    check_pattern(pattern)
                except ValueError as exc:
                    raise ValueError(f"item {position}: {exc}") from None
        return value


class _SeveritiesBase(_Model):
    """What each rule's finding does to a span: block it, carry it into the summary,
    report it, or nothing. One field per rule of the registry, defaulting to its severity
    under the ``default`` policy."""

    @field_validator("*", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare `off` as false; it can only mean the severity `off`.
        return "off" if value is False else value

    def of(self, rule: str) -> Severity:
        """The severity of `rule`."""
        value: Severity = getattr(self, rule)
        return value

    if TYPE_CHECKING:  # one field per registered rule, made at import

        def __getattr__(self, rule: str) -> Severity: ...


_DEFAULT_SEVERITIES = severities_of("default")
if TYPE_CHECKING:
    Severities = _SeveritiesBase
else:
    Severities = create_model(
        "Severities",
        __base__=_SeveritiesBase,
        **{name: (Severity, _DEFAULT_SEVERITIES[name]) for name in RULE_NAMES},
    )


class NullResultPatterns(_Patterns):
    """How a result that says something was not the case (not found, no matches, an empty
    search result) is recognised; failures and rejections are negatives too."""

    empty: bool = False
    """Whether an empty result is a negative (False: a command that succeeded silently)."""
    patterns: list[str] = Field(default_factory=list)
    ignore_tools: list[str] = Field(default_factory=list)


class RetryPatterns(_Patterns):
    """How a failed (and retryable) call is recognised beyond an error status."""

    error: list[str] = Field(default_factory=list)


class RejectionPatterns(_Patterns):
    """How a call refused before it ran (a human rejection, a denied permission) is
    recognised: a negative result and a resolution, never a retry."""

    patterns: list[str] = Field(default_factory=list)


class CommitmentPatterns(_Patterns):
    """Phrases by which the assistant promises an action; the next tool call discharges one.
    A sentence that is a question, or matches ``conditional`` (waiting on the user), is none."""

    patterns: list[str] = Field(default_factory=list)
    conditional: list[str] = Field(default_factory=list)


class BackgroundPatterns(_Patterns):
    """How background work is recognised: a call with one of ``launch_arguments`` true whose
    result names a task id (``ids``, the first group the id); it is done when a later result
    or message naming the id matches ``done``, or a ``kill_tools`` call names it."""

    launch_arguments: list[str] = Field(default_factory=list)
    ids: list[str] = Field(default_factory=list)
    done: list[str] = Field(default_factory=list)
    kill_tools: list[str] = Field(default_factory=list)


class TransactionPatterns(_Patterns):
    """Tool names that open and close a transaction."""

    begin: list[str] = Field(default_factory=list)
    end: list[str] = Field(default_factory=list)


class IdentifierPatterns(_Patterns):
    """Shapes of identifiers (codes, ids, paths) that later messages may still refer to.
    A shape must match a whole value (see `otel_compaction.identifiers`)."""

    patterns: list[str] = Field(default_factory=list)
    stopwords: list[str] = Field(default_factory=list)
    max_identifiers: int | None = Field(default=40, ge=0)
    """At most this many identifiers a summary must carry, the most used first; the archive
    handle covers the rest. None for no cap."""


class Patterns(_Model):
    """Every pattern a heuristic rule uses; none are hard-coded."""

    null_result: NullResultPatterns = NullResultPatterns()
    retry: RetryPatterns = RetryPatterns()
    rejection: RejectionPatterns = RejectionPatterns()
    commitment: CommitmentPatterns = CommitmentPatterns()
    transaction: TransactionPatterns = TransactionPatterns()
    background: BackgroundPatterns = BackgroundPatterns()
    identifiers: IdentifierPatterns = IdentifierPatterns()


class ProtectedHead(_Model):
    """The head of a transcript that is never compacted (the system prompt)."""

    roles: list[str] = Field(default_factory=lambda: ["system", "developer"])
    messages: int = Field(default=0, ge=0)


class Thresholds(_Model):
    """Context-budget fractions: compaction is considered above ``trigger``, is critical
    (deferral no longer allowed) above ``critical``, and aims to bring usage down to
    ``target``; the last ``keep_recent`` messages stay verbatim unless the budget is
    critical."""

    trigger: float = Field(default=0.7, gt=0, le=1)
    critical: float = Field(default=0.9, gt=0, le=1)
    target: float = Field(default=0.5, gt=0, le=1)
    keep_recent: int = Field(default=2, ge=0)


class StaleAfter(_Model):
    """When an open obligation is stale: after this many user turns in the transcript, or
    this many seconds open in the ledger (None switches either off)."""

    turns: int | None = Field(default=3, ge=1)
    seconds: float | None = Field(default=1800, gt=0)


class HookModes(_Model):
    """What a CLI's PreCompact hook does when the compaction would cut open obligations, per
    trigger: ``block`` it (naming them) or ``warn`` (let it proceed; the summarizer is still
    told what is pending)."""

    manual: Literal["block", "warn"] = "block"
    auto: Literal["block", "warn"] = "warn"
    reissue: Literal["ask", "deny", "off"] = "ask"
    """What the PreToolUse hook does with a call that repeats a side effect a compaction
    removed from context: ``ask`` the user, ``deny`` it, or let it run (``off``)."""

    def mode(self, trigger: str) -> Literal["block", "warn"]:
        """The mode for `trigger` (an unknown trigger is treated as automatic)."""
        return self.manual if trigger == "manual" else self.auto


class SummaryChecks(_Model):
    """What happens when a summary fails verification: it is retried ``retries`` times with
    the missing items named, then the span is held verbatim (``defer``) or the compaction
    raises (``refuse``)."""

    retries: int = Field(default=1, ge=0)
    on_unverified: Literal["defer", "refuse"] = "defer"


class Policy(_Model):
    """A compaction policy. Load one with `Policy.load`; construct one directly in code.

    Example:
        >>> policy = Policy.load("default")
        >>> policy.rules.open_tool_call
        'block'
    """

    name: str = "custom"
    description: str = ""
    extends: str | None = None
    rules: Severities = Severities()
    patterns: Patterns = Patterns()
    extension_limit: int = Field(default=16, ge=0)
    protected_head: ProtectedHead = ProtectedHead()
    archived_relaxes: list[str] = Field(default_factory=list)
    stale_after: StaleAfter = StaleAfter()
    thresholds: Thresholds = Thresholds()
    summaries: SummaryChecks = SummaryChecks()
    hooks: HookModes = HookModes()
    side_effects: SideEffectTable = SideEffectTable()

    @field_validator("archived_relaxes")
    @classmethod
    def _known_rules(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in RULES]
        if unknown:
            raise ValueError(
                f"unknown rule {unknown[0]!r}; expected one of {', '.join(RULE_NAMES)}"
            )
        return value

    # -- compiled patterns (the model is frozen, so caching is safe) ---------------------------

    @cached_property
    def null_regex(self) -> Scan | None:
        """Negative-result patterns as one regex."""
        return compile_patterns(self.patterns.null_result.patterns)

    @cached_property
    def error_regex(self) -> Scan | None:
        """Failed-result patterns as one regex."""
        return compile_patterns(self.patterns.retry.error)

    @cached_property
    def rejection_regex(self) -> Scan | None:
        """Rejection patterns as one regex."""
        return compile_patterns(self.patterns.rejection.patterns)

    @cached_property
    def commitment_regex(self) -> Scan | None:
        """Commitment phrases as one regex."""
        return compile_patterns(self.patterns.commitment.patterns)

    @cached_property
    def commitment_conditional_regex(self) -> Scan | None:
        """Sentences that wait on the user, as one regex."""
        return compile_patterns(self.patterns.commitment.conditional)

    @cached_property
    def background_id_regex(self) -> Scan | None:
        """Background task id shapes as one regex."""
        return compile_patterns(self.patterns.background.ids)

    @cached_property
    def background_done_regex(self) -> Scan | None:
        """Background task terminal statuses as one regex."""
        return compile_patterns(self.patterns.background.done)

    @cached_property
    def transaction_begin_regex(self) -> Scan | None:
        """Tool names opening a transaction."""
        return compile_patterns(self.patterns.transaction.begin)

    @cached_property
    def transaction_end_regex(self) -> Scan | None:
        """Tool names closing a transaction."""
        return compile_patterns(self.patterns.transaction.end)

    @cached_property
    def identifier_stopwords(self) -> frozenset[str]:
        """Values never taken for identifiers."""
        return frozenset(self.patterns.identifiers.stopwords)

    @cached_property
    def identifier_regex(self) -> Scan | None:
        """Identifier shapes as one regex."""
        return compile_patterns(self.patterns.identifiers.patterns)

    def compile(self) -> Policy:
        """Compile every pattern list now rather than at its first use (a gate does this when
        it is built, so that its first decision does not pay for it); returns the policy."""
        for name in _SCANS:
            getattr(self, name)
        return self

    @cached_property
    def severities(self) -> tuple[dict[str, Severity], dict[str, Severity]]:
        """Every rule's severity as `severity` gives it, for a span kept in place and for an
        archived one (the policy is frozen, and every analysis asks). Read, do not change."""
        kept, archived = (
            {name: self.severity(name, addressable=a) for name in RULE_NAMES} for a in (False, True)
        )
        return kept, archived

    def severity(self, rule: str, *, addressable: bool = False) -> Severity:
        """The severity of `rule`, relaxed from block to carry when the span is archived."""
        value: Severity = self.rules.of(rule)
        if addressable and value == "block" and rule in self.archived_relaxes:
            return "carry"
        return value

    # -- loading -----------------------------------------------------------------------------

    @classmethod
    def load(cls, name_or_path: str | Path = "default") -> Policy:
        """Load a built-in policy by name (``default``, ``strict``, ``lenient``: always the
        built-in one; a file of that name needs a path such as ``./default.yaml``) or a YAML
        policy file by path."""
        text = str(name_or_path)
        if isinstance(name_or_path, str) and text in BUILTIN_POLICIES:
            path = builtin_policy_dir() / f"{text}.yaml"
            return cls.from_yaml(path.read_text(encoding="utf-8"), source=str(path), builtin=text)
        path = Path(text)
        if not path.is_file():
            raise PolicyError(
                f"{text}: no such policy file, and not a built-in policy "
                f"({', '.join(BUILTIN_POLICIES)})"
            )
        builtin = _builtin_name(path)
        try:
            body = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError(f"{text}: cannot read the policy file: {exc}") from None
        return cls.from_yaml(body, source=str(path), builtin=builtin)

    @classmethod
    def from_yaml(
        cls, text: str, *, source: str = "<policy>", builtin: str | None = None
    ) -> Policy:
        """Parse and validate policy YAML; errors name `source`, the key path and the problem.

        `builtin` names the built-in policy the text is, whose severities come from the rule
        registry (the file may still override them)."""
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise PolicyError(f"{source}: invalid YAML{where}: {problem}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise PolicyError(f"{source}: expected a mapping at the top, got {type(data).__name__}")
        if builtin is not None:
            rules = data.get("rules") or {}
            if not isinstance(rules, dict):
                raise PolicyError(f"{source}: rules: expected a mapping of rule to severity")
            data = {**data, "rules": {**severities_of(builtin), **rules}}
        data = _inherit(data, source)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(part) for part in first["loc"]) or "(top)"
            more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
            raise PolicyError(f"{source}: {key}: {first['msg']}{more}") from None


def _builtin_name(path: Path) -> str | None:
    """The built-in policy `path` is, when it is one of the shipped files."""
    try:
        resolved = path.resolve()
    except OSError:
        return None
    for name in BUILTIN_POLICIES:
        if (builtin_policy_dir() / f"{name}.yaml").resolve() == resolved:
            return name
    return None


class _Extending(threading.local):
    """The policy files being loaded, outermost first, while ``extends`` is followed."""

    def __init__(self) -> None:
        self.chain: list[Path] = []


_EXTENDING = _Extending()


def _inherit(data: dict[str, Any], source: str) -> dict[str, Any]:
    """Apply ``extends``: a file that sets only a few keys starts from the policy it extends
    (``default`` unless it says otherwise; ``extends: null`` starts from nothing)."""
    base_name = data.get("extends", "default")
    if base_name is None:
        return data
    if not isinstance(base_name, str):
        raise PolicyError(f"{source}: extends: expected a policy name or path, got {base_name!r}")
    if base_name in BUILTIN_POLICIES:
        base_policy = Policy.load(base_name)
    else:
        base_path = (Path(source).parent / base_name).resolve()
        here, chain = Path(source).resolve(), _EXTENDING.chain
        if base_path == here:
            raise PolicyError(f"{source}: extends: a policy cannot extend itself")
        if base_path in chain:
            cycle = " -> ".join(p.name for p in (*chain[chain.index(base_path) :], here, base_path))
            raise PolicyError(f"{source}: extends: {base_name} closes a cycle ({cycle})")
        chain.append(here)
        try:
            base_policy = Policy.load(base_path)
        finally:
            chain.pop()
    base = base_policy.model_dump(mode="python", exclude={"name", "description"})
    base["extends"] = base_name
    return _merge(base, data)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def builtin_policy_dir() -> Path:
    """Where the built-in policies live: inside the installed wheel, or the source tree."""
    packaged = Path(str(resources.files("otel_compaction"))) / "_policies"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "policies"
