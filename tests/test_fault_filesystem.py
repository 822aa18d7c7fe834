"""A filesystem that fails as object storage fails, under the loader: errors, throttling, stalls,
truncated, missing and wrong objects. Each fault ends in a daskshuffle error that names it, or in the
right rows; never in wrong rows.

``faulty://`` is an in-memory fsspec filesystem whose reads of the files a test names fail in one way.
A pile store is written locally and copied into it, so the loader reads it as a remote store: chunk
files fetched ahead, many at once, through :class:`~daskshuffle.storage.Fetches`.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import numpy as np
import pytest
import zarr
from fsspec.implementations.memory import MemoryFileSystem

import daskshuffle as ds

N_ROWS = 12_000
N_PILES = 6


class FaultyFileSystem(MemoryFileSystem):
    """Memory storage whose reads of paths containing a pattern fail as :attr:`faults` says."""

    protocol = "faulty"
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    #: (pattern, fault) pairs; a read of a path containing the pattern meets the fault.
    faults: ClassVar[list[tuple[str, Callable[[str, bytes], bytes]]]] = []
    lock = threading.Lock()

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        data = super().cat_file(path, start, end, **kwargs)
        for pattern, fault in list(self.faults):
            if pattern in path:
                return fault(path, data)
        return data


def _raise(error: BaseException) -> Callable[[str, bytes], bytes]:
    def fault(path: str, data: bytes) -> bytes:
        raise error

    return fault


def _stall(seconds: float) -> Callable[[str, bytes], bytes]:
    def fault(path: str, data: bytes) -> bytes:
        time.sleep(seconds)
        return data

    return fault


def _truncate(path: str, data: bytes) -> bytes:
    return data[: len(data) // 2]


class SlowDown(OSError):
    """What a client library raises for S3's 503 SlowDown, after its retries: recognised by its code."""

    def __init__(self) -> None:
        super().__init__(
            "An error occurred (SlowDown) when calling the GetObject operation: Please reduce your request rate."
        )
        self.response = {"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}}


@pytest.fixture(scope="module")
def local_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("faulty")
    group = zarr.open_group(tmp / "raw.zarr", mode="w", zarr_format=3)
    group.create_array("x", data=np.arange(N_ROWS * 8, dtype="f4").reshape(N_ROWS, 8), chunks=(1_000, 8))
    group.create_array("id", data=np.arange(N_ROWS), chunks=(1_000,))
    ds.shuffle_zarr(tmp / "raw.zarr", tmp / "piles.zarr", n_piles=N_PILES, seed=5, chunk_rows=250)
    return tmp / "piles.zarr"


@pytest.fixture
def faulty_store(local_store: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    fsspec.register_implementation("faulty", FaultyFileSystem, clobber=True)
    url = f"faulty://{request.node.name.replace('[', '-').replace(']', '')}/piles.zarr"
    fs = fsspec.filesystem("faulty")
    fs.put(str(local_store), url, recursive=True)
    FaultyFileSystem.faults = []
    yield url
    FaultyFileSystem.faults = []
    fs.rm(url, recursive=True)


def _chunks(fs: Any, url: str, variable: str) -> list[str]:
    return sorted(path for path in fs.find(f"{url}/{variable}") if "/c/" in path)


def _ids(store: str, **options: Any) -> np.ndarray:
    with ds.PileLoader(store, batch_size=500, seed=1, **options) as loader:
        return np.concatenate([batch["id"] for batch in loader])


def test_a_store_without_faults_reads_every_row_once(faulty_store: str) -> None:
    assert np.array_equal(np.sort(_ids(faulty_store)), np.arange(N_ROWS))


@pytest.mark.parametrize(
    ("fault", "expected", "words"),
    [
        (_raise(OSError(errno.ETIMEDOUT, "Read timed out")), ds.StorageAccessError, "no answer.*nothing is damaged"),
        (
            _raise(ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")),
            ds.StorageAccessError,
            "no answer.*nothing is damaged",
        ),
        (_raise(SlowDown()), ds.StorageAccessError, "throttl"),
        (_raise(FileNotFoundError(errno.ENOENT, "No such key")), ds.CorruptPileStoreError, "missing|not found|no such"),
        (_truncate, ds.CorruptPileStoreError, "truncated|size|bytes"),
    ],
    ids=["timeout", "connection-reset", "throttled", "missing", "truncated"],
)
@pytest.mark.parametrize("variable", ["x", "id"])
def test_a_chunk_that_storage_does_not_serve_whole_is_an_error_that_names_it(
    faulty_store: str, fault: Callable[[str, bytes], bytes], expected: type[Exception], words: str, variable: str
) -> None:
    fs = fsspec.filesystem("faulty")
    chunk = _chunks(fs, faulty_store, variable)[3]
    FaultyFileSystem.faults = [(chunk, fault)]
    with pytest.raises(expected, match=f"(?i){words}") as raised:
        _ids(faulty_store)
    assert not isinstance(raised.value, ds.StorageAccessError) or expected is ds.StorageAccessError
    assert "faulty://" in str(raised.value) or chunk.rsplit("/", 1)[-1] in str(raised.value)


def test_a_chunk_of_another_place_served_for_this_one_is_never_read_as_rows(faulty_store: str) -> None:
    """Storage serving the bytes of another chunk of the same variable (same size, intact checksum)."""
    fs = fsspec.filesystem("faulty")
    chunks = _chunks(fs, faulty_store, "id")
    sizes: dict[int, list[str]] = {}
    for path in chunks:
        sizes.setdefault(fs.size(path), []).append(path)
    first, other = next(paths for paths in sizes.values() if len(paths) > 1)[:2]
    wrong = fs.cat_file(other)
    FaultyFileSystem.faults = [(first, lambda path, data: wrong)]
    with pytest.raises((ds.CorruptPileStoreError, ds.StoreChangedError)):
        _ids(faulty_store)


def test_stalled_reads_end_with_the_right_rows(faulty_store: str) -> None:
    """Every chunk of x stalls a little (many requests in flight wait at once): rows are late, never wrong."""
    FaultyFileSystem.faults = [("/x/c/", _stall(0.01))]
    started = time.perf_counter()
    assert np.array_equal(np.sort(_ids(faulty_store, prefetch="1MiB")), np.arange(N_ROWS))
    assert time.perf_counter() - started < 60


def _loader_threads() -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith("daskshuffle-loader")]


def test_a_loader_closed_during_stalled_reads_returns_promptly_and_leaves_no_thread(faulty_store: str) -> None:
    FaultyFileSystem.faults = [("/x/c/", _stall(0.05))]
    loader = ds.PileLoader(faulty_store, batch_size=500, seed=1, order=ds.orders.Piles(budget="64KiB"))
    batches = iter(loader)
    next(batches)
    started = time.perf_counter()
    loader.close()
    closed = time.perf_counter() - started
    while _loader_threads() and time.perf_counter() - started < 30:
        time.sleep(0.05)
    assert closed < 5 and _loader_threads() == []


def test_a_fault_that_passes_is_not_remembered(faulty_store: str) -> None:
    """A read that failed (throttled) and is tried again by a new loader reads every row."""
    fs = fsspec.filesystem("faulty")
    FaultyFileSystem.faults = [(_chunks(fs, faulty_store, "x")[0], _raise(SlowDown()))]
    with pytest.raises(ds.StorageAccessError):
        _ids(faulty_store)
    FaultyFileSystem.faults = []
    assert np.array_equal(np.sort(_ids(faulty_store)), np.arange(N_ROWS))
