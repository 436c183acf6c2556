"""Every relative link of the README and of the pages in ``docs/`` leads somewhere: to a file
or directory of the repository, and to a heading of the page when it names an anchor.

Anchors are the ones GitHub makes from a page's headings: lower case, punctuation other than
``-`` and ``_`` removed, spaces as hyphens, and ``-1``, ``-2``... for a heading repeated.
Links inside code blocks and inline code are text, not links.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from conftest import REPO_ROOT
from readme_snippets import PAGES

_LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.IGNORECASE)


def _prose(text: str, inline_code: bool = False) -> list[tuple[int, str]]:
    """The lines of `text` outside fenced code blocks, with their numbers, inline code
    blanked out unless `inline_code`."""
    lines: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line if inline_code else _INLINE_CODE.sub("", line)))
    return lines


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading's text (before any ``-N`` for a repeat)."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of `page`'s headings."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _prose(page.read_text(encoding="utf-8"), inline_code=True):
        heading = _HEADING.match(line)
        if heading is None:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[tuple[int, str]]:
    """The relative links of `page` (targets of links and images), with their line numbers."""
    found: list[tuple[int, str]] = []
    for number, line in _prose(page.read_text(encoding="utf-8")):
        for pattern in (_LINK, _IMAGE):
            found += [
                (number, m.group(1))
                for m in pattern.finditer(line)
                if not _EXTERNAL.match(m.group(1))
            ]
    return found


def broken(page: Path, root: Path = REPO_ROOT) -> list[str]:
    """What is wrong with the relative links of `page` in the repository at `root`, one line
    each."""
    problems: list[str] = []
    for number, target in links(page):
        where = f"{page.relative_to(root)}:{number}: {target}"
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not destination.exists():
            problems.append(f"{where}: no such file")
            continue
        if root.resolve() not in (destination, *destination.parents):
            problems.append(f"{where}: outside the repository")
            continue
        if anchor and (destination.suffix != ".md" or unquote(anchor) not in anchors(destination)):
            problems.append(f"{where}: no heading with anchor #{anchor}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    assert broken(page) == []


def test_the_readme_links_to_every_page() -> None:
    readme, *docs = PAGES
    linked = {(readme.parent / target.partition("#")[0]).resolve() for _, target in links(readme)}
    assert docs, "docs/ has no pages"
    assert [page.name for page in docs if page.resolve() not in linked] == []


def test_the_link_check_finds_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# Readme\n", encoding="utf-8")
    page = tmp_path / "docs" / "probe.md"
    text = (
        "# A page\n\n## Its `second` heading, again\n\n## Its `second` heading, again\n\n"
        "[ok](#a-page) [ok](#its-second-heading-again-1) [ok](../README.md) "
        "[ok](https://example.com/x#y) `[code](nowhere.md)`\n\n"
        "[bad](#no-such-heading) [bad](missing.md) [bad](../README.md#nowhere)\n\n"
        "```\n[code](nowhere.md)\n```\n"
    )
    page.write_text(text, encoding="utf-8")
    assert broken(page, tmp_path) == [
        "docs/probe.md:9: #no-such-heading: no heading with anchor #no-such-heading",
        "docs/probe.md:9: missing.md: no such file",
        "docs/probe.md:9: ../README.md#nowhere: no heading with anchor #nowhere",
    ]
