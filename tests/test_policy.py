"""The shipped policies, policy-file errors, and `otel-compaction policy show|validate|schema`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_harness import run_cli, write_file

from otel_compaction import (
    CompactionGate,
    CompactionRefused,
    LiveSpanCompactionError,
    Policy,
    PolicyError,
)
from otel_compaction.identifiers import find_identifiers
from otel_compaction.policy import _SCANS, BUILTIN_POLICIES, RULE_NAMES, builtin_policy_dir

OBLIGATION_RULES = (
    "open_tool_call",
    "orphan_result",
    "open_transaction",
    "pending_retry",
    "dangling_commitment",
    "ledger_mismatch",
    "severed_obligation",
)


def severities(policy: Policy, *, addressable: bool = False) -> dict[str, str]:
    return {rule: policy.severity(rule, addressable=addressable) for rule in RULE_NAMES}


# --------------------------------------------------------------------------------------------
# the three shipped policies
# --------------------------------------------------------------------------------------------


def test_builtin_policies_ship_as_files() -> None:
    assert BUILTIN_POLICIES == ("default", "strict", "lenient")
    for name in BUILTIN_POLICIES:
        path = builtin_policy_dir() / f"{name}.yaml"
        assert path.is_file(), path
        policy = Policy.load(name)
        assert policy.name == name
        assert policy.description
        # Loading by path gives the same policy as loading by name.
        assert Policy.load(path).model_dump() == policy.model_dump()


def test_default_blocks_obligations_and_carries_negatives_and_identifiers() -> None:
    policy = Policy.load("default")
    assert severities(policy) == {
        "open_tool_call": "block",
        "orphan_result": "block",
        "unmatched_result": "warn",
        "open_transaction": "block",
        "pending_retry": "block",
        "dangling_commitment": "block",
        "open_background_task": "carry",  # it may run on for the session: carried by its handle
        "pending_approval": "block",
        "stale_obligation": "carry",
        "abandoned_call": "carry",  # discharged: the summary must say it never ran to its end
        "null_result": "carry",
        "unresolved_reference": "carry",
        "not_addressable": "carry",
        "ledger_mismatch": "block",
        "severed_obligation": "block",
        "thinking_tool_loop": "block",
        "whole_thinking_loop": "off",  # stricter than the provider: a policy's choice
        "reasoning_item": "block",
        "split_response": "block",
    }
    assert severities(policy, addressable=True) == severities(policy)
    assert policy.archived_relaxes == []
    assert policy.extension_limit == 16
    assert (policy.protected_head.roles, policy.protected_head.messages) == (
        ["system", "developer"],
        0,
    )
    assert policy.patterns.null_result.ignore_tools == ["think"]


def test_strict_blocks_everything_and_archiving_relaxes_negatives_and_references() -> None:
    policy = Policy.load("strict")
    # A stale obligation is carried, not blocked: blocking on it would starve the span again.
    # So is a background task still running: it may run for the rest of the session.
    # A call of an ended run is discharged: holding the span for it would starve it forever.
    carried = dict.fromkeys(("stale_obligation", "open_background_task", "abandoned_call"), "carry")
    assert severities(policy) == {**dict.fromkeys(RULE_NAMES, "block"), **carried}
    assert policy.archived_relaxes == ["null_result", "unresolved_reference"]
    assert severities(policy, addressable=True) == {
        **dict.fromkeys(RULE_NAMES, "block"),
        **carried,
        "null_result": "carry",
        "unresolved_reference": "carry",
    }


def test_lenient_only_enforces_pairing_and_provider_atomicity() -> None:
    policy = Policy.load("lenient")
    blocked = [
        "open_tool_call",
        "orphan_result",
        "thinking_tool_loop",
        "reasoning_item",
        "split_response",
    ]
    assert [r for r, s in severities(policy).items() if s == "block"] == blocked
    assert policy.rules.not_addressable == "off"
    assert policy.rules.whole_thinking_loop == "off"  # stricter than the provider
    off = (*blocked, "not_addressable", "whole_thinking_loop")
    assert {s for r, s in severities(policy).items() if r not in off} == {"warn"}


def test_detection_patterns_live_in_the_policy_files() -> None:
    for name in BUILTIN_POLICIES:
        policy = Policy.load(name)
        assert policy.commitment_regex is not None
        assert policy.commitment_regex.search("I will verify the address first.")
        assert policy.null_regex is not None
        assert policy.null_regex.search("No results found")
        assert policy.error_regex is not None
        assert policy.error_regex.search("Error: timed out")
        assert policy.identifier_regex is not None
        assert list(find_identifiers("code ZFA04Y for mia_li_3668", policy.identifier_regex)) == [
            "ZFA04Y",
            "mia_li_3668",
        ]
        assert policy.transaction_begin_regex is not None
        assert policy.transaction_begin_regex.search("begin_transaction")
    # A policy without patterns detects nothing heuristic.
    bare = Policy()
    assert (bare.commitment_regex, bare.null_regex, bare.identifier_regex) == (None, None, None)


# One transcript, three policies: a negative result, an identifier used after the span.
MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "find order A1B2C3D4"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "find", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "not found"},
    {"role": "user", "content": "try A1B2C3D4 again"},
]


def test_policies_decide_differently_on_the_same_span() -> None:
    default = CompactionGate("default").evaluate(MESSAGES, 0, 3)
    assert (default.action, default.span) == ("compact", (0, 3))
    assert default.must_carry.identifiers == ("A1B2C3D4",)
    assert [n.text for n in default.must_carry.negatives] == ["not found"]

    with pytest.raises(CompactionRefused) as caught:
        CompactionGate("strict").evaluate(MESSAGES, 0, 3)
    assert type(caught.value) is LiveSpanCompactionError
    assert [(f.rule, f.message_index) for f in caught.value.decision.blocking] == [
        ("unresolved_reference", 0),
        ("not_addressable", 0),
        ("null_result", 2),
    ]
    archived = CompactionGate("strict").evaluate(MESSAGES, 0, 3, addressable=True)
    assert (archived.action, archived.must_carry.identifiers) == ("compact", ("A1B2C3D4",))

    lenient = CompactionGate("lenient").evaluate(MESSAGES, 0, 3)
    assert lenient.action == "compact"
    assert [(f.rule, f.severity) for f in lenient.findings] == [
        ("unresolved_reference", "warn"),
        ("null_result", "warn"),
    ]
    assert (lenient.must_carry.identifiers, lenient.must_carry.negatives) == ((), ())


# --------------------------------------------------------------------------------------------
# errors in policy files
# --------------------------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "policy.yaml") -> Path:
    return write_file(tmp_path, name, text)


def load_error(path: Path) -> str:
    with pytest.raises(PolicyError) as caught:
        Policy.load(path)
    return str(caught.value)


def test_bad_severity_names_file_key_and_expected(tmp_path: Path) -> None:
    path = write(tmp_path, "rules:\n  open_tool_call: maybe\n")
    assert load_error(path) == (
        f"{path}: rules.open_tool_call: Input should be 'block', 'carry', 'warn' or 'off'"
    )


def test_unknown_rule_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "rules:\n  open_tool_cal: block\n")
    assert load_error(path) == f"{path}: rules.open_tool_cal: Extra inputs are not permitted"


def test_several_errors_report_the_first_and_count_the_rest(tmp_path: Path) -> None:
    path = write(tmp_path, "extension_limit: -1\nrules:\n  null_result: loud\n")
    # Errors come in the model's field order: rules before extension_limit.
    assert load_error(path) == (
        f"{path}: rules.null_result: Input should be 'block', 'carry', 'warn' or 'off' (and 1 more)"
    )


def test_wrong_types(tmp_path: Path) -> None:
    assert load_error(write(tmp_path, "extension_limit: lots\n")) == (
        f"{tmp_path / 'policy.yaml'}: extension_limit: Input should be a valid integer, "
        "unable to parse string as an integer"
    )
    path = write(tmp_path, "archived_relaxes: [null_result, everything]\n", "relax.yaml")
    assert load_error(path).startswith(
        f"{path}: archived_relaxes: Value error, unknown rule 'everything'; expected one of "
        "open_tool_call, orphan_result, "
    )
    path = write(tmp_path, "- just\n- a list\n", "list.yaml")
    assert load_error(path) == f"{path}: expected a mapping at the top, got list"


def test_invalid_yaml_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "name: broken\nrules:\n  open_tool_call: [block\n")
    message = load_error(path)
    assert message.startswith(f"{path}: invalid YAML at line 4 column 1: ")
    path = write(tmp_path, "name: x\n\tbad: tab\n", "tab.yaml")
    assert load_error(path).startswith(f"{path}: invalid YAML at line 2 column 1: ")


def test_invalid_regex_names_pattern_key_and_item(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "patterns:\n  commitment:\n    patterns:\n      - 'I will'\n      - '(unclosed'\n",
    )
    message = load_error(path)
    assert message.startswith(
        f"{path}: patterns.commitment.patterns: Value error, item 1: "
        "invalid regular expression '(unclosed': "
    )


def test_yaml_bare_off_means_the_severity_off(tmp_path: Path) -> None:
    path = write(tmp_path, "rules:\n  null_result: off\n  not_addressable: Off\n")
    policy = Policy.load(path)
    assert policy.rules.null_result == "off"
    assert policy.rules.not_addressable == "off"
    decision = CompactionGate(policy).evaluate(
        [{"role": "tool", "tool_call_id": "x", "content": ""}, {"role": "user", "content": "a"}],
        1,
        2,
    )
    assert decision.findings == ()


def test_missing_policy_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(PolicyError) as caught:
        Policy.load(missing)
    assert str(caught.value) == (
        f"{missing}: no such policy file, and not a built-in policy (default, strict, lenient)"
    )


def test_empty_policy_file_is_all_defaults(tmp_path: Path) -> None:
    policy = Policy.load(write(tmp_path, "# nothing here\n"))
    assert policy.name == "custom"
    assert severities(policy) == severities(Policy.load("default"))


# --------------------------------------------------------------------------------------------
# otel-compaction policy show | validate | schema
# --------------------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "policy", *argv)


@pytest.mark.parametrize("name", BUILTIN_POLICIES)
def test_policy_show_round_trips(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "show", name)
    assert (code, err) == (0, "")
    shown = yaml.safe_load(out)
    assert shown["name"] == name
    assert set(shown["rules"]) == set(RULE_NAMES)
    assert Policy.from_yaml(out).model_dump() == Policy.load(name).model_dump()


def test_policy_show_defaults_to_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show")
    assert code == 0
    assert yaml.safe_load(out)["name"] == "default"


def test_policy_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, "name: mine\nrules:\n  null_result: block\n", "mine.yaml")
    code, out, err = run(capsys, "validate", "default", "strict", "lenient", str(good))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "default: ok (policy 'default')",
        "strict: ok (policy 'strict')",
        "lenient: ok (policy 'lenient')",
        f"{good}: ok (policy 'mine')",
    ]

    bad = write(tmp_path, "rules:\n  open_tool_call: sometimes\n", "bad.yaml")
    code, out, err = run(capsys, "validate", str(bad))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"otel-compaction: error: {bad}: rules.open_tool_call: "
        "Input should be 'block', 'carry', 'warn' or 'off'"
    ]


def test_policy_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "schema")
    assert (code, err) == (0, "")
    schema = json.loads(out)
    assert schema["type"] == "object"
    assert "rules" in schema["properties"]
    assert {"patterns", "extension_limit", "protected_head", "archived_relaxes"} <= set(
        schema["properties"]
    )
    severities_ref = schema["properties"]["rules"]
    assert "$ref" in severities_ref or "allOf" in severities_ref or "properties" in severities_ref
    definitions = schema["$defs"]["Severities"]["properties"]
    assert set(definitions) == set(RULE_NAMES)


def test_check_with_a_broken_policy_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transcript = write(tmp_path, json.dumps(MESSAGES), "t.json")
    bad = write(tmp_path, "protected_head:\n  messages: -2\n", "bad.yaml")
    code, out, err = run_cli(capsys, "check", str(transcript), "--policy", str(bad))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"otel-compaction: error: {bad}: protected_head.messages: "
        "Input should be greater than or equal to 0"
    ]


def test_verbose_patterns_with_comments_and_capture_groups_work(tmp_path: Path) -> None:
    """A ``(?x)`` pattern with a trailing comment, and patterns with capture groups, load and
    find what they say (each list is scanned as one alternation)."""
    path = write(
        tmp_path,
        "patterns:\n"
        "  commitment:\n"
        "    patterns: ['(?x) \\bI \\s will \\s (check|verify)  # a promise', '(?i)let me look']\n"
        "  identifiers:\n"
        "    patterns: ['(ord)_(\\d+)']\n",
    )
    gate = CompactionGate(Policy.load(path))
    messages = [
        {"role": "user", "content": "order ord_12345"},
        {"role": "assistant", "content": "I will check it."},
        {"role": "user", "content": "and ord_12345?"},
    ]
    held = gate.evaluate(messages, 0, 2, raise_on_refuse=False)
    assert [(o.kind, o.name) for o in held.obligations] == [("commitment", "I will check it.")]
    assert gate.evaluate(messages, 0, 1).must_carry.identifiers == ("ord_12345",)


def test_a_gate_compiles_its_policy_s_patterns_when_it_is_built() -> None:
    """Every pattern list of the policy is compiled by the time the gate exists: its first
    decision reads only what it was asked."""
    policy = Policy.load("default")
    assert not any(name in policy.__dict__ for name in _SCANS)
    CompactionGate(policy)
    assert all(name in policy.__dict__ for name in _SCANS)
    properties = {n for n, v in vars(Policy).items() if n.endswith("_regex")}
    assert properties == set(_SCANS)  # none is left out of `compile`
