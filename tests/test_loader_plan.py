"""The loader's pure planning: epochs, ranks, batches and worker splits. No I/O."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from daskshuffle.epochs._epoch_plan import (
    epoch_pile_order,
    n_batches,
    plan_batches,
    rank_range,
    rank_share,
    split_batches,
    stream_segments,
)
from daskshuffle.epochs._order_classes import Py2s
from daskshuffle.epochs._orders import ORDERS, division_cuts

seeds = st.integers(0, 2**63 - 1)
# Some examples draw many whole epochs: on a busy machine they outlast hypothesis's default
# per-example deadline, which measures the machine, not the code.
slow = settings(deadline=None)
pile_sizes = st.lists(st.integers(0, 40), min_size=1, max_size=10)


def offsets_of(sizes: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def stream_rows(offsets: np.ndarray, seed: int, epoch: int, start: int, stop: int) -> np.ndarray:
    """Positions ``start:stop`` of an epoch's stream: py2s's order, one division (the piles shuffled end to end)."""
    n_rows = int(offsets[-1])
    return ORDERS["py2s"](offsets, seed, epoch, division_cuts(n_rows, 1, n_rows), Py2s()).rows[start:stop]


def rank_rows(sizes: list[int], seed: int, epoch: int, n_ranks: int, batch_size: int, drop_last: bool) -> list:
    offsets = offsets_of(sizes)
    n_rows = int(offsets[-1])
    return [
        stream_rows(offsets, seed, epoch, *rank_range(n_rows, n_ranks, rank, batch_size, drop_last))
        for rank in range(n_ranks)
    ]


@slow
@given(pile_sizes, seeds, st.integers(0, 1000))
def test_an_epoch_is_a_permutation_of_the_rows(sizes: list[int], seed: int, epoch: int) -> None:
    offsets = offsets_of(sizes)
    rows = stream_rows(offsets, seed, epoch, 0, int(offsets[-1]))
    np.testing.assert_array_equal(np.sort(rows), np.arange(offsets[-1]))


@slow
@given(pile_sizes, st.data())
def test_segments_cut_the_stream_exactly(sizes: list[int], data: st.DataObject) -> None:
    offsets = offsets_of(sizes)
    n_rows = int(offsets[-1])
    start = data.draw(st.integers(0, n_rows))
    stop = data.draw(st.integers(start, n_rows))
    segments = stream_segments(offsets, start, stop)
    assert sum(segment.stop - segment.start for segment in segments) == stop - start
    assert all(0 <= segment.start < segment.stop <= sizes[segment.pile] for segment in segments)
    # Each read appears once, in order: a range reads a read at most once.
    piles = [segment.pile for segment in segments]
    assert piles == sorted(set(piles))
    # Only the first and the last segment may be part of a read.
    assert all(segment.start == 0 and segment.stop == sizes[segment.pile] for segment in segments[1:-1])
    # The segments are exactly positions start:stop of the reads end to end.
    positions = [np.arange(offsets[s.pile] + s.start, offsets[s.pile] + s.stop) for s in segments]
    np.testing.assert_array_equal(np.concatenate([np.zeros(0, dtype=np.int64), *positions]), np.arange(start, stop))


@slow
@given(pile_sizes, seeds, st.integers(0, 100), st.integers(1, 6), st.integers(1, 9), st.booleans())
def test_ranks_are_disjoint_equal_and_leave_out_few_rows(
    sizes: list[int], seed: int, epoch: int, n_ranks: int, batch_size: int, drop_last: bool
) -> None:
    ranks = rank_rows(sizes, seed, epoch, n_ranks, batch_size, drop_last)
    n_rows = sum(sizes)
    taken = np.concatenate(ranks)
    assert len(np.unique(taken)) == len(taken), "ranks overlap"
    assert len({len(rows) for rows in ranks}) == 1, "ranks take different numbers of rows"
    left_out = n_rows - len(taken)
    assert 0 <= left_out < (n_ranks * batch_size if drop_last else n_ranks)
    counts = {n_batches(len(rows), batch_size, drop_last) for rows in ranks}
    assert len(counts) == 1, "ranks yield different numbers of batches"
    if drop_last:
        assert all(len(rows) % batch_size == 0 for rows in ranks)
    # The rows left out are the tail of the epoch's stream.
    whole = stream_rows(offsets_of(sizes), seed, epoch, 0, n_rows)
    np.testing.assert_array_equal(np.sort(np.setdiff1d(whole, taken)), np.sort(whole[len(taken) :]))


@slow
@given(pile_sizes, st.integers(1, 6), st.integers(1, 9), st.booleans())
def test_a_rank_reads_at_most_one_pile_shared_with_each_neighbour(
    sizes: list[int], n_ranks: int, batch_size: int, drop_last: bool
) -> None:
    offsets = offsets_of(sizes)
    n_rows = int(offsets[-1])
    read = [
        {s.pile for s in stream_segments(offsets, *rank_range(n_rows, n_ranks, rank, batch_size, drop_last))}
        for rank in range(n_ranks)
    ]
    for rank in range(n_ranks):
        others = set().union(*(read[other] for other in range(n_ranks) if other != rank))
        assert len(read[rank] & others) <= 2  # only its first and its last pile
    # I/O does not grow with the number of ranks: each boundary between two
    # ranks makes at most one pile that both read.
    assert sum(len(piles) for piles in read) <= len([s for s in sizes if s]) + n_ranks - 1


@slow
@given(st.lists(st.integers(1, 30), min_size=2, max_size=6), seeds, st.integers(2, 5), st.booleans())
def test_the_rows_left_out_change_with_the_epoch(sizes: list[int], seed: int, n_ranks: int, drop_last: bool) -> None:
    n_rows = sum(sizes)
    left_out = []
    for epoch in range(30):
        whole = stream_rows(offsets_of(sizes), seed, epoch, 0, n_rows)
        taken = n_ranks * rank_share(n_rows, n_ranks, 3, drop_last)
        left_out.append(frozenset(whole[taken:].tolist()))
    if 0 < taken < n_rows:
        # With at least two piles of which the last one is random, 30 epochs that all
        # leave out the same rows have probability below 2**-29 (below 1e-6 over 100 examples).
        assert len(set(left_out)) > 1


@slow
@given(pile_sizes, seeds, st.integers(0, 50))
def test_same_seed_same_order_and_epochs_differ(sizes: list[int], seed: int, epoch: int) -> None:
    offsets = offsets_of(sizes)
    n_rows = int(offsets[-1])
    first = stream_rows(offsets, seed, epoch, 0, n_rows)
    np.testing.assert_array_equal(first, stream_rows(offsets, seed, epoch, 0, n_rows))
    if n_rows >= 12:
        # 12! orders: two epochs or two seeds agree with probability below 1e-8.
        assert not np.array_equal(first, stream_rows(offsets, seed, epoch + 1, 0, n_rows))
        assert not np.array_equal(first, stream_rows(offsets, seed ^ 1, epoch, 0, n_rows))


def test_seed_and_epoch_do_not_alias() -> None:
    # seed 1 epoch 0 is not seed 0 epoch 1 (the seed + epoch pitfall).
    offsets = offsets_of([50])
    np.testing.assert_raises(
        AssertionError,
        np.testing.assert_array_equal,
        stream_rows(offsets, 1, 0, 0, 50),
        stream_rows(offsets, 0, 1, 0, 50),
    )
    assert epoch_pile_order(1, 0, 50).tolist() != epoch_pile_order(0, 1, 50).tolist()


@given(st.integers(0, 200), st.integers(1, 8))
def test_worker_splits_are_contiguous_and_cover_the_batches(total: int, n_parts: int) -> None:
    runs = [split_batches(total, n_parts, part) for part in range(n_parts)]
    assert runs[0][0] == 0 and runs[-1][1] == total
    assert all(runs[part][1] == runs[part + 1][0] for part in range(n_parts - 1))
    sizes = [stop - first for first, stop in runs]
    assert max(sizes) - min(sizes) <= 1


@given(st.integers(0, 500), st.integers(1, 40), st.booleans())
def test_n_batches_counts_full_and_partial_batches(n_rows: int, batch_size: int, drop_last: bool) -> None:
    count = n_batches(n_rows, batch_size, drop_last)
    full, rest = divmod(n_rows, batch_size)
    assert count == full + (rest > 0 and not drop_last)


@slow
@given(pile_sizes, st.integers(1, 4), st.integers(1, 50), st.booleans(), st.data())
def test_a_batch_plan_cuts_the_ranks_stream_into_batches(
    sizes: list[int], n_ranks: int, batch_size: int, drop_last: bool, data: st.DataObject
) -> None:
    offsets = offsets_of(sizes)
    n_rows = int(offsets[-1])
    rank = data.draw(st.integers(0, n_ranks - 1))
    positions = rank_range(n_rows, n_ranks, rank, batch_size, drop_last)
    total = n_batches(positions[1] - positions[0], batch_size, drop_last)
    first = data.draw(st.integers(0, total))
    stop = data.draw(st.integers(first, total))
    plan = plan_batches(offsets, positions, batch_size, first, stop)
    assert len(plan) == stop - first == len(list(plan))
    whole = np.arange(*positions)
    for index, parts in enumerate(plan, start=first):
        # Each batch is the next batch_size positions of the rank's stream, read after read.
        rows = []
        for part in parts:
            segment = plan.segments[part.segment]
            begin = offsets[segment.pile] + segment.start
            rows.append(np.arange(begin + part.start, begin + part.stop))
        np.testing.assert_array_equal(np.concatenate(rows), whole[index * batch_size : (index + 1) * batch_size])
