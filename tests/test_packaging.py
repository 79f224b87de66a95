"""The package as it is installed: its name on the index, one version source, the license, the
typing marker, the citation file and the console scripts (``.ci/run`` builds and installs the
wheel itself)."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import pytest

import textkit

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_distribution_name_and_one_version_source():
    project = PYPROJECT["project"]
    assert project["name"] == "textkit-jax"          # "textkit" on the index is another project
    version = project["version"]
    assert textkit.__version__ == version, (
        f"installed metadata says {textkit.__version__}, pyproject.toml {version}: reinstall "
        "(pip install -e .)")
    for path in ("textkit/__init__.py", "CITATION.cff", "README.md"):
        assert version not in (ROOT / path).read_text(encoding="utf-8"), path


def test_license_typing_marker_and_citation_ship():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX" in text    # the full text
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert (ROOT / "textkit" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["textkit"]
    citation = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    assert re.search(r"^cff-version: 1\.2\.0$", citation, re.MULTILINE)
    assert re.search(r"^title: .*textkit", citation, re.MULTILINE)
    assert re.search(r"^license: Apache-2\.0$", citation, re.MULTILINE)


@pytest.mark.parametrize("script", sorted(PYPROJECT["project"]["scripts"]))
def test_console_scripts_name_functions_inside_textkit(script):
    module, _, function = PYPROJECT["project"]["scripts"][script].partition(":")
    assert module.split(".")[0] == "textkit"          # examples/ are not in the wheel
    assert callable(getattr(importlib.import_module(module), function))


def test_finetune_command_names_its_recipes(capsys):
    from textkit.cli.finetune import RECIPES, main
    from textkit.tasks import get_task

    assert {name: get_task(task).name for name, (task, _) in RECIPES.items()} == {
        "classify": "sequence_classification", "squad": "question_answering",
        "ner": "token_classification"}
    with pytest.raises(SystemExit) as exit_:
        main(["ner", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: textkit-finetune ner ")
    with pytest.raises(SystemExit) as exit_:
        main(["translate"])
    assert exit_.value.code == 2 and "invalid choice: 'translate'" in capsys.readouterr().err


def test_ci_builds_and_installs_the_wheel_outside_the_tree():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "-m build --outdir \"$dist\"" in script and "mktemp -d" in script
    assert re.search(r'"\$dist/venv/bin/pip" install .*textkit_jax-\*\.whl', script)
    assert "textkit.__version__" in script and "venv/bin/textkit-plot --help" in script
