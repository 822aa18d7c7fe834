"""The registry of epoch orders (``PileLoader(order=...)``): pure functions, no I/O.

Invariants run over every registered order; then each order's defining property.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from daskshuffle import DaskShuffleTypeError, DaskShuffleValueError
from daskshuffle._random import make_rng
from daskshuffle.epochs._epoch_plan import epoch_pile_order, plan_batches, rank_range, rank_share
from daskshuffle.epochs._order_classes import (
    ORDER_CLASSES,
    Buffer,
    Interleave,
    Naive,
    Order,
    Piles,
    Py1b,
    Py1s,
    Py2s,
    parse_order,
)
from daskshuffle.epochs._orders import (
    ORDERS,
    buffer_stream,
    division_cuts,
    interleave_stream,
    py1br_bounds,
    py1e_ranges,
    unit_reads,
)
from daskshuffle.quality import orders, report

seeds = st.integers(0, 2**63 - 1)
pile_sizes = st.lists(st.integers(0, 60), min_size=1, max_size=8)
slow = settings(deadline=None)


def offsets_of(sizes: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def order_for(name: str, size: int = 16, cycle: int = 3) -> Order:
    """The order ``name`` with blocks and buffers of ``size`` rows, and ``cycle`` piles interleaved."""
    values = {"shuffle_block_size": size, "buffer_size": size, "cycle_length": cycle}
    chosen = ORDER_CLASSES[name]
    return chosen(
        **{option.name: values[option.name] for option in dataclasses.fields(chosen) if option.name in values}
    )


def needed(chosen: type[Order]) -> list[str]:
    """The options ``chosen`` must be given."""
    return [option.name for option in dataclasses.fields(chosen) if option.default is dataclasses.MISSING]


def space_of(offsets: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """Piles in the epoch's visiting order, each in stored order: the unshuffled stream."""
    visit = epoch_pile_order(seed, epoch, len(offsets) - 1)
    return np.concatenate([np.arange(offsets[p], offsets[p + 1]) for p in visit]).astype(np.int64)


# -- every order ---------------------------------------------------------------------------------


@slow
@pytest.mark.parametrize("name", sorted(ORDERS))
@given(sizes=pile_sizes, seed=seeds, epoch=st.integers(0, 100), n_divisions=st.integers(1, 4), size=st.integers(1, 50))
def test_every_order_is_a_permutation_cut_into_units_within_divisions(
    name: str, sizes: list[int], seed: int, epoch: int, n_divisions: int, size: int
) -> None:
    offsets = offsets_of(sizes)
    n = int(offsets[-1])
    divisions = division_cuts(n, n_divisions, n // n_divisions)
    order = ORDERS[name](offsets, seed, epoch, divisions, order_for(name, size))
    np.testing.assert_array_equal(np.sort(order.rows), np.arange(n))
    assert order.bounds[0] == 0 and order.bounds[-1] == n and (np.diff(order.bounds) > 0).all()
    if name != "piles":  # the loader's own order is cut between ranks by the plan, as it always was
        assert set(divisions.tolist()) <= set(order.bounds.tolist()), "no unit straddles a division"
    again = ORDERS[name](offsets, seed, epoch, divisions, order_for(name, size))
    np.testing.assert_array_equal(order.rows, again.rows)
    np.testing.assert_array_equal(order.bounds, again.bounds)


@pytest.mark.parametrize("name", sorted(ORDERS))
def test_every_order_changes_with_the_epoch_and_the_seed(name: str) -> None:
    offsets = offsets_of([100] * 10)
    divisions = division_cuts(1000, 2, 500)
    order = order_for(name, 64, 3)
    first, second, other = (ORDERS[name](offsets, s, e, divisions, order).rows for s, e in [(1, 0), (1, 1), (0, 1)])
    assert not np.array_equal(first, second) and not np.array_equal(second, other)


# -- what each order is --------------------------------------------------------------------------

OFFSETS = offsets_of([120, 80, 150, 100, 90, 60, 140, 110, 100, 50])  # 1,000 rows
DIVISIONS = division_cuts(1000, 3, 333)


def test_naive_is_uniform_and_the_loaders_piles_are_too_within_an_epoch() -> None:
    rows = ORDERS["naive"](offsets_of([10_000] * 10), 7, 0, division_cuts(100_000, 1, 100_000), Naive()).rows
    table = report(rows, batch_size=256)
    assert set(table["verdict"]) == {"as uniform"}, table


def test_py1s_shuffles_each_part_of_a_pile_alone_and_cuts_boundary_piles_in_stored_order() -> None:
    order = ORDERS["py1s"](OFFSETS, 5, 1, DIVISIONS, Py1s())
    space = space_of(OFFSETS, 5, 1)
    for a, b in itertools.pairwise(order.bounds.tolist()):
        assert sorted(order.rows[a:b].tolist()) == sorted(space[a:b].tolist())
        piles = np.searchsorted(OFFSETS, order.rows[a:b], side="right") - 1
        assert len(set(piles.tolist())) == 1, "a unit is one pile or one part of it"


def test_py2s_gives_a_boundary_piles_parts_random_rows_where_py1s_gives_stored_runs() -> None:
    """At a cut between divisions, py1s splits the pile's stored rows in two runs; py2s deals them at random."""
    offsets = offsets_of([1000, 1000])
    divisions = division_cuts(2000, 4, 500)  # every pile is cut in two
    for name, contiguous in (("py1s", True), ("py2s", False)):
        order = ORDERS[name](offsets, 2, 0, divisions, ORDER_CLASSES[name]())
        for a, b in itertools.pairwise(divisions.tolist()):
            part = np.sort(order.rows[a:b])
            assert bool(part[-1] - part[0] == b - a - 1) == contiguous, name


@pytest.mark.parametrize("name", ["py1b", "py1br"])
def test_py1b_blocks_take_their_rows_from_their_own_piles_only(name: str) -> None:
    block = 250
    order = ORDERS[name](OFFSETS, 9, 3, DIVISIONS, order_for(name, block))
    space = space_of(OFFSETS, 9, 3)
    mixed = 0
    for a, b in itertools.pairwise(order.bounds.tolist()):
        assert sorted(order.rows[a:b].tolist()) == sorted(space[a:b].tolist()), "a block's own stretch of piles"
        assert b - a <= (1.25 * block if name == "py1br" else block)
        mixed += len(set((np.searchsorted(OFFSETS, order.rows[a:b], side="right") - 1).tolist())) > 1
    assert mixed >= 3, "blocks larger than piles mix piles"
    assert (
        np.diff(ORDERS["py1b"](OFFSETS, 9, 3, division_cuts(1000, 1, 1000), Py1b(block)).bounds)[:-1] == block
    ).all()


def test_py1br_block_sizes_vary_and_are_staggered_between_divisions() -> None:
    divisions = division_cuts(100_000, 4, 25_000)
    bounds = py1br_bounds(divisions, 1000, seed=1, epoch=0)
    sizes = np.diff(bounds)
    inner = [s for a, s in zip(bounds[:-1], sizes, strict=True) if a not in divisions and a + s not in divisions]
    assert min(inner) >= 750 and max(inner) < 1250 and len(set(inner)) > 50
    firsts = [int(bounds[np.searchsorted(bounds, d) + 1] - d) for d in divisions[:-1]]
    assert len(set(firsts)) == len(firsts), "each division starts its blocks at another offset"


def test_py1e_puts_each_row_within_its_piles_extended_range() -> None:
    """Sorting random keys of the extended ranges moves a row at most half a block and a pile past its range."""
    block, seed, epoch = 300, 4, 2
    order = ORDERS["py1e"](OFFSETS, seed, epoch, DIVISIONS, order_for("py1e", block))
    space, low, high = py1e_ranges(OFFSETS, seed, epoch, DIVISIONS, block)
    position = np.empty(1000, dtype=np.int64)
    position[order.rows] = np.arange(1000)
    slack = block / 2 + int(np.diff(OFFSETS).max())
    at = position[space]
    assert ((low - slack <= at) & (at < high + slack)).all()
    assert (high - low <= np.maximum(block, np.diff(OFFSETS).max())).all()
    # And rows do spread beyond their own pile: the ranges overlap.
    assert (np.abs(at - np.arange(1000)) > 50).mean() > 0.2


@pytest.mark.parametrize("name", ["buffer", "interleave"])
def test_a_buffer_never_yields_a_row_more_than_buffer_size_positions_early(name: str) -> None:
    size = 50
    order = ORDERS[name](OFFSETS, 1, 0, DIVISIONS, order_for(name, size, 3))
    position = np.empty(1000, dtype=np.int64)
    position[order.rows] = np.arange(1000)
    if name == "buffer":
        stream = space_of(OFFSETS, 1, 0)
    else:  # the interleaved piles are the buffer's input: rebuild it division by division
        space = space_of(OFFSETS, 1, 0)
        ends = np.cumsum(np.diff(OFFSETS)[epoch_pile_order(1, 0, 10)])
        stream = np.empty(1000, dtype=np.int64)
        for a, b in itertools.pairwise(DIVISIONS.tolist()):
            cuts = [a, *ends[(ends > a) & (ends < b)].tolist(), b]
            stream[a:b] = interleave_stream([space[s:e] for s, e in itertools.pairwise(cuts)], 3)
    assert (position[stream] >= np.arange(1000) - size + 1).all()
    assert (position[stream] != np.arange(1000)).mean() > 0.9


@slow
@given(st.integers(1, 300), st.integers(1, 40), seeds)
def test_buffer_stream_is_a_permutation_that_moves_rows_at_most_buffer_size_early(n: int, size: int, seed: int) -> None:
    out = buffer_stream(np.arange(n), size, make_rng(seed, "test"))
    np.testing.assert_array_equal(np.sort(out), np.arange(n))
    position = np.empty(n, dtype=np.int64)
    position[out] = np.arange(n)
    assert (position >= np.arange(n) - size + 1).all()


@given(st.lists(st.integers(0, 20), max_size=8), st.integers(1, 5))
def test_interleave_reads_cycle_length_files_in_turn(sizes: list[int], cycle: int) -> None:
    offsets = offsets_of(sizes or [0])
    files = [np.arange(a, b) for a, b in itertools.pairwise(offsets.tolist())]
    out = interleave_stream(files, cycle)
    np.testing.assert_array_equal(np.sort(out), np.arange(offsets[-1]))
    for file in files:  # each file is read front to back
        assert np.all(np.diff(out[np.isin(out, file)]) > 0)
    if cycle >= len(files):  # all at once: the first rows of every non-empty file come first
        assert sorted(out[: sum(1 for f in files if len(f))].tolist()) == sorted(f[0] for f in files if len(f))


# -- quality at equal memory ---------------------------------------------------------------------


def test_the_quality_measures_rank_the_orders_as_expected() -> None:
    """100,000 rows in 100 piles of ~1,000, two epochs of each order, measured in source positions.

    Each measure's band is five standard deviations of a uniform shuffle: a correct uniform order leaves
    one of its 9 bands about 5 times in a million seeds; the other orders miss theirs by 40 standard
    deviations or more (seed 11: buffer's lag correlation 0.52 against a band of +-0.016).
    """
    n, n_piles = 100_000, 100

    def measured(name: str, **options: int) -> dict[tuple[str, str], tuple[float, str]]:
        # Piles: a group of one unit of a pile's rows (a budget of two groups).
        order = Piles(budget=2_000) if name == "piles" else ORDER_CLASSES[name](**options)
        unit_rows = 1_000 if name == "piles" else None
        first, second = (orders.piles(n, n_piles, seed=11, epoch=e, order=order, unit_rows=unit_rows) for e in (0, 1))
        table = report(second, batch_size=256, n_piles=n_piles, previous=first).set_index(["metric", "scale"])
        return {key: (row.value, row.verdict) for key, row in table.iterrows()}

    naive = measured("naive")
    assert {verdict for _, verdict in naive.values()} == {"as uniform"}
    overlap = ("co-batch overlap", "batch 256")
    # Piles keep their rows together from epoch to epoch: batch-mates meet again ~80x as often as uniform.
    for name in ("piles", "py1s", "py2s"):
        assert measured(name)[overlap][0] > 50 * naive[overlap][0], name
    # A block of 4 piles meets its batch-mates again about 4 times less often than a pile alone.
    assert measured("py1b", shuffle_block_size=4_000)[overlap][0] < measured("piles")[overlap][0] / 3
    # Each pile is stored in an order drawn from the seed, so a small buffer over the piles in stored order, or four
    # piles read in turn into one, is uniform within an epoch; what it keeps is the next epoch's batch-mates.
    small = measured("buffer", buffer_size=100)
    assert small[("lag correlation", "lag 1")][1] == small[("spread", "batch")][1] == "as uniform"
    assert small[overlap][0] > 50 * naive[overlap][0]
    cycled = measured("interleave", buffer_size=1_000, cycle_length=4)
    assert cycled[("spread", "pile")][1] == "as uniform" and cycled[overlap][0] > 5 * naive[overlap][0]
    # Over rows in source (chronological) order, a small buffer leaves neighbours correlated, and four of 100 files
    # read in turn into a buffer keep the files' order at the scale of a pile.
    verdicts = {
        name: report(rows, batch_size=256, n_piles=n_piles).set_index(["metric", "scale"])["verdict"]
        for name, rows in [
            ("buffer", orders.shuffle_buffer(n, 100, seed=11)),
            ("interleave", orders.interleave(n, n_piles, cycle_length=4, buffer_size=1_000, seed=11)),
        ]
    }
    assert verdicts["buffer"][("lag correlation", "lag 1")] == verdicts["buffer"][("spread", "batch")] == "not uniform"
    assert verdicts["interleave"][("spread", "pile")] == "not uniform"


# -- arguments and reads -------------------------------------------------------------------------


def test_parse_order_takes_orders_and_the_names_of_those_that_need_no_options() -> None:
    assert parse_order("py2s") == Py2s() and parse_order(Py1b(shuffle_block_size=8)) == Py1b(8)
    with pytest.raises(DaskShuffleValueError, match=r"Expected order to be one of .* Got 'random' instead"):
        parse_order("random")
    with pytest.raises(DaskShuffleValueError, match=r"Expected order=ds\.orders\.Py1b\(shuffle_block_size=\.\.\.\)"):
        parse_order("py1b")
    with pytest.raises(DaskShuffleTypeError, match=r"Expected order to be an order of daskshuffle\.orders"):
        parse_order(3)


def test_orders_check_their_options_and_carry_them() -> None:
    made = Interleave(cycle_length=2, buffer_size=10)
    assert (made.cycle_length, made.buffer_size) == (2, 10)
    assert {name: cls.name for name, cls in ORDER_CLASSES.items()} == {name: name for name in [*ORDERS, "piles"]}
    assert {name: needed(cls) for name, cls in ORDER_CLASSES.items() if needed(cls)} == {
        "py1b": ["shuffle_block_size"],
        "py1br": ["shuffle_block_size"],
        "py1e": ["shuffle_block_size"],
        "buffer": ["buffer_size"],
        "interleave": ["cycle_length", "buffer_size"],
    }
    assert Piles().budget == "auto" and Piles("1KiB").budget == 1024 and Piles(budget=4096).budget == 4096
    with pytest.raises(DaskShuffleValueError, match="Expected budget to be a size"):
        Piles("lots")
    with pytest.raises(DaskShuffleTypeError, match="Expected budget to be 'auto' or a size") as error:
        Piles(1.5)  # type: ignore[arg-type]
    assert error.value.parameter == "budget"
    with pytest.raises(DaskShuffleTypeError, match="Expected cycle_length to be a positive integer"):
        Interleave(cycle_length=1.5, buffer_size=10)  # type: ignore[arg-type]
    with pytest.raises(DaskShuffleValueError, match=r"Expected buffer_size to be a positive integer\. Got 0"):
        Buffer(buffer_size=0)


def test_every_order_takes_lanes_by_keyword() -> None:
    """Lanes cut any order into streams: an option of every order, checked when the order is made."""
    for cls in ORDER_CLASSES.values():
        made = cls(**dict.fromkeys(needed(cls), 4), n_lanes=8)
        assert made.n_lanes == 8 and dataclasses.replace(made, n_lanes=None) == cls(**dict.fromkeys(needed(cls), 4))
        assert repr(made).endswith("n_lanes=8)") and "n_lanes" not in repr(dataclasses.replace(made, n_lanes=None))
        assert made != dataclasses.replace(made, n_lanes=4)
    assert Piles("2MiB", n_lanes=8) == Piles(budget=2**21, n_lanes=8)
    assert Piles().n_lanes is None
    with pytest.raises(DaskShuffleValueError, match="Expected n_lanes to be a positive integer") as error:
        Py1b(shuffle_block_size=10, n_lanes=0)
    assert error.value.parameter == "n_lanes"
    with pytest.raises(DaskShuffleTypeError, match="Expected n_lanes to be a positive integer"):
        Piles(n_lanes=2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Py1b(10, 8)  # type: ignore[misc]  # the lanes by keyword only
    # The spelling an error suggests names the order's own options, not the lanes every order takes.
    with pytest.raises(DaskShuffleValueError, match=r"order=ds\.orders\.Py1b\(shuffle_block_size=\.\.\.\), with"):
        parse_order("py1b")


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=200), st.integers(0, 300))
def test_unit_reads_find_every_row_in_runs_of_the_store(rows: list[int], gap: int) -> None:
    wanted = np.asarray(rows, dtype=np.int64)
    runs, index = unit_reads(wanted, gap)
    read = np.concatenate([np.arange(a, b) for a, b in runs])
    np.testing.assert_array_equal(read[index], wanted)
    assert all(b <= c for (_, b), (c, _) in itertools.pairwise(runs)), "runs in store order, disjoint"
    assert len(read) <= len(np.unique(wanted)) * (gap + 1)
    assert len(runs) == 1 + int((np.diff(np.unique(wanted)) > gap + 1).sum()), "a run per gap wider than gap"


def test_unit_reads_read_a_stretch_of_rows_in_one_run() -> None:
    assert unit_reads(np.array([5, 3, 4, 6]), gap=0)[0] == [(3, 7)]
    assert unit_reads(np.array([3, 5]), gap=0)[0] == [(3, 4), (5, 6)]
    assert unit_reads(np.array([3, 5]), gap=1)[0] == [(3, 6)]


@slow
@pytest.mark.parametrize("name", sorted(set(ORDERS) - {"piles"}))
@given(sizes=pile_sizes, seed=seeds, n_ranks=st.integers(1, 4), batch=st.integers(1, 30), drop_last=st.booleans())
def test_the_plan_cuts_an_orders_units_between_ranks_and_batches_exactly(
    name: str, sizes: list[int], seed: int, n_ranks: int, batch: int, drop_last: bool
) -> None:
    """What the loader does with an order: its units as piles, in their order, cut at the ranks' ranges."""
    offsets = offsets_of(sizes)
    n = int(offsets[-1])
    share = rank_share(n, n_ranks, batch, drop_last)
    order = ORDERS[name](offsets, seed, 1, division_cuts(n, n_ranks, share), order_for(name, 12))
    for rank in range(n_ranks):
        start, stop = rank_range(n, n_ranks, rank, batch, drop_last)
        plan = plan_batches(order.bounds, (start, stop), batch)
        got = [order.rows[order.bounds[s.pile] + s.start : order.bounds[s.pile] + s.stop] for s in plan.segments]
        np.testing.assert_array_equal(np.concatenate([np.zeros(0, np.int64), *got]), order.rows[start:stop])
        sizes_of_batches = [sum(part.stop - part.start for part in parts) for parts in plan]
        assert all(size == batch for size in sizes_of_batches[:-1])
