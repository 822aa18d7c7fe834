"""EpochShuffler: a fresh full shuffle per epoch, made in the background, on real stores."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import make_zarr_source

import daskshuffle
from daskshuffle import EpochShuffler, PileLoader
from daskshuffle._errors import DaskShuffleValueError
from daskshuffle.reshuffle._epochs import epoch_seed

N_ROWS = 1_000
OPTIONS = {"n_piles": 4, "progress": False}


def epoch_ids(loader: PileLoader) -> np.ndarray:
    return np.concatenate([batch["id"] for batch in loader])


def stores(workdir: Path) -> list[str]:
    return sorted(path.name for path in workdir.glob("epoch-*.zarr"))


def test_each_epoch_is_its_own_shuffle_and_a_permutation(source: str, tmp_path: Path) -> None:
    workdir = tmp_path / "epochs"
    with EpochShuffler(source, workdir, n_epochs=3, batch_size=100, seed=7, shuffle_options=OPTIONS) as epochs:
        orders = [epoch_ids(loader) for loader in epochs]
        assert len(epochs) == 3
    for order in orders:
        np.testing.assert_array_equal(np.sort(order), np.arange(N_ROWS))
    # Three independent uniform orders of 1,000 rows: equal prefixes of 20 ids have probability ~1e-60.
    assert len({order[:20].tobytes() for order in orders}) == 3
    # Epoch e is exactly shuffle_zarr with the epoch's seed, read by a PileLoader.
    daskshuffle.shuffle_zarr(source, tmp_path / "e1.zarr", seed=epoch_seed(7, 1), **OPTIONS)
    with PileLoader(tmp_path / "e1.zarr", 100) as loader:
        np.testing.assert_array_equal(epoch_ids(loader), orders[1])
    assert not workdir.exists()


def test_epoch_seeds_are_drawn_not_added() -> None:
    seeds = {epoch_seed(seed, epoch) for seed in range(4) for epoch in range(4)}
    assert len(seeds) == 16  # seed + epoch would give 7 distinct values


class Shuffles:
    """A shuffle that records the stores that exist when each starts, and counts those that finished."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.seen: list[list[str]] = []
        self.finished = 0

    def __call__(self, src: Any, dst: Any, **kwargs: Any) -> Any:
        self.seen.append([*stores(self.workdir), Path(dst).name])
        try:
            return daskshuffle.shuffle_zarr(src, dst, **kwargs)
        finally:
            self.finished += 1

    def wait_until_finished(self, n: int, timeout: float = 60) -> None:
        """Poll until ``n`` shuffles have finished, and every shuffle started has: the producer is idle."""
        deadline = time.monotonic() + timeout
        while not (self.finished >= n and self.finished == len(self.seen)):
            assert time.monotonic() < deadline, f"{self.finished} of {n} shuffles finished in {timeout} s"
            time.sleep(0.005)


def test_at_most_max_concurrent_epochs_stores_exist(source: str, tmp_path: Path) -> None:
    workdir = tmp_path / "epochs"
    shuffle = Shuffles(workdir)
    seen = shuffle.seen

    with EpochShuffler(
        source, workdir, n_epochs=5, batch_size=250, seed=1, shuffle=shuffle, shuffle_options=OPTIONS
    ) as epochs:
        for epoch, loader in enumerate(epochs):
            # A slow consumer: the next epoch is shuffled meanwhile, and an unbounded producer would go on to
            # the one after while this one is still held (which the stores it saw on starting would show).
            shuffle.wait_until_finished(min(epoch + 2, 5))
            existing = stores(workdir)
            assert len(existing) <= 2
            assert f"epoch-{epoch:05d}.zarr" in existing
            assert len(epoch_ids(loader)) == N_ROWS
    assert len(seen) == 5
    for epoch, names in enumerate(seen):  # when epoch e's shuffle starts, only epoch e - 1 may remain
        assert set(names) <= {f"epoch-{e:05d}.zarr" for e in (epoch - 1, epoch)}
    assert not workdir.exists()


def test_one_epoch_at_a_time_with_max_one(source: str, tmp_path: Path) -> None:
    workdir = tmp_path / "epochs"
    shuffle = Shuffles(workdir)
    with EpochShuffler(
        source,
        workdir,
        n_epochs=3,
        batch_size=500,
        seed=1,
        max_concurrent_epochs=1,
        shuffle=shuffle,
        shuffle_options=OPTIONS,
    ) as epochs:
        for epoch, _ in enumerate(epochs):
            shuffle.wait_until_finished(epoch + 1)  # nothing is shuffled ahead, however long the epoch
            assert stores(workdir) == [f"epoch-{epoch:05d}.zarr"]
    assert [names[-1] for names in shuffle.seen] == [f"epoch-{epoch:05d}.zarr" for epoch in range(3)]
    for epoch, names in enumerate(shuffle.seen):  # epoch e starts once epoch e - 1 is gone
        assert names == [f"epoch-{epoch:05d}.zarr"]


def test_breaking_off_and_closing_leaves_nothing(source: str, tmp_path: Path) -> None:
    workdir = tmp_path / "epochs"
    epochs = EpochShuffler(source, workdir, n_epochs=4, batch_size=100, seed=2, shuffle_options=OPTIONS)
    for loader in epochs:
        next(iter(loader))
        break
    epochs.close()
    assert not workdir.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.zarr"]


def test_a_workdir_with_other_files_is_kept(source: str, tmp_path: Path) -> None:
    workdir = tmp_path / "epochs"
    workdir.mkdir()
    (workdir / "notes.txt").write_text("mine")
    with EpochShuffler(source, workdir, n_epochs=1, batch_size=500, seed=2, shuffle_options=OPTIONS) as epochs:
        for loader in epochs:
            epoch_ids(loader)
    assert sorted(p.name for p in workdir.iterdir()) == ["notes.txt"]


def test_resume_continues_the_same_batches(source: str, tmp_path: Path) -> None:
    def run(workdir: Path) -> EpochShuffler:
        return EpochShuffler(source, workdir, n_epochs=3, batch_size=100, seed=3, shuffle_options=OPTIONS)

    with run(tmp_path / "whole") as epochs:
        whole = [batch["id"] for loader in epochs for batch in loader]

    saved: dict[str, Any] = {}
    with run(tmp_path / "first") as epochs:
        taken = []
        for epoch, loader in enumerate(epochs):
            for i, batch in enumerate(loader):
                taken.append(batch["id"])
                if epoch == 1 and i == 3:
                    saved = epochs.state_dict()
                    break
            if saved:
                break
    assert saved["epoch"] == 1
    assert not (tmp_path / "first").exists()  # the stores are gone: resuming shuffles epoch 1 again

    with run(tmp_path / "second") as epochs:
        epochs.load_state_dict(saved)
        rest = [batch["id"] for loader in epochs for batch in loader]
    resumed = taken + rest
    assert len(resumed) == len(whole) == 30
    for got, want in zip(resumed, whole, strict=True):
        np.testing.assert_array_equal(got, want)


def test_resume_refuses_another_seed(source: str, tmp_path: Path) -> None:
    with EpochShuffler(source, tmp_path / "e", n_epochs=1, batch_size=100, seed=3) as epochs:
        state = epochs.state_dict()
    with (
        EpochShuffler(source, tmp_path / "e", n_epochs=1, batch_size=100, seed=4) as epochs,
        pytest.raises(DaskShuffleValueError, match="seed=3"),
    ):
        epochs.load_state_dict(state)


@pytest.mark.slow
def test_ranks_share_each_epoch_and_wait_for_each_other(source: str, tmp_path: Path) -> None:
    workdir = tmp_path / "epochs"
    got: dict[int, list[np.ndarray]] = {0: [], 1: []}
    errors: list[BaseException] = []
    read_by_rank_0 = [threading.Event() for _ in range(3)]

    def train(rank: int) -> None:
        try:
            with EpochShuffler(
                source, workdir, n_epochs=3, batch_size=50, seed=5, rank=rank, world_size=2, shuffle_options=OPTIONS
            ) as epochs:
                for epoch, loader in enumerate(epochs):
                    if rank == 1:
                        # A slower rank, reading each epoch only once rank 0 has read it and moved on: rank 0
                        # must not remove the store under it.
                        assert read_by_rank_0[epoch].wait(timeout=60), f"rank 0 did not read epoch {epoch}"
                    got[rank].append(epoch_ids(loader))
                    if rank == 0:
                        read_by_rank_0[epoch].set()
        except BaseException as error:  # surfaced in the test's thread below
            errors.append(error)

    threads = [threading.Thread(target=train, args=(rank,)) for rank in (1, 0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    import traceback

    assert not errors, [traceback.format_exception(error) for error in errors]
    for epoch in range(3):
        both = np.concatenate([got[0][epoch], got[1][epoch]])
        np.testing.assert_array_equal(np.sort(both), np.arange(N_ROWS))
        assert abs(len(got[0][epoch]) - len(got[1][epoch])) <= 50
    assert not workdir.exists()


def test_closing_a_rank_that_waits_for_rank_0_ends_its_wait(source: str, tmp_path: Path) -> None:
    """A rank other than 0 polls storage for rank 0's store; a close from another thread ends that wait at once
    (not after ``WAIT_SECONDS``), and the iteration ends with nothing yielded."""
    epochs = EpochShuffler(
        source, tmp_path / "epochs", n_epochs=2, batch_size=50, seed=0, rank=1, world_size=2, shuffle_options=OPTIONS
    )
    iterating, ended = threading.Event(), threading.Event()
    yielded: list[PileLoader] = []

    def train() -> None:
        iterating.set()
        yielded.extend(epochs)  # no rank 0 runs: it waits for a store that never comes
        ended.set()

    thread = threading.Thread(target=train, daemon=True)
    thread.start()
    assert iterating.wait(timeout=60)
    epochs.close()
    assert ended.wait(timeout=60), "the close did not end the wait for rank 0"
    assert yielded == []


def test_a_failed_shuffle_surfaces_in_the_training_loop(tmp_path: Path) -> None:
    with (
        EpochShuffler(tmp_path / "missing.zarr", tmp_path / "e", n_epochs=2, batch_size=10, seed=0) as epochs,
        pytest.raises(FileNotFoundError, match=r"missing\.zarr"),
    ):
        next(iter(epochs))
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"n_epochs": 0}, "n_epochs"),
        ({"batch_size": -1}, "batch_size"),
        ({"max_concurrent_epochs": 0}, "max_concurrent_epochs"),
        ({"rank": 2, "world_size": 2}, "rank"),
        ({"shuffle_options": {"seed": 1}}, "shuffle_options"),
        ({"shuffle_options": {"overwrite": True}}, "shuffle_options"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    source: str, tmp_path: Path, kwargs: dict[str, Any], parameter: str
) -> None:
    arguments: dict[str, Any] = {"n_epochs": 2, "batch_size": 10, **kwargs}
    with pytest.raises(DaskShuffleValueError) as error:
        EpochShuffler(source, tmp_path / "e", **arguments)
    assert error.value.parameter == parameter
    assert not (tmp_path / "e").exists()


def test_shuffles_run_on_the_current_client(cluster_client: Any, tmp_path: Path) -> None:
    from distributed import get_task_stream

    source = make_zarr_source(tmp_path / "raw.zarr", N_ROWS, chunk_rows=64)
    with (
        get_task_stream(client=cluster_client) as stream,
        cluster_client.as_current(),
        EpochShuffler(source, tmp_path / "c", n_epochs=2, batch_size=100, seed=9, shuffle_options=OPTIONS) as e,
    ):
        on_cluster = [epoch_ids(loader) for loader in e]
    assert len(stream.data) > 0  # the background shuffles ran on the cluster's workers
    with EpochShuffler(source, tmp_path / "t", n_epochs=2, batch_size=100, seed=9, shuffle_options=OPTIONS) as e:
        on_threads = [epoch_ids(loader) for loader in e]
    for a, b in zip(on_cluster, on_threads, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_plain_for_loop_to_the_end_leaves_nothing(source: str, tmp_path: Path) -> None:
    workdir = tmp_path / "epochs"
    epochs = EpochShuffler(source, workdir, n_epochs=2, batch_size=250, seed=4, shuffle_options=OPTIONS)
    for loader in epochs:  # as the README shows: no with, no close()
        epoch_ids(loader)
    assert not workdir.exists()
    assert epochs.state_dict()["epoch"] == 2


def test_a_dropped_half_used_shuffler_leaves_nothing(source: str, tmp_path: Path) -> None:
    import gc

    workdir = tmp_path / "epochs"
    epochs = EpochShuffler(source, workdir, n_epochs=3, batch_size=250, seed=4, shuffle_options=OPTIONS)
    iterator = iter(epochs)
    next(iter(next(iterator)))  # one batch of the first epoch, the second epoch shuffled ahead
    assert stores(workdir)
    del epochs, iterator
    gc.collect()
    assert not workdir.exists()


def test_unknown_shuffle_options_are_a_type_error_before_anything_is_written(source: str, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"\['n_pile'\]"):
        EpochShuffler(source, tmp_path / "e", n_epochs=2, batch_size=10, shuffle_options={"n_pile": 4})
    with pytest.raises(TypeError, match="dict of arguments"):
        EpochShuffler(source, tmp_path / "e", n_epochs=2, batch_size=10, shuffle_options=[("n_piles", 4)])
    assert not (tmp_path / "e").exists()


@pytest.mark.slow
def test_every_crash_window_resumes_with_exactly_the_remaining_batches(source: str, tmp_path: Path) -> None:
    """A state saved anywhere (before, at and after every batch, between epochs, at the end) resumes exactly."""
    import json

    def run(workdir: str) -> EpochShuffler:
        return EpochShuffler(source, tmp_path / workdir, n_epochs=2, batch_size=500, seed=3, shuffle_options=OPTIONS)

    # Each window: the batches handed out so far, and the state a crash there would have left behind.
    windows: list[tuple[str, int, dict[str, Any]]] = []
    whole: list[np.ndarray] = []

    def save(where: str) -> None:
        windows.append((where, len(whole), json.loads(json.dumps(epochs.state_dict()))))

    with run("whole") as epochs:
        save("before the first epoch")
        for epoch, loader in enumerate(epochs):
            save(f"epoch {epoch}, before its first batch")
            for i, batch in enumerate(loader):
                whole.append(batch["id"])
                save(f"epoch {epoch}, after batch {i}")
            save(f"epoch {epoch}, after its loop")
        save("after the last epoch")
    assert len(whole) == 4

    for where, taken, state in windows:
        with run(f"resumed-{len(list(tmp_path.iterdir()))}") as epochs:
            epochs.load_state_dict(state)
            rest = [batch["id"] for loader in epochs for batch in loader]
        assert len(rest) == len(whole) - taken, f"{where}: {len(rest)} batches where {len(whole) - taken} remain"
        for got, want in zip(rest, whole[taken:], strict=True):
            np.testing.assert_array_equal(got, want, err_msg=where)
