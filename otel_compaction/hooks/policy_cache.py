"""The hooks' policy, parsed once: a cache beside the hooks' state, keyed by the policy file.

A hook process starts for every event a CLI sends it, and parsing and validating a policy
(YAML, then every pattern compiled once to check it) is a fixed cost of each. `load_policy`
keeps the validated `Policy` in ``<directory>/policy-<key>.pickle`` (the hooks' directory is
``otel-compaction/policy-cache`` in the CLI's config directory, beside their state), the key
naming what it was parsed from: the name or path as given, the file's resolved path,
modification time and size, and this package's version. A change to any of them parses again.

Guarantees: the cache is written atomically (a temporary file renamed into place), mode 0600
in a 0700 directory, and read only when it is a regular file owned by this user that nobody
else can write (a pickle runs code when loaded); a cache that is unreadable, stale, foreign or
damaged is ignored and replaced. Failing to write it only costs the next run a parse. What
``Policy.load`` refuses is refused the same way: errors are never cached.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import tempfile
from pathlib import Path
from typing import Final

from otel_compaction._version import __version__
from otel_compaction.hooks.state import DIR_MODE, FILE_MODE
from otel_compaction.policy import Policy, builtin_policy_dir
from otel_compaction.rules.registry import BUILTIN_POLICIES

__all__ = ["load_policy"]

_PREFIX: Final = "policy-"


def load_policy(name_or_path: str, directory: Path) -> Policy:
    """`Policy.load(name_or_path)`, from the cache in `directory` when it holds this policy
    file as it is now (see the module docstring)."""
    key = _key(name_or_path)
    if key is None:
        return Policy.load(name_or_path)
    cache = directory / f"{_PREFIX}{hashlib.sha256(key.encode()).hexdigest()[:24]}.pickle"
    cached = _read(cache, key)
    if cached is not None:
        return cached
    policy = Policy.load(name_or_path)
    _write(cache, key, policy)
    return policy


def _key(name_or_path: str) -> str | None:
    """What the policy is parsed from, as one string; None when the file is not there (so
    that `Policy.load` says why)."""
    if name_or_path in BUILTIN_POLICIES:
        path = builtin_policy_dir() / f"{name_or_path}.yaml"
    else:
        path = Path(name_or_path)
    try:
        resolved = path.resolve()
        status = resolved.stat()
    except (OSError, RuntimeError):
        return None
    if not stat.S_ISREG(status.st_mode):
        return None
    return "\0".join(
        (name_or_path, str(resolved), str(status.st_mtime_ns), str(status.st_size), __version__)
    )


def _read(cache: Path, key: str) -> Policy | None:
    try:
        with cache.open("rb") as file:
            status = os.fstat(file.fileno())
            trusted = (
                stat.S_ISREG(status.st_mode)
                and status.st_uid == os.getuid()
                and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            )
            if not trusted:
                return None
            stored_key, policy = pickle.load(file)
    except Exception:  # missing, damaged, or from another build of the classes: parse again
        return None
    if stored_key != key or not isinstance(policy, Policy):
        return None
    return policy


def _write(cache: Path, key: str, policy: Policy) -> None:
    try:
        cache.parent.parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        cache.parent.mkdir(exist_ok=True, mode=DIR_MODE)
        descriptor, temporary = tempfile.mkstemp(dir=cache.parent, prefix=".policy-")
        try:
            os.fchmod(descriptor, FILE_MODE)
            with os.fdopen(descriptor, "wb") as file:
                pickle.dump((key, policy), file, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(temporary, cache)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass  # the next run parses the policy again
