"""The pools of daskshuffle's threads (daskshuffle/_threads.py), and closing a loader from a thread its reads wait for."""

from __future__ import annotations

import threading

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
