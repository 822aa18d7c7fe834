"""PileLoader(order=...) on real Zarr and Parquet pile stores: the loader's guarantees hold for every order."""

from __future__ import annotations

import dataclasses
import itertools
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest
from conftest import consume
from simulate import unit_stream
from test_pile_stores import KINDS, N_ROWS, SEED

from daskshuffle import DaskShuffleValueError, PileLoader, orders
from daskshuffle.epochs._order_classes import ORDER_CLASSES
from daskshuffle.epochs._orders import ORDERS, READ_GAPS, division_cuts, unit_reads
from daskshuffle.loader._order_reads import OrderReads
from daskshuffle.loader._reads import LoaderReads
from daskshuffle.readers import PileReader, open_pile_reader

BATCH = 50
VALUES = {"shuffle_block_size": 300, "buffer_size": 60, "cycle_length": 3}


#: ``order="piles"``, with a budget of 400 rows (of 26 bytes): units
#: of a chunk or two, in groups of 200 rows, several groups a pile's worth, several piles a group.
UNITS = "units"
UNITS_BUDGET = f"{400 * 26}B"
#: Every order of the registry but "piles" (which the loader reads in groups of units), and those units.
NAMES = [*sorted(name for name in ORDERS if name != "piles"), UNITS]


def order(name: str) -> orders.Order:
    """The order ``name`` with the options of :data:`VALUES` it needs; "piles" (:data:`UNITS`) with a small budget."""
    if name in (UNITS, "piles"):
        return orders.Piles(budget=UNITS_BUDGET)
    chosen = ORDER_CLASSES[name]
    return chosen(
        **{option.name: VALUES[option.name] for option in dataclasses.fields(chosen) if option.name in VALUES}
    )


@pytest.fixture(scope="module", params=["zarr", "xarray", "parquet"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray]:
    """A pile store of 1,000 rows in 7 piles, and its ids in stored order."""
    kind = KINDS[request.param]
    path = kind.make(tmp_path_factory.mktemp(request.param))
    return path, kind.ids(path)


def loader(store: tuple[str, np.ndarray], name: str, **more: object) -> PileLoader:
    opened = PileLoader(store[0], BATCH, order=order(name), **more)  # type: ignore[arg-type]
    assert name != UNITS or opened.settings.unit_rows is not None, "every store here is read in units"
    return opened


def epoch_ids(store: tuple[str, np.ndarray], name: str, epoch: int, **more: object) -> list[np.ndarray]:
    with loader(store, name, **more) as opened:
        opened.set_epoch(epoch)
        return [batch["id"] for batch in opened]


def planned(store: tuple[str, np.ndarray], name: str, epoch: int, n_divisions: int = 1, share: int = N_ROWS):
    """The ids the pure order gives for ``epoch``, in stored ids."""
    if name == UNITS:  # the stream of the groups of units, which ranks cut as they cut piles
        with loader(store, name) as opened:
            unit_rows, group_rows = opened.settings.unit_rows, opened.settings.group_rows
        assert unit_rows is not None and group_rows is not None and group_rows < N_ROWS // 2
        return store[1][unit_stream(N_ROWS, unit_rows, group_rows, SEED, epoch)]
    offsets = open_pile_reader(store[0]).pile_offsets
    divisions = division_cuts(N_ROWS, n_divisions, share)
    return store[1][ORDERS[name](offsets, SEED, epoch, divisions, order(name)).rows]


@pytest.mark.parametrize("name", NAMES)
def test_an_epoch_is_the_orders_permutation_and_epochs_differ(store: tuple[str, np.ndarray], name: str) -> None:
    first, second = (np.concatenate(epoch_ids(store, name, epoch)) for epoch in (0, 1))
    np.testing.assert_array_equal(first, planned(store, name, 0))
    np.testing.assert_array_equal(np.sort(first), np.arange(N_ROWS))
    np.testing.assert_array_equal(np.sort(second), np.arange(N_ROWS))
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_batches_and_resume_mid_epoch_gives_the_rest(store: tuple[str, np.ndarray], name: str) -> None:
    with loader(store, name, prefetch="64MiB") as whole:
        expected = consume(whole, 30)  # into the second epoch
    for at in (7, 23):
        with loader(store, name, prefetch="0B") as first:
            taken = consume(first, at)
            state = first.state_dict()
        with loader(store, name) as resumed:
            resumed.load_state_dict(state)
            rest = consume(resumed, 30 - at)
        for got, want in zip(taken + rest, expected, strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_are_disjoint_balanced_and_cover_the_epoch(
    store: tuple[str, np.ndarray], name: str, drop_last: bool
) -> None:
    world_size = 3
    ranks = [
        epoch_ids(store, name, 2, rank=rank, world_size=world_size, drop_last=drop_last) for rank in range(world_size)
    ]
    assert len({len(batches) for batches in ranks}) == 1, "every rank the same number of batches"
    together = np.concatenate([np.concatenate(batches) for batches in ranks])
    assert len(np.unique(together)) == len(together), "ranks are disjoint"
    left_out = world_size * BATCH if drop_last else world_size
    assert N_ROWS - left_out < len(together) <= N_ROWS
    share = len(together) // world_size
    np.testing.assert_array_equal(together, planned(store, name, 2, world_size, share)[: len(together)])


@pytest.mark.parametrize("name", ["py1b", "buffer", UNITS])
def test_lanes_give_the_same_global_steps_for_every_world_size(store: tuple[str, np.ndarray], name: str) -> None:
    steps = {}
    for world_size in (1, 2):
        per_rank = []
        for rank in range(world_size):
            lanes = dataclasses.replace(order(name), n_lanes=4)
            with PileLoader(store[0], 100 // world_size, order=lanes, rank=rank, world_size=world_size) as opened:
                per_rank.append([batch["id"] for batch in opened])
        steps[world_size] = [np.concatenate(step) for step in zip(*per_rank, strict=True)]
    for one, two in zip(steps[1], steps[2], strict=True):
        np.testing.assert_array_equal(one, two)


def test_each_order_reads_a_bounded_share_of_the_store(store: tuple[str, np.ndarray]) -> None:
    """Per epoch: once for the orders of whole units of piles, about twice for py1e, buffer and interleave."""
    offsets = open_pile_reader(store[0]).pile_offsets
    bounds = {"piles": 1.0, "naive": 1.0, "py1s": 1.0, "py2s": 1.0, "py1b": 1.0, "py1br": 1.0}
    for name in ORDERS:
        epoch_order = ORDERS[name](offsets, SEED, 0, division_cuts(N_ROWS, 1, N_ROWS), order(name))
        read = sum(
            b - a
            for u, v in itertools.pairwise(epoch_order.bounds.tolist())
            for a, b in unit_reads(epoch_order.rows[u:v], READ_GAPS[name])[0]
        )
        assert N_ROWS <= read <= bounds.get(name, 3.0) * N_ROWS, name


def test_a_state_of_another_order_or_other_options_is_refused(store: tuple[str, np.ndarray]) -> None:
    with loader(store, "py1b") as first:
        next(iter(first))
        state = first.state_dict()
    assert state["settings"]["order"] == "py1b" and state["settings"]["shuffle_block_size"] == 300
    with loader(store, "piles") as other, pytest.raises(DaskShuffleValueError, match="order: saved 'py1b', here"):
        other.load_state_dict(state)
    with (
        PileLoader(store[0], BATCH, order=orders.Py1b(shuffle_block_size=200)) as other,
        pytest.raises(DaskShuffleValueError, match="shuffle_block_size: saved 300, here 200"),
    ):
        other.load_state_dict(state)


def test_bad_orders_and_options_are_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.zarr"  # refused before the store is opened
    with pytest.raises(DaskShuffleValueError, match="Expected order to be one of"):
        PileLoader(path, BATCH, order="global")  # type: ignore[arg-type]
    with pytest.raises(
        DaskShuffleValueError, match=r"Expected order=ds\.orders\.Buffer\(buffer_size=\.\.\.\)"
    ) as error:
        PileLoader(path, BATCH, order="buffer")  # type: ignore[arg-type]
    assert error.value.parameter == "order"
    with pytest.raises(TypeError, match="unexpected keyword argument 'shuffle_block_size'"):
        PileLoader(path, BATCH, shuffle_block_size=100)  # type: ignore[call-arg]


def test_piles_names_the_store_piles_each_unit_reads(store: tuple[str, np.ndarray]) -> None:
    with loader(store, "py1b") as opened:
        piles = opened.piles(0)
        plan = opened.plan(0)
    assert sorted(set(piles)) == list(range(7))
    assert len(piles) <= 7 + len(plan.segments), "a pile is read once, or twice where a block ends inside it"


def test_torch_workers_yield_the_loaders_batches_of_an_order(store: tuple[str, np.ndarray]) -> None:
    torch = pytest.importorskip("torch")
    from daskshuffle.torch import PileDataset

    dataset = PileDataset(store[0], BATCH, order=orders.Py1b(shuffle_block_size=300), variables=["id"])
    batches = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    got = {tuple(batch["id"].numpy().tolist()) for batch in batches}
    assert got == {tuple(ids.tolist()) for ids in epoch_ids(store, "py1b", 0)}


@pytest.mark.parametrize("name", NAMES)
def test_the_loader_reads_each_row_a_bounded_number_of_times(
    store: tuple[str, np.ndarray], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted at the reader: every row at least once, and at most as often as the architecture's table says."""
    counts = np.zeros(N_ROWS, dtype=np.int64)
    reader_class = type(open_pile_reader(store[0]))
    read_rows, read_pile = reader_class.read_rows, reader_class.read_pile

    def counting_rows(self: object, start: int, stop: int) -> object:
        counts[start:stop] += 1
        return read_rows(self, start, stop)  # type: ignore[arg-type]

    def counting_pile(self: object, pile: int) -> object:
        offsets = self.pile_offsets  # type: ignore[attr-defined]
        counts[offsets[pile] : offsets[pile + 1]] += 1
        return read_pile(self, pile)  # type: ignore[arg-type]

    own_runs = reader_class.read_runs

    def counting_runs(
        self: object, runs: list[tuple[int, int]]
    ) -> object:  # the Zarr reader reads runs without read_rows
        for start, stop in runs:
            counts[start:stop] += 1
        return own_runs(self, runs)  # type: ignore[arg-type]

    monkeypatch.setattr(reader_class, "read_rows", counting_rows)
    if own_runs is not PileReader.read_runs:
        monkeypatch.setattr(reader_class, "read_runs", counting_runs)
    monkeypatch.setattr(reader_class, "read_pile", counting_pile)
    with loader(store, name, prefetch="0B") as opened:
        opened.set_epoch(1)
        for _ in opened.iter_batches(1):
            pass
    assert (counts >= 1).all()
    most = {"py1e": 4, "buffer": 4, "interleave": 4}.get(name, 1)
    assert counts.max() <= most, (name, np.bincount(counts))


def test_the_repr_names_an_order_other_than_piles(store: tuple[str, np.ndarray]) -> None:
    with loader(store, "py1e") as opened, loader(store, "piles") as default:
        assert "order='py1e'" in repr(opened) and "order=" not in repr(default)


def _inside(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is running ``function`` (anywhere on its stack) right now."""
    frame: FrameType | None = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def test_two_threads_asking_for_an_epoch_at_once_make_its_order_once() -> None:
    offsets = np.arange(0, 10_001, 1_000, dtype=np.int64)
    units = OrderReads(ORDER_CLASSES["naive"](), offsets, SEED, division_cuts(10_000, 1, 10_000))
    made: list[int] = []
    draw = units.draw

    def counted(epoch: int) -> object:
        made.append(epoch)
        if len(made) == 1:
            # Hold the first order until the other thread makes one too, or waits for this one (Future.result).
            other = next(thread for thread in threads if thread is not threading.current_thread())
            deadline = time.monotonic() + 30
            while len(made) == 1 and not _inside(other, "result") and time.monotonic() < deadline:
                time.sleep(0.001)
        return draw(epoch)

    units.draw = counted  # type: ignore[method-assign]
    start = threading.Barrier(2)
    orders: list[object] = []

    def ask() -> None:
        start.wait(timeout=30)
        orders.append(units.epoch_order(4))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert made == [4], "the second thread waits for the first's order rather than making it again"
    assert len(orders) == 2 and orders[0] is orders[1]
    assert units.epoch_order(4) is orders[0] and made == [4]


def test_an_order_that_fails_is_made_again_when_asked_again() -> None:
    offsets = np.arange(0, 101, 10, dtype=np.int64)
    units = OrderReads(orders.Naive(), offsets, SEED, division_cuts(100, 1, 100))
    draw, calls = units.draw, []

    def failing_once(epoch: int) -> object:
        calls.append(epoch)
        if len(calls) == 1:
            raise MemoryError("no room for the order")
        return draw(epoch)

    units.draw = failing_once  # type: ignore[method-assign]
    with pytest.raises(MemoryError, match="no room"):
        units.epoch_order(0)
    assert len(units.epoch_order(0).rows) == 100 and calls == [0, 0]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("ahead", [0, 400], ids=["less than a read", "400 rows"])
def test_reads_ahead_hold_no_more_than_a_prefetch_given_as_a_size(
    store: tuple[str, np.ndarray], name: str, ahead: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read's rows, from the read until the batches let them go: at most the read in use and the budget.

    Counted by read: a background thread that shared a read with the consumer makes its own copy of the
    result, which nobody takes, once the consumer may have let the rows go.
    """
    live: dict[object, int] = {}
    read_of: dict[int, object] = {}
    released: set[object] = set()
    most, largest = [0], [0]
    lock = threading.Lock()
    read, release = LoaderReads.read, LoaderReads.release

    def counting_read(self: LoaderReads, job: Any) -> Any:
        pile = read(self, job)
        with lock:
            read_of[id(pile.rows)] = job
            if job not in released:
                live[job] = pile.n_rows
                largest[0] = max(largest[0], pile.n_rows)
                most[0] = max(most[0], sum(live.values()))
        return pile

    def counting_release(self: LoaderReads, pile: Any) -> None:
        with lock:
            job = read_of.get(id(pile.rows))
            released.add(job)
            live.pop(job, None)
        release(self, pile)

    monkeypatch.setattr(LoaderReads, "read", counting_read)
    monkeypatch.setattr(LoaderReads, "release", counting_release)
    row_nbytes = 8 + 4 * 4 + 2  # id, x and y of every store here
    with loader(store, name, prefetch=f"{ahead * row_nbytes + 1}B") as opened:
        for _ in range(2):
            for _ in opened:
                pass
    assert largest[0] > ahead or ahead == 400, "the smaller budget holds less than any read"
    assert 0 < most[0] <= largest[0] + ahead, (most[0], largest[0], ahead)
