"""The import contract of docs/architecture.md, checked on the source: every import statement
under ``textkit/`` (lazy ones inside functions included) goes down the layers, and the modules
import each other without cycles.

The layer order is read from the block after ``<!-- layers:`` in docs/architecture.md, top to
bottom; the packages named on one line form one layer and do not import each other. A module
may import modules of its own package and of any lower layer. ``from textkit.pkg import name``
counts as an import of ``textkit.pkg.name`` when that is a module, else of ``textkit.pkg``.
Only static import statements are seen (``importlib.import_module`` is not: textkit's own
``__init__`` loads subpackages that way, and nothing else should).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "textkit"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Import:
    source: str     # importing module, e.g. "textkit.models.layers"
    file: str       # its file, e.g. "textkit/models/layers.py"
    line: int
    target: str     # imported module (or package), e.g. "textkit.models.kernels"


def read_layers(text: str) -> list[tuple[str, ...]]:
    """Layers top to bottom, each a tuple of package (or module) names."""
    match = re.search(r"<!-- layers:.*?-->\s*```\n(.*?)```", text, re.DOTALL)
    assert match, f"{ARCHITECTURE} has no '<!-- layers: ... -->' block"
    layers = []
    for line in match.group(1).splitlines():
        names = re.split(r"\s{2,}", line.strip())[0]
        layers.append(tuple(name.strip() for name in names.split(",")))
    return layers


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Module name -> file of every module under ``package`` (``textkit/``)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """Absolute name of the ``from`` part of ``node`` (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(known: dict[str, Path]) -> list[Import]:
    """Every textkit import of every module in ``known`` (walking the whole syntax tree)."""
    found = []
    for module, path in known.items():
        file = "/".join(module.split(".")) + ("/__init__.py" if path.name == "__init__.py"
                                               else ".py")
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = resolve(module, path.name == "__init__.py", node)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                           for alias in node.names]
            else:
                continue
            found += [Import(module, file, node.lineno, target) for target in targets
                      if target == "textkit" or target.startswith("textkit.")]
    return found


def layer_of(module: str, layers: list[tuple[str, ...]]) -> tuple[int, str] | None:
    """(layer index, the layer entry owning ``module``); the root package is above all."""
    if module == "textkit":
        return -1, "textkit"
    for index, names in enumerate(layers):
        for name in names:
            if module == name or module.startswith(name + "."):
                return index, name
    return None


def upward_imports(found: list[Import], layers: list[tuple[str, ...]]) -> list[str]:
    bad = []
    for imp in found:
        source, target = layer_of(imp.source, layers), layer_of(imp.target, layers)
        if source is None or target is None or source[1] == target[1]:
            continue        # unmapped modules are reported by their own test
        if target[0] <= source[0]:
            where = ("is a higher layer than" if target[0] < source[0]
                     else "is in the same layer as")
            bad.append(f"{imp.file}:{imp.line}: {imp.source} imports {imp.target} "
                       f"({target[1]} {where} {source[1]})")
    return bad


def cycles(found: list[Import], known: dict[str, Path]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), leaving out the edges
    from a package's ``__init__`` into its own submodules."""
    graph: dict[str, set[str]] = {module: set() for module in known}
    for imp in found:
        own_submodule = (imp.file.endswith("__init__.py")
                         and imp.target.startswith(imp.source + "."))
        if imp.target in known and imp.target != imp.source and not own_submodule:
            graph[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


@pytest.fixture(scope="module")
def layers():
    return read_layers(ARCHITECTURE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def known():
    return modules()


@pytest.fixture(scope="module")
def found(known):
    return imports(known)


def test_layers_are_read_from_the_docs_and_imports_from_the_code(layers, found):
    names = [name for layer in layers for name in layer]
    assert len(names) == len(set(names)), f"a package is named twice: {names}"
    for name in ("textkit.tasks", "textkit.models", "textkit.data", "textkit.errors"):
        assert name in names
    lazy = [imp for imp in found if imp.source == "textkit.decoding.translator"
            and imp.target == "textkit.models.kernels"]
    assert len(found) > 200 and lazy, "the import statements were not all found"


def test_every_module_has_a_layer(known, layers):
    unmapped = [module for module in known if layer_of(module, layers) is None]
    assert not unmapped, (f"modules in no layer of {ARCHITECTURE.relative_to(ROOT)} (declare "
                          f"the package there): {unmapped}")


def test_imported_modules_exist(found, known):
    def exists(name: str) -> bool:
        return name in known or any(name.startswith(m + ".") for m in known
                                    if known[m].name != "__init__.py")

    missing = [f"{imp.file}:{imp.line}: {imp.source} imports {imp.target}"
               for imp in found if not exists(imp.target)]
    assert not missing, f"imports of textkit modules that do not exist: {missing}"


def test_no_upward_import(found, layers):
    bad = upward_imports(found, layers)
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_no_import_cycle(found, known):
    found_cycles = cycles(found, known)
    assert not found_cycles, f"import cycles between modules: {found_cycles}"


def test_the_checks_catch_a_violation(tmp_path, layers):
    """An upward lazy import and a cycle in a small fake tree are reported."""
    package = tmp_path / "textkit"
    for name, text in {
        "__init__.py": "",
        "data/__init__.py": "from textkit.data import a\n",
        "data/a.py": "def f():\n    from textkit.models import layers\n",
        "data/b.py": "from textkit.data import c\n",
        "data/c.py": "import textkit.data.b\n",
        "models/__init__.py": "",
        "models/layers.py": "from textkit.data import a\n",
    }.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    known = modules(package)
    found = imports(known)
    bad = upward_imports(found, layers)
    assert len(bad) == 1 and bad[0].startswith(
        "textkit/data/a.py:2: textkit.data.a imports textkit.models.layers (textkit.models is "
        "a higher layer than textkit.data)"), bad
    assert cycles(found, known) == [["textkit.data.a", "textkit.models.layers"],
                                    ["textkit.data.b", "textkit.data.c"]]
