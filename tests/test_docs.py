"""The docs site: an API page per public package, repository links mapped to pages, CI builds it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("data", "batchify", "vocab", "embedding", "models", "decoding", "pretrained",
            "precision", "training", "tasks", "parallel", "errors")


def load_hooks():
    path = ROOT / "tools" / "mkdocs_hooks.py"
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_public_package_has_an_api_page_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for name in PACKAGES:
        page = ROOT / "docs" / "api" / f"{name}.md"
        assert f"::: textkit.{name}\n" in page.read_text(encoding="utf-8")
        assert f"textkit.{name}: api/{name}.md" in config
    for page in ("index.md", "results.md", "benchmarks.md", "changelog.md"):
        assert f": {page}" in config
    assert "strict: true" in config and "name: material" in config


def test_repository_links_become_site_links():
    hooks = load_hooks()
    pages = hooks.site_pages(str(ROOT / "docs"))
    assert pages["README.md"] == "index.md" and pages["docs/results.md"] == "results.md"
    readme = "[r](docs/results.md#toy) ![c](docs/images/c.png) [b](benchmarks/README.md) [w](https://x.org/a.md)"
    assert hooks.rewrite_links(readme, "README.md", "index.md", pages) == (
        "[r](results.md#toy) ![c](images/c.png) [b](benchmarks.md) [w](https://x.org/a.md)")
    page = "[c](../CHANGELOG.md) [f](results.md#x)"
    assert hooks.rewrite_links(page, "docs/gluonnlp.md", "gluonnlp.md", pages) == (
        "[c](changelog.md) [f](results.md#x)")
    assert hooks.rewrite_links("[c](../../CHANGELOG.md)", "docs/api/data.md", "api/data.md",
                               pages) == "[c](../changelog.md)"
    assert hooks.rewrite_links("[t](../tests/x.py)", "docs/results.md", "results.md", pages) == (
        "[t](../tests/x.py)")  # outside the site: left for --strict to report


def test_docs_extra_and_ci_step():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extra = re.search(r"^docs = \[(.*?)\n\]", pyproject, re.DOTALL | re.MULTILINE).group(1)
    for requirement in ('"mkdocs>=1.6', '"mkdocs-material>=', '"mkdocstrings[python]>='):
        assert requirement in extra
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert '-e ".[docs]"' in script and "mkdocs build --strict" in script
    assert 'pip install -e ".[docs]" && mkdocs serve' in (ROOT / "README.md").read_text("utf-8")
    assert "site/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()


@pytest.mark.slow
def test_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocstrings", reason='no docs extra (pip install -e ".[docs]")')
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                            "--site-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                           env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert build.returncode == 0, build.stderr[-3000:]
    assert (tmp_path / "api" / "training" / "index.html").is_file()
