"""Source data that no longer decodes is named, file and chunk, in a daskshuffle error: on the client and from workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

import daskshuffle
from daskshuffle import DaskShuffleError


def _zstd_source(path: Path) -> Path:
    """400 rows of ``x`` in zstd chunks of 100 rows (zarr's default compressor)."""
    group = zarr.open_group(path, mode="w")
    array = group.create_array("x", shape=(400, 8), chunks=(100, 8), dtype="u1")
    array[:] = np.random.default_rng(0).integers(0, 9, (400, 8)).astype("u1")
    return path


def _damage(chunk: Path) -> None:
    chunk.write_bytes(b"\0" * chunk.stat().st_size)  # no longer zstd


def test_a_sampled_chunk_that_does_not_decode_is_named_on_the_client(tmp_path: Path) -> None:
    source = _zstd_source(tmp_path / "raw.zarr")
    _damage(source / "x" / "c" / "0" / "0")
    with pytest.raises(DaskShuffleError, match=r"Got the chunk \S*raw.zarr/x/c/0/0, which does not .*restore it") as e:
        daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", n_piles=4, seed=1)
    assert isinstance(e.value, ValueError) and "Zstd" in str(e.value), "the codec's reason is kept"
    assert not (tmp_path / "piles.zarr").exists(), "nothing is left"


@pytest.mark.slow
def test_a_chunk_that_does_not_decode_is_named_from_a_worker(tmp_path: Path, cluster_client: Any) -> None:
    source = _zstd_source(tmp_path / "raw.zarr")
    _damage(source / "x" / "c" / "3" / "0")  # not the sampled chunk: read by pass 1 on a worker
    with (
        cluster_client.as_current(),
        pytest.raises(DaskShuffleError, match=r"Got the chunk \S*raw.zarr/x/c/3/0, which does not decode"),
    ):
        daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", n_piles=4, seed=1, block_memory="1KiB")
    assert not (tmp_path / "piles.zarr").exists()


def test_a_parquet_page_that_does_not_decode_is_named(tmp_path: Path) -> None:
    path = tmp_path / "raw.parquet"
    pq.write_table(pa.table({"id": np.arange(100_000)}), path, compression="zstd", row_group_size=20_000)
    column = pq.read_metadata(path).row_group(2).column(0)
    data = bytearray(path.read_bytes())
    data[column.data_page_offset + 60 : column.data_page_offset + 260] = b"\x07" * 200
    path.write_bytes(bytes(data))
    with pytest.raises(DaskShuffleError, match=r"Got row group 2 of '\S*raw.parquet', which does not decode"):
        daskshuffle.shuffle_parquet(path, tmp_path / "piles", n_piles=4, seed=1, block_memory="64KiB")
    assert not (tmp_path / "piles").exists()


@pytest.mark.slow
@pytest.mark.s3
def test_a_chunk_that_does_not_decode_on_s3_is_named(tmp_path: Path, s3: Any) -> None:
    source = _zstd_source(tmp_path / "raw.zarr")
    _damage(source / "x" / "c" / "2" / "0")
    url = s3.put(str(source), "raw.zarr")
    with pytest.raises(DaskShuffleError, match=r"Got the chunk s3://\S*raw.zarr/x/c/2/0, which does not decode"):
        daskshuffle.shuffle_zarr(
            url, s3.url("piles.zarr"), n_piles=4, seed=1, block_memory="1KiB", storage_options=s3.storage_options
        )


def _xarray_source(path: Path) -> Path:
    """400 times of ``t2m`` (and ``time``) in zstd chunks of 100 times, written by xarray."""
    import xarray as xr

    values = np.random.default_rng(0).normal(size=(400, 8)).astype("f4")
    dataset = xr.Dataset({"t2m": (("time", "x"), values)}, coords={"time": np.arange(400)})
    dataset.chunk({"time": 100}).to_zarr(path, zarr_format=3, consolidated=False)
    return path


def test_an_xarray_chunk_that_does_not_decode_is_named(tmp_path: Path) -> None:
    source = _xarray_source(tmp_path / "raw.zarr")
    _damage(source / "t2m" / "c" / "2" / "0")
    with pytest.raises(
        DaskShuffleError, match=r"Got the chunk \S*raw.zarr/t2m/c/2/0, which does not .*restore it"
    ) as e:
        daskshuffle.shuffle_xarray(source, tmp_path / "piles.zarr", dim="time", n_piles=4, seed=1, block_memory="1KiB")
    assert isinstance(e.value, ValueError) and "Zstd" in str(e.value), "the codec's reason is kept"
    assert not (tmp_path / "piles.zarr").exists(), "nothing is left"


@pytest.mark.slow
def test_an_xarray_chunk_that_does_not_decode_is_named_from_a_worker(tmp_path: Path, cluster_client: Any) -> None:
    source = _xarray_source(tmp_path / "raw.zarr")
    _damage(source / "t2m" / "c" / "3" / "0")
    with (
        cluster_client.as_current(),
        pytest.raises(DaskShuffleError, match=r"Got the chunk \S*raw.zarr/t2m/c/3/0, which does not decode"),
    ):
        daskshuffle.shuffle_xarray(source, tmp_path / "piles.zarr", dim="time", n_piles=4, seed=1, block_memory="1KiB")
    assert not (tmp_path / "piles.zarr").exists()


def test_a_chunk_of_a_dask_array_from_zarr_that_does_not_decode_is_named(tmp_path: Path) -> None:
    import dask.array as da

    source = _zstd_source(tmp_path / "raw.zarr")
    _damage(source / "x" / "c" / "1" / "0")
    with pytest.raises(DaskShuffleError, match=r"Got the chunk \S*raw.zarr/x/c/1/0, which does not .*restore it") as e:
        daskshuffle.shuffle_zarr(
            {"x": da.from_zarr(str(source / "x"))}, tmp_path / "piles.zarr", n_piles=4, seed=1, block_memory="1KiB"
        )
    assert isinstance(e.value, ValueError) and "Zstd" in str(e.value)
    assert not (tmp_path / "piles.zarr").exists()


@pytest.mark.slow
def test_a_chunk_of_a_dask_array_from_zarr_that_does_not_decode_is_named_from_a_worker(
    tmp_path: Path, cluster_client: Any
) -> None:
    import dask.array as da

    source = _zstd_source(tmp_path / "raw.zarr")
    _damage(source / "x" / "c" / "3" / "0")
    with (
        cluster_client.as_current(),
        pytest.raises(DaskShuffleError, match=r"Got the chunk \S*raw.zarr/x/c/3/0, which does not decode"),
    ):
        daskshuffle.shuffle_zarr(
            {"x": da.from_zarr(str(source / "x"))}, tmp_path / "piles.zarr", n_piles=4, seed=1, block_memory="1KiB"
        )
    assert not (tmp_path / "piles.zarr").exists()


def _fails_at_block_2(block: Any, block_info: Any = None) -> Any:
    if block_info is not None and block_info[0]["chunk-location"][0] == 2:
        raise RuntimeError("Zstd decompression error: unknown frame descriptor")
    return block


def test_a_block_of_a_dask_array_of_unknown_origin_that_does_not_compute_is_named(tmp_path: Path) -> None:
    import dask.array as da

    x = da.ones((400, 8), chunks=(100, 8), dtype="u1")
    x = da.map_blocks(_fails_at_block_2, x, dtype="u1")
    with pytest.raises(
        DaskShuffleError, match=r"a block of the dask array 'x' \(rows 200 to 300\) did not compute"
    ) as e:
        daskshuffle.shuffle_zarr({"x": x}, tmp_path / "piles.zarr", n_piles=4, seed=1, block_memory="1KiB")
    assert isinstance(e.value.__cause__, RuntimeError), "the cause is chained"
    assert not (tmp_path / "piles.zarr").exists()


def test_an_xarray_index_chunk_that_does_not_decode_is_named_when_opened(tmp_path: Path) -> None:
    source = _xarray_source(tmp_path / "raw.zarr")
    time_chunk = next((source / "time" / "c").iterdir())
    _damage(time_chunk)  # xarray reads an index coordinate when it opens the dataset
    with pytest.raises(
        DaskShuffleError, match=r"Got the chunk \S*raw.zarr/time/c/0, which does not decode .*restore it"
    ) as e:
        daskshuffle.shuffle_xarray(source, tmp_path / "piles.zarr", dim="time", n_piles=4, seed=1)
    assert isinstance(e.value, ValueError) and "Zstd" in str(e.value)
    assert not (tmp_path / "piles.zarr").exists()
