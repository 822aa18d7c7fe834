"""Shuffles and the loader on object storage: a real S3 API (moto's server) on loopback.

Each test has a bucket of its own (the ``s3`` fixture); every store is small.
Outputs on S3 must equal the same shuffle on local disk, byte for byte in the
rows and in their order.
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
from conftest import Configure, Points, make_zarr_source, raise_at

import daskshuffle as ds
from daskshuffle.readers import open_pile_reader
from daskshuffle.storage import _leftovers
from daskshuffle.storage._location import Location

pytestmark = pytest.mark.s3

N_ROWS = 1_500


def _arrays(store: str, storage_options: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    group = zarr.open_group(store, mode="r", storage_options=storage_options)
    return {name: np.asarray(array[...]) for name, array in sorted(group.arrays())}


def _rows(store: str, storage_options: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Every row of a pile store in storage order, through the pile reader (any kind)."""
    reader = open_pile_reader(store, storage_options=storage_options)
    try:
        batch = reader.rows.as_arrays(reader.read_rows(0, reader.n_rows))
        if batch is None:
            table = reader.read_rows(0, reader.n_rows)
            return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
        return batch
    finally:
        reader.close()


def _assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.fixture
def zarr_pair(tmp_path: Path, s3: Any) -> tuple[str, str]:
    """The same small Zarr group on local disk and in the bucket."""
    local = make_zarr_source(tmp_path / "raw.zarr", N_ROWS, chunk_rows=125)
    return local, s3.put(local, "raw.zarr")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("on_s3", "part_nbytes", "levels"),
    [(False, None, 1), (True, None, 1), (True, 1_000, 1), (True, 1_000, 2)],
    ids=["pieces on this machine", "pieces on s3", "pieces on s3 in parts", "pieces on s3 in parts, two levels"],
)
def test_zarr_s3_to_s3_equals_local(
    tmp_path: Path,
    s3: Any,
    zarr_pair: tuple[str, str],
    on_s3: bool,
    part_nbytes: int | None,
    levels: int,
    configure: Configure,
) -> None:
    """By default the pieces go to this machine's disk; on object storage a piece file is written in parts,
    and a read across two parts is two requests, joined."""
    if part_nbytes is not None:
        configure({"shuffle.part-nbytes": part_nbytes})
    local, remote = zarr_pair
    options = {"n_piles": 5 if levels == 1 else 9, "seed": 3, "block_memory": "10KiB", "levels": levels}
    ds.shuffle_zarr(local, str(tmp_path / "piles.zarr"), **options)
    tmp = s3.url("scratch") if on_s3 else None
    result = ds.shuffle_zarr(remote, s3.url("piles.zarr"), storage_options=s3.storage_options, tmp=tmp, **options)
    assert result.n_rows == N_ROWS
    _assert_same(_arrays(s3.url("piles.zarr"), s3.storage_options), _arrays(str(tmp_path / "piles.zarr")))
    # The pieces are gone: only the source and the store are left in the bucket.
    assert sorted(path.rsplit("/", 1)[-1] for path in s3.fs.ls(s3.bucket)) == ["piles.zarr", "raw.zarr"]


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine's temporary directory, for the test: where the pieces of a shuffle to object storage go."""
    machine = tmp_path / "machine-tmp"
    machine.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(machine))
    return machine


@pytest.mark.slow
def test_pieces_go_to_this_machine_and_an_interrupted_run_continues_from_there(
    tmp_path: Path, s3: Any, zarr_pair: tuple[str, str], machine: Path, points: Points
) -> None:
    """For a destination on object storage the pieces go to the machine's temporary directory, not the bucket."""
    local, remote = zarr_pair
    options: dict[str, Any] = {"n_piles": 5, "seed": 3, "block_memory": "10KiB"}
    points.arm("merge", raise_at())  # every merge: Ctrl-C after pass 1
    with dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
        ds.shuffle_zarr(remote, s3.url("piles.zarr"), storage_options=s3.storage_options, **options)
    assert list(machine.rglob("*.bin")), "the pieces of pass 1 are on this machine"
    assert not [path for path in s3.fs.find(s3.bucket) if "daskshuffle-tmp" in path], "none in the bucket"
    left = _leftovers.find(Location.of(s3.url("piles.zarr"), s3.storage_options))
    assert [leftover.what for leftover in left if leftover.path.startswith(str(machine))] == ["pieces"]
    points.disarm("merge")
    scatters = points.arm("scatter")
    ds.shuffle_zarr(remote, s3.url("piles.zarr"), storage_options=s3.storage_options, **options)
    assert not scatters, "the pieces written before are read, not written again"
    ds.shuffle_zarr(local, str(tmp_path / "piles.zarr"), **options)
    _assert_same(_arrays(s3.url("piles.zarr"), s3.storage_options), _arrays(str(tmp_path / "piles.zarr")))
    assert not list(machine.rglob("*")), "nothing is left on this machine"


def test_a_refused_shuffle_leaves_nothing_on_this_machine(s3: Any, machine: Path) -> None:
    import dask.array as da

    arrays = {"x": da.arange(1_000, chunks=100)}
    ds.shuffle_zarr(arrays, s3.url("piles.zarr"), 4, seed=0, storage_options=s3.storage_options)
    again = ds.shuffle_zarr(arrays, s3.url("piles.zarr"), 4, seed=0, storage_options=s3.storage_options)
    assert again.n_tasks == 0, "the same arrays (the same dask token): the finished store, as every shuffle"
    other = {"x": da.arange(2_000, chunks=100)}
    with pytest.raises(ds.PileStoreExistsError):
        ds.shuffle_zarr(other, s3.url("piles.zarr"), 4, seed=0, storage_options=s3.storage_options)
    assert not list(machine.rglob("*"))


def test_pieces_stay_beside_the_destination_when_this_machine_has_no_room(
    s3: Any, zarr_pair: tuple[str, str], machine: Path, monkeypatch: pytest.MonkeyPatch, points: Points
) -> None:
    _, remote = zarr_pair
    no_room = shutil.disk_usage(machine)._replace(free=1_000)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: no_room)  # this machine has no room

    points.arm("merge", raise_at())  # every merge: Ctrl-C after pass 1
    with dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
        ds.shuffle_zarr(
            remote, s3.url("piles.zarr"), 5, seed=3, block_memory="10KiB", storage_options=s3.storage_options
        )
    pieces = [path for path in s3.fs.find(s3.bucket) if "piles.zarr.daskshuffle-tmp" in path and path.endswith(".bin")]
    assert pieces, "the pieces are beside the destination, in the bucket"
    assert not list(machine.rglob("*"))


def test_zarr_local_tmp_and_s3_destination(tmp_path: Path, s3: Any, zarr_pair: tuple[str, str]) -> None:
    local, remote = zarr_pair
    ds.shuffle_zarr(local, str(tmp_path / "piles.zarr"), 4, seed=1, materialize=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    ds.shuffle_zarr(
        remote, s3.url("piles.zarr"), 4, seed=1, materialize=True, tmp=str(scratch), storage_options=s3.storage_options
    )
    _assert_same(_arrays(s3.url("piles.zarr"), s3.storage_options), _arrays(str(tmp_path / "piles.zarr")))
    assert list(scratch.iterdir()) == []  # the pieces were removed, the directory named by tmp was kept


def test_loader_reads_piles_from_s3(tmp_path: Path, s3: Any, zarr_pair: tuple[str, str]) -> None:
    local, remote = zarr_pair
    ds.shuffle_zarr(local, str(tmp_path / "piles.zarr"), 6, seed=2)
    ds.shuffle_zarr(remote, s3.url("piles.zarr"), 6, seed=2, storage_options=s3.storage_options)
    on_disk = ds.PileLoader(str(tmp_path / "piles.zarr"), batch_size=128, seed=9)
    on_s3 = ds.PileLoader(
        s3.url("piles.zarr"), batch_size=128, seed=9, prefetch="64MiB", storage_options=s3.storage_options
    )
    with on_disk, on_s3:
        remote_batches = list(on_s3)
        local_batches = list(on_disk)
    assert len(remote_batches) == len(local_batches) == -(-N_ROWS // 128)
    for got, expected in zip(remote_batches, local_batches, strict=True):
        _assert_same(got, expected)
    ids = np.concatenate([batch["id"] for batch in remote_batches])
    assert np.array_equal(np.sort(ids), np.arange(N_ROWS))


def _parquet_source(path: Path) -> str:
    rng = np.random.default_rng(0)
    ids = np.arange(N_ROWS, dtype=np.int64)
    table = pa.table(
        {"id": ids, "x": rng.standard_normal(N_ROWS), "label": pa.array([f"row-{i}" for i in ids], type=pa.string())}
    )
    pq.write_table(table, path, row_group_size=400)
    return str(path)


def test_parquet_s3_to_s3_equals_local(tmp_path: Path, s3: Any) -> None:
    local = _parquet_source(tmp_path / "raw.parquet")
    remote = s3.put(local, "raw.parquet")
    options = {"n_piles": 5, "seed": 4, "block_memory": "10KiB"}
    ds.shuffle_parquet(local, str(tmp_path / "piles.parquet"), **options)
    ds.shuffle_parquet(remote, s3.url("piles.parquet"), storage_options=s3.storage_options, **options)
    _assert_same(_rows(s3.url("piles.parquet"), s3.storage_options), _rows(str(tmp_path / "piles.parquet")))
    with ds.PileLoader(s3.url("piles.parquet"), batch_size=500, seed=0, storage_options=s3.storage_options) as loader:
        assert sorted(np.concatenate([batch["id"] for batch in loader]).tolist()) == list(range(N_ROWS))


def test_missing_bucket_is_named_and_nothing_is_written(tmp_path: Path, s3: Any) -> None:
    local = make_zarr_source(tmp_path / "raw.zarr", 500)
    dst = "s3://no-such-bucket-daskshuffle/piles.zarr"
    with pytest.raises(ds.DaskShuffleError, match=r"no-such-bucket-daskshuffle.*bucket") as caught:
        ds.shuffle_zarr(local, dst, 2, seed=0, storage_options=s3.storage_options)
    assert "s3://no-such-bucket-daskshuffle/piles.zarr" in str(caught.value)
    assert not s3.fs.exists("no-such-bucket-daskshuffle")


def test_wrong_credentials_are_named_and_leave_no_store(tmp_path: Path, s3: Any) -> None:
    from s3 import storage_options

    local = make_zarr_source(tmp_path / "raw.zarr", 500)
    wrong = storage_options(s3.endpoint, key="not-a-key", secret="not-a-secret")
    s3.require_auth(True)
    try:
        with pytest.raises(ds.DaskShuffleError, match=r"credentials") as caught:
            ds.shuffle_zarr(local, s3.url("piles.zarr"), 2, seed=0, storage_options=wrong)
    finally:
        s3.require_auth(False)
    assert s3.url("piles.zarr") in str(caught.value)
    assert s3.fs.ls(s3.bucket) == []


def test_failed_s3_run_leaves_no_destination(tmp_path: Path, s3: Any, points: Points) -> None:
    local = make_zarr_source(tmp_path / "raw.zarr", 2_000, chunk_rows=100)
    points.arm("scatter", raise_at(4, RuntimeError))  # a source block that cannot be read
    with pytest.raises(RuntimeError, match="a fault at the point"):
        ds.shuffle_zarr(local, s3.url("piles.zarr"), 3, seed=0, block_memory="4KiB", storage_options=s3.storage_options)
    assert s3.fs.ls(s3.bucket, refresh=True) == []
    with pytest.raises(ds.SourceNotFoundError):
        ds.PileLoader(s3.url("piles.zarr"), batch_size=10, storage_options=s3.storage_options)


def test_lines_s3_to_s3_equal_local(tmp_path: Path, s3: Any) -> None:
    local = tmp_path / "corpus.jsonl"
    local.write_text("".join(f'{{"id": {i}}}\n' for i in range(N_ROWS)))
    remote = s3.put(str(local), "corpus.jsonl")
    ds.shuffle_lines(str(local), str(tmp_path / "out.jsonl"), 4, seed=5, block_memory="8KiB")
    ds.shuffle_lines(remote, s3.url("out.jsonl"), 4, seed=5, block_memory="8KiB", storage_options=s3.storage_options)
    assert s3.fs.cat_file(f"{s3.bucket}/out.jsonl") == (tmp_path / "out.jsonl").read_bytes()
    assert sorted(path.rsplit("/", 1)[-1] for path in s3.fs.ls(s3.bucket)) == ["corpus.jsonl", "out.jsonl"]


@pytest.mark.parametrize("compression", ["", ".gz"])
def test_lines_into_many_files_on_s3_equal_local(tmp_path: Path, s3: Any, compression: str) -> None:
    """Two piles into seven files: each merge task writes parts of several files at once, all put together at the
    end, several at a time."""
    local = tmp_path / "corpus.jsonl"
    local.write_text("".join(f'{{"id": {i}}}\n' for i in range(N_ROWS)))
    options = {"seed": 5, "block_memory": "8KiB", "n_output_files": 7}
    ds.shuffle_lines(str(local), str(tmp_path / f"out-{{}}.jsonl{compression}"), 2, **options)
    ds.shuffle_lines(
        str(local), s3.url(f"out-{{}}.jsonl{compression}"), 2, storage_options=s3.storage_options, **options
    )
    for index in range(7):
        expected = (tmp_path / f"out-{index}.jsonl{compression}").read_bytes()
        got = s3.fs.cat_file(f"{s3.bucket}/out-{index}.jsonl{compression}")
        if compression:
            expected, got = gzip.decompress(expected), gzip.decompress(got)
        assert got == expected and got.count(b"\n") in (N_ROWS // 7, N_ROWS // 7 + 1)
    assert len(s3.fs.ls(s3.bucket, refresh=True)) == 7, "the parts are gone"


@pytest.mark.slow
def test_xarray_s3_to_s3_equals_local(tmp_path: Path, s3: Any, zarr_pair: tuple[str, str]) -> None:
    local, remote = zarr_pair
    ds.shuffle_xarray(local, str(tmp_path / "piles.zarr"), dim="row", n_piles=4, seed=6)
    ds.shuffle_xarray(remote, s3.url("piles.zarr"), dim="row", n_piles=4, seed=6, storage_options=s3.storage_options)
    _assert_same(_arrays(s3.url("piles.zarr"), s3.storage_options), _arrays(str(tmp_path / "piles.zarr")))


@pytest.mark.slow
def test_a_netcdf4_file_on_s3_is_read_a_range_at_a_time_on_a_cluster(
    tmp_path: Path, s3: Any, cluster_client: Any
) -> None:
    """The worker processes open the file again from what the dataset's tasks carry: the storage_options too."""
    import xarray as xr

    data = xr.Dataset(
        {"x": (("row", "k"), np.arange(3.0 * N_ROWS).reshape(N_ROWS, 3)), "t": ("row", np.arange(N_ROWS))}
    )
    data.to_netcdf(tmp_path / "raw.nc", engine="h5netcdf", encoding={"x": {"chunksizes": (250, 3)}})
    ds.shuffle_xarray(str(tmp_path / "raw.nc"), str(tmp_path / "local.zarr"), dim="row", n_piles=4, seed=3)
    remote = s3.put(str(tmp_path / "raw.nc"), "raw.nc")
    with cluster_client.as_current():
        ds.shuffle_xarray(
            remote, str(tmp_path / "piles.zarr"), dim="row", n_piles=4, seed=3, storage_options=s3.storage_options
        )
    _assert_same(_arrays(str(tmp_path / "piles.zarr")), _arrays(str(tmp_path / "local.zarr")))
    data.to_netcdf(tmp_path / "raw3.nc", engine="scipy")  # netCDF3: read whole by the only engine that reads it
    with pytest.raises(ds.DaskShuffleValueError, match=r"raw3.nc', which it cannot open .*netCDF4 or HDF5.*local disk"):
        ds.shuffle_xarray(
            s3.put(str(tmp_path / "raw3.nc"), "raw3.nc"),
            str(tmp_path / "no.zarr"),
            dim="row",
            n_piles=4,
            storage_options=s3.storage_options,
        )


def test_a_file_on_s3_needs_h5netcdf(tmp_path: Path, s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import xarray as xr

    monkeypatch.setitem(sys.modules, "h5netcdf", None)  # not installed
    xr.Dataset({"x": ("row", np.arange(10.0))}).to_netcdf(tmp_path / "raw.nc", engine="scipy")
    remote = s3.put(str(tmp_path / "raw.nc"), "raw.nc")
    with pytest.raises(
        ImportError,
        match=r"netCDF4 or HDF5, through h5netcdf, which is not installed: pip install 'daskshuffle\[netcdf\]'",
    ):
        ds.shuffle_xarray(remote, str(tmp_path / "no.zarr"), dim="row", n_piles=2, storage_options=s3.storage_options)
    assert not (tmp_path / "no.zarr").exists()


def test_zarr_s3_to_s3_on_a_cluster(tmp_path: Path, s3: Any, zarr_pair: tuple[str, str], cluster_client: Any) -> None:
    # Worker processes reach the bucket with the storage_options the tasks carry, not this process's environment.
    local, remote = zarr_pair
    ds.shuffle_zarr(local, str(tmp_path / "piles.zarr"), 5, seed=8, block_memory="10KiB")
    with cluster_client.as_current():
        ds.shuffle_zarr(
            remote, s3.url("piles.zarr"), 5, seed=8, block_memory="10KiB", storage_options=s3.storage_options
        )
        assert ds.verify(s3.url("piles.zarr"), storage_options=s3.storage_options).n_rows == N_ROWS
    _assert_same(_arrays(s3.url("piles.zarr"), s3.storage_options), _arrays(str(tmp_path / "piles.zarr")))


@pytest.mark.slow
def test_loader_with_wrong_credentials_names_the_store(tmp_path: Path, s3: Any, zarr_pair: tuple[str, str]) -> None:
    from s3 import storage_options

    _, remote = zarr_pair
    ds.shuffle_zarr(remote, s3.url("piles.zarr"), 2, seed=0, storage_options=s3.storage_options)
    s3.require_auth(True)
    try:
        with pytest.raises(ds.StorageAccessError, match="credentials") as caught:
            ds.PileLoader(s3.url("piles.zarr"), batch_size=10, storage_options=storage_options(s3.endpoint, "no", "no"))
    finally:
        s3.require_auth(False)
    assert s3.url("piles.zarr") in str(caught.value) and isinstance(caught.value, PermissionError)


@pytest.mark.slow
def test_one_storage_options_for_local_and_s3_paths(tmp_path: Path, s3: Any, zarr_pair: tuple[str, str]) -> None:
    # A user passes the same storage_options to every call; local paths ignore them.
    local, remote = zarr_pair
    options = s3.storage_options
    ds.shuffle_zarr(remote, str(tmp_path / "from-s3.zarr"), 3, seed=0, storage_options=options)
    ds.shuffle_zarr(local, s3.url("from-local.zarr"), 3, seed=0, storage_options=options)
    _assert_same(_arrays(str(tmp_path / "from-s3.zarr")), _arrays(s3.url("from-local.zarr"), options))
    with ds.PileLoader(str(tmp_path / "from-s3.zarr"), batch_size=500, seed=0, storage_options=options) as loader:
        assert sum(len(batch["id"]) for batch in loader) == N_ROWS
    assert ds.verify(str(tmp_path / "from-s3.zarr"), remote, storage_options=options).n_rows == N_ROWS


@pytest.mark.slow
def test_a_group_the_user_opened_is_read_with_its_own_options(
    tmp_path: Path, s3: Any, zarr_pair: tuple[str, str]
) -> None:
    """No storage_options: the group's store reaches the bucket, for its reads, its identity and verify=True."""
    local, remote = zarr_pair
    ds.shuffle_zarr(local, str(tmp_path / "local.zarr"), 4, seed=0)
    group = zarr.open_group(remote, mode="r+", storage_options=s3.storage_options)
    store = group.store
    ds.shuffle_zarr(group, str(tmp_path / "piles.zarr"), 4, seed=0, verify=True)
    _assert_same(_arrays(str(tmp_path / "piles.zarr")), _arrays(str(tmp_path / "local.zarr")))
    assert group.store is store and not store.read_only, "the user's group is left as it was"
    again = ds.shuffle_zarr(group, str(tmp_path / "piles.zarr"), 4, seed=0)
    assert again.n_tasks == 0, "the source's identity is the one the store records"
    recorded = zarr.open_group(str(tmp_path / "piles.zarr"), mode="r").attrs["daskshuffle"]["source"]
    assert recorded == [remote]


def test_a_group_the_user_opened_is_checked_on_the_workers_with_its_own_options(
    tmp_path: Path, s3: Any, zarr_pair: tuple[str, str], cluster_client: Any
) -> None:
    """The workers are asked whether they reach the group as its store does, not by its URL alone (no credentials)."""
    local, remote = zarr_pair
    ds.shuffle_zarr(local, str(tmp_path / "local.zarr"), 4, seed=0)
    group = zarr.open_group(remote, mode="r", storage_options=s3.storage_options)
    with cluster_client.as_current():
        ds.shuffle_zarr(group, str(tmp_path / "piles.zarr"), 4, seed=0, verify=True)
    _assert_same(_arrays(str(tmp_path / "piles.zarr")), _arrays(str(tmp_path / "local.zarr")))


@pytest.mark.slow
def test_generations_on_s3(tmp_path: Path, s3: Any, zarr_pair: tuple[str, str]) -> None:
    # The generation list is one object, replaced whole; removed generations leave no objects behind.
    _, remote = zarr_pair
    more = s3.put(make_zarr_source(tmp_path / "more.zarr", 500, chunk_rows=100, first_id=N_ROWS), "more.zarr")
    store, options = s3.url("piles.zarr"), s3.storage_options
    ds.shuffle_zarr(remote, store, 4, seed=0, storage_options=options)
    ds.append(store, more, seed=1, storage_options=options)

    def ids() -> np.ndarray:
        with ds.PileLoader(store, batch_size=250, storage_options=options) as loader:
            return np.sort(np.concatenate([batch["id"] for batch in loader]))

    np.testing.assert_array_equal(ids(), np.arange(N_ROWS + 500))
    assert [g.n_rows for g in ds.compact(store, storage_options=options)] == [N_ROWS + 500]
    np.testing.assert_array_equal(ids(), np.arange(N_ROWS + 500))
    again = s3.put(make_zarr_source(tmp_path / "again.zarr", 500, chunk_rows=100, first_id=N_ROWS), "again.zarr")
    ds.append(store, again, seed=2, storage_options=options)
    assert [g.generation for g in ds.evict(store, keep_last=1, storage_options=options)] == [3]
    np.testing.assert_array_equal(ids(), np.arange(N_ROWS, N_ROWS + 500))
    import s3fs

    listed = s3fs.S3FileSystem(**options).find(store.removeprefix("s3://"))
    assert not [key for key in listed if "/generations/00002/" in key or "/x/" in key.split("/generations/")[0]]
