"""The one read mode of order="piles": units of whole chunks dealt into groups under a budget, mixed in memory."""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import Points, make_zarr_source
from hypothesis import given, settings, strategies as st
from scipy import stats
from simulate import unit_groups, unit_stream

import daskshuffle
from daskshuffle import PileLoader
from daskshuffle.epochs import auto_budget, epoch_runs, group_permutation, unit_bounds, unit_excess
from daskshuffle.epochs._epoch_plan import rank_range
from daskshuffle.loader._reads import LoaderReads
from daskshuffle.orders import Piles
from daskshuffle.quality._metrics import cobatch_overlap

N_ROWS = 3_000
ROW_NBYTES = 4 * 4 + 8 + 2  # x float32[4], id int64 and y int16 (make_zarr_source)


@given(n_rows=st.integers(0, 300), seed=st.integers(0, 2**31), epoch=st.integers(0, 5))
@settings(max_examples=200, deadline=None)
def test_a_group_is_handed_out_in_a_permutation_drawn_from_the_seed(n_rows: int, seed: int, epoch: int) -> None:
    order = group_permutation(n_rows, seed, epoch, 3)
    assert sorted(order.tolist()) == list(range(n_rows))
    assert np.array_equal(group_permutation(n_rows, seed, epoch, 3), order), "same seed, same order"
    if n_rows > 20:
        assert not np.array_equal(group_permutation(n_rows, seed, epoch, 4), order), "another group, another order"
        assert not np.array_equal(group_permutation(n_rows, seed, epoch + 1, 3), order), "another epoch"


def test_every_order_of_a_group_is_as_likely() -> None:
    """The 24 orders of 4 rows over 24,000 groups: chi-square with 23 degrees of freedom, p > 1e-7 (seeded)."""
    counts = collections.Counter(tuple(group_permutation(4, 7, 0, group).tolist()) for group in range(24_000))
    assert len(counts) == 24
    assert stats.chisquare(list(counts.values())).pvalue > 1e-7


@given(
    n_rows=st.integers(0, 500),
    unit_rows=st.integers(1, 60),
    group_rows=st.integers(1, 300),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 5),
)
@settings(max_examples=200, deadline=None)
def test_every_unit_is_in_one_group_each_epoch(
    n_rows: int, unit_rows: int, group_rows: int, seed: int, epoch: int
) -> None:
    bounds = unit_bounds(n_rows, unit_rows)
    offsets, groups = unit_groups(bounds, group_rows, seed, epoch)
    units = np.concatenate([np.zeros(0, np.int64), *groups])
    assert sorted(units.tolist()) == list(range(len(bounds) - 1))
    sizes = np.diff(bounds)
    assert np.array_equal(np.diff(offsets), [int(sizes[g].sum()) for g in groups])
    assert all(len(g) == 1 or sizes[g].sum() <= group_rows for g in groups), "a group holds at most group_rows"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    source = make_zarr_source(tmp_path / "raw.zarr", N_ROWS, chunk_rows=100)
    daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", 3, seed=5, chunk_rows=50)
    return tmp_path / "piles.zarr"


#: A budget of 600 rows: groups of 300 rows, six units of 50 rows each.
SMALL = Piles(budget=f"{600 * ROW_NBYTES}B")


def test_a_store_is_read_in_units_and_each_epoch_is_a_permutation(store: Path) -> None:
    with PileLoader(store, 64, seed=1, order=SMALL) as loader:
        assert (loader.settings.unit_rows, loader.settings.group_rows) == (50, 300)
        epochs = []
        for _ in range(3):
            batches = list(loader)
            ids = np.concatenate([batch["id"] for batch in batches])
            x = np.concatenate([batch["x"] for batch in batches])
            assert sorted(ids.tolist()) == list(range(N_ROWS))
            assert np.array_equal(x[:, 0], ids.astype(np.float32)), "variables stay aligned"
            epochs.append(ids)
        assert not np.array_equal(epochs[0], epochs[1])
        assert loader.settings.to_dict()["unit_rows"] == 50, "in the state"
    with PileLoader(store, 64, seed=1, order=SMALL) as again:
        assert np.array_equal(np.concatenate([batch["id"] for batch in again]), epochs[0]), "same seed, same order"


def test_each_epoch_is_the_planned_order_of_shuffled_units_interleaved(store: Path) -> None:
    """Store rows dealt in units into groups, each group handed out in a permutation of its own: from the plan alone."""
    stored = zarr.open_group(store, mode="r")["id"][:]
    with PileLoader(store, 64, seed=1, order=SMALL) as loader:
        for epoch in range(3):
            got = np.concatenate([batch["id"] for batch in loader])
            np.testing.assert_array_equal(got, stored[unit_stream(N_ROWS, 50, 300, 1, epoch)])


def test_ranks_are_disjoint_and_cover_and_a_state_resumes_exactly(store: Path) -> None:
    stored = zarr.open_group(store, mode="r")["id"][:]
    whole = []
    for rank in range(3):
        with PileLoader(store, 40, seed=2, rank=rank, world_size=3, order=SMALL) as loader:
            whole.append(np.concatenate([batch["id"] for batch in loader]))
        start, stop = rank_range(N_ROWS, 3, rank, 40, False)
        np.testing.assert_array_equal(whole[-1], stored[unit_stream(N_ROWS, 50, 300, 2, 0)[start:stop]])
    ids = np.concatenate(whole)
    assert len(np.unique(ids)) == len(ids) and len(ids) >= N_ROWS - 3
    with PileLoader(store, 40, seed=2, order=SMALL) as loader:
        iterator = iter(loader)
        first = [next(iterator)["id"] for _ in range(17)]
        state = loader.state_dict()
        rest = [batch["id"] for batch in iterator]
    with PileLoader(store, 40, seed=2, order=SMALL) as resumed:
        resumed.load_state_dict(state)
        assert all(np.array_equal(a, b) for a, b in zip([batch["id"] for batch in resumed], rest, strict=True))
    assert len(first) + len(rest) == len(resumed)


def test_lanes_give_the_same_global_steps_for_any_number_of_ranks(store: Path) -> None:
    order = Piles(budget=f"{600 * ROW_NBYTES}B", n_lanes=4)
    with PileLoader(store, 40, seed=3, order=order) as alone:
        steps = [batch["id"] for batch in alone]
    halves = []
    for rank in range(2):
        with PileLoader(store, 20, seed=3, rank=rank, world_size=2, order=order) as loader:
            halves.append([batch["id"] for batch in loader])
    for step, a, b in zip(steps, *halves, strict=True):
        assert np.array_equal(step, np.concatenate([a, b]))


@pytest.mark.parametrize(("prefetch", "ahead"), [("0B", 0), ("auto", 1), (f"{600 * ROW_NBYTES}B", 2)])
def test_the_rows_held_stay_within_the_budget(
    store: Path, prefetch: str, ahead: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every group handed to the batches, from its read until its release, counted at once."""
    live: dict[int, int] = {}
    most = [0]
    read, release = LoaderReads.read, LoaderReads.release

    def counting_read(self: LoaderReads, job: Any) -> Any:
        pile = read(self, job)
        live[id(pile.rows)] = sum(values.nbytes for values in pile.rows.values())
        most[0] = max(most[0], sum(live.values()))
        return pile

    def counting_release(self: LoaderReads, pile: Any) -> None:
        live.pop(id(pile.rows), None)
        release(self, pile)

    monkeypatch.setattr(LoaderReads, "read", counting_read)
    monkeypatch.setattr(LoaderReads, "release", counting_release)
    budget = 600 * ROW_NBYTES
    with PileLoader(store, 64, seed=1, order=SMALL, prefetch=prefetch) as loader:
        for _ in range(2):
            for _ in loader:
                pass
    held = ahead + 1  # groups: the one in use and those read ahead (as many as the prefetch size holds)
    assert 0 < most[0] <= held * budget // 2


@pytest.mark.slow
def test_epochs_are_close_to_independent_at_large_piles_with_a_small_budget(tmp_path: Path) -> None:
    """Two piles of 10,000 rows, units of 100 rows, groups of 2,000: about 200 / 20**2 + 1 = 1.4x.

    The budget holds less than a pile, so the loader of whole piles reads one
    at a time here: 2x, and n_piles times for more piles. The co-batch overlap
    of three pairs of epochs, batches of 20: over 30 seeds the mean ratio was
    1.38 with a standard deviation of 0.053, largest 1.49. 1.75 is seven
    standard deviations above, 1.0 seven below: a correct loader fails this
    far less than once in a million seeds.
    """
    source = make_zarr_source(tmp_path / "raw.zarr", 20_000, chunk_rows=500)
    daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", 2, seed=11, chunk_rows=100)
    order = Piles(budget=f"{4_000 * ROW_NBYTES}B")
    with PileLoader(tmp_path / "piles.zarr", 20, seed=11, order=order) as loader:
        assert (loader.settings.unit_rows, loader.settings.group_rows) == (100, 2_000)
        epochs = [np.concatenate([batch["id"] for batch in loader]) for _ in range(4)]
    measures = [cobatch_overlap(epochs[e], epochs[e + 1], 20) for e in range(3)]
    ratio = np.mean([m.value for m in measures]) / measures[0].uniform
    assert 1.0 < ratio < 1.75
    assert unit_excess(20_000, 100, 2_000) == pytest.approx(1.4, abs=0.2)


def test_the_quality_report_states_the_expected_excess_of_units(store: Path) -> None:
    from daskshuffle.quality._report import _epochs

    with PileLoader(store, 64, seed=1, order=SMALL) as loader:
        measure, advice = _epochs(loader)
    assert measure.value == pytest.approx(unit_excess(N_ROWS, 50, 300)) and "units of 50 rows" in measure.scale
    assert advice is not None and "groups of 6 units of 50 rows" in advice  # 60 units / 6**2 + 1: over 2x


@given(
    data=st.floats(0, 2.0**57),
    unit=st.floats(0, 2.0**32),
    least=st.integers(1, 2**30),
    most=st.integers(1, 2**36),
    memory=st.none() | st.integers(1, 2**41),
)
@settings(max_examples=300, deadline=None)
def test_the_automatic_budget_keeps_epochs_within_2x_of_independent_unless_it_is_capped(
    data: float, unit: float, least: int, most: int, memory: int | None
) -> None:
    budget = auto_budget(data, unit, least=least, most=most, memory=memory)
    ceiling = most if memory is None else min(most, memory / 16)
    assert budget >= least, "never below the least"
    assert budget <= max(least, ceiling), "never above the most, nor a sixteenth of the memory, beyond the least"
    if least < budget < ceiling - 1 and budget > 2**20:  # neither bound (and no rounding): groups of sqrt(data * unit)
        assert data * unit / (budget / 2) ** 2 + 1 == pytest.approx(2.0, rel=1e-6)


def test_the_default_budget_grows_with_the_store_to_keep_epochs_within_2x_of_independent(tmp_path: Path) -> None:
    """With a least of one unit, the default groups hold ``sqrt(data * unit)`` bytes: 4x the data, 2x the group."""
    groups = []
    for n_rows in (2_000, 8_000):
        source = make_zarr_source(tmp_path / f"raw-{n_rows}.zarr", n_rows, chunk_rows=100)
        daskshuffle.shuffle_zarr(source, tmp_path / f"piles-{n_rows}.zarr", 2, seed=5, chunk_rows=50)
        least = {"loader.units-budget-least-nbytes": 1}
        with daskshuffle.config.set(least), PileLoader(tmp_path / f"piles-{n_rows}.zarr", 10, seed=1) as loader:
            unit_rows, group_rows = loader.settings.unit_rows, loader.settings.group_rows
            assert unit_rows is not None and group_rows is not None
            assert unit_rows == 50, "units of one chunk"
            assert group_rows == pytest.approx(np.sqrt(n_rows * unit_rows), abs=1), "groups for about 2x"
            groups.append(group_rows)
            assert len(np.concatenate([batch["id"] for batch in loader])) == n_rows
    assert groups[1] == pytest.approx(2 * groups[0], rel=0.02)
    both = {"loader.units-budget-least-nbytes": 1, "loader.units-budget-most-nbytes": 4_000}
    with daskshuffle.config.set(both), PileLoader(tmp_path / "piles-8000.zarr", 10, seed=1) as loader:
        assert loader.settings.group_rows == 2_000 // ROW_NBYTES, "two groups within the most"


@pytest.mark.slow
def test_a_loader_closed_while_a_group_is_read_behind_it_stops_reading(tmp_path: Path, points: Points) -> None:
    """A group of 120 tasks of 10 ms each read in the background: closing stops it after the tasks under way."""
    source = make_zarr_source(tmp_path / "raw.zarr", 12_000, chunk_rows=100)
    daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", 2, seed=5, chunk_rows=50)
    behind, closing, closed = threading.Event(), threading.Event(), threading.Event()
    during_close: list[int] = []
    after_close: list[int] = []

    def slow_read(count: int) -> None:
        if closing.is_set():
            (after_close if closed.is_set() else during_close).append(count)
        behind.set()
        time.sleep(0.01)  # a slow disk: each task of a group takes 10 ms

    tasks = points.arm("chunk read", slow_read)
    budget = Piles(budget=f"{4_000 * ROW_NBYTES}B")  # groups of 2,000 rows: 40 units of 50 rows
    with daskshuffle.config.set({"zarr-reader.local-task-nbytes": 1}):  # a task a chunk file
        loader = PileLoader(tmp_path / "piles.zarr", 100, seed=1, order=budget)
        batches = iter(loader)
        next(batches)  # the first group read; the second one now read behind the consumer
        behind.clear()
        assert behind.wait(60), "the second group is read behind the consumer"
        closing.set()
        loader.close()
        closed.set()
    under_way = 2  # a task of the loader's read thread, and one begun as close began
    assert len(during_close) <= under_way, f"close waited for {len(during_close)} reads, not only those under way"
    assert after_close == [], "no chunk file read after close: its threads are joined"
    assert len(tasks) < 2 * 120, "the second group was not read whole"


@given(
    sizes=st.lists(st.integers(0, 200), min_size=1, max_size=4),
    unit_rows=st.integers(1, 50),
    counts=st.lists(st.integers(0, 500), min_size=4, max_size=4),
    seed=st.integers(0, 2**31),
)
@settings(max_examples=200, deadline=None)
def test_a_mixture_takes_each_streams_rows_from_whole_copies_and_a_sample_of_its_units(
    sizes: list[int], unit_rows: int, counts: list[int], seed: int
) -> None:
    members = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    segments = np.array([[members[m], 0, size, m] for m, size in enumerate(sizes)], dtype=np.int64)
    bounds = unit_bounds(int(members[-1]), [unit_rows] * len(sizes), segments)
    assert not set(members[1:-1].tolist()) - set(bounds.tolist()), "no unit crosses from one store to the next"
    counts = [c if n else 0 for c, n in zip(counts, sizes, strict=False)]
    runs = epoch_runs(bounds, seed, 0, members, counts)
    assert (runs[:, 1] > runs[:, 0]).all()
    for m, (n, count) in enumerate(zip(sizes, counts, strict=False)):
        own = runs[(runs[:, 0] >= members[m]) & (runs[:, 1] <= members[m + 1])]
        rows = np.concatenate([np.arange(a, b) for a, b in own.tolist()] or [np.zeros(0, np.int64)])
        assert len(rows) == count, "each stream puts its count of rows into the epoch"
        if n:
            times = np.bincount(rows - members[m], minlength=n)
            assert times.min() >= count // n and times.max() <= count // n + 1, "whole copies, then each row once more"
    assert np.array_equal(runs, epoch_runs(bounds, seed, 0, members, counts)), "same seed, same runs"


def test_units_of_a_store_read_through_others_are_whole_chunks_of_each() -> None:
    """Generations of chunks of 4 and 8 rows, pile by pile: each unit lies in one generation, cut at its chunks."""
    segments = np.array([[0, 0, 6, 0], [6, 0, 10, 1], [16, 6, 6, 0], [22, 10, 6, 1]])
    bounds = unit_bounds(28, [4, 8], segments)
    assert bounds.tolist() == [0, 4, 6, 14, 16, 18, 22, 28]


@pytest.fixture
def two_stores(tmp_path: Path) -> tuple[Path, Path]:
    """Two stores of 2 piles each: 3,000 rows (ids 0-2,999) and 1,000 rows (ids 0-999), chunks of 50 rows."""
    daskshuffle.shuffle_zarr(
        make_zarr_source(tmp_path / "a.zarr", N_ROWS, chunk_rows=100), tmp_path / "pa.zarr", 2, seed=5, chunk_rows=50
    )
    daskshuffle.shuffle_zarr(
        make_zarr_source(tmp_path / "b.zarr", 1_000, chunk_rows=100), tmp_path / "pb.zarr", 2, seed=6, chunk_rows=50
    )
    return tmp_path / "pa.zarr", tmp_path / "pb.zarr"


def test_a_mixture_is_read_in_groups_of_units_of_every_stream(two_stores: tuple[Path, Path]) -> None:
    """Each row of the first store once, of the second 1.5 times; its first batch mixes units of both stores."""
    a, b = two_stores
    streams = [daskshuffle.Stream(a), daskshuffle.Stream(b, repeat=1.5)]
    with PileLoader(streams, 100, seed=1, order=SMALL) as loader:
        assert loader.settings.unit_rows is not None and loader.settings.group_rows == 300
        for _ in range(2):
            batches = list(loader)
            x = np.concatenate([batch["x"] for batch in batches])
            assert len(x) == N_ROWS + 1_500
            first = batches[0]["id"]
            assert len(np.unique(first // 50)) > 2, "a batch holds rows of several units, not of one pile"
    with PileLoader(streams, 100, seed=1, order=SMALL) as loader:
        ids = np.concatenate([batch["id"] for batch in loader])
        rows_of_b = ids[ids < 1_000]
        times = np.bincount(rows_of_b, minlength=1_000)
        # b's ids (0-999) are also ids of a: a gives each once, b once and a half more.
        assert np.bincount(times).tolist()[2:] == [500, 500], "b's rows: half twice more, half once more"


def test_an_appended_store_is_read_in_units_of_each_generation(tmp_path: Path) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", N_ROWS, chunk_rows=100)
    daskshuffle.shuffle_zarr(source, tmp_path / "grown.zarr", 2, seed=5, chunk_rows=50)
    later = make_zarr_source(tmp_path / "later.zarr", 1_000, chunk_rows=100)
    daskshuffle.append(tmp_path / "grown.zarr", later, seed=6, chunk_rows=50)
    with PileLoader(tmp_path / "grown.zarr", 100, seed=1, order=SMALL) as loader:
        assert (loader.settings.unit_rows, loader.settings.group_rows) == (50, 300)
        ids = np.concatenate([batch["id"] for batch in loader])
        assert sorted(set(loader.piles(0))) == [0, 1]
    assert np.bincount(np.bincount(ids)).tolist() == [0, 2_000, 1_000], "every row of both generations once"
    first = ids[:100]
    assert len(np.unique(first // 50)) > 2, "a batch holds rows of several units, not of one pile"
