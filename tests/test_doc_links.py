"""Every relative link in the documents resolves (issue 55, item 3: "Every doc link checked by a test").

The documents: README.md, docs/**/*.md, soak/*.md, examples/*.md. A link is a Markdown inline link
`[text](target)` outside code blocks and code spans. A relative target must name an existing file or folder
(relative to the linking document); a `#anchor` on a Markdown target (or on the document itself) must be
the GitHub slug of one of that document's headings. External links (http:, https:, mailto:) are not
fetched: the suite runs offline."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted(
    {
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "soak").glob("*.md"),
        *(ROOT / "examples").glob("*.md"),
    }
)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The document without fenced code blocks and code spans (links there are not links)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    return LINK.findall(_prose(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, lower case, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors on its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _show(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def broken(document: Path) -> list[str]:
    """Every link of `document` that does not resolve, with the reason."""
    problems = []
    for target in links(document.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (document.parent / unquote(path_part)).resolve() if path_part else document
        if not resolved.exists():
            problems.append(f"{target}: no such file {_show(resolved)}")
            continue
        if anchor and resolved.is_file() and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            problems.append(f"{target}: no heading with anchor #{anchor} in {_show(resolved)}")
    return problems


def test_the_documents_are_found():
    names = {d.relative_to(ROOT).as_posix() for d in DOCUMENTS}
    assert {"README.md", "docs/README.md", "docs/benchmarks.md", "soak/PROTOCOL.md"} <= names, names


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: d.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(document):
    assert broken(document) == [], f"{document.relative_to(ROOT)}: broken links"


def test_the_checker_sees_links_anchors_and_code(tmp_path):
    """The parts the checker relies on: a link in prose counts, one in code does not, slugs as GitHub's."""
    assert links("see [a](b.md) and `[c](d.md)`\n```\n[e](f.md)\n```\n[g](h.md#i)") == ["b.md", "h.md#i"]
    assert slug("Where PostgreSQL comes from") == "where-postgresql-comes-from"
    assert slug("§3 `belay_jobs` columns") == "3-belay_jobs-columns"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}
    (tmp_path / "t.md").write_text("# Top\n[ok](#top) [gone](missing.md) [bad](#nowhere) [self](t.md#top)\n")
    assert broken(tmp_path / "t.md") == [
        f"missing.md: no such file {(tmp_path / 'missing.md').resolve()}",
        "#nowhere: no heading with anchor #nowhere in " + str(tmp_path / "t.md"),
    ]
