"""The pools of daskshuffle's threads (daskshuffle/_threads.py), and closing a loader from a thread its reads wait for."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import make_zarr_source

from daskshuffle._threads import LazyPool, release_on_collection


def test_a_pool_is_joined_from_any_thread_but_its_own() -> None:
    release = threading.Event()
    pool = LazyPool(2, "test")
    busy = pool.get().submit(release.wait, 30)
    closer = pool.get().submit(pool.shutdown)  # garbage collection in one of the pool's threads
    assert closer.result(timeout=30) is None and not busy.done()  # it returned while the other task still ran
    release.set()
    assert busy.result(timeout=30)

    release.clear()
    pool = LazyPool(1, "test")
    busy = pool.get().submit(release.wait, 30)
    outside = threading.Thread(target=pool.shutdown, name="daskshuffle-another-pool_0")
    outside.start()
    outside.join(timeout=0.5)
    assert outside.is_alive()  # it joins: it cannot end before the task does
    release.set()
    outside.join(timeout=30)
    assert not outside.is_alive() and busy.result(timeout=30)


def test_a_pool_is_made_again_after_shutdown() -> None:
    pool = LazyPool(2, "again")
    assert list(pool.get().map(abs, [-1, 2])) == [1, 2]
    pool.shutdown()
    assert not [thread for thread in threading.enumerate() if thread.name.startswith(pool.prefix)]
    assert list(pool.get().map(abs, [-3])) == [3]
    pool.shutdown()


def test_a_release_collected_in_a_thread_of_daskshuffles_runs_in_a_thread_of_its_own() -> None:
    """Garbage collection in a decoder holding the reader's lock: closing the reader takes that lock."""
    lock, ran_in = threading.Lock(), []

    def release(where: list[str]) -> None:
        with lock:
            where.append(threading.current_thread().name)

    def decoder() -> None:
        with lock:  # in the middle of a read
            release_on_collection(release, ran_in)  # at once, this would wait for the lock forever

    thread = threading.Thread(target=decoder, name="daskshuffle-parquet-decode-0_0")
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    for _ in range(3000):
        if ran_in:
            break
        threading.Event().wait(0.01)
    assert ran_in == ["daskshuffle-release"]
    release_on_collection(release, ran_in)  # anywhere else, at once
    assert ran_in[-1] == threading.current_thread().name


def _three_consumers(loader: Any) -> dict[str, object]:
    """``peek`` (twenty times) and two ranges of epoch 0, each in a thread of its own, started at once."""
    start = threading.Barrier(3, timeout=60)
    results: dict[str, object] = {}
    works = {
        "peek": lambda: [loader.peek()["id"] for _ in range(20)],
        "a": lambda: [batch["id"] for batch in loader.iter_batches(0)],
        "b": lambda: [batch["id"] for batch in loader.iter_batches(0)],
    }

    def run(name: str) -> None:
        start.wait()
        try:
            results[name] = works[name]()
        except BaseException as error:  # the test looks at what each thread ended in
            results[name] = error

    threads = [threading.Thread(target=run, args=(name,)) for name in works]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


@pytest.mark.slow
def test_peek_and_two_ranges_in_three_threads_end_well_or_in_a_public_error(tmp_path: Path) -> None:
    """One loader, three threads: ``peek`` and two ``iter_batches``. A range's end stops only its own reads: each
    thread gets its rows, or a daskshuffle error, never the reader's private cancellation."""
    import daskshuffle as ds

    source = make_zarr_source(tmp_path / "raw.zarr", 20_000, chunk_rows=100)
    ds.shuffle_zarr(source, tmp_path / "piles.zarr", 4, seed=1, chunk_rows=50)
    small = ds.orders.Piles(budget="64KiB")  # groups of about 1,200 rows: many reads, each of many chunk files
    for _ in range(5):
        with ds.PileLoader(tmp_path / "piles.zarr", 100, seed=1, order=small) as loader:
            expected = [batch["id"] for batch in loader.iter_batches(0)]
            results = _three_consumers(loader)
        assert sorted(results) == ["a", "b", "peek"]
        for name, got in results.items():
            if isinstance(got, BaseException):
                assert isinstance(got, ds.DaskShuffleError), f"{name}: {type(got).__module__}.{type(got).__name__}"
            elif name != "peek":
                assert isinstance(got, list) and len(got) == len(expected)
                assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
