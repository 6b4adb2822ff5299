"""Every relative link in the user-facing Markdown (README.md, CONTRIBUTING.md,
CHANGELOG.md, docs/*.md, benchmarks/README.md, tests/README.md) points at a file of the
repository, and every `#anchor` at a heading of its target (GitHub's heading ids)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _paths import ROOT

PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "CHANGELOG.md",
        ROOT / "benchmarks" / "README.md",
        ROOT / "tests" / "README.md",
        *(ROOT / "docs").glob("*.md"),
    ]
)

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """`text` without fenced code blocks and inline code, where brackets are not links."""
    return _CODE.sub("", _FENCE.sub("", text))


def anchors(text: str) -> set[str]:
    """The ids GitHub gives the headings of a Markdown text."""
    seen: dict[str, int] = {}
    ids = set()
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").replace("*", "").lower())
        slug = slug.replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        ids.add(slug if n == 0 else f"{slug}-{n}")
    return ids


def broken_links(page: Path) -> list[str]:
    """The relative links of `page` whose file or anchor does not exist."""
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in _LINK.findall(_prose(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md":
            if anchor not in anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{target}: no heading with that id in {dest.name}")
    return broken


def test_the_checker_sees_a_broken_link_and_anchor(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Binding ranks: `--bind-to`\n## Two\n## Two\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#binding-ranks---bind-to) [ok](b.md#two-1) [self](#top)\n# Top\n"
        "[gone](c.md) [bad](b.md#three) `[code](d.md)` [web](https://example.com/x)\n"
        "```\n[fenced](e.md)\n```\n"
    )
    assert broken_links(page) == [
        "c.md: no such file",
        "b.md#three: no heading with that id in b.md",
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_the_docs_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    linked = {target.partition("#")[0] for target in _LINK.findall(_prose(index))}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages <= linked, f"docs/README.md does not list {sorted(pages - linked)}"
