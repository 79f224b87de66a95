"""The docs site: an API page per public package, repository links mapped to pages, CI builds it
and fails on any warning (a page with a broken anchor fails CI's own command line)."""

from __future__ import annotations

import importlib.util
import re
import shlex
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


def ci_docs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """CI's step 4 (the ``mkdocs build`` line of ``.ci/run``, its flags as written there) on
    ``config``, into ``site``."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    line = re.search(r"^NO_MKDOCS_2_WARNING=1 \.venv/bin/mkdocs (build .*) --site-dir ", script,
                     re.MULTILINE)
    assert line, "no mkdocs build line in .ci/run"
    return subprocess.run([sys.executable, "-m", "mkdocs", *shlex.split(line.group(1)),
                           "--config-file", str(config), "--site-dir", str(site)],
                          cwd=ROOT, capture_output=True, text=True,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})


def test_ci_docs_step_fails_on_a_broken_anchor(tmp_path):
    """The project's mkdocs.yml (strict, its validation settings) on two pages: CI's command
    passes with a good anchor and fails on a broken one (``--quiet`` would pass it)."""
    pytest.importorskip("material", reason='no docs extra (pip install -e ".[docs]")')
    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: docs\nhooks: []\nplugins: [search]\n"
        "nav: [index.md, other.md]\n", encoding="utf-8")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A heading\n", encoding="utf-8")
    for anchor, fails in (("a-heading", False), ("no-such-heading", True)):
        (tmp_path / "docs" / "index.md").write_text(f"# Home\n\n[there](other.md#{anchor})\n",
                                                    encoding="utf-8")
        build = ci_docs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
        assert (build.returncode != 0) == fails, build.stderr[-3000:]
    assert "does not contain an anchor '#no-such-heading'" in build.stderr


def test_docs_name_the_generation_surface():
    """``--chat``, ``LMTokenizer.apply_chat_template``, ``beam_search`` and every ``kind``
    that ``load_pretrained`` returns are in the guide and on the API pages."""
    guide = (ROOT / "docs" / "language_models.md").read_text(encoding="utf-8")
    for word in ("--chat", "apply_chat_template", "LMTokenizer", "beam_search", '"causal_lm"',
                 '"encoder"', '"sentence_encoder"', '"translation"'):
        assert word in guide, word
    assert "::: textkit.decoding.beam_search.beam_search\n" in (
        ROOT / "docs" / "api" / "decoding.md").read_text(encoding="utf-8")
    assert "::: textkit.pretrained.lm_tokenizer.LMTokenizer\n" in (
        ROOT / "docs" / "api" / "pretrained.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocstrings", reason='no docs extra (pip install -e ".[docs]")')
    build = ci_docs_build(ROOT / "mkdocs.yml", tmp_path)
    assert build.returncode == 0, build.stderr[-3000:]
    assert (tmp_path / "api" / "training" / "index.html").is_file()
    decoding = (tmp_path / "api" / "decoding" / "index.html").read_text(encoding="utf-8")
    assert 'id="textkit.decoding.beam_search.beam_search"' in decoding
    pretrained = (tmp_path / "api" / "pretrained" / "index.html").read_text(encoding="utf-8")
    assert 'id="textkit.pretrained.lm_tokenizer.LMTokenizer.apply_chat_template"' in pretrained
    for kind in ("causal_lm", "encoder", "sentence_encoder", "translation"):
        assert f"&quot;{kind}&quot;" in pretrained or f'"{kind}"' in pretrained, kind
