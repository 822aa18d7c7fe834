"""Files fetched ahead of their reads (storage/_fetch.py), and the loader's read-ahead on a remote store."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
import traceback
import warnings
from concurrent.futures import Future
from typing import Any, ClassVar

import fsspec
import numpy as np
import pytest
from conftest import Configure
from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.memory import MemoryFileSystem

import daskshuffle as ds
from daskshuffle.loader._epoch_reads import Read
from daskshuffle.orders import Piles
from daskshuffle.storage._fetch import Fetches


class CountingFS(MemoryFileSystem):
    """An in-memory filesystem that counts reads of each file and may hold them until released."""

    protocol = "countingmem"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: dict[str, int] = {}
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
        with self.lock:
            self.reads[path] = self.reads.get(path, 0) + 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            assert self.gate.wait(10)
            return bytes(super().cat_file(path, start, end, **kwargs))
        finally:
            with self.lock:
                self.in_flight -= 1


class AsyncCountingFS(AsyncFileSystem):
    """:class:`CountingFS` as an asynchronous filesystem (as s3fs, gcsfs, adlfs): requests are coroutines on its loop."""

    protocol = "asynccountingmem"
    files: ClassVar[dict[str, bytes]] = {}  # shared by every instance, as MemoryFileSystem's: a pickled copy reads them

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: dict[str, int] = {}
        self.gate = threading.Event()
        self.gate.set()
        self.in_flight = 0
        self.most_in_flight = 0

    async def _pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:
        self.files[path] = bytes(value)

    async def _cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
        self.reads[path] = self.reads.get(path, 0) + 1  # on the loop's one thread: no lock
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            for _ in range(10_000):
                if self.gate.is_set():
                    break
                await asyncio.sleep(0.001)
            if path not in self.files:
                raise FileNotFoundError(path)
            return self.files[path][start:end]
        finally:
            self.in_flight -= 1


@pytest.fixture(params=["threads", "event loop"])
def fs(request: pytest.FixtureRequest) -> CountingFS | AsyncCountingFS:
    """Six small files, on a filesystem read by a pool of threads, and on one with an event loop of its own."""
    fs: CountingFS | AsyncCountingFS
    if request.param == "threads":
        fs = CountingFS(skip_instance_cache=True)
        fs.store.clear()
        fs.pseudo_dirs.clear()
    else:
        fs = AsyncCountingFS(skip_instance_cache=True)
        fs.files.clear()
    for name in "abcdef":
        fs.pipe_file(f"/files/{name}", name.encode() * 3)
    return fs


def test_a_file_two_reads_need_is_fetched_once_and_kept_until_both_took_it(fs: CountingFS | AsyncCountingFS) -> None:
    fetches = Fetches(fs)
    assert fetches.start("one", ["/files/a", "/files/b"], nbytes=6)
    assert fetches.start("two", ["/files/b", "/files/c"], nbytes=6)
    assert not fetches.start("two", ["/files/b"], nbytes=6)  # under way already
    assert fetches.nbytes == 12
    assert [fetches.take("one", path).result() for path in ("/files/a", "/files/b")] == [b"aaa", b"bbb"]  # type: ignore[union-attr]
    assert fetches.nbytes == 6
    assert fetches.take("two", "/files/b").result() == b"bbb"  # type: ignore[union-attr]
    assert fetches.take("two", "/files/b") is None  # handed over once
    assert fetches.take("three", "/files/a") is None  # never started
    assert fetches.take("two", "/files/c").result() == b"ccc"  # type: ignore[union-attr]
    assert fetches.nbytes == 0
    assert fs.reads == {"/files/a": 1, "/files/b": 1, "/files/c": 1}
    fetches.clear()


def test_a_kept_file_serves_a_later_read_without_a_request(fs: CountingFS | AsyncCountingFS) -> None:
    """Within the limit of kept bytes, the oldest going past it; a file larger than the limit is not kept."""
    fetches = Fetches(fs, kept=7)
    paths = ["/files/a", "/files/b", "/files/c"]
    assert fetches.start("landing", paths, nbytes=9) and fetches.start("one", paths, nbytes=9)
    for path in paths:  # landed before it is kept, so counted at once
        assert fetches.take("landing", path).result(timeout=10) == fetches.take("one", path, keep=True).result()  # type: ignore[union-attr]
    assert fetches.kept_nbytes == 6  # past the limit of 7 bytes: the oldest, a, went
    assert fetches.start("two", ["/files/a", "/files/b"], nbytes=6)
    assert fetches.take("two", "/files/b").result(timeout=10) == b"bbb"  # type: ignore[union-attr]
    assert fetches.take("two", "/files/a").result(timeout=10) == b"aaa"  # type: ignore[union-attr]
    assert fetches.take("three", "/files/c").result(timeout=10) == b"ccc"  # type: ignore[union-attr]
    assert fetches.take("four", "/files/c") is None  # a kept file serves one read
    assert fetches.kept_nbytes == 0
    assert fs.reads == {"/files/a": 2, "/files/b": 1, "/files/c": 1}
    fetches.clear()
    small = Fetches(fs, kept=2)
    assert small.start("landing", ["/files/d"], nbytes=3) and small.start("one", ["/files/d"], nbytes=3)
    assert small.take("landing", "/files/d").result(timeout=10) == small.take("one", "/files/d", keep=True).result()  # type: ignore[union-attr]
    assert small.kept_nbytes == 0 and small.take("five", "/files/d") is None  # larger than the limit: not kept
    small.clear()


def test_a_fetch_kept_as_it_is_taken_serves_the_reads_after_it(fs: CountingFS | AsyncCountingFS) -> None:
    """Kept from the moment its read takes it, landed or not: no read after that fetches the file again."""
    fetches = Fetches(fs)
    fs.gate.clear()  # requests wait until released
    assert fetches.start("one", ["/files/a"], nbytes=3)
    first = fetches.take("one", "/files/a", keep=True)
    assert fetches.start("two", ["/files/a"], nbytes=3)  # the kept fetch, still in flight
    assert fetches.take("three", "/files/a", keep=True) is not None  # never started: shares read two's
    fs.gate.set()
    assert first.result(timeout=10) == fetches.take("two", "/files/a", keep=True).result(timeout=10) == b"aaa"  # type: ignore[union-attr]
    assert fetches.take("four", "/files/a", keep=True).result(timeout=10) == b"aaa"  # type: ignore[union-attr]
    assert fetches.kept_nbytes == 3 and fs.reads == {"/files/a": 1}
    fetches.clear()


def test_clear_cancels_what_is_queued_kept_fetches_too(fs: CountingFS | AsyncCountingFS) -> None:
    """After clear, no fetch is left to be sent: not a read's, taken or not, nor one kept while still queued."""
    fs.gate.clear()  # the first request holds the only place in flight
    fetches = Fetches(fs, in_flight=1)
    assert fetches.start("one", ["/files/a", "/files/b", "/files/c"], nbytes=9)
    kept = fetches.take("one", "/files/b", keep=True)
    queued = fetches.take("one", "/files/c")
    assert kept is not None and queued is not None and not kept.running() and not queued.running()
    fetches.clear()
    assert kept.cancelled() and queued.cancelled()
    fs.gate.set()
    assert fetches.start("two", ["/files/d"], nbytes=3)  # the next request sent is this read's
    assert fetches.take("two", "/files/d").result(timeout=10) == b"ddd"  # type: ignore[union-attr]
    assert fs.reads.get("/files/b", 0) == 0 and fs.reads.get("/files/c", 0) == 0
    fetches.clear()


class ClearedWhileSending(AsyncCountingFS):
    """Clears the fetches reading it as the second request of a batch is being sent."""

    protocol = "clearedwhilesending"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fetches: Fetches | None = None
        self.sent = 0

    @property
    def _cat_file(self) -> Any:
        self.sent += 1
        if self.sent == 2 and self.fetches is not None:
            self.fetches.clear()  # the first request is in flight, the second about to be
        return super()._cat_file


def test_a_request_cancelled_before_it_began_leaves_no_coroutine_unawaited() -> None:
    """clear() while requests are being sent cancels one not yet begun: nothing of it is left to warn at collection."""
    fs = ClearedWhileSending(skip_instance_cache=True)
    fs.files.clear()
    for name in "ab":
        fs.pipe_file(f"/files/{name}", name.encode() * 3)
    fs.fetches, fs.sent = (fetches := Fetches(fs)), 0
    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert fetches.start("one", ["/files/a", "/files/b"], nbytes=6)
            deadline = time.monotonic() + 10
            while fs.sent < 2:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            for _ in range(3):  # the loop ran what was scheduled on it: each request landed or was cancelled
                asyncio.run_coroutine_threadsafe(asyncio.sleep(0), fs.loop).result(timeout=10)
            gc.collect()
    finally:
        sys.unraisablehook = hook
    assert fs.sent == 2
    assert not [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert not unraisable


def test_byte_ranges_are_requests_of_their_own_fetched_once(fs: CountingFS | AsyncCountingFS) -> None:
    fetches = Fetches(fs)
    fs.pipe_file("/files/long", b"0123456789")
    assert fetches.start("one", [("/files/long", 2, 5), "/files/long"], nbytes=13)
    assert fetches.start("two", [("/files/long", 2, 5), ("/files/long", 8, 10)], nbytes=5)
    assert fetches.take("one", ("/files/long", 2, 5)).result(timeout=10) == b"234"  # type: ignore[union-attr]
    assert fetches.take("one", "/files/long").result(timeout=10) == b"0123456789"  # type: ignore[union-attr]
    # Read one is over: a read of that key now is a new one, never started, and shares read two's fetch.
    assert fetches.take("one", ("/files/long", 8, 10)).result(timeout=10) == b"89"  # type: ignore[union-attr]
    assert fetches.take("two", ("/files/long", 2, 5)).result(timeout=10) == b"234"  # type: ignore[union-attr]
    assert fetches.take("two", ("/files/long", 8, 10)).result(timeout=10) == b"89"  # type: ignore[union-attr]
    assert fetches.nbytes == 0
    assert fs.reads == {"/files/long": 3}  # the whole file and two ranges, the shared range once
    fetches.clear()


def test_requests_in_flight_are_capped_and_sent_in_order(fs: CountingFS | AsyncCountingFS) -> None:
    fs.gate.clear()
    fetches = Fetches(fs, in_flight=2)
    fetches.start("first", ["/files/a", "/files/b"], nbytes=6)
    fetches.start("second", ["/files/c", "/files/d", "/files/e", "/files/f"], nbytes=12)
    first = fetches.take("first", "/files/a")
    last = fetches.take("second", "/files/f")
    assert first is not None and last is not None
    assert not last.running() and not last.done()  # queued behind the first read's requests
    fs.gate.set()
    assert last.result(timeout=10) == b"fff" and first.result(timeout=10) == b"aaa"
    assert fs.most_in_flight <= 2
    fetches.clear()


def test_an_error_reaches_the_read_and_a_dropped_read_is_forgotten(fs: CountingFS | AsyncCountingFS) -> None:
    fetches = Fetches(fs)
    fetches.start("read", ["/files/missing", "/files/a"], nbytes=6)
    missing = fetches.take("read", "/files/missing")
    assert missing is not None
    with pytest.raises(FileNotFoundError):
        missing.result(timeout=10)
    fetches.drop("read")
    assert fetches.nbytes == 0 and "read" not in fetches
    assert fetches.take("read", "/files/a") is None
    fetches.clear()


def test_fetches_pickle_empty(fs: CountingFS | AsyncCountingFS) -> None:
    import pickle

    fetches = Fetches(fs)
    fetches.start("read", ["/files/a"], nbytes=3)
    copy = pickle.loads(pickle.dumps(fetches))
    assert copy.nbytes == 0 and "read" not in copy
    copy.start("read", ["/files/a"], nbytes=3)
    assert copy.take("read", "/files/a").result(timeout=10) == b"aaa"  # type: ignore[union-attr]
    fetches.clear()
    copy.clear()


@pytest.mark.parametrize("prefetch", ["0B", "auto", "64KiB", "64MiB"])
def test_a_remote_store_reads_the_batches_of_a_local_one(memory_store: str, tmp_path: Any, prefetch: Any) -> None:
    with ds.PileLoader(str(tmp_path / "piles.zarr"), batch_size=512, seed=1) as local:
        expected = [batch["id"] for _ in range(2) for batch in local]
    with ds.PileLoader(memory_store, batch_size=512, seed=1, prefetch=prefetch) as remote:
        assert remote._piles.reader.fetches
        got = [batch["id"] for _ in range(2) for batch in remote]
    assert len(got) == len(expected)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


def test_mixed_remote_stores_fetch_ahead_and_read_the_batches_of_local_ones(memory_store: str, tmp_path: Any) -> None:
    """A mixture of remote stores fetches each store's part of a read ahead of it, as one remote store does."""
    second = memory_store.replace("/piles.zarr", "/second.zarr")
    fsspec.filesystem("memory").copy(memory_store, second, recursive=True)
    local = str(tmp_path / "piles.zarr")
    options: dict[str, Any] = {"batch_size": 100, "seed": 1, "order": Piles(budget="24KiB")}
    with ds.PileLoader([ds.Stream(local), ds.Stream(local, choose=5_000)], **options) as loader:
        expected = [batch["id"] for batch in loader]
        local_rows = loader._piles.reader.read_rows(19_000, 21_000)["id"]  # the end of one store, the start of the next
    with ds.PileLoader(
        [ds.Stream(memory_store), ds.Stream(second, choose=5_000)], prefetch="24KiB", **options
    ) as loader:
        reader = loader._piles.reader
        assert reader.fetches
        reader.fetch(19_000, 21_000)
        assert [member.fetched_nbytes > 0 for member in reader.members] == [True, True]
        assert np.array_equal(reader.read_rows(19_000, 21_000)["id"], local_rows)
        assert reader.fetched_nbytes == 0  # taken by the read
        reader.fetch(0, 500)
        reader.forget(0, 500)
        assert reader.fetched_nbytes == 0
        got = [batch["id"] for batch in loader]
    assert len(got) == len(expected)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


@pytest.mark.parametrize("parquet", [False, True], ids=["zarr", "parquet"])
def test_a_group_of_units_sends_the_requests_of_all_its_units_at_once(
    memory_store: str, parquet_store: tuple[str, str], parquet: bool
) -> None:
    """Without reading ahead (prefetch="0B"), a group's units are fetched together, not one after another."""
    store = parquet_store[1] if parquet else memory_store
    with ds.PileLoader(store, batch_size=100, seed=1, prefetch="0B", order=Piles(budget="1MiB")) as loader:
        reader = loader._piles.reader
        read_runs, seen = reader.read_runs, []

        def watched(runs: Any) -> Any:
            seen.append((len(runs), sum(b - a for a, b in runs), reader.fetched_nbytes))  # before the first is read
            return read_runs(runs)

        reader.read_runs = watched
        n_rows = sum(len(batch["id"]) for batch in loader)
        assert reader.fetched_nbytes == 0  # every read took what it fetched
    assert n_rows == reader.n_rows and seen
    assert all(nbytes >= 8 * rows for _, rows, nbytes in seen), "every unit's requests out before the first is read"
    assert parquet or any(count > 1 for count, _, _ in seen), "groups of several units"


def test_closing_a_loader_lets_reads_under_way_take_their_requests(
    parquet_store: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read in a background thread when the loader closes finishes from the requests started for it.

    Had they been cancelled, it would send them again, a pile after another.
    """
    _, remote = parquet_store
    loader = ds.PileLoader(remote, batch_size=100, seed=1, prefetch="64MiB", order=Piles(budget="256KiB"))
    reader = loader._piles.reader
    fetches, closing, started_while_closing = reader._fetches, threading.Event(), []
    start = fetches.start

    def watched(key: Any, requests: Any, nbytes: int) -> bool:
        started = start(key, requests, nbytes)
        # A read's own start, as it takes its requests (not a group's read starting all of its piles' at once).
        if started and closing.is_set() and any(frame.name == "_take" for frame in traceback.extract_stack()):
            started_while_closing.append(key)
        return started

    def slow(path: str, begin: Any = None, end: Any = None, **kwargs: Any) -> bytes:
        time.sleep(0.02)  # a request of object storage: some still queued when the loader closes
        return bytes(MemoryFileSystem.cat_file(reader._fs, path, begin, end, **kwargs))

    monkeypatch.setattr(fetches, "start", watched)
    monkeypatch.setattr(reader._fs, "cat_file", slow)
    for _ in loader:  # an epoch: then the next epoch's first groups are read in background threads
        pass
    closing.set()
    loader.close()
    assert started_while_closing == []


def test_read_ahead_stays_within_its_budget(memory_store: str) -> None:
    """With a budget of about two piles, at most the budget and one read are fetched ahead at any batch."""
    with ds.PileLoader(memory_store, batch_size=100, seed=1, prefetch="24KiB", order=Piles(budget="24KiB")) as loader:
        reader = loader._piles.reader
        pile_nbytes = int(np.diff(reader.pile_offsets).max()) * (4 * 4 + 8)
        peak = 0
        for _ in loader:
            peak = max(peak, reader.fetched_nbytes)
    # The pool reads ahead what the budget holds as soon as it may, taking what was fetched for it.
    assert 0 <= peak <= 24 * 2**10 + 2 * pile_nbytes


@pytest.fixture
def requested(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of every request of fsspec's memory filesystem (``cat_file``) from now on, in order."""
    paths: list[str] = []
    cat_file = MemoryFileSystem.cat_file

    def counted(self: MemoryFileSystem, path: str, *args: Any, **kwargs: Any) -> bytes:
        paths.append(path)
        return bytes(cat_file(self, path, *args, **kwargs))

    monkeypatch.setattr(MemoryFileSystem, "cat_file", counted)
    return paths


def _small_store(memory_store: str, tmp_path: Any) -> str:
    """The source of ``memory_store`` shuffled again in chunks of 1,000 rows (units of one chunk, 21 reads an
    epoch), in the memory filesystem beside it."""
    ds.shuffle_zarr(str(tmp_path / "raw.zarr"), str(tmp_path / "small.zarr"), n_piles=40, seed=3, chunk_rows=1_000)
    url = memory_store.replace("/piles.zarr", "/small.zarr")
    fsspec.filesystem("memory").put(str(tmp_path / "small.zarr"), url, recursive=True)
    return url


def test_an_epoch_fetches_each_chunk_file_once(memory_store: str, tmp_path: Any, requested: list[str]) -> None:
    """A chunk across the boundary of two piles read apart is kept for the second read rather than fetched again."""
    one_pile = Piles(budget="24KiB")  # the piles beside each other are read apart
    with ds.PileLoader(str(tmp_path / "piles.zarr"), batch_size=100, seed=4, order=one_pile) as local:
        expected = [batch["id"] for batch in local]
    # prefetch="0B": the reads one after another, so that what each fetches is certain.
    with ds.PileLoader(memory_store, batch_size=100, seed=4, order=one_pile, prefetch="0B") as loader:
        assert all(np.array_equal(a, b["id"]) for a, b in zip(expected, loader, strict=True))
    chunks = {path: requested.count(path) for path in requested if "/c/" in path}
    stored = [path for path in (tmp_path / "piles.zarr").rglob("*") if path.is_file() and "/c/" in path.as_posix()]
    assert len(chunks) == len(stored) > 2
    assert set(chunks.values()) == {1}


def test_an_epoch_of_a_mixture_fetches_the_next_epoch_no_further_than_its_first_read(
    memory_store: str, tmp_path: Any, requested: list[str]
) -> None:
    """A budget larger than two epochs reads ahead only the next epoch's first read: the loader may never go on."""
    url = _small_store(memory_store, tmp_path)
    streams = [ds.Stream(url, choose=10_000), ds.Stream(url, choose=10_000)]
    options: dict[str, Any] = {"batch_size": 100, "seed": 2, "order": Piles(budget="24KiB")}
    with ds.PileLoader(streams, prefetch="0B", **options) as loader:  # no read ahead: the requests an epoch needs
        assert sum(len(batch["id"]) for batch in loader) == 20_000
    needed = sum("/c/" in path for path in requested)  # chunk files
    requested.clear()
    with ds.PileLoader(streams, prefetch="1GiB", **options) as loader:
        reader = loader._piles.reader
        for _ in loader:
            pass
        first = Read(1, *loader._share.plans(1)[0].segments[0])
        files = {
            (id(member), chunks.path(index))
            for start, stop in loader._piles.epoch_reads.spans(first)
            for member, a, b in reader._spans(start, stop)
            for chunks in member._chunks.values()
            for index in range(a // chunks.chunk_rows, (b - 1) // chunks.chunk_rows + 1)
        }
    assert len(loader._share.plans(1)[0].segments) > 4  # many reads in an epoch, so the rest would show
    sent = sum("/c/" in path for path in requested)
    assert needed <= sent <= needed + len(files), (needed, sent, len(files))


def test_two_reads_of_one_span_keep_their_fetches_apart(memory_store: str, tmp_path: Any, requested: list[str]) -> None:
    """The same rows fetched for two reads (the next epoch's, a stream repeated): one letting go leaves the other's."""
    from daskshuffle.readers import ZarrPileReader

    reader, local = ZarrPileReader(memory_store), ZarrPileReader(tmp_path / "piles.zarr")
    requested.clear()  # those of the open
    start, stop = int(reader.pile_offsets[3]), int(reader.pile_offsets[5])
    reader.fetch(start, stop, "this epoch")
    reader.fetch(start, stop, "next epoch")
    reader.forget(start, stop, "this epoch")
    assert reader.fetched_nbytes > 0, "the next epoch's fetch is still held"
    rows = reader.read_rows(start, stop)
    reader.forget(start, stop, "next epoch")
    assert requested and len(requested) == len(set(requested)), "each file requested once, for both reads"
    assert reader.fetched_nbytes == 0
    assert all(np.array_equal(rows[name], values) for name, values in local.read_rows(start, stop).items())
    reader.close()


def test_the_next_epochs_first_read_takes_the_files_fetched_for_this_epoch(
    memory_store: str, tmp_path: Any, requested: list[str]
) -> None:
    """Read ahead with this epoch's reads of the same units, it does not request their files again when it comes."""
    url = _small_store(memory_store, tmp_path)
    with ds.PileLoader(url, batch_size=100, seed=2, prefetch="1GiB", order=Piles(budget="24KiB")) as loader:
        reader = loader._piles.reader
        for _ in loader:  # the whole epoch fetched ahead at its first read, and the next epoch's first read
            pass
        next(iter(loader))  # the next epoch's first read
        first = Read(1, *loader._share.plans(1)[0].segments[0])
        files = {
            chunks.path(index)
            for start, stop in loader._piles.epoch_reads.spans(first)
            for chunks in reader._chunks.values()
            for index in range(start // chunks.chunk_rows, (stop - 1) // chunks.chunk_rows + 1)
        }
    assert len(loader._share.plans(1)[0].segments) > 4 and files
    assert {path: requested.count(path) for path in files} == dict.fromkeys(files, 1)


def test_a_local_store_does_not_fetch(tmp_path: Any, memory_store: str) -> None:
    with ds.PileLoader(str(tmp_path / "piles.zarr"), batch_size=100, prefetch="1GiB") as loader:
        assert not loader._piles.reader.fetches and loader._piles.read_ahead == 0


def test_prefetch_refuses_a_size_it_cannot_read(memory_store: str) -> None:
    with pytest.raises(
        ds.DaskShuffleValueError, match=r"prefetch to be a size such as '512MiB', or 'auto'\. Got 'lots' instead"
    ):
        ds.PileLoader(memory_store, batch_size=100, prefetch="lots")


def test_futures_are_plain_concurrent_futures(fs: CountingFS | AsyncCountingFS) -> None:
    fetches = Fetches(fs)
    fetches.start("read", ["/files/a"], nbytes=3)
    assert isinstance(fetches.take("read", "/files/a"), Future)
    fetches.clear()


# -- a Parquet pile store ------------------------------------------------------------------
@pytest.fixture
def parquet_store(tmp_path: Any) -> tuple[str, str]:
    """A Parquet pile store of 6,000 rows in 24 piles over several part files, on disk and in fsspec's memory."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = np.arange(6_000)
    rng = np.random.default_rng(0)
    table = pa.table(
        {
            "id": ids,
            "x": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(6_000 * 4, dtype=np.float32)), 4),
            "text": [f"row {i}" for i in ids],
        }
    )
    (tmp_path / "raw").mkdir()
    pq.write_table(table, tmp_path / "raw" / "a.parquet", row_group_size=500)
    local = ds.shuffle_parquet(tmp_path / "raw", tmp_path / "piles", n_piles=24, seed=3, block_memory="64KiB").path
    memory = fsspec.filesystem("memory")
    url = f"memory://parquet-ahead-{tmp_path.name}/piles"
    memory.put(str(local), url, recursive=True)
    return str(local), url


def _fetched_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse every file opened on fsspec's memory storage: a read of a part file not from the bytes fetched."""

    def refused(self: MemoryFileSystem, path: str, *args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"{path} opened and read directly: the fetched bytes were not enough")

    monkeypatch.setattr(MemoryFileSystem, "_open", refused)


def _ids(store: str, prefetch: Any, storage_options: dict[str, Any] | None = None) -> list[np.ndarray]:
    with ds.PileLoader(store, batch_size=500, seed=1, prefetch=prefetch, storage_options=storage_options) as loader:
        assert loader._piles.reader.fetches == ("://" in store)
        return [batch["id"] for _ in range(2) for batch in loader]


@pytest.mark.parametrize("prefetch", ["0B", "auto", "64KiB", "64MiB"])
def test_a_remote_parquet_store_reads_the_batches_of_a_local_one(
    parquet_store: tuple[str, str], prefetch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local, remote = parquet_store
    expected = _ids(local, prefetch)
    _fetched_only(monkeypatch)
    got = _ids(remote, prefetch)
    assert len(got) == len(expected) > 2
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


@pytest.mark.parametrize("prefetch", ["0B", "auto"])
def test_footers_not_kept_are_fetched_with_the_column_chunks(
    parquet_store: tuple[str, str], prefetch: Any, monkeypatch: pytest.MonkeyPatch, configure: Configure
) -> None:
    """In a store of more part files than footers kept, a read fetches its footer and reads nothing else."""

    configure({"parquet-reader.footers-kept": 1})
    local, remote = parquet_store
    expected = _ids(local, prefetch)
    fetchers: list[Any] = []  # the reader's fetches, once it is open
    footers_read: list[str] = []  # the part files whose last bytes were read other than by the fetches
    cat_file = MemoryFileSystem.cat_file

    def counted(self: MemoryFileSystem, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
        fetched = bool(fetchers) and fetchers[0].owns_thread()
        if path.endswith(".parquet") and end == self.info(path)["size"] and not fetched:
            footers_read.append(path.rsplit("/", 1)[-1])
        return bytes(cat_file(self, path, start, end, **kwargs))

    monkeypatch.setattr(MemoryFileSystem, "cat_file", counted)
    with ds.PileLoader(remote, batch_size=500, seed=1, prefetch=prefetch) as loader:
        reader = loader._piles.reader
        fetchers.append(reader._fetches)
        # Every footer at open (the first again for the row size "auto" groups of piles are chosen by).
        parts = sorted(path.rsplit("/", 1)[-1] for path in reader.part_paths)
        assert len(parts) > 2 and sorted(set(footers_read)) == parts
        footers_read.clear()
        _fetched_only(monkeypatch)  # every read from the bytes fetched
        got = [batch["id"] for _ in range(2) for batch in loader]
        assert footers_read == [] and len(reader._parts) == 1
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


@pytest.mark.parametrize("range_nbytes", [1_000, 8 * 2**20])
def test_a_parquet_read_fetches_its_column_chunks_all_at_once(
    parquet_store: tuple[str, str], monkeypatch: pytest.MonkeyPatch, range_nbytes: int, configure: Configure
) -> None:
    """A subset of the columns, from the bytes fetched only: long runs of column chunks in several ranges too."""
    from daskshuffle.readers._parquet_reader import ParquetPileReader

    configure({"parquet-reader.range-nbytes": range_nbytes})
    local, remote = parquet_store
    reader, expected = ParquetPileReader(remote, variables=["x", "id"]), ParquetPileReader(local, variables=["x", "id"])
    _fetched_only(monkeypatch)  # every read from the bytes fetched
    reader.fetch(0, reader.n_rows)
    assert reader.fetched_nbytes > 0
    assert reader.read_rows(0, reader.n_rows).equals(expected.read_rows(0, expected.n_rows))
    assert reader.fetched_nbytes == 0
    # Rows within piles, a part file's boundary crossed, fetched or not.
    first = int(reader.part_starts[1])
    for start, stop in [(first - 7, first + 300), (10, 20), (5_990, 6_000)]:
        reader.fetch(start, stop)
        assert reader.read_rows(start, stop).equals(expected.read_rows(start, stop))
        assert reader.read_rows(start, stop).equals(expected.read_rows(start, stop))
    reader.fetch(100, 200)
    reader.forget(100, 200)
    assert reader.fetched_nbytes == 0
    reader.close()


def test_remote_footers_are_read_from_the_end_of_each_part(tmp_path: Any, parquet_store: tuple[str, str]) -> None:
    """A footer larger than the bytes first requested is requested again, whole; a truncated part is named."""
    import pyarrow.parquet as pq

    from daskshuffle.formats._parquet_fetched import FOOTER_NBYTES
    from daskshuffle.readers._parquet_reader import ParquetPileReader

    local, remote = parquet_store
    # 1,000 piles in a part file: a row group each, a footer larger than the bytes first requested.
    large = ds.shuffle_parquet(tmp_path / "raw", tmp_path / "many", n_piles=1_000, seed=0, block_memory="1GiB").path
    assert pq.read_metadata(f"{large}/{sorted(os.listdir(large))[-1]}").serialized_size > FOOTER_NBYTES
    memory = fsspec.filesystem("memory")
    memory.put(large, f"{remote}-many", recursive=True)
    for local_store, remote_store in [(local, remote), (large, f"{remote}-many")]:
        reader, expected = ParquetPileReader(remote_store), ParquetPileReader(local_store)
        for index in range(len(reader.part_paths)):
            assert reader._part(index, None).equals(expected._part(index, None))
        assert reader.read_rows(0, reader.n_rows).equals(expected.read_rows(0, expected.n_rows))
    path = reader.part_paths[-1]
    memory.pipe_file(path, memory.cat_file(path)[:-100])
    truncated = ParquetPileReader(f"{remote}-many")
    first = int(truncated.part_starts[-1])
    with pytest.raises(ds.CorruptPileStoreError, match=r"footer cannot be read.*part-"):
        truncated.read_rows(first, first + 1)


def test_parquet_read_ahead_stays_within_its_budget(parquet_store: tuple[str, str]) -> None:
    _, remote = parquet_store
    with ds.PileLoader(remote, batch_size=100, seed=1, prefetch="24KiB", order=Piles(budget="24KiB")) as loader:
        reader = loader._piles.reader
        footer = reader._part(0, None)
        largest = max(footer.row_group(group).total_byte_size for group in range(footer.num_row_groups))
        peak = 0
        for _ in loader:
            peak = max(peak, reader.fetched_nbytes)
    # The pool reads ahead what the budget holds as soon as it may, taking what was fetched for it.
    assert 0 <= peak <= 24 * 2**10 + 2 * largest


def _damaged_text_column(remote: str) -> tuple[Any, int]:
    """A reader of ``remote`` whose pile 5 has a damaged page in its column ``text``; the pile."""
    import pyarrow.parquet as pq

    from daskshuffle.readers._parquet_reader import ParquetPileReader

    memory = fsspec.filesystem("memory")
    reader = ParquetPileReader(remote)
    pile = 5
    first = int(reader.pile_offsets[pile])
    part = int(np.searchsorted(reader.part_starts, first, side="right")) - 1
    path = reader.part_paths[part]
    group = int(np.searchsorted(reader._layout(part, None).group_starts, first - reader.part_starts[part]))
    data = bytearray(memory.cat_file(path))
    footer = pq.read_metadata(path, filesystem=memory)
    names = [footer.schema.column(i).name for i in range(footer.num_columns)]
    column = footer.row_group(group).column(names.index("text"))
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    data[start + column.total_compressed_size - 4] ^= 0xFF  # inside the column chunk's last page
    memory.pipe_file(path, bytes(data))
    return reader, pile


def test_a_damaged_remote_part_is_still_detected(parquet_store: tuple[str, str]) -> None:
    _, remote = parquet_store
    reader, pile = _damaged_text_column(remote)
    first = int(reader.pile_offsets[pile])
    path = reader.part_paths[int(np.searchsorted(reader.part_starts, first, side="right")) - 1]
    for prefetched in (False, True):
        if prefetched:
            reader.fetch(int(reader.pile_offsets[pile]), int(reader.pile_offsets[pile + 1]))
        with pytest.raises(ds.CorruptPileStoreError, match=rf"\(pile {pile}, columns \['text'\]\)"):
            reader.read_pile(pile)
        assert reader.fetched_nbytes == 0
    assert reader.read_pile(pile - 1).num_rows > 0
    fsspec.filesystem("memory").rm(path)
    with pytest.raises(ds.CorruptPileStoreError, match=rf"fails to read.*\(pile {pile}, columns"):
        reader.read_pile(pile)
    reader.close()


def test_a_remote_part_read_again_after_damage_is_fetched_anew_and_ends_at_a_cancel(
    parquet_store: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pile whose fetched bytes fail their checksums is read again through requests of its own, which a cancel ends."""
    from daskshuffle.readers import ReadCancelledError

    _, remote = parquet_store
    reader, pile = _damaged_text_column(remote)
    start, stop = int(reader.pile_offsets[pile]), int(reader.pile_offsets[pile + 1])
    calls, held, gate, requested = [0], threading.Event(), threading.Event(), threading.Event()
    cat_file = MemoryFileSystem.cat_file

    def gated(self: MemoryFileSystem, *args: Any, **kwargs: Any) -> bytes:
        calls[0] += 1
        if held.is_set():
            requested.set()
            assert gate.wait(30)
        return bytes(cat_file(self, *args, **kwargs))

    monkeypatch.setattr(MemoryFileSystem, "cat_file", gated)
    reader.fetch(start, stop)  # as the loader fetches ahead: the damaged bytes land
    requests, _ = reader._requests(start, stop)
    waited = time.perf_counter()
    while calls[0] < len(requests) and time.perf_counter() - waited < 30:
        time.sleep(0.01)
    held.set()  # from now on requests wait for the gate
    ended: list[BaseException] = []

    def read() -> None:
        try:
            reader.read_pile(pile)
        except BaseException as error:
            ended.append(error)

    thread = threading.Thread(target=read)
    thread.start()
    assert requested.wait(30), "the read again sends requests of its own"
    reader.cancel_reads()
    thread.join(5)
    gate.set()
    assert not thread.is_alive() and len(ended) == 1 and isinstance(ended[0], ReadCancelledError), ended
    held.clear()
    with pytest.raises(ds.CorruptPileStoreError, match=rf"\(pile {pile}, columns \['text'\]\)"):
        reader.read_pile(pile)
    reader.close()


@pytest.mark.s3
@pytest.mark.parametrize("prefetch", ["0B", "auto", "64KiB"])
def test_a_parquet_store_on_s3_reads_the_batches_of_a_local_one(
    parquet_store: tuple[str, str], s3: Any, prefetch: Any
) -> None:
    local, _ = parquet_store
    remote = s3.put(local, "piles")
    got, expected = _ids(remote, prefetch, s3.storage_options), _ids(local, prefetch)
    assert len(got) == len(expected) > 2
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
