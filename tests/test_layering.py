"""The layers of DESIGN.md: dependencies point down only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "daskshuffle"


def imported_after(statement: str) -> set[str]:
    """Top-level modules in sys.modules after running ``statement`` in a fresh interpreter."""
    code = f"import sys; {statement}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


@pytest.mark.parametrize(
    "module", ["daskshuffle._plan", "daskshuffle._random", "daskshuffle._parse", "daskshuffle._errors"]
)
def test_pure_layers_import_neither_dask_nor_storage(module: str) -> None:
    loaded = imported_after(f"import {module}")
    assert not loaded & {"dask", "distributed", "zarr", "fsspec", "pyarrow", "xarray", "pandas"}, loaded


def test_only_the_graph_layer_imports_dask() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(name.split(".")[0] in {"dask", "distributed"} for name in names):
                offenders.append(str(path.relative_to(PACKAGE.parent)))
    allowed = {"daskshuffle/_graph.py", "daskshuffle/_parse.py", "daskshuffle/demo.py", "daskshuffle/_cli.py"}
    assert set(offenders) <= allowed, sorted(set(offenders) - allowed)


@pytest.mark.slow
def test_pure_layers_type_check_strictly() -> None:
    """mypy --strict (configured in pyproject) on the layers that must stay pure."""
    files = [str(PACKAGE / name) for name in ("_plan.py", "_random.py", "_parse.py", "_errors.py")]
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", *files],
        capture_output=True,
        text=True,
        cwd=PACKAGE.parent,
    )
    assert run.returncode == 0, run.stdout + run.stderr
