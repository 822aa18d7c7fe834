"""The pools of daskshuffle's threads (daskshuffle/_threads.py), and closing a loader from a thread its reads wait for."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import make_zarr_source

from daskshuffle._threads import LazyPool, each, release_on_collection, started_each


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


def test_each_runs_its_calls_together_and_raises_the_first_error_in_order_once_all_ended() -> None:
    barrier = threading.Barrier(4, timeout=30)  # four calls that wait for each other: they run at once
    assert each(lambda item: (barrier.wait(), item * 2)[1], range(4)) == [0, 2, 4, 6]

    ended = []

    def call(item: int) -> int:
        if item in (1, 2):
            raise ValueError(f"item {item}")
        time.sleep(0.2)
        ended.append(item)
        return item

    with pytest.raises(ValueError, match="item 1"):
        each(call, range(4))
    assert sorted(ended) == [0, 3], "the calls after a failure run too, and have ended when it is raised"


def test_started_each_interrupted_cancels_the_calls_not_started_and_waits_for_those_under_way() -> None:
    ended = []

    def call(item: int) -> None:
        if item == 0:
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)  # Ctrl-C while the calls run
            time.sleep(1)
        ended.append(item)

    with pytest.raises(KeyboardInterrupt):
        started_each(call, range(5), threads=1)
    assert ended == [0], "the call under way ended before the interrupt went on; the others never started"
    time.sleep(0.2)
    assert ended == [0]


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
def test_a_read_begun_by_a_pool_after_its_reads_were_cancelled_begins_cancelled() -> None:
    """A job that started just before its pool's reads were cancelled must not then wait on a stalled request."""
    from daskshuffle.readers._cancel import ReadCancelledError, ReadsUnderWay

    reads = ReadsUnderWay()
    reads.cancel("daskshuffle-read-7_")
    outcomes: dict[str, str] = {}

    def begin() -> None:
        try:
            reads.begin().check()
        except ReadCancelledError:
            outcomes[threading.current_thread().name] = "cancelled"
        else:
            outcomes[threading.current_thread().name] = "goes on"

    for name in ("daskshuffle-read-7_0", "daskshuffle-read-70_0", "daskshuffle-read-8_1"):
        thread = threading.Thread(target=begin, name=name)
        thread.start()
        thread.join(timeout=30)
    assert outcomes == {
        "daskshuffle-read-7_0": "cancelled",
        "daskshuffle-read-70_0": "goes on",  # another pool, whose name begins alike
        "daskshuffle-read-8_1": "goes on",
    }


def test_a_cancelled_pool_is_remembered_only_while_one_of_its_threads_lives() -> None:
    """A loader makes a pool of reader threads for each iteration: the names of pools joined since are forgotten."""
    from concurrent.futures import ThreadPoolExecutor

    from daskshuffle.readers._cancel import ReadCancelledError, ReadsUnderWay

    reads, release = ReadsUnderWay(), threading.Event()
    live = ThreadPoolExecutor(2, thread_name_prefix="daskshuffle-live")
    busy = live.submit(release.wait, 30)
    reads.cancel("daskshuffle-live_")
    for number in range(50):  # the pools of a loader iterated again and again, each joined after its cancel
        pool = ThreadPoolExecutor(1, thread_name_prefix=f"daskshuffle-done-{number}")
        pool.submit(abs, -1).result(timeout=30)
        reads.cancel(f"daskshuffle-done-{number}_")
        pool.shutdown(wait=True)
    assert reads._pools_done == {"daskshuffle-live_", "daskshuffle-done-49_"}
    with pytest.raises(ReadCancelledError):  # a read the live pool begins now begins cancelled
        live.submit(lambda: reads.begin().check()).result(timeout=30)
    release.set()
    assert busy.result(timeout=30)
    live.shutdown(wait=True)


@pytest.mark.slow  # five loaders, each read by three threads
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


# -- closing a loader while another thread iterates it ---------------------------------------------------------------

#: x float32[4], id int64 and y int16 (make_zarr_source) a row; groups of 150 rows, units of one chunk (16 rows).
_ROW_NBYTES = 4 * 4 + 8 + 2


@pytest.fixture(scope="module")
def small_groups(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,000 rows in 7 piles stored in chunks of 16 rows: read by the order below in seven groups of 150 rows."""
    import daskshuffle as ds

    root = tmp_path_factory.mktemp("close")
    source = make_zarr_source(root / "raw.zarr", 1_000, chunk_rows=64)
    ds.shuffle_zarr(source, root / "piles.zarr", n_piles=7, seed=3, chunk_rows=16)
    return root / "piles.zarr"


def _order() -> Any:
    import daskshuffle as ds

    return ds.orders.Piles(budget=f"{300 * _ROW_NBYTES}B")


def _chunk_reads_of_first_group(store: Path) -> int:
    """How many times the reads of the first group reach the point ``"chunk read"`` (nothing read ahead)."""
    import daskshuffle as ds
    from daskshuffle.storage._crash import armed

    with armed("chunk read") as reached, ds.PileLoader(store, 64, seed=3, order=_order(), prefetch="0B") as loader:
        next(loader.iter_batches(0))
        return len(reached)


@pytest.mark.parametrize("iterate", ["loader", "range"])
def test_nothing_is_read_after_close_returns_whatever_the_consumer_does(
    small_groups: Path, points: Any, iterate: str
) -> None:
    """A consumer between two batches while another thread closes the loader: its next batch (of a group not read
    yet) raises the error of a closed loader, and no read, no reader thread starts once close() returned."""
    import daskshuffle as ds

    taken, closed = threading.Event(), threading.Event()
    after_close: list[str] = []  # the threads that read a chunk once close() returned
    ended: list[BaseException] = []
    head: list[np.ndarray] = []
    points.arm(
        "chunk read", lambda count: after_close.append(threading.current_thread().name) if closed.is_set() else 0
    )
    loader = ds.PileLoader(small_groups, 64, seed=3, order=_order())

    def consume() -> None:
        batches = iter(loader) if iterate == "loader" else loader.iter_batches(0)
        for _ in range(2):  # rows 0:128, of the first group; batch 2 takes rows of the second
            head.append(next(batches)["id"])
        taken.set()
        assert closed.wait(30)
        try:
            next(batches)
        except Exception as error:  # the test looks at what the consumer ended in
            ended.append(error)

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert taken.wait(30)
    loader.close()
    closed.set()
    consumer.join(30)
    assert not consumer.is_alive() and len(ended) == 1, ended
    assert type(ended[0]) is ds.DaskShuffleValueError and "closed" in str(ended[0]), repr(ended[0])
    assert after_close == [], "a read started after close() returned"
    assert [thread.name for thread in threading.enumerate() if thread.name.startswith("daskshuffle-loader")] == []
    if iterate == "loader":  # not an epoch ended early as if whole; iterating again goes on from that batch
        assert "closed by another thread" in str(ended[0]) and "before batch 2 of epoch 0" in str(ended[0])
        points.disarm("chunk read")
        rest = [batch["id"] for batch in loader]
        loader.close()
        assert sorted(np.concatenate([*head, *rest]).tolist()) == list(range(1_000)), "every row once"


def test_a_range_in_another_thread_gets_the_error_of_a_closed_loader_while_close_runs(
    small_groups: Path, points: Any
) -> None:
    """``close()`` while it waits for the read ahead of a range whose thread asks for its next batch at that instant:
    that thread gets the error of a closed loader, never Python's "generator already executing"."""
    import inspect

    import daskshuffle as ds

    first_group = _chunk_reads_of_first_group(small_groups)
    paused, release = threading.Event(), threading.Event()

    def hold_the_read_ahead(count: int) -> None:
        if count == first_group + 1:  # the first chunk of the second group, read ahead while the range is suspended
            paused.set()
            assert release.wait(60)

    points.arm("chunk read", hold_the_read_ahead)
    loader = ds.PileLoader(small_groups, 64, seed=3, order=_order())
    batches = loader.iter_batches(0)
    next(batches)
    assert paused.wait(30)
    closer = threading.Thread(target=loader.close)
    closer.start()
    # Until the closing thread runs the range's cleanup (where close() did that), or for a while (where it does not).
    for _ in range(100):
        if inspect.getgeneratorstate(batches) == inspect.GEN_RUNNING:
            break
        threading.Event().wait(0.01)
    ended: list[BaseException] = []
    asking = threading.Thread(target=lambda: ended.extend(_next_error(batches)))
    asking.start()
    asking.join(30)
    release.set()
    closer.join(60)
    asking.join(60)
    assert not closer.is_alive() and not asking.is_alive()
    assert len(ended) == 1 and type(ended[0]) is ds.DaskShuffleValueError, repr(ended)
    assert "closed" in str(ended[0])
    assert [thread.name for thread in threading.enumerate() if thread.name.startswith("daskshuffle-loader")] == []


def _next_error(batches: Any) -> list[BaseException]:
    """The error ``next(batches)`` (and the batches after it) end in: none if they end well."""
    try:
        for _ in batches:
            pass
    except BaseException as error:  # the test looks at what the thread ended in
        return [error]
    return []
