"""The directory every docstring example runs in.

Each example (``pytest --doctest-modules daskshuffle``, part of the normal run) starts in a fresh
temporary directory that holds exactly:

- ``raw.zarr``: a Zarr v3 group, ``x`` (1000, 8) float32, ``y`` = ``id % 10`` (1000,) int64 and
  ``id`` = ``arange(1000)`` int64, in chunks of 100 rows, dimensions ``("row", "feature")``;
- ``raw.parquet``: one Parquet file, ``id`` int64 0..999, ``x`` float64, ``label`` string
  (``"label-0"``, ``"label-1"``, ``"label-2"``, in turn);
- ``corpus.jsonl``: 1000 lines ``{"id": i}``;
- ``piles.zarr`` and ``piles.parquet``: their pile stores, ``shuffle_zarr`` / ``shuffle_parquet``
  with ``n_piles=8, seed=0``;
- ``day-2.zarr``: a copy of ``raw.zarr``, the next day's rows, for ``append``;
- ``window.zarr``: a pile store of two generations, ``raw.zarr`` (``n_piles=4, seed=0``) and
  ``day-2.zarr`` appended (``seed=1``).

so an example reads like a user's session: ``daskshuffle.PileLoader("piles.zarr", batch_size=100)``.
The stores are made once per session and copied for each example. Examples run on dask's threaded
scheduler.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem

N_ROWS = 1_000

# daskshuffle.torch and _torch_dataloader import torch at the top; without it there is nothing of them to run.
TORCH_MODULES = ["daskshuffle/torch.py", "daskshuffle/_torch_dataloader.py"]
collect_ignore = [] if importlib.util.find_spec("torch") else TORCH_MODULES


def _write_sources(root: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zarr

    rng = np.random.default_rng(0)
    ids = np.arange(N_ROWS, dtype=np.int64)
    group = zarr.open_group(root / "raw.zarr", mode="w", zarr_format=3)
    x = rng.standard_normal((N_ROWS, 8), dtype=np.float32)
    group.create_array("x", data=x, chunks=(100, 8), dimension_names=("row", "feature"))
    group.create_array("y", data=ids % 10, chunks=(100,), dimension_names=("row",))
    group.create_array("id", data=ids, chunks=(100,), dimension_names=("row",))
    labels = pa.array([f"label-{i % 3}" for i in range(N_ROWS)], type=pa.string())
    pq.write_table(pa.table({"id": ids, "x": rng.standard_normal(N_ROWS), "label": labels}), root / "raw.parquet")
    (root / "corpus.jsonl").write_text("".join(f'{{"id": {i}}}\n' for i in range(N_ROWS)))


@pytest.fixture(scope="session")
def doctest_stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The examples' directory, made once: sources and their pile stores."""
    import dask

    import daskshuffle

    root = tmp_path_factory.mktemp("doctest-stores")
    _write_sources(root)
    shutil.copytree(root / "raw.zarr", root / "day-2.zarr")
    with dask.config.set(scheduler="threads"):
        daskshuffle.shuffle_zarr(root / "raw.zarr", root / "piles.zarr", n_piles=8, seed=0)
        daskshuffle.shuffle_parquet(root / "raw.parquet", root / "piles.parquet", n_piles=8, seed=0)
        daskshuffle.shuffle_zarr(root / "raw.zarr", root / "window.zarr", n_piles=4, seed=0)
        daskshuffle.append(root / "window.zarr", root / "day-2.zarr", seed=1)
    return root


@pytest.fixture(autouse=True)
def _doctest_directory(request: pytest.FixtureRequest) -> Iterator[None]:
    """Run each docstring example in a fresh copy of the examples' directory."""
    if not isinstance(request.node, DoctestItem):
        yield
        return
    import dask

    stores: Path = request.getfixturevalue("doctest_stores")
    directory: Path = request.getfixturevalue("tmp_path")
    for entry in stores.iterdir():
        (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, directory / entry.name)
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    monkeypatch.chdir(directory)
    with dask.config.set(scheduler="threads"):
        yield
