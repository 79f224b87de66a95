"""mkdocs hook: repository files (README.md, benchmarks/README.md, CHANGELOG.md) as site pages.

A page under ``docs/`` whose text is ``<!-- include: PATH ... -->`` becomes the file at ``PATH``
(relative to the repository root). Every page's relative links are written as repository paths
(``docs/results.md`` in the README, ``../benchmarks/README.md`` in ``docs/``) so that they work on
GitHub; this hook maps them to the site's pages, so ``mkdocs build --strict`` checks them all.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = re.compile(r"\A<!-- include: (\S+)[^>]*-->\s*\Z")
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)#\s]+)([^)]*\))")


def site_pages(docs_dir: str) -> dict[str, str]:
    """Repository path -> page path under ``docs_dir``, for pages and the files they include."""
    pages = {}
    for path in Path(docs_dir).rglob("*.md"):
        relative = path.relative_to(docs_dir).as_posix()
        match = INCLUDE.match(path.read_text(encoding="utf-8"))
        pages[match.group(1) if match else f"docs/{relative}"] = relative
    return pages


def rewrite_links(markdown: str, source: str, page: str, pages: dict[str, str]) -> str:
    """Write each relative link of ``source`` (a repository path) as a link from ``page``."""

    def one(match: re.Match) -> str:
        target = match.group(2)
        if "://" in target or target.startswith(("/", "mailto:")):
            return match.group(0)
        repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(source), target))
        if repo_path in pages:
            site_path = pages[repo_path]
        elif repo_path.startswith("docs/"):
            site_path = repo_path.removeprefix("docs/")  # images and other files under docs/
        else:
            return match.group(0)  # outside the site: mkdocs reports it under --strict
        new = posixpath.relpath(site_path, posixpath.dirname(page) or ".")
        return match.group(1) + new + match.group(3)

    return LINK.sub(one, markdown)


def on_page_markdown(markdown, page, config, files):
    """Include the repository file a page names, then map its links to the site's pages."""
    page_path = page.file.src_uri
    source = f"docs/{page_path}"
    match = INCLUDE.match(markdown)
    if match:
        source = match.group(1)
        markdown = (ROOT / source).read_text(encoding="utf-8")
    return rewrite_links(markdown, source, page_path, site_pages(config["docs_dir"]))
