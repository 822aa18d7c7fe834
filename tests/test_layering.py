"""The layers of DESIGN.md: dependencies point down only."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "daskshuffle"


PURE_LAYERS = [
    "daskshuffle._plan",
    "daskshuffle._epoch_plan",
    "daskshuffle._levels",
    "daskshuffle._level_plan",
    "daskshuffle._orders",
    "daskshuffle._order_units",
    "daskshuffle._mix_plan",
    "daskshuffle._streams",
    "daskshuffle._random",
    "daskshuffle._parse",
    "daskshuffle._errors",
    "daskshuffle._scale",
]
STORAGE_AND_DASK = {"dask", "distributed", "zarr", "fsspec", "pyarrow", "xarray", "pandas"}


def test_pure_layers_import_neither_dask_nor_storage() -> None:
    """Import each pure layer in turn in one fresh interpreter; none may bring in dask or storage."""
    code = (
        "import importlib, json, sys\n"
        "loaded = {}\n"
        f"for module in {PURE_LAYERS!r}:\n"
        "    importlib.import_module(module)\n"
        "    loaded[module] = sorted({name.split('.')[0] for name in sys.modules})\n"
        "print(json.dumps(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    offenders = {module: sorted(set(names) & STORAGE_AND_DASK) for module, names in json.loads(out).items()}
    # Imports accumulate, so the first module that shows an offender is the one that imports it.
    assert not any(offenders.values()), offenders


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
    allowed = {
        "daskshuffle/_graph.py",
        "daskshuffle/_compute.py",
        "daskshuffle/_parse.py",
        "daskshuffle/demo.py",
        "daskshuffle/_cli/_common.py",
    }
    assert set(offenders) <= allowed, sorted(set(offenders) - allowed)
