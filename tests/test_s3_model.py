"""The S3 model of the benchmarks (benchmarks/_s3_model.py): object-store behaviour, cost and counts.

Timings are checked only as lower bounds that follow from the model, and as
upper bounds with a margin of ten times that no loaded machine can miss.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import dask
import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import zarr
from conftest import make_zarr_source

import daskshuffle as ds

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import _s3_model
from _s3_model import S3ModelFileSystem

BUCKET = "bucket"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A local directory with one bucket in it."""
    root = tmp_path / "objects"
    (root / BUCKET).mkdir(parents=True)
    return root


@pytest.fixture
def options(root: Path) -> dict[str, Any]:
    """storage_options of a model without cost, for the correctness tests."""
    return {"root": str(root), "latency": 0.0, "bandwidth": 1e12}


@pytest.fixture
def fs(options: dict[str, Any]) -> S3ModelFileSystem:
    return S3ModelFileSystem(**options)


def _counts(stats: dict[str, dict[str, int]]) -> dict[str, int]:
    return {kind: n for kind, n in stats["requests"].items() if n}


# Object-store behaviour -------------------------------------------------------


def test_url_resolves_to_the_model(options: dict[str, Any]) -> None:
    fs, path = fsspec.core.url_to_fs("s3model://bucket/a/b", **options)
    assert isinstance(fs, S3ModelFileSystem)
    assert path == "bucket/a/b"
    assert fs.unstrip_protocol(path) == "s3model://bucket/a/b"
    assert fsspec.get_filesystem_class("s3model") is S3ModelFileSystem
    assert _s3_model.KINDS == ("get", "put", "list", "head", "delete", "copy")


def test_write_read_list_copy_delete(fs: S3ModelFileSystem, root: Path) -> None:
    fs.pipe_file("bucket/dir/a", b"0123456789")
    with fs.open("bucket/dir/sub/b", "wb") as file:
        file.write(b"abc")
        file.write(b"def")
    assert fs.cat_file("bucket/dir/a") == b"0123456789"
    assert fs.cat_file("bucket/dir/a", start=2, end=5) == b"234"
    assert fs.cat_file("bucket/dir/a", start=-3) == b"789"
    assert fs.cat_file("bucket/dir/a", start=8, end=100) == b"89"
    assert fs.cat_ranges(["bucket/dir/a", "bucket/dir/sub/b"], [1, 0], [3, None]) == [b"12", b"abcdef"]
    assert fs.cat(["bucket/dir/a", "bucket/dir/sub/b"]) == {
        "bucket/dir/a": b"0123456789",
        "bucket/dir/sub/b": b"abcdef",
    }
    with fs.open("bucket/dir/a", "rb") as file:
        file.seek(4)
        assert file.read(3) == b"456"
    assert fs.info("bucket/dir/a")["size"] == 10
    assert fs.info("bucket/dir")["type"] == "directory"
    assert fs.ls("", detail=False) == ["bucket"]
    assert fs.ls("bucket/dir", detail=False) == ["bucket/dir/a", "bucket/dir/sub"]
    assert [info["type"] for info in fs.ls("bucket/dir")] == ["file", "directory"]
    assert fs.find("bucket") == ["bucket/dir/a", "bucket/dir/sub/b"]
    assert fs.find("bucket", withdirs=True) == ["bucket/dir", "bucket/dir/a", "bucket/dir/sub", "bucket/dir/sub/b"]
    assert fs.find("bucket", maxdepth=2) == ["bucket/dir/a"]
    assert fs.glob("bucket/dir/*") == ["bucket/dir/a", "bucket/dir/sub"]
    fs.cp_file("bucket/dir/a", "bucket/copy/a")
    assert fs.cat_file("bucket/copy/a") == b"0123456789"
    fs.rm_file("bucket/copy/a")
    assert not fs.exists("bucket/copy/a")
    assert not fs.exists("bucket/copy")  # a prefix goes with its last object
    fs.rm("bucket/dir", recursive=True)
    assert fs.find("bucket") == []
    assert fs.exists("bucket")  # the bucket stays
    assert [path.name for path in root.iterdir()] == ["bucket"]


def test_object_store_semantics(fs: S3ModelFileSystem) -> None:
    fs.mkdir("bucket/a/b")  # prefixes are implicit
    assert not fs.exists("bucket/a")
    fs.makedirs("bucket/a/b", exist_ok=True)
    assert not fs.exists("bucket/a")
    with pytest.raises(FileNotFoundError):
        fs.pipe_file("nobucket/key", b"x")
    with pytest.raises(FileNotFoundError):
        fs.cat_file("bucket/missing")
    with pytest.raises(FileNotFoundError):
        fs.ls("bucket/missing")
    fs.pipe_file("bucket/key", b"x")
    with pytest.raises(FileExistsError):
        fs.pipe_file("bucket/key", b"y", mode="create")
    with pytest.raises(ValueError, match="cannot be appended"):
        fs.open("bucket/key", "ab")
    fs.mkdir("other")  # a path of one component is a bucket
    assert fs.ls("", detail=False) == ["bucket", "other"]
    fs.mv("bucket/key", "other/key")  # copy, then delete
    assert fs.find("") == ["other/key"]


def test_a_file_written_is_one_put(fs: S3ModelFileSystem) -> None:
    fs.reset_stats()
    with fs.open("bucket/big", "wb", block_size=5 * 2**20) as file:
        for _ in range(4):
            file.write(b"x" * 2**21)
        # Nothing is visible before the file is closed: an object appears whole.
        assert not fs.exists("bucket/big")
    stats = fs.stats()
    assert stats["requests"]["put"] == 1
    assert stats["bytes"]["put"] == 2**23
    assert fs.size("bucket/big") == 2**23


def test_a_missing_root_is_named(options: dict[str, Any]) -> None:
    fs = S3ModelFileSystem(latency=0.0)
    with pytest.raises(ValueError, match="root"):
        fs.cat_file("bucket/a")
    with pytest.raises(ValueError, match="latency"):
        S3ModelFileSystem(root=options["root"], latency=-1)


def test_zarr_group_round_trip(options: dict[str, Any]) -> None:
    url = "s3model://bucket/group.zarr"
    group = zarr.open_group(url, mode="w", zarr_format=3, storage_options=options)
    x = np.arange(1_000, dtype=np.float32).reshape(250, 4)
    group.create_array("x", shape=x.shape, chunks=(64, 4), dtype=x.dtype)[...] = x
    group.attrs["title"] = "model"
    again = zarr.open_group(url, mode="r", storage_options=options)
    assert again.attrs["title"] == "model"
    np.testing.assert_array_equal(again["x"][...], x)
    np.testing.assert_array_equal(again["x"][10:20, 1:3], x[10:20, 1:3])


def test_parquet_round_trip(fs: S3ModelFileSystem) -> None:
    filesystem = pafs.PyFileSystem(pafs.FSSpecHandler(fs))
    table = pa.table({"id": np.arange(1_000), "x": np.linspace(0, 1, 1_000)})
    pq.write_table(table, "bucket/t/part.parquet", filesystem=filesystem, row_group_size=100)
    assert pq.read_table("bucket/t/part.parquet", filesystem=filesystem).equals(table)
    assert pq.read_table("bucket/t", filesystem=filesystem).equals(table)


# The model has no conditional writes (If-None-Match), so the shuffle's lock says it cannot exclude two runs.
@pytest.mark.filterwarnings("ignore:S3ModelFileSystem offers no conditional write:UserWarning")
def test_shuffle_zarr_and_loader_epoch(tmp_path: Path, options: dict[str, Any]) -> None:
    n_rows = 2_000
    source = make_zarr_source(tmp_path / "raw.zarr", n_rows, chunk_rows=250)
    dst = "s3model://bucket/piles.zarr"
    with dask.config.set(scheduler="threads"):
        result = ds.shuffle_zarr(source, dst, 5, seed=1, block_memory="20KiB", storage_options=options)
        ds.shuffle_zarr(source, str(tmp_path / "piles.zarr"), 5, seed=1, block_memory="20KiB")
    assert result.n_rows == n_rows
    remote = zarr.open_group(dst, mode="r", storage_options=options)
    local = zarr.open_group(str(tmp_path / "piles.zarr"), mode="r")
    np.testing.assert_array_equal(remote["id"][...], local["id"][...])
    ids = []
    with ds.PileLoader(dst, batch_size=128, seed=0, storage_options=options) as loader:
        for batch in loader:
            np.testing.assert_array_equal(batch["x"][:, 0], batch["id"])
            ids.append(batch["id"])
    np.testing.assert_array_equal(np.sort(np.concatenate(ids)), np.arange(n_rows))


def test_shuffle_into_a_missing_bucket_is_refused(tmp_path: Path, options: dict[str, Any]) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 100)
    with pytest.raises(FileNotFoundError, match="bucket"):
        ds.shuffle_zarr(source, "s3model://nobucket/piles.zarr", 2, storage_options=options)


# Counts -------------------------------------------------------------------------


def test_request_counts(fs: S3ModelFileSystem, root: Path) -> None:
    fs.reset_stats()
    fs.pipe_file("bucket/a", b"0123456789")  # put 10 bytes
    fs.cat_file("bucket/a")  # get 10
    fs.cat_file("bucket/a", start=2, end=5)  # get 3
    fs.cat_ranges(["bucket/a", "bucket/a"], [0, 5], [1, 7])  # 2 gets, 3 bytes
    fs.info("bucket/a")  # head
    fs.exists("bucket/b")  # head
    fs.ls("bucket")  # list
    fs.find("bucket")  # list
    fs.cp_file("bucket/a", "bucket/b")  # copy, no bytes on the client's link
    fs.rm_file("bucket/b")  # delete
    assert fs.stats() == {
        "requests": {"get": 4, "put": 1, "list": 2, "head": 2, "delete": 1, "copy": 1},
        "bytes": {"get": 16, "put": 10, "list": 0, "head": 0, "delete": 0, "copy": 0},
    }
    # The counts are the class's: every instance adds to them, and any resets them.
    other = S3ModelFileSystem(root=str(root), latency=0.0, bandwidth=2e12)
    assert other is not fs
    other.cat_file("bucket/a")
    assert fs.stats()["requests"]["get"] == 5
    other.reset_stats()
    assert _counts(fs.stats()) == {}


@pytest.mark.slow
def test_listing_and_bulk_delete_are_paged(fs: S3ModelFileSystem) -> None:
    fs.pipe({f"bucket/p/{i:05d}": b"" for i in range(2_500)})
    fs.reset_stats()
    assert len(fs.find("bucket/p")) == 2_500
    assert _counts(fs.stats()) == {"list": 3}
    fs.reset_stats()
    fs.rm("bucket/p", recursive=True)
    # One listing (3 pages), a head for the prefix itself, three DeleteObjects of up to 1,000 keys.
    assert _counts(fs.stats()) == {"list": 3, "head": 1, "delete": 3}
    assert fs.find("bucket") == []


# Cost -----------------------------------------------------------------------


@pytest.fixture
def slow(root: Path) -> dict[str, Any]:
    """20 objects of 100 kB in the bucket, written to disk directly (no requests)."""
    for i in range(20):
        (root / BUCKET / f"{i:02d}").write_bytes(b"x" * 100_000)
    return {"root": str(root), "bandwidth": 10e6}


def _timed(call: Any) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def test_a_request_takes_latency_plus_size_over_bandwidth(slow: dict[str, Any]) -> None:
    fs = S3ModelFileSystem(**slow, latency=0.05)
    nbytes = 500_000
    least = 0.05 + nbytes / 10e6
    assert _timed(lambda: fs.pipe_file("bucket/big", b"y" * nbytes)) >= least
    assert _timed(lambda: fs.cat_file("bucket/big")) >= least
    assert _timed(lambda: fs.cat_file("bucket/big", start=0, end=100_000)) >= 0.05 + 100_000 / 10e6
    assert _timed(lambda: fs.info("bucket/big")) >= 0.05
    assert _timed(lambda: fs.ls("bucket")) >= 0.05
    with fs.open("bucket/big", "rb", block_size=nbytes) as file:
        assert _timed(lambda: file.read()) >= least


def test_requests_run_concurrently(slow: dict[str, Any]) -> None:
    # 20 requests of 0.5 s one after another would take 10 s: at once, a little over 0.5 s (bound 5 s, for a busy CI).
    fs = S3ModelFileSystem(**slow, latency=0.5)
    paths = [f"bucket/{i:02d}" for i in range(20)]
    elapsed = _timed(lambda: fs.cat(paths))
    assert 0.5 + 100_000 / 10e6 <= elapsed < 10 * 0.5


@pytest.mark.slow
def test_max_in_flight_serializes_requests(slow: dict[str, Any]) -> None:
    fs = S3ModelFileSystem(**slow, latency=0.1, max_in_flight=1)
    paths = [f"bucket/{i:02d}" for i in range(20)]
    assert _timed(lambda: fs.cat(paths)) >= 20 * (0.1 + 100_000 / 10e6)


def test_total_bandwidth_is_shared(slow: dict[str, Any]) -> None:
    # 20 requests of 100 kB over a 4 MB/s link: 0.5 s at least, though each alone would take 10 ms.
    fs = S3ModelFileSystem(**slow, latency=0.0, total_bandwidth=4e6)
    paths = [f"bucket/{i:02d}" for i in range(20)]
    assert _timed(lambda: fs.cat(paths)) >= 20 * 100_000 / 4e6


@pytest.mark.slow
def test_a_zarr_pile_store_opens_in_two_round_trips(tmp_path: Path, root: Path, options: dict[str, Any]) -> None:
    """The group's metadata, then its arrays' zarr.json and crc32c tables at once: 2 latencies, not 3."""
    source = make_zarr_source(tmp_path / "raw.zarr", 400, chunk_rows=100)
    with dask.config.set(scheduler="threads"):
        ds.shuffle_zarr(source, "s3model://bucket/piles.zarr", 2, seed=1, storage_options=options)
    latency = 1.0  # the bound below is 2.8 s: a busy CI's delays are small beside it
    slow = {**options, "latency": latency}
    began = time.perf_counter()
    with ds.PileLoader("s3model://bucket/piles.zarr", batch_size=100, storage_options=slow) as loader:
        opened = time.perf_counter() - began
        assert sum(len(batch["id"]) for batch in loader) == 400
    assert 2 * latency <= opened < 2.8 * latency, f"opened in {opened:.2f} s at {latency} s a round trip"
