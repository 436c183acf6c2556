"""One rule, one module, one registry line: the policies, the docs and the registry agree."""

from __future__ import annotations

import contextlib
import importlib
import io
import pkgutil
import re

import yaml
from conftest import REPO_ROOT

import otel_compaction.rules as rules_package
from otel_compaction import Policy
from otel_compaction.policy import builtin_policy_dir
from otel_compaction.rules import BUILTIN_POLICIES, RULES, Rule

DOCS = "\n".join(
    (REPO_ROOT / "docs" / page).read_text(encoding="utf-8")
    for page in ("rules.md", "verification.md")
)
"""The pages of the rule table, writing a rule, and summary verification."""


def section(title: str) -> str:
    return DOCS.split(f"\n{title}\n", 1)[1].split("\n## ", 1)[0]


def test_every_rule_module_is_registered_once() -> None:
    modules = [
        info.name
        for info in pkgutil.iter_modules(rules_package.__path__)
        if not info.name.startswith("_") and info.name not in ("base", "registry")
    ]
    registered = []
    for name in modules:
        module = importlib.import_module(f"otel_compaction.rules.{name}")
        rule = module.RULE
        assert isinstance(rule, Rule), name
        assert rule.name == name, f"rules/{name}.py defines {rule.name!r}"
        assert RULES[name] is rule
        assert set(rule.severities) == set(BUILTIN_POLICIES), name
        registered.append(name)
    assert sorted(registered) == sorted(RULES)


def test_builtin_policies_take_their_severities_from_the_registry() -> None:
    for name in BUILTIN_POLICIES:
        policy = Policy.load(name)
        assert {rule: policy.rules.of(rule) for rule in RULES} == {
            rule: RULES[rule].severities[name] for rule in RULES
        }, name


def test_strict_and_lenient_extend_default_and_keep_no_patterns() -> None:
    for name in ("strict", "lenient"):
        data = yaml.safe_load((builtin_policy_dir() / f"{name}.yaml").read_text("utf-8"))
        assert data["extends"] == "default"
        assert "patterns" not in data and "rules" not in data, name
        assert Policy.load(name).patterns == Policy.load("default").patterns


def test_the_docs_rule_table_is_the_registry() -> None:
    table = section("## Rules and policies")
    rows = re.findall(
        r"^\| `(\w+)` \| (\w+) \| (.+?) \| (\w+) \| (\w+) \| (\w+) \|$", table, re.MULTILINE
    )
    assert rows == [
        (
            rule.name,
            rule.kind,
            rule.summary,
            rule.severities["default"],
            rule.severities["strict"],
            rule.severities["lenient"],
        )
        for rule in RULES.values()
    ]


def test_writing_a_rule_names_the_files_it_touches() -> None:
    text = section("### Writing a rule")
    for needle in ("otel_compaction/rules/", "rules/registry.py", "RULE = Rule(", "scan", "check"):
        assert needle in text


def test_the_docs_verification_example_runs_as_printed() -> None:
    block = section("## Summary verification").split("```python\n", 1)[1].split("```", 1)[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "docs/verification.md", "exec"), {})
    printed = [line[2:].strip() for line in block.splitlines() if line.startswith("# ")]
    assert out.getvalue().split() == " ".join(printed).split()


def test_every_ledger_kind_is_declared_by_one_rule_with_its_discharge() -> None:
    from typing import get_args

    from otel_compaction.ledger import ObligationKind
    from otel_compaction.rules import DISCHARGE, RULE_OF_KIND, remedy

    for kind in get_args(ObligationKind):
        declaring = [r.name for r in RULES.values() if r.discharge and r.discharge.kind == kind]
        assert declaring == [RULE_OF_KIND[kind]], kind
        assert DISCHARGE[kind], kind
        assert "force_terminal()" in remedy(kind), kind
    # The background task, which two tables once disagreed on, has one rule.
    assert RULE_OF_KIND["background_task"] == "open_background_task"
