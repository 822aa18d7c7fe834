"""The pools of daskshuffle's threads (daskshuffle/_threads.py), and closing a loader from a thread its reads wait for."""

from __future__ import annotations

import threading

from daskshuffle._threads import LazyPool


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
