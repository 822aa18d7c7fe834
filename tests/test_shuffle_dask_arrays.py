"""``shuffle_zarr`` of a dask array, or of a dict of dask arrays sharing their rows."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from daskshuffle import DaskShuffleTypeError, DaskShuffleValueError, PileLoader, shuffle_zarr

N_ROWS = 5_000


def _arrays(x_rows: int = 500, y_rows: int = 500) -> dict[str, Any]:
    """``id``, ``x`` (``x[:, 0] == id``) and ``y`` (``id % 7``), the last two chunked as asked."""
    ids = da.arange(N_ROWS, chunks=500, dtype=np.int64)
    x = da.concatenate([ids[:, None].astype(np.float32), da.ones((N_ROWS, 3), chunks=500, dtype=np.float32)], axis=1)
    return {"id": ids, "x": x.rechunk((x_rows, 4)), "y": (ids % 7).astype(np.int16).rechunk(y_rows)}


def _read(path: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(str(path), mode="r")
    return {name: np.asarray(array[...]) for name, array in group.arrays()}


def _assert_aligned_permutation(out: dict[str, np.ndarray]) -> None:
    ids = out["id"]
    np.testing.assert_array_equal(np.sort(ids), np.arange(N_ROWS))
    assert not np.array_equal(ids, np.arange(N_ROWS)), "shuffled"
    np.testing.assert_array_equal(out["x"][:, 0], ids.astype(np.float32))
    np.testing.assert_array_equal(out["y"], ids % 7)


def test_a_dict_of_dask_arrays_is_shuffled_aligned_and_deterministic(tmp_path: Path) -> None:
    result = shuffle_zarr(_arrays(), tmp_path / "a.zarr", 8, seed=1, block_memory=20_000)
    assert result.n_rows == N_ROWS and sorted(result.variables) == ["id", "x", "y"]
    first = _read(tmp_path / "a.zarr")
    _assert_aligned_permutation(first)
    shuffle_zarr(_arrays(), tmp_path / "b.zarr", 8, seed=1, block_memory=20_000)
    shuffle_zarr(_arrays(), tmp_path / "c.zarr", 8, seed=2, block_memory=20_000)
    np.testing.assert_array_equal(_read(tmp_path / "b.zarr")["id"], first["id"])
    assert not np.array_equal(_read(tmp_path / "c.zarr")["id"], first["id"])
    with PileLoader(tmp_path / "a.zarr", 128, seed=0) as loader:
        batches = list(loader)
    np.testing.assert_array_equal(np.sort(np.concatenate([batch["id"] for batch in batches])), np.arange(N_ROWS))
    opened = xr.open_zarr(tmp_path / "a.zarr")
    assert opened["x"].dims == ("row", "x_dim_1") and opened.sizes["row"] == N_ROWS


def test_arrays_chunked_differently_along_the_rows_are_cut_at_the_same_rows(tmp_path: Path) -> None:
    shuffle_zarr(_arrays(), tmp_path / "even.zarr", 8, seed=3, block_memory=20_000)
    shuffle_zarr(_arrays(x_rows=300, y_rows=1_234), tmp_path / "odd.zarr", 8, seed=3, block_memory=20_000)
    odd = _read(tmp_path / "odd.zarr")
    _assert_aligned_permutation(odd)
    # Blocks follow the first array's chunks: the same as when every array had them.
    np.testing.assert_array_equal(odd["id"], _read(tmp_path / "even.zarr")["id"])


def test_a_single_dask_array_is_stored_as_data(tmp_path: Path) -> None:
    rows = da.random.default_rng(0).random((N_ROWS, 16), chunks=(1_000, 16))
    shuffle_zarr(rows, tmp_path / "p.zarr", 4, seed=0, materialize=True)
    out = _read(tmp_path / "p.zarr")
    assert list(out) == ["data"]
    expected = rows.compute()
    order = np.lexsort(out["data"].T[::-1])
    np.testing.assert_array_equal(out["data"][order], expected[np.lexsort(expected.T[::-1])])
    shuffle_zarr(rows, tmp_path / "same.zarr", 4, seed=0, materialize=True)
    np.testing.assert_array_equal(_read(tmp_path / "same.zarr")["data"], out["data"])


def test_every_block_is_computed_once(tmp_path: Path) -> None:
    computed: list[tuple[int, ...]] = []
    lock = threading.Lock()

    def block(block_info: dict[Any, Any] | None = None) -> np.ndarray:
        assert block_info is not None
        location = block_info[None]["chunk-location"]
        with lock:
            computed.append(location)
        start = location[0] * 500
        return np.arange(start, start + 500, dtype=np.int64)

    ids = da.map_blocks(block, chunks=((500,) * 10,), dtype=np.int64)
    with dask.config.set(scheduler="threads"):
        shuffle_zarr({"id": ids, "twice": ids * 2}, tmp_path / "p.zarr", 4, seed=0)
    assert sorted(computed) == [(index,) for index in range(10)]
    out = _read(tmp_path / "p.zarr")
    np.testing.assert_array_equal(out["twice"], out["id"] * 2)


@pytest.mark.cluster
def test_same_output_on_a_local_cluster_as_on_threads(tmp_path: Path, cluster_client: Any) -> None:
    shuffle_zarr(_arrays(), tmp_path / "threads.zarr", 8, seed=5, block_memory=20_000)
    with cluster_client.as_current():
        shuffle_zarr(_arrays(), tmp_path / "cluster.zarr", 8, seed=5, block_memory=20_000)
    threads, cluster = _read(tmp_path / "threads.zarr"), _read(tmp_path / "cluster.zarr")
    for name in threads:
        np.testing.assert_array_equal(threads[name], cluster[name])


@pytest.mark.parametrize(
    ("src", "error", "match"),
    [
        ({"id": da.arange(10), "scalar": da.from_array(np.float64(1.0))}, DaskShuffleValueError, "0-d arrays"),
        ({"id": da.arange(10), "x": da.arange(11)}, DaskShuffleValueError, "same number of rows"),
        (
            {"id": da.from_array(np.array(["a", 1], dtype=object), chunks=1)},
            DaskShuffleTypeError,
            "numeric, boolean or datetime dtype",
        ),
        ({"id": da.arange(10)[da.arange(10) > 3]}, DaskShuffleValueError, r"unknown \(nan\) sizes"),
        ({"id": da.arange(10), "x": np.arange(10)}, DaskShuffleTypeError, "map names .* to dask arrays"),
        ({}, DaskShuffleValueError, "at least one array"),
        (da.arange(10)[da.arange(10) > 3], DaskShuffleValueError, "compute_chunk_sizes"),
    ],
)
def test_bad_arrays_are_refused_before_anything_is_written(tmp_path: Path, src: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        shuffle_zarr(src, tmp_path / "p.zarr", 4, seed=0)
    assert list(tmp_path.iterdir()) == []


def test_variables_choose_among_the_arrays(tmp_path: Path) -> None:
    result = shuffle_zarr(_arrays(), tmp_path / "p.zarr", 4, seed=0, variables=["id", "y"])
    assert sorted(result.variables) == ["id", "y"] and sorted(_read(tmp_path / "p.zarr")) == ["id", "y"]
    with pytest.raises(DaskShuffleValueError, match=r"unknown \['z'\]"):
        shuffle_zarr(_arrays(), tmp_path / "q.zarr", 4, seed=0, variables=["z"])
    with pytest.raises(DaskShuffleValueError, match="compressors='auto' with dask arrays"):
        shuffle_zarr(_arrays(), tmp_path / "q.zarr", 4, seed=0, compressors=None)
    assert not (tmp_path / "q.zarr").exists()
