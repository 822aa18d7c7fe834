"""The layers of docs/architecture.md, as the package tree shows them: imports point down only."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "daskshuffle"

# Bottom to top; a module may import its own layer and the layers below it. Formats and quality
# share a rank but do not import each other. docs/architecture.md's layers table is this list.
LAYERS: list[set[str]] = [
    {"_compat", "_errors", "_random", "_threads"},
    {"_parse"},
    {"storage"},
    {"plan"},
    {"orders"},
    {"formats", "quality"},
    {"shuffle"},
    {"loader"},
    {"_torch_dataloader"},
    {"__init__", "torch"},
    {"_cli"},
    {"demo", "__main__"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
STORAGE_AND_DASK = {"dask", "distributed", "zarr", "fsspec", "pyarrow", "xarray", "pandas"}
DASK_ALLOWED = {"shuffle", "_cli", "demo", "_parse"}


def _module(path: Path, package: Path = PACKAGE) -> tuple[str, bool]:
    parts = path.relative_to(package.parent).with_suffix("").parts
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def _unit(module: str) -> str:
    """The layer unit of a module: its subpackage, or its own name at the package root."""
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _imports(path: Path, package: Path) -> list[tuple[str, int]]:
    """The daskshuffle modules ``path`` imports (absolute names), with line numbers."""
    module, is_package = _module(path, package)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = module.split(".")[: None if is_package else -1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, *([node.module] if node.module else [])])
            names = [f"{target}.{alias.name}" for alias in node.names] if node.module is None else [target]
            found += [(name, node.lineno) for name in names]
        elif node.module and node.module.split(".")[0] == "daskshuffle":
            found.append((node.module, node.lineno))
    return found


def upward_imports(package: Path = PACKAGE) -> list[str]:
    offenders = []
    for path in sorted(package.rglob("*.py")):
        source = _unit(_module(path, package)[0])
        for target, line in _imports(path, package):
            unit = _unit(target)
            if unit not in RANK:  # a name imported from the package itself (`from .. import append`)
                unit = "__init__"
            if RANK[unit] > RANK[source] or (RANK[unit] == RANK[source] and unit != source):
                offenders.append(f"{path.relative_to(package.parent)}:{line} imports {target}")
    return offenders


def test_every_module_belongs_to_a_layer() -> None:
    units = {_unit(_module(path)[0]) for path in PACKAGE.rglob("*.py")}
    assert units <= set(RANK), sorted(units - set(RANK))
    assert len(list(PACKAGE.glob("*.py"))) <= 14  # the root holds the ground and the public faces


def test_imports_point_down_only() -> None:
    assert upward_imports() == []


def test_the_layering_check_catches_an_upward_import(tmp_path: Path) -> None:
    package = tmp_path / "daskshuffle"
    (package / "plan").mkdir(parents=True)
    (package / "loader").mkdir()
    (package / "__init__.py").write_text("")
    (package / "plan" / "__init__.py").write_text("")
    (package / "loader" / "__init__.py").write_text("")
    (package / "loader" / "_loader.py").write_text("from ..plan._plan import x\n")
    (package / "plan" / "_plan.py").write_text("from ..loader import _loader\n")
    assert upward_imports(package) == ["daskshuffle/plan/_plan.py:1 imports daskshuffle.loader"]


PURE_LAYERS = ["plan", "_errors", "_random", "_parse"]


@pytest.mark.parametrize("layer", [*PURE_LAYERS, "_compat"])
def test_pure_layers_import_neither_dask_nor_storage(layer: str) -> None:
    """Import every module of a pure layer in a fresh interpreter; none may bring in dask or storage."""
    modules = sorted(_module(path)[0] for path in PACKAGE.rglob("*.py") if _unit(_module(path)[0]) == layer)
    code = (
        "import importlib, json, sys\n"
        f"for module in {modules!r}:\n"
        "    importlib.import_module(module)\n"
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert not set(json.loads(out)) & STORAGE_AND_DASK


def test_the_pure_layers_reach_no_other_library_internals() -> None:
    """The adapters of :mod:`daskshuffle._compat` stand at the ground, but the pure layers never use them."""
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if _unit(_module(path)[0]) in PURE_LAYERS
        for target, line in _imports(path, PACKAGE)
        if _unit(target) == "_compat"
    ]
    assert offenders == []


def test_only_the_graph_layer_imports_dask() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(name.split(".")[0] in {"dask", "distributed"} for name in names):
                offenders.append(path)
    units = {_unit(_module(path)[0]) for path in offenders}
    assert units <= DASK_ALLOWED, sorted(units - DASK_ALLOWED)


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def _layers_rows(markdown: str) -> list[tuple[list[str], str]]:
    """The rows of the table under ``## Layers``: the names in the first column, and the second column."""
    section = markdown.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    cells = [line.split("|") for line in section.splitlines() if line.startswith("| `")]
    return [(re.findall(r"`([^`]+)`", row[1]), row[2]) for row in cells]


def test_the_architecture_page_is_short_and_its_layers_table_is_the_tree() -> None:
    markdown = ARCHITECTURE.read_text()
    assert len(markdown.splitlines()) <= 300, "docs/architecture.md is a map: keep it to 300 lines"
    table = [{name.removesuffix(".py").removesuffix("/") for name in names} for names, _ in _layers_rows(markdown)]
    assert table == LAYERS, "the layers table has one row per layer of LAYERS, in its order"
    subpackages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert subpackages <= set().union(*table)


def test_every_module_the_architecture_page_names_exists() -> None:
    markdown = ARCHITECTURE.read_text()
    named = set(re.findall(r"`((?:[a-z_]+/)*_?[a-z_0-9]+\.py)`", markdown))
    missing = sorted(name for name in named if not (PACKAGE / name).exists() and not (PACKAGE.parent / name).exists())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"
    for names, holds in _layers_rows(markdown):
        packages = [name.removesuffix("/") for name in names if name.endswith("/")]
        for module in re.findall(r"`(_[a-z_]+)`", holds) if packages else []:
            assert any((PACKAGE / package / f"{module}.py").exists() for package in packages), (
                f"the layers table names {module} in {packages}, which hold no such module"
            )
