"""The loader's local cache of a remote pile store (storage/_cache.py), on the S3 model of the benchmarks."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from simulate import unit_groups

import daskshuffle as ds
from daskshuffle.epochs import unit_bounds
from daskshuffle.epochs._epoch_plan import rank_range
from daskshuffle.orders import Piles
from daskshuffle.pilestore import read_metadata
from daskshuffle.storage._cache import MARKER, SCAN_FRACTION, StoreCache

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _s3_model import S3ModelFileSystem

BUCKET = "cache"


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any], str]:
    """A pile store of 200,000 rows in 24 piles, on local disk and in a bucket of the model (no latency)."""
    work = tmp_path_factory.mktemp("cache")
    group = zarr.open_group(work / "raw.zarr", mode="w")
    group.create_array("x", data=np.arange(200_000 * 8, dtype="f4").reshape(200_000, 8), chunks=(10_000, 8))
    group.create_array("id", data=np.arange(200_000), chunks=(10_000,))
    ds.shuffle_zarr(str(work / "raw.zarr"), str(work / "piles.zarr"), n_piles=24, seed=5)
    shutil.copytree(work / "piles.zarr", work / "objects" / BUCKET / "piles.zarr")
    options = {"root": str(work / "objects"), "latency": 0.0, "bandwidth": 1e12}
    return f"s3model://{BUCKET}/piles.zarr", options, str(work / "piles.zarr")


def chunk_files(store: str) -> list[Path]:
    return [path for path in Path(store).rglob("*") if path.is_file() and "/c/" in path.as_posix()]


def cached_files(directory: Path) -> list[Path]:
    """The files a cache holds in ``directory``: not its mark, nor (unless asked) files being written."""
    return sorted(path for path in directory.rglob("*") if path.is_file() and path.name != MARKER)


def chunk_gets(options: dict[str, Any]) -> int:
    return int(S3ModelFileSystem(**options).stats()["requests"]["get"])


def epoch_ids(store: str, options: dict[str, Any] | None, **kwargs: Any) -> list[np.ndarray]:
    with ds.PileLoader(store, batch_size=2_000, seed=2, storage_options=options, **kwargs) as loader:
        return [batch["id"] for batch in loader]


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


#: Gets of an epoch of a Parquet store that are not data: the look for a Zarr group's zarr.json (not there), the
#: store's sidecar and a footer.
PARQUET_METADATA_GETS = 3


@pytest.mark.parametrize(
    ("store", "metadata_gets"), [("remote", 9), ("remote_parquet", PARQUET_METADATA_GETS)], ids=["zarr", "parquet"]
)
def test_later_epochs_read_the_cache_not_the_store(
    store: str, metadata_gets: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The first epoch fetches every data file (a Zarr store's chunks, a Parquet store's column chunks in each part
    file); the next reads them from the cache, fetching only the metadata."""
    url, options, local = request.getfixturevalue(store)
    expected = epoch_ids(local, None)
    fs = S3ModelFileSystem(**options)
    fs.reset_stats()
    assert same(epoch_ids(url, options, cache=tmp_path / "c"), expected)
    data_files = chunk_files(local) or list(Path(local).glob("*.parquet"))
    assert chunk_gets(options) >= len(data_files) > 0  # every data file fetched once at least
    fs.reset_stats()
    assert same(epoch_ids(url, options, cache=ds.Cache(tmp_path / "c")), expected)
    assert chunk_gets(options) <= metadata_gets


def test_a_damaged_cached_file_is_fetched_again(remote: Any, tmp_path: Path) -> None:
    url, options, local = remote
    expected = epoch_ids(local, None)
    epoch_ids(url, options, cache=tmp_path / "c")
    cached = cached_files(tmp_path / "c")
    for path in cached[::3]:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    cached[1].write_bytes(b"")  # truncated
    fs = S3ModelFileSystem(**options)
    fs.reset_stats()
    assert same(epoch_ids(url, options, cache=tmp_path / "c", prefetch="0B"), expected)
    refetched = chunk_gets(options)
    assert len(cached[::3]) <= refetched < len(cached[::3]) + 10
    assert same(epoch_ids(url, options, cache=tmp_path / "c"), expected)  # and put right in the cache


def test_cached_files_removed_behind_a_loaders_back_are_fetched_again(remote: Any, tmp_path: Path) -> None:
    """The loader knows what its cache holds without looking; a file gone since is fetched when it is read."""
    url, options, local = remote
    with ds.PileLoader(local, batch_size=2_000, seed=2) as loader:
        expected = [[batch["id"] for batch in loader] for _ in range(2)]
    fs = S3ModelFileSystem(**options)
    # No reads ahead: none can fetch, or cache again, a file while the test removes it.
    with ds.PileLoader(
        url, batch_size=2_000, seed=2, storage_options=options, cache=tmp_path / "c", prefetch="0B"
    ) as loader:
        assert same([batch["id"] for batch in loader], expected[0])
        cached = cached_files(tmp_path / "c")
        assert len(cached) == len(chunk_files(local))
        for path in cached:
            path.unlink()
        fs.reset_stats()
        assert same([batch["id"] for batch in loader], expected[1])
        assert chunk_gets(options) == len(cached)  # each once, then cached again
    held = cached_files(tmp_path / "c")
    assert len(held) == len(chunk_files(local))  # every chunk file cached again, whole


def test_opening_a_remote_store_costs_three_requests_and_one_a_variable(remote: Any) -> None:
    """The group's metadata, which is also the look for the kind of store, then its arrays' metadata, at once,
    then the crc32c table of each variable's chunks, at once."""
    url, options, _ = remote
    fs = S3ModelFileSystem(**options)
    fs.reset_stats()
    with ds.PileLoader(url, batch_size=2_000, seed=2, storage_options=options):
        pass
    assert {kind: n for kind, n in fs.stats()["requests"].items() if n} == {"get": 3 + 2}


def test_the_cache_holds_to_its_limit(remote: Any, tmp_path: Path) -> None:
    url, options, local = remote
    store_nbytes = sum(path.stat().st_size for path in chunk_files(local))
    limit = store_nbytes // 3
    cache = ds.Cache(tmp_path / "c", max_size=limit)
    assert same(epoch_ids(url, options, cache=cache), epoch_ids(local, None))
    held = sum(path.stat().st_size for path in cached_files(tmp_path / "c"))
    # The cache looks at its whole size each time it wrote a twentieth of its limit: within that of the limit.
    assert 0 < held <= limit * (1 + SCAN_FRACTION)


def test_two_loaders_share_one_cache(remote: Any, tmp_path: Path) -> None:
    url, options, local = remote
    expected = epoch_ids(local, None)
    results: list[list[np.ndarray]] = []
    barrier = threading.Barrier(2)

    def read() -> None:
        barrier.wait()
        results.append(epoch_ids(url, options, cache=ds.Cache(tmp_path / "c", max_size="2MiB")))

    threads = [threading.Thread(target=read) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == 2 and all(same(result, expected) for result in results)


def _chunks_of(store: str, runs: list[tuple[int, int]]) -> set[tuple[str, int]]:
    """The chunk files (variable, chunk index) that hold rows of ``runs`` of ``store``."""
    group = zarr.open_group(store, mode="r")
    found = set()
    for name in ("x", "id"):
        chunk_rows = group[name].chunks[0]
        for first, last in runs:
            found |= {(name, index) for index in range(first // chunk_rows, (last - 1) // chunk_rows + 1)}
    return found


def test_a_rank_reading_units_caches_only_the_chunks_of_its_groups(remote: Any, tmp_path: Path) -> None:
    """Of a store whose piles are stored shuffled: exactly the chunk files of the units of the groups it has rows of."""
    url, options, local = remote
    order = Piles(budget="2MiB")
    epoch_ids(url, options, cache=tmp_path / "c", rank=0, world_size=4, prefetch="0B", order=order)
    cached = len(cached_files(tmp_path / "c"))
    with ds.PileLoader(local, batch_size=2_000, seed=2, rank=0, world_size=4, order=order) as loader:
        unit_rows, group_rows = loader.settings.unit_rows, loader.settings.group_rows
    assert unit_rows is not None and group_rows is not None
    # From the plan alone: the groups of epoch 0 that rank 0's positions of the stream fall in, and their units.
    bounds = unit_bounds(200_000, unit_rows)
    offsets, groups = unit_groups(bounds, group_rows, 2, 0)
    start, stop = rank_range(200_000, 4, 0, 2_000, False)
    read = [g for g in range(len(groups)) if offsets[g] < stop and start < offsets[g + 1]]
    assert 1 < len(read) < len(groups) - 1, "a rank reads several groups, not all"
    runs = [(int(bounds[u]), int(bounds[u + 1])) for g in read for u in groups[g].tolist()]
    expected = _chunks_of(local, runs)
    assert cached == len(expected) < len(chunk_files(local))


def test_a_local_store_is_not_cached(remote: Any, tmp_path: Path) -> None:
    _, _, local = remote
    with pytest.warns(UserWarning, match="the cache does nothing"):
        epoch_ids(local, None, cache=tmp_path / "c")
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").rglob("*"))


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (5, ds.DaskShuffleTypeError, "Expected cache to be a local directory"),
        ("s3://bucket/cache", ds.DaskShuffleValueError, "directory on a local disk"),
    ],
)
def test_a_cache_that_cannot_be_is_refused(remote: Any, value: Any, error: type, match: str) -> None:
    url, options, _ = remote
    with pytest.raises(error, match=match):
        ds.PileLoader(url, batch_size=100, cache=value, storage_options=options)


def test_a_cache_size_that_is_not_a_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ds.DaskShuffleValueError, match="max_size"):
        ds.Cache(tmp_path, max_size="lots")


# -- a Parquet pile store: its byte ranges are cached ----------------------------------------------
@pytest.fixture(scope="module")
def remote_parquet(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any], str]:
    """A Parquet pile store of 20,000 rows in 12 piles, on local disk and in a bucket of the model (no latency)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    work = tmp_path_factory.mktemp("cache-parquet")
    ids = np.arange(20_000)
    x = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(20_000 * 4, dtype="f4")), 4)
    (work / "raw.parquet").mkdir()
    pq.write_table(pa.table({"id": ids, "x": x}), work / "raw.parquet" / "part-0.parquet", row_group_size=2_000)
    ds.shuffle_parquet(str(work / "raw.parquet"), str(work / "piles.parquet"), n_piles=12, seed=5)
    shutil.copytree(work / "piles.parquet", work / "objects" / BUCKET / "piles.parquet")
    options = {"root": str(work / "objects"), "latency": 0.0, "bandwidth": 1e12}
    return f"s3model://{BUCKET}/piles.parquet", options, str(work / "piles.parquet")


def test_a_damaged_cached_parquet_range_is_read_again(remote_parquet: Any, tmp_path: Path) -> None:
    """A cached range that fails its page checksums is evicted and its rows read from the store; it is fetched and
    cached again when it is next read."""
    url, options, local = remote_parquet
    expected = epoch_ids(local, None)
    epoch_ids(url, options, cache=tmp_path / "c")
    damaged = {}
    for path in cached_files(tmp_path / "c"):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        damaged[path] = bytes(data)
    assert same(epoch_ids(url, options, cache=tmp_path / "c"), expected)
    left = [path for path in damaged if path.exists() and path.read_bytes() == damaged[path]]
    assert not left, "every damaged range evicted (or cached again, whole, by a later read of it)"
    # Fetched again, by the epoch that found the damage (a group of units reads through the cache) or the next.
    assert same(epoch_ids(url, options, cache=tmp_path / "c"), expected)
    fs = S3ModelFileSystem(**options)
    fs.reset_stats()
    assert same(epoch_ids(url, options, cache=tmp_path / "c"), expected)
    assert chunk_gets(options) <= PARQUET_METADATA_GETS  # and cached again


# -- the cache owns its directory, and only that ---------------------------------------------------
def test_a_directory_holding_a_users_files_is_refused_and_its_files_kept(remote: Any, tmp_path: Path) -> None:
    """Trimming removes only what the cache wrote: a directory of the user's is never the cache's."""
    url, options, local = remote
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    notes = home / "project" / "notes.txt"
    notes.write_bytes(b"a user's notes\n" * 1_000)
    os.utime(notes, (0, 0))  # read longest ago of all: the first a cache that counted it would remove
    limit = sum(path.stat().st_size for path in chunk_files(local)) // 3
    with contextlib.suppress(ds.DaskShuffleValueError):
        epoch_ids(url, options, cache=ds.Cache(home, max_size=limit))
    assert notes.read_bytes() == b"a user's notes\n" * 1_000
    assert sorted(path.name for path in home.rglob("*")) == ["notes.txt", "project"], "nothing written there"
    with pytest.raises(ds.DaskShuffleValueError, match=r"holds 1 entry a cache did not make \('project'\).*or empty"):
        ds.Cache(home)


@pytest.mark.parametrize("where", ["a file", "below a file"])
def test_a_cache_directory_that_cannot_be_one_is_refused_when_made(tmp_path: Path, where: str) -> None:
    file = tmp_path / "notes.txt"
    file.write_bytes(b"notes")
    directory = file if where == "a file" else file / "cache"
    with pytest.raises(ds.DaskShuffleValueError, match=f"Expected cache to be a directory.*{where}") as raised:
        ds.Cache(directory)
    assert raised.value.parameter == "cache"
    assert file.read_bytes() == b"notes"


def test_a_cache_is_marked_its_own_and_opened_again(remote: Any, tmp_path: Path) -> None:
    url, options, local = remote
    expected = epoch_ids(local, None)
    assert same(epoch_ids(url, options, cache=tmp_path / "c"), expected)
    assert (tmp_path / "c" / MARKER).is_file()
    entries = {path.name for path in (tmp_path / "c").iterdir()}
    assert len(entries) == 2 and MARKER in entries, "the mark and one directory of the store's"
    assert same(epoch_ids(url, options, cache=ds.Cache(tmp_path / "c")), expected)


def test_a_file_left_being_written_long_ago_is_removed_and_a_recent_one_kept(remote: Any, tmp_path: Path) -> None:
    """A loader killed while it wrote leaves a ``.partial-`` file: the cache's own name, removed once it is old."""
    url, options, local = remote
    epoch_ids(url, options, cache=tmp_path / "c")
    (store,) = [path for path in (tmp_path / "c").iterdir() if path.is_dir()]
    old, recent = store / (".partial-" + "a" * 32), store / (".partial-" + "b" * 32)
    old.write_bytes(b"x" * 100)
    recent.write_bytes(b"x" * 100)
    os.utime(old, (0, 0))
    StoreCache(ds.Cache(tmp_path / "c", max_size=10**9), str(read_metadata(local)["fingerprint"])).trim()
    assert not old.exists() and recent.exists()


def test_a_cache_unpickled_where_its_directory_cannot_be_used_warns_and_reads_without(tmp_path: Path) -> None:
    """A DataLoader worker unpickles the loader's cache: if its directory is gone for a file, it reads without one."""
    import pickle

    cache = StoreCache(ds.Cache(tmp_path / "cache"), "fingerprint")
    cache.write("s3://cache/piles.zarr/x/c/0", b"bytes")
    shipped = pickle.dumps(cache)
    shutil.rmtree(tmp_path / "cache")
    (tmp_path / "cache").write_bytes(b"a file now")

    with pytest.warns(UserWarning, match="The cache is not used: Expected cache to be a directory"):
        unpickled = pickle.loads(shipped)
    assert not unpickled.holds("s3://cache/piles.zarr/x/c/0")
    assert unpickled.read("s3://cache/piles.zarr/x/c/0", 5) is None
    unpickled.write("s3://cache/piles.zarr/x/c/0", b"bytes")  # keeps nothing, raises nothing
    unpickled.trim()
    assert (tmp_path / "cache").read_bytes() == b"a file now"
