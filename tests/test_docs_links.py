"""Every link in the README and docs/ leads somewhere: a relative link names a file of the checkout, and a
``#fragment`` names a heading of its page (as GitHub turns headings into anchors)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!\\)\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in CODE.sub("", page.read_text()).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def links(page: Path) -> list[str]:
    return LINK.findall(CODE.sub("", page.read_text()))


def broken(page: Path) -> list[str]:
    bad = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):          # http:, https:, mailto: — nothing outside is fetched here
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(f"{target}: no such file")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            bad.append(f"{target}: no heading #{fragment} in {file.name}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page):
    # given a page of the README or docs/, then each of its relative links names a file and heading that exist
    assert broken(page) == []


def test_the_readme_links_every_docs_page():
    # a page nobody can reach from the README is a page a newcomer never finds
    reached = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    for page in PAGES[1:]:
        reached |= {(page.parent / t.partition("#")[0]).resolve() for t in links(page) if t.partition("#")[0]}
    assert [p.name for p in PAGES[1:] if p.resolve() not in reached] == []


def test_a_broken_link_is_found(tmp_path):
    # the checker itself: a missing file and a missing heading are both reported
    (tmp_path / "other.md").write_text("# Title\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-section) [gone](missing.md) [bad](other.md#nowhere) `[code](x.md)`\n")
    assert broken(page) == ["missing.md: no such file", "other.md#nowhere: no heading #nowhere in other.md"]
