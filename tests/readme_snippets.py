"""The code blocks of the README and of the pages in ``docs/``, as the tests that run them read
them.

Every block a test runs carries a key in an HTML comment on the line right above its fence
(``<!-- snippet: gate -->``), invisible when the page is rendered. A key names one block in
all the pages together (`keyed`), so a test finds a block wherever it moved. A block's
expected output is written as comments right after the ``print(...)`` line that prints it:
each comment that starts with ``# `` is one printed line, and a comment indented further
(``#        ...``) continues the line before it, joined with one space::

    print(check.ok, check.to_dict())
    # False {'identifiers': ['ZFA04Y'], 'negatives': [{'message_index': 2, 'call_id': 'c1',
    #        'tool': 'get_reservation'}], 'pending': []}

Needs only the standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO_ROOT

__all__ = ["DOCS", "PAGES", "README", "Block", "blocks", "expected_output", "keyed", "pages"]

README = REPO_ROOT / "README.md"
"""The README the tests read."""
DOCS = REPO_ROOT / "docs"
"""The pages the README links to, one per path and one per reference."""


def pages() -> list[Path]:
    """The README, then every page of ``docs/`` by name: the order the tests read them in."""
    return [README, *sorted(DOCS.glob("*.md"))]


PAGES = pages()
"""`pages` when the tests were collected."""

_FENCE = re.compile(r"^```(\w*)\s*$")
_KEY = re.compile(r"^<!-- snippet: ([\w-]+) -->\s*$")
_OUTPUT = re.compile(r"^\s*# (\S.*)$")
_CONTINUED = re.compile(r"^\s*#\s{2,}(\S.*)$")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    """The page it is on."""
    language: str
    """The fence's info string: ``python``, ``sh``, ``json``, or empty."""
    code: str
    line: int
    """The line number of its opening fence (1-based)."""

    @property
    def where(self) -> str:
        """Its page, relative to the repository, and line: ``docs/zero-code.md:12``."""
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"

    key: str | None
    """The key of the ``<!-- snippet: KEY -->`` comment right above the fence, if any."""


def blocks(path: Path = README) -> list[Block]:
    """Every fenced block of `path`, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        key_match = _KEY.match(lines[index - 1]) if index > 0 else None
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise AssertionError(f"{path.name}:{index + 1}: code block never closed")
        found.append(
            Block(
                page=path,
                language=opening.group(1),
                code="\n".join(lines[index + 1 : end]) + "\n",
                line=index + 1,
                key=key_match.group(1) if key_match else None,
            )
        )
        index = end + 1
    return found


def keyed(*paths: Path) -> dict[str, Block]:
    """The blocks of `paths` (by default every page) that carry a key, by key; a key used
    twice, on one page or on two, fails."""
    by_key: dict[str, Block] = {}
    for path in paths or tuple(pages()):
        for block in blocks(path):
            if block.key is None:
                continue
            if block.key in by_key:
                raise AssertionError(
                    f"snippet key {block.key!r} is used at {by_key[block.key].where} "
                    f"and {block.where}"
                )
            by_key[block.key] = block
    return by_key


def expected_output(code: str) -> list[str]:
    """The lines the block's comments say it prints, in order (see the module docstring)."""
    expected: list[str] = []
    after_print = False
    for line in code.splitlines():
        if after_print and line.lstrip().startswith("#"):
            continued = _CONTINUED.match(line)
            if continued is not None and expected:
                expected[-1] += " " + continued.group(1)
                continue
            shown = _OUTPUT.match(line)
            if shown is not None:
                expected.append(shown.group(1))
                continue
        after_print = "print(" in line
    return expected
