"""Which libraries each entry point loads, in a fresh interpreter: the heavy ones only where they are used."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HEAVY = ("dask", "distributed", "pyarrow", "xarray", "zarr", "pandas")


def _loaded(code: str, cwd: Path) -> set[str]:
    """The heavy libraries imported once ``code`` ran in a fresh interpreter."""
    script = textwrap.dedent(code) + textwrap.dedent(
        f"""
        import json, sys
        print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}} & set({list(HEAVY)!r}))))
        """
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return set(json.loads(run.stdout.strip().splitlines()[-1]))


def test_import_daskshuffle_loads_none_of_them(tmp_path: Path) -> None:
    assert _loaded("import daskshuffle", tmp_path) == set()


def test_a_loader_over_a_zarr_store_loads_no_dask_pyarrow_or_xarray(doctest_stores: Path) -> None:
    loaded = _loaded(
        """
        import daskshuffle as ds
        with ds.PileLoader("piles.zarr", batch_size=100) as loader:
            assert sum(len(batch["id"]) for batch in loader) == 1000
        """,
        doctest_stores,
    )
    assert not loaded & {"dask", "distributed", "pyarrow", "xarray", "pandas"}, loaded


@pytest.mark.parametrize("name", ["shuffle_lines", "explain", "orders", "Stream", "config"])
def test_naming_an_entry_point_loads_only_what_it_needs(name: str, tmp_path: Path) -> None:
    loaded = _loaded(f"import daskshuffle as ds\nds.{name}\n", tmp_path)
    assert not loaded & {"zarr", "xarray", "pyarrow"}, f"ds.{name} loads {sorted(loaded)}"


def test_explain_loads_no_zarr_or_dask(tmp_path: Path) -> None:
    loaded = _loaded("import daskshuffle as ds\nds.explain(1e10, 256, n_piles='auto')\n", tmp_path)
    assert not loaded & {"zarr", "dask", "xarray", "pyarrow"}, loaded


def test_shuffle_lines_runs_without_zarr_or_xarray(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("".join(f"{i}\n" for i in range(100)))
    loaded = _loaded(
        """
        import daskshuffle as ds
        ds.shuffle_lines("in.txt", "out.txt", seed=0)
        assert sorted(open("out.txt").read().split()) == sorted(str(i) for i in range(100))
        """,
        tmp_path,
    )
    assert not loaded & {"zarr", "xarray"}, loaded
