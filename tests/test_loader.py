"""PileLoader's own mechanics on a real Zarr pile store: epochs, resume, prefetch, shutdown, bad input.

What every kind of pile store guarantees (each row once, the planned batches, ranks, exact resume,
damage) is checked over every kind in ``test_pile_stores.py``.
"""

from __future__ import annotations

import gc
import json
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import consume, interruptible, make_zarr_source
from simulate import unit_groups, unit_stream

import daskshuffle as ds
from daskshuffle import DaskShuffleValueError, IncompletePileStoreError, PileLoader, SourceNotFoundError
from daskshuffle.epochs import unit_bounds
from daskshuffle.orders import Piles

N_ROWS = 1_000
SEED = 3
BATCH = 64
ROW_NBYTES = 4 * 4 + 8 + 2  # x float32[4], id int64 and y int16 (make_zarr_source)
#: Groups of 150 rows, units of one chunk (16 rows): seven reads an epoch, for the tests of reads and threads.
ORDER = Piles(budget=f"{300 * ROW_NBYTES}B")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """1,000 rows in 7 piles of 124 to 153 rows, stored in chunks of 16 rows."""
    root = tmp_path_factory.mktemp("loader")
    source = make_zarr_source(root / "raw.zarr", N_ROWS, chunk_rows=64)
    ds.shuffle_zarr(source, root / "piles.zarr", n_piles=7, seed=SEED, chunk_rows=16)
    return str(root / "piles.zarr")


@pytest.fixture
def copy_of(store: str, tmp_path: Path) -> str:
    """A copy of the store that a test may damage."""
    return str(shutil.copytree(store, tmp_path / "copy.zarr"))


def offsets_of(store: str) -> np.ndarray:
    return np.asarray(zarr.open_group(store, mode="r").attrs["daskshuffle"]["pile_offsets"], dtype=np.int64)


def expected_rows(store: str, epoch: int, *, order: Piles = ORDER, seed: int = SEED) -> np.ndarray:
    """The store rows a loader of ``order`` should yield, in order, from the pure plan."""
    with PileLoader(store, BATCH, seed=seed, order=order) as loader:
        unit_rows, group_rows = loader.settings.unit_rows, loader.settings.group_rows
    assert unit_rows is not None and group_rows is not None
    return unit_stream(N_ROWS, unit_rows, group_rows, seed, epoch)


def ids_of(batches: Iterable[dict]) -> np.ndarray:
    return np.concatenate([batch["id"] for batch in batches])


def store_ids(store: str) -> np.ndarray:
    return zarr.open_group(store, mode="r")["id"][:]


def loader_threads() -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith("daskshuffle-loader")]


def damage_rows_outside(store: str, keep: list[tuple[int, int]]) -> int:
    """Overwrite every chunk whose rows all lie outside the ``keep`` row ranges; return how many."""
    damaged = 0
    for name, array in zarr.open_group(store, mode="r").arrays():
        rows = int(array.chunks[0])
        for path in (Path(store) / name / "c").rglob("*"):
            chunk = int(path.relative_to(Path(store) / name / "c").parts[0])
            first, last = chunk * rows, (chunk + 1) * rows
            if path.is_file() and not any(first < stop and start < last for start, stop in keep):
                path.write_bytes(b"not a chunk")
                damaged += 1
    return damaged


def group_rows_of(store: str, epoch: int, groups: Iterable[int]) -> list[tuple[int, int]]:
    """The runs of store rows of ``groups`` of ``epoch`` of a loader of :data:`ORDER`, from the plan alone."""
    with PileLoader(store, BATCH, order=ORDER) as loader:
        unit_rows, group_rows = loader.settings.unit_rows, loader.settings.group_rows
    assert unit_rows is not None and group_rows is not None
    bounds = unit_bounds(N_ROWS, unit_rows)
    _, dealt = unit_groups(bounds, group_rows, SEED, epoch)
    return [(int(bounds[u]), int(bounds[u + 1])) for group in groups for u in dealt[group].tolist()]


# -- one epoch -------------------------------------------------------------------


def test_epochs_differ_and_iterating_again_moves_to_the_next_epoch(store: str) -> None:
    with PileLoader(store, batch_size=BATCH) as loader:
        assert loader.epoch == 0
        first = ids_of(loader)
        assert loader.epoch == 1
        second = ids_of(loader)
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(np.sort(first), np.sort(second))
    with PileLoader(store, batch_size=BATCH) as fresh:
        fresh.set_epoch(1)
        np.testing.assert_array_equal(ids_of(fresh), second)


def test_same_seed_and_epoch_give_the_same_batches(store: str) -> None:
    with (
        PileLoader(store, batch_size=BATCH) as a,
        PileLoader(store, batch_size=BATCH, seed=SEED, prefetch="64MiB") as b,
    ):
        for epoch in (0, 5):
            a.set_epoch(epoch)
            b.set_epoch(epoch)
            for left, right in zip(a, b, strict=True):
                for name in left:
                    np.testing.assert_array_equal(left[name], right[name])
    # seed=None is the store's seed; another seed gives another order.
    with PileLoader(store, batch_size=BATCH, seed=SEED + 1) as other:
        assert not np.array_equal(ids_of(other), store_ids(store)[expected_rows(store, 0, order=Piles())])


def test_variables_selects_what_is_read(store: str) -> None:
    with PileLoader(store, batch_size=100, variables=["id"]) as loader:
        batch = next(iter(loader))
        assert list(batch) == ["id"]
        assert loader.variables == ["id"]


# -- ranks -------------------------------------------------------------------------


def test_io_does_not_grow_with_world_size(store: str) -> None:
    """A rank reads the groups it has rows of: all ranks together, at most one more read per rank."""
    with PileLoader(store, 8, order=ORDER) as alone:
        n_groups = len({segment.pile for segment in alone.plan(0).segments})
    assert n_groups > 4
    for world_size in (2, 4, 8):
        read = 0
        for rank in range(world_size):
            with PileLoader(store, 8, order=ORDER, rank=rank, world_size=world_size) as loader:
                read += len({segment.pile for segment in loader.plan(0).segments})
        assert read <= n_groups + world_size - 1


# -- resume ------------------------------------------------------------------------


def test_resume_reads_no_group_before_the_one_it_continues_in(store: str, copy_of: str) -> None:
    with PileLoader(store, BATCH, order=ORDER) as loader:
        reference = [batch["id"] for batch in loader]
        k = 9
        groups = [segment.pile for segment in loader.plan(0).segments]
        needed = sorted({segment.pile for segment in loader.plan(0, start=k).segments})
    assert min(needed) > min(groups), "choose k past the first group"
    assert damage_rows_outside(copy_of, group_rows_of(copy_of, 0, needed)) > 0
    state = {**PileLoader(store, BATCH, order=ORDER).state_dict(), "batches": k}
    with PileLoader(copy_of, BATCH, order=ORDER) as resumed:
        resumed.load_state_dict(state)
        rest = [batch["id"] for batch in resumed]
    assert len(rest) == len(reference) - k
    for got, want in zip(rest, reference[k:], strict=True):
        np.testing.assert_array_equal(got, want)
    with (
        PileLoader(copy_of, BATCH, order=ORDER) as from_start,
        pytest.raises(ds.CorruptPileStoreError, match="crc32c"),
    ):
        list(from_start)


def test_resume_in_a_new_process(store: str, tmp_path: Path) -> None:
    with PileLoader(store, BATCH, world_size=2, rank=1) as loader:
        reference = consume(loader, 2 * len(loader))
    with PileLoader(store, BATCH, world_size=2, rank=1) as loader:
        consume(loader, 11)
        (tmp_path / "state.json").write_text(json.dumps(loader.state_dict()))
    code = textwrap.dedent(
        f"""
        import json, sys
        import numpy as np
        from daskshuffle import PileLoader
        loader = PileLoader({store!r}, {BATCH}, world_size=2, rank=1)
        loader.load_state_dict(json.loads(open({str(tmp_path / "state.json")!r}).read()))
        ids = [batch["id"] for batch in loader]
        np.save({str(tmp_path / "rest.npy")!r}, np.concatenate(ids))
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    # The new process finishes epoch 1 from its twelfth batch on.
    np.testing.assert_array_equal(np.load(tmp_path / "rest.npy"), np.concatenate(reference[11:]))


def test_a_state_of_another_store_or_other_settings_is_refused(store: str, tmp_path: Path) -> None:
    with PileLoader(store, BATCH) as loader:
        consume(loader, 3)
        state = loader.state_dict()
    other = ds.shuffle_zarr(make_zarr_source(tmp_path / "raw.zarr", 500), tmp_path / "other.zarr", n_piles=3, seed=0)
    with pytest.raises(DaskShuffleValueError, match=r"Expected a state saved by a loader of .* another store"):
        PileLoader(other.path, BATCH).load_state_dict(state)
    with pytest.raises(DaskShuffleValueError, match=r"settings differ .*batch_size: saved 64, here 32"):
        PileLoader(store, 32).load_state_dict(state)
    with pytest.raises(DaskShuffleValueError, match=r"settings differ .*world_size: saved 1, here 2.*set_epoch"):
        PileLoader(store, BATCH, world_size=2).load_state_dict(state)
    with pytest.raises(DaskShuffleValueError, match=r"seed: saved 3, here 4"):
        PileLoader(store, BATCH, seed=4).load_state_dict(state)
    with pytest.raises(DaskShuffleValueError, match=r"Expected a dict returned by PileLoader.state_dict"):
        PileLoader(store, BATCH).load_state_dict({"epoch": 1})
    with pytest.raises(DaskShuffleValueError, match=r"at most 16, the batches per epoch. Got 17 instead"):
        PileLoader(store, BATCH).load_state_dict({**state, "batches": 17})
    with pytest.raises(DaskShuffleValueError, match=r"version 1. Got version 99"):
        PileLoader(store, BATCH).load_state_dict({**state, "version": 99})


# -- prefetch and shutdown ---------------------------------------------------------


def used(batches: Iterable[Any], seconds: float = 0.002) -> Iterator[Any]:
    """``batches``, each kept for ``seconds`` as a training step would: then background threads read ahead."""
    for batch in batches:
        yield batch
        time.sleep(seconds)


def test_reads_run_in_one_pool_for_every_consumer_and_give_the_same_batches(store: str) -> None:
    """A consumer that comes straight back and one away with each batch: the same pool, the same batches."""
    batches = {}
    for prefetch in ("0B", "auto", "2KiB", "64MiB"):
        with PileLoader(store, BATCH, order=ORDER, prefetch=prefetch) as loader:
            got, threads = [], set()
            for batch in loader:
                got.append(batch["id"])
                threads.update(loader_threads())
            assert len(threads) == 1, "one pool of reader threads"
            again = [batch["id"] for batch in used(loader.iter_batches(0))]
        batches[prefetch] = got
        assert all(np.array_equal(a, b) for a, b in zip(got, again, strict=True))
    for got in batches.values():
        assert all(np.array_equal(a, b) for a, b in zip(got, batches["auto"], strict=True))


def test_prefetch_is_a_size_and_a_number_is_refused(store: str) -> None:
    with pytest.raises(ds.DaskShuffleTypeError, match=r"Expected prefetch to be a size such as '512MiB'.*Got 2") as e:
        PileLoader(store, BATCH, prefetch=2)  # type: ignore[arg-type]
    assert e.value.parameter == "prefetch"
    with pytest.raises(DaskShuffleValueError, match="Expected prefetch to be a size"):
        PileLoader(store, BATCH, prefetch="-1B")


def test_breaking_out_of_the_loop_stops_the_background_reads(store: str) -> None:
    loader = PileLoader(store, BATCH, order=ORDER, prefetch="64MiB")
    for index, _ in enumerate(used(loader)):
        if index == 3:
            assert loader_threads()
            break
    assert loader_threads() == []
    assert loader.state_dict()["batches"] == 4
    loader.close()


def test_close_context_manager_and_garbage_collection_join_the_threads(store: str) -> None:
    loader = PileLoader(store, BATCH, order=ORDER)
    list(used(loader))  # a whole epoch: the next epoch's first pile is read ahead
    assert loader_threads()
    loader.close()
    assert loader_threads() == []

    with PileLoader(store, BATCH, order=ORDER) as loader:
        iterator = iter(used(loader))
        for _ in range(4):
            next(iterator)
        assert loader_threads()
    assert loader_threads() == []
    with pytest.raises(StopIteration):
        next(iterator)

    loader = PileLoader(store, BATCH, order=ORDER)
    list(used(loader))
    iterator = iter(loader)
    next(iterator)
    assert loader_threads()
    del loader, iterator
    gc.collect()
    assert loader_threads() == []

    loader = PileLoader(store, BATCH, order=ORDER)
    list(used(loader))  # no iteration in progress, but the next epoch is being read ahead
    assert loader_threads()
    del loader
    gc.collect()
    assert loader_threads() == []


def test_a_new_iteration_replaces_one_in_progress(store: str) -> None:
    with PileLoader(store, BATCH, order=ORDER) as loader:
        first = iter(loader)
        head = [next(first)["id"] for _ in range(2)]
        rest = ids_of(loader)  # continues epoch 0 after the two batches handed out
        assert next(first, None) is None
        np.testing.assert_array_equal(np.concatenate([*head, rest]), store_ids(store)[expected_rows(store, 0)])


@pytest.mark.parametrize("prefetch", ["0B", "auto"])
def test_a_second_thread_iterating_the_loader_is_refused(store: str, prefetch: str) -> None:
    """One loader, one consumer: a thread that iterates while another thread's iteration is open gets an error."""
    started, both_tried = threading.Barrier(2, timeout=30), threading.Barrier(2, timeout=30)
    got: dict[str, np.ndarray] = {}
    refused: dict[str, BaseException] = {}

    def consume_epoch(name: str, loader: PileLoader) -> None:
        started.wait()  # both threads ask for an iteration before either takes a batch
        try:
            batches = iter(loader)
        except Exception as error:
            refused[name] = error
            both_tried.wait()
            return
        both_tried.wait()
        got[name] = ids_of(batches)

    with PileLoader(store, 10, prefetch=prefetch, order=ORDER) as loader:
        threads = [threading.Thread(target=consume_epoch, args=(name, loader), name=name) for name in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(refused) == 1 and len(got) == 1, (refused, list(got))
        (error,) = refused.values()
        assert isinstance(error, DaskShuffleValueError), repr(error)
        assert "Expected one consumer per PileLoader" in str(error) and "thread" in str(error)
        # The one consumer gets the epoch, each row once; the position follows it alone.
        (ids,) = got.values()
        np.testing.assert_array_equal(ids, store_ids(store)[expected_rows(store, 0)])
        assert loader.state_dict()["epoch"] == 1
        # Once that iteration is over, another thread may iterate: the next epoch.
        after: list[np.ndarray] = []
        thread = threading.Thread(target=lambda: after.append(ids_of(loader)))
        thread.start()
        thread.join(timeout=60)
        assert len(after) == 1 and len(after[0]) == N_ROWS


def test_moving_the_position_under_another_threads_iteration_is_refused(store: str) -> None:
    with PileLoader(store, BATCH, order=ORDER) as loader:
        batches = iter(loader)
        first = next(batches)
        errors: list[BaseException] = []

        def move() -> None:
            for call in (lambda: loader.set_epoch(3), lambda: loader.load_state_dict(loader.state_dict())):
                try:
                    call()
                except Exception as error:
                    errors.append(error)

        thread = threading.Thread(target=move)
        thread.start()
        thread.join(timeout=60)
        assert len(errors) == 2 and all(isinstance(error, DaskShuffleValueError) for error in errors), errors
        rest = ids_of(batches)  # the iteration goes on, untouched
        np.testing.assert_array_equal(np.concatenate([first["id"], rest]), store_ids(store)[expected_rows(store, 0)])


def test_keyboard_interrupt_stops_the_background_reads(store: str) -> None:
    code = textwrap.dedent(
        f"""
        import os, signal, threading
        from daskshuffle import PileLoader
        loader = PileLoader({store!r}, 8, prefetch="64MiB")
        try:
            for index, batch in enumerate(loader):
                if index == 5:
                    os.kill(os.getpid(), signal.SIGINT)
        except KeyboardInterrupt:
            print("interrupted", [t.name for t in threading.enumerate() if t.name.startswith("daskshuffle")])
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, preexec_fn=interruptible
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "interrupted []"


def test_the_loader_needs_no_dask(store: str) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["dask"] = sys.modules["distributed"] = None  # any import of them now fails
        from daskshuffle import PileLoader
        with PileLoader({store!r}, 100, prefetch="64MiB") as loader:
            assert sum(len(batch["id"]) for batch in loader) == {N_ROWS}
        print(sorted(name for name in sys.modules if name.split(".")[0] in ("dask", "distributed")))
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "['dask', 'distributed']"  # only the two blocked entries


def test_a_loader_given_sizes_as_strings_loads_no_dask(store: str) -> None:
    """Sizes in words (``prefetch="8MiB"``, ``Piles("16MiB")``) are read without dask, through a whole epoch."""
    code = textwrap.dedent(
        f"""
        import sys
        import daskshuffle as ds
        with ds.PileLoader({store!r}, 100, prefetch="8MiB", order=ds.orders.Piles("16MiB")) as loader:
            assert sum(len(batch["id"]) for batch in loader) == {N_ROWS}
        print(sorted({{name.split(".")[0] for name in sys.modules}} & {{"dask", "distributed"}}))
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_a_progress_bar_is_the_loader_wrapped(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``tqdm(loader)`` takes the epoch's length; the loader takes no ``progress=`` of its own."""
    from tqdm import tqdm

    with pytest.raises(TypeError, match="unexpected keyword argument 'progress'"):
        PileLoader(store, BATCH, progress=True)  # type: ignore[call-arg]
    with PileLoader(store, BATCH) as loader:
        assert sum(len(batch["id"]) for batch in tqdm(loader, desc="epoch 0", mininterval=0)) == N_ROWS
    err = capsys.readouterr().err
    assert "epoch 0" in err
    assert "16/16" in err


@pytest.fixture(scope="module")
def many_piles(tmp_path_factory: pytest.TempPathFactory) -> ds.ShuffleResult:
    """100,000 rows of 72 bytes in 10 piles of about 720 kB."""
    root = tmp_path_factory.mktemp("memory")
    group = zarr.open_group(root / "raw.zarr", mode="w")
    group.create_array("x", data=np.random.default_rng(0).standard_normal((100_000, 16), dtype=np.float32))
    group.create_array("id", data=np.arange(100_000))
    return ds.shuffle_zarr(root / "raw.zarr", root / "piles.zarr", n_piles=10, seed=0, chunk_rows=1024)


@pytest.mark.parametrize(("prefetch", "ahead"), [("0B", 0), ("auto", 1)])
def test_memory_stays_within_a_few_groups(many_piles: ds.ShuffleResult, prefetch: str, ahead: int) -> None:
    pile_nbytes = int(many_piles.pile_sizes.max()) * (16 * 4 + 8)
    group = Piles(budget=f"{2 * pile_nbytes}B")  # groups of about a pile's bytes
    with PileLoader(many_piles.path, 500, order=group, prefetch=prefetch) as loader:
        list(loader)  # once, so that first imports and caches are not counted
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            for _ in loader:
                time.sleep(0.0005)  # a consumer slower than the reader: the piles read ahead wait
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    # The group being consumed and the one read ahead, plus (measured: about half a group) the
    # permutation of the read in progress and the batch being gathered. Not the 10 piles of the store.
    assert peak < (ahead + 2) * pile_nbytes


# -- bad input -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"batch_size": 0}, ValueError, "Expected batch_size to be a positive integer. Got 0 instead"),
        ({"batch_size": 2.5}, TypeError, "Expected batch_size to be a positive integer. Got 2.5 instead"),
        ({"batch_size": 8, "rank": 2, "world_size": 2}, ValueError, r"rank to lie in \[0, world_size\) = \[0, 2\)"),
        ({"batch_size": 8, "rank": -1}, ValueError, "Expected rank to be an integer >= 0. Got -1"),
        ({"batch_size": 8, "world_size": 0}, ValueError, "Expected world_size to be a positive integer"),
        ({"batch_size": 8, "prefetch": -1}, TypeError, "Expected prefetch to be a size"),
        ({"batch_size": 8, "drop_last": 1}, TypeError, "Expected drop_last to be True or False"),
        ({"batch_size": 8, "variables": ["id", "nope"]}, ValueError, r"Got unknown \['nope'\]"),
        ({"batch_size": 8, "variables": "id"}, TypeError, "Expected variables to be a list of names"),
        ({"batch_size": 8, "seed": -1}, ValueError, "Expected seed to lie in"),
        ({"batch_size": 600, "world_size": 2, "drop_last": True}, ValueError, "at least one batch per epoch"),
    ],
)
def test_bad_arguments_are_refused(store: str, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match) as caught:
        PileLoader(store, **kwargs)
    assert isinstance(caught.value, ds.DaskShuffleError)


def test_a_store_of_no_rows_is_refused_as_empty(tmp_path: Path) -> None:
    group = zarr.open_group(tmp_path / "empty.zarr", mode="w")
    group.create_array("x", shape=(0, 3), dtype="f4", chunks=(10, 3))
    ds.shuffle_zarr(str(tmp_path / "empty.zarr"), str(tmp_path / "piles.zarr"), "auto", seed=0)
    with pytest.raises(ds.DaskShuffleValueError, match=r"Expected a pile store with rows to load. Got one of 0 rows"):
        PileLoader(tmp_path / "piles.zarr", 8)


def test_a_store_that_is_not_a_complete_pile_store_is_refused(copy_of: str, tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError, match=r"Expected an existing pile store. Got .*nowhere.zarr"):
        PileLoader(tmp_path / "nowhere.zarr", 8)
    (tmp_path / "plain").mkdir()
    with pytest.raises(IncompletePileStoreError, match=r"Expected a pile store written by daskshuffle"):
        PileLoader(tmp_path / "plain", 8)
    raw = make_zarr_source(tmp_path / "raw.zarr", 10)
    with pytest.raises(IncompletePileStoreError, match=r"which has no daskshuffle metadata"):
        PileLoader(raw, 8)
    group = zarr.open_group(copy_of, mode="r+")
    metadata = dict(group.attrs["daskshuffle"])
    group.attrs["daskshuffle"] = {**metadata, "complete": False}  # as an interrupted shuffle leaves it
    with pytest.raises(IncompletePileStoreError, match=r"whose shuffle did not finish"):
        PileLoader(copy_of, 8)
    group.attrs["daskshuffle"] = {**metadata, "format_version": 0}
    with pytest.raises(IncompletePileStoreError, match=r"format version 3. Got version 0 .* shuffle the source again"):
        PileLoader(copy_of, 8)


def test_zarr_stores_yield_numpy_or_xarray_batches(tmp_path: Path) -> None:
    src = make_zarr_source(tmp_path / "raw.zarr", 50)
    ds.shuffle_zarr(src, tmp_path / "piles.zarr", n_piles=2, seed=0)
    with pytest.raises(DaskShuffleValueError, match=r"batch_format='numpy' .* or 'xarray' .* for a Zarr pile store"):
        PileLoader(tmp_path / "piles.zarr", batch_size=4, batch_format="arrow")
    # A store shuffled from unnamed Zarr arrays too: its dimensions were named when it was written.
    xarray_loader = PileLoader(tmp_path / "piles.zarr", batch_size=4, seed=0, batch_format="xarray")
    numpy_loader = PileLoader(tmp_path / "piles.zarr", batch_size=4, seed=0)
    batch, numpy_batch = next(iter(xarray_loader)), next(iter(numpy_loader))
    # Its rows take what numpy rows take: the same units under the budget.
    settings = [(loader.settings.unit_rows, loader.settings.group_rows) for loader in (xarray_loader, numpy_loader)]
    assert settings[0] == settings[1]
    assert sorted(batch.data_vars) == sorted(numpy_batch)
    for name, values in numpy_batch.items():
        np.testing.assert_array_equal(batch[name].values, values)


# -- ranges of batches ---------------------------------------------------------------


def test_a_range_of_batches_leaves_the_position_alone_and_stops_with_close(store: str) -> None:
    with PileLoader(store, BATCH, order=ORDER, prefetch="64MiB") as loader:
        iterator = iter(loader)
        first = next(iterator)["id"]
        state = loader.state_dict()
        head = [batch["id"] for batch in loader.iter_batches(0, 0, 4)]
        assert loader.state_dict() == state
        np.testing.assert_array_equal(head[0], first)
        # The iteration in progress goes on with the same batches, unaffected by the range's reads.
        for want in head[1:]:
            np.testing.assert_array_equal(next(iterator)["id"], want)
        unfinished = used(loader.iter_batches(1))
        for _ in range(4):
            next(unfinished)
        assert loader_threads()
    assert loader_threads() == []
    with pytest.raises(DaskShuffleValueError, match="closed instead, before batch 4 of epoch 1"):
        next(unfinished)  # not an end, as if the range were whole


def test_batches_are_gathered_into_the_arrays_allocate_makes(store: str) -> None:
    made = []

    def allocate(n_rows: int, layout: dict) -> dict:
        arrays = {name: np.full((n_rows, *shape), -1, dtype=dtype) for name, (dtype, shape) in layout.items()}
        made.append(arrays)
        return arrays

    with PileLoader(store, BATCH, order=ORDER) as loader:
        batches = list(loader.iter_batches(0, allocate=allocate))
        assert len(made) == len(batches) == len(loader)
        for batch, arrays in zip(batches, made, strict=True):
            assert all(batch[name] is arrays[name] for name in arrays)
        np.testing.assert_array_equal(ids_of(batches), store_ids(store)[expected_rows(store, 0)])


# -- gathering -----------------------------------------------------------------------


@pytest.mark.parametrize("arrays", [True, False], ids=["numpy take", "reader take"])
@pytest.mark.parametrize("position", [-1, 10, 11])
def test_a_position_out_of_the_pile_raises_rather_than_repeating_a_row(store: str, arrays: bool, position: int) -> None:
    from daskshuffle.epochs._epoch_plan import BatchPlan, Segment
    from daskshuffle.loader._batches import gather_batches
    from daskshuffle.loader._reads import ShuffledPile
    from daskshuffle.readers import open_pile_reader

    reader = open_pile_reader(store)
    rows = reader.read_rows(0, 10)
    order = np.array([0, 1, 2, position], dtype=np.intp)
    pile = ShuffledPile(rows, reader.rows.as_arrays(rows) if arrays else None, order, 10, "rows 0:10")
    with pytest.raises(
        IndexError, match=rf"Expected positions in 0:10, .* Got 1 out of range \(the first {position}\)"
    ):
        list(gather_batches(reader.rows, BatchPlan([Segment(0, 0, 4)], 4), lambda segment: pile))
    # A plan that asks for more positions than the pile's order holds.
    pile = ShuffledPile(rows, reader.rows.as_arrays(rows), order[:3], 10, "rows 0:10")
    with pytest.raises(IndexError, match=r"Expected positions 0:4 of segment 0's order. Got an order of 3"):
        list(gather_batches(reader.rows, BatchPlan([Segment(0, 0, 4)], 4), lambda segment: pile))
    reader.close()


@pytest.mark.parametrize("arrays", [True, False], ids=["numpy take", "reader take"])
@pytest.mark.parametrize("variable", ["id", "x", "y"])
def test_a_variable_shorter_than_its_pile_is_corrupt_never_repeated_rows(
    store: str, arrays: bool, variable: str
) -> None:
    """Every variable is checked against the rows its read records, not only the first: none is clipped."""
    from daskshuffle import CorruptPileStoreError
    from daskshuffle.epochs._epoch_plan import BatchPlan, Segment
    from daskshuffle.loader._batches import gather_batches
    from daskshuffle.loader._reads import ShuffledPile
    from daskshuffle.readers import open_pile_reader

    reader = open_pile_reader(store)
    rows = reader.read_rows(0, 10)
    short = {**rows, variable: rows[variable][:9]}  # one variable lost its last row, the others did not
    order = np.arange(10, dtype=np.intp)[::-1].copy()  # the last row first: a clipped gather repeats row 8
    pile = ShuffledPile(short, reader.rows.as_arrays(short) if arrays else None, order, 10, "pile 0 (rows 0:10)")
    with pytest.raises(
        CorruptPileStoreError, match=rf"Expected 10 rows of variable '{variable}' in pile 0 \(rows 0:10\).* Got 9"
    ):
        list(gather_batches(reader.rows, BatchPlan([Segment(0, 0, 10)], 10), lambda segment: pile))
    reader.close()


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_peek_costs_no_rows(store: str, world_size: int) -> None:
    """``peek`` gives the next batch and leaves it to the next iteration; ``next(iter(...))`` takes it."""
    with PileLoader(store, batch_size=BATCH, seed=SEED, rank=world_size - 1, world_size=world_size) as loader:
        peeked = loader.peek()
        assert loader.state_dict()["batches"] == 0
        epoch = list(loader)
        assert np.array_equal(peeked["id"], epoch[0]["id"])
        with PileLoader(store, batch_size=BATCH, seed=SEED, rank=world_size - 1, world_size=world_size) as fresh:
            assert np.array_equal(ids_of(epoch), ids_of(fresh))  # every row of the epoch, none lost to the peek
        taken = next(iter(loader))  # epoch 1's first batch, taken: the next iteration starts after it
        rest = list(loader)
        assert len(rest) == len(loader) - 1 and not np.isin(taken["id"], ids_of(rest)).any()


def test_a_cache_for_a_local_store_warns_that_it_does_nothing(store: str, tmp_path: Path) -> None:
    with pytest.warns(ds.IneffectiveSettingWarning, match="read where it lies, so the cache does nothing"):
        loader = PileLoader(store, batch_size=BATCH, seed=SEED, cache=tmp_path / "cache")
    with loader:
        assert sorted(ids_of(loader).tolist()) == sorted(store_ids(store).tolist())
    assert not any((tmp_path / "cache").rglob("*"))
