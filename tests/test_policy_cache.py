"""The hooks parse a policy once: the cache beside their state, and when it is not trusted."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from otel_compaction.errors import PolicyError
from otel_compaction.hooks.policy_cache import load_policy
from otel_compaction.policy import Policy


def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each `Policy.load` the cache makes, by what it was asked to load."""
    calls: list[str] = []
    depth = [0]
    load = Policy.load

    def counted(name_or_path: str | Path = "default") -> Policy:
        if not depth[0]:  # not the policies it extends
            calls.append(str(name_or_path))
        depth[0] += 1
        try:
            return load(name_or_path)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(Policy, "load", counted)
    return calls


def caches(directory: Path) -> list[Path]:
    return sorted(directory.glob("policy-*.pickle"))


def test_a_builtin_policy_is_parsed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = parses(monkeypatch)
    cache = tmp_path / "cache"
    first = load_policy("strict", cache)
    second = load_policy("strict", cache)
    assert calls == ["strict"]
    assert second == first == Policy.load("strict")
    assert second.name == "strict"
    [file] = caches(cache)
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


def test_each_policy_has_its_own_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = parses(monkeypatch)
    assert load_policy("default", tmp_path).name == "default"
    assert load_policy("lenient", tmp_path).name == "lenient"
    assert load_policy("default", tmp_path).name == "default"
    assert calls == ["default", "lenient"]
    assert len(caches(tmp_path)) == 2


def test_a_changed_policy_file_is_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = parses(monkeypatch)
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nextension_limit: 4\n", encoding="utf-8")
    assert load_policy(str(path), tmp_path / "cache").extension_limit == 4
    assert load_policy(str(path), tmp_path / "cache").extension_limit == 4
    path.write_text("name: mine\nextension_limit: 9\n", encoding="utf-8")
    os.utime(path, ns=(1, 1))  # whatever the clock's resolution, the key changes
    assert load_policy(str(path), tmp_path / "cache").extension_limit == 9
    assert calls == [str(path), str(path)]


def test_a_cache_others_can_write_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = parses(monkeypatch)
    load_policy("default", tmp_path)
    [file] = caches(tmp_path)
    file.chmod(0o666)
    assert load_policy("default", tmp_path).name == "default"
    assert calls == ["default", "default"]
    assert stat.S_IMODE(file.stat().st_mode) == 0o600  # replaced


def test_a_damaged_cache_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = parses(monkeypatch)
    load_policy("default", tmp_path)
    [file] = caches(tmp_path)
    file.write_bytes(b"\x80\x05not a pickle")
    assert load_policy("default", tmp_path).name == "default"
    assert load_policy("default", tmp_path).name == "default"
    assert calls == ["default", "default"]


def test_an_unknown_policy_is_refused_and_nothing_cached(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="no such policy file"):
        load_policy("nonesuch", tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("extension_limit: -3\n", encoding="utf-8")
    with pytest.raises(PolicyError):
        load_policy(str(bad), tmp_path / "cache")
    assert not caches(tmp_path) and not caches(tmp_path / "cache")


def test_an_unwritable_cache_directory_only_costs_a_parse(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory", encoding="utf-8")
    assert load_policy("default", blocked / "cache").name == "default"
