"""The layers of docs/architecture.md, as the package tree shows them: imports point down only."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).parents[1] / "daskshuffle"

PYPROJECT = PACKAGE.parent / "pyproject.toml"


def _contracts() -> list[dict[str, Any]]:
    contracts: list[dict[str, Any]] = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    return contracts


def _layers() -> list[set[str]]:
    """The layers of pyproject.toml's import-linter contract, bottom to top; the package's own
    ``__init__`` (the public names) stands with ``torch``, as docs/architecture.md's table has it."""
    (contract,) = [contract for contract in _contracts() if contract["type"] == "layers"]
    layers = [set(re.split(r"\s*[|:]\s*", layer)) for layer in reversed(contract["layers"])]
    for layer in layers:
        if "torch" in layer:
            layer.add("__init__")
    return layers


# Bottom to top; a module may import its own layer and the layers below it (`lint-imports`, run by
# `make lint`, checks it, also through other modules). docs/architecture.md's layers table is this list.
LAYERS = _layers()
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


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
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "daskshuffle"]
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


def test_every_module_belongs_to_a_layer() -> None:
    units = {_unit(_module(path)[0]) for path in PACKAGE.rglob("*.py")}
    assert units <= set(RANK), sorted(units - set(RANK))
    assert len(list(PACKAGE.glob("*.py"))) <= 14  # the root holds the ground and the public faces


def test_the_contracts_catch_an_upward_import_through_any_spelling(tmp_path: Path) -> None:
    """An ``import daskshuffle.loader._loader`` inside a function of ``plan/`` breaks two contracts."""
    copy = tmp_path / "daskshuffle"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PYPROJECT, tmp_path / "pyproject.toml")
    with (copy / "plan" / "_rules.py").open("a") as rules:
        rules.write("\n\ndef _reaches_up() -> None:\n    import daskshuffle.loader._loader  # noqa: F401\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    lint = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"]
    run = subprocess.run(lint, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout
    assert "Layers: imports point down only BROKEN" in run.stdout
    assert "The plan is pure: no storage, no data libraries BROKEN" in run.stdout
    assert "daskshuffle.plan._rules -> daskshuffle.loader._loader" in run.stdout
    clean = subprocess.run(lint, cwd=PACKAGE.parent, capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stdout


STORAGE_AND_DASK = {"dask", "distributed", "zarr", "fsspec", "pyarrow", "xarray", "pandas"}
PURE_LAYERS = ["plan", "epochs", "_errors", "_random", "_parse"]


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


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def _layers_rows(markdown: str) -> list[tuple[list[str], str]]:
    """The rows of the table under ``## Layers``: the names in the first column, and the second column."""
    section = markdown.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    cells = [line.split("|") for line in section.splitlines() if line.startswith("| `")]
    return [(re.findall(r"`([^`]+)`", row[1]), row[2]) for row in cells]


def test_the_architecture_pages_layers_table_is_the_tree() -> None:
    markdown = ARCHITECTURE.read_text()
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
