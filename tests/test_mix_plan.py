"""The pure plan of a mixture: every epoch's rows, their copies and units (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from daskshuffle.plan._epoch_order import division_cuts
from daskshuffle.plan._mix_plan import mixed_order, stream_offsets
from daskshuffle.plan._streams import Stream, epoch_counts

piles = st.lists(st.integers(2, 12), min_size=1, max_size=5)


@st.composite
def mixtures(draw: st.DrawFn) -> tuple[list[np.ndarray], list[int]]:
    stores = draw(st.lists(piles, min_size=1, max_size=3))
    offsets = [np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64) for sizes in stores]
    counts = [draw(st.integers(0, 4 * int(o[-1]))) for o in offsets]
    return offsets, counts


@given(mixtures(), st.integers(0, 2**32), st.integers(0, 50), st.integers(1, 4))
def test_each_epoch_has_each_streams_rows_in_units_of_one_pile_and_no_copies_side_by_side(
    mixture: tuple[list[np.ndarray], list[int]], seed: int, epoch: int, n_divisions: int
) -> None:
    store_offsets, counts = mixture
    offsets, first_piles = stream_offsets(store_offsets)
    n_rows = sum(counts)
    divisions = division_cuts(n_rows, n_divisions, n_rows // n_divisions)
    order = mixed_order(offsets, first_piles, counts, seed, epoch, divisions)
    again = mixed_order(offsets, first_piles, counts, seed, epoch, divisions)
    np.testing.assert_array_equal(order.rows, again.rows)
    assert len(order.rows) == n_rows and order.bounds[0] == 0 and order.bounds[-1] == n_rows
    assert set(divisions.tolist()) <= set(order.bounds.tolist())
    times = np.bincount(order.rows, minlength=int(offsets[-1]))
    for stream, count in enumerate(counts):
        first, last = offsets[first_piles[stream]], offsets[first_piles[stream + 1]]
        mine = times[first:last]
        assert mine.sum() == count
        assert set(mine.tolist()) <= {count // (last - first), -(-count // (last - first))}
    assert (np.diff(order.rows) != 0).all(), "two copies of a row side by side"
    for start, stop in zip(order.bounds[:-1].tolist(), order.bounds[1:].tolist(), strict=True):
        unit = order.rows[start:stop]
        assert len(np.unique(unit)) == len(unit), "a unit holds a row once"
        assert len(np.unique(np.searchsorted(offsets, unit, side="right"))) == 1, "a unit holds rows of one pile"


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=5), st.lists(st.floats(0.01, 100), min_size=5, max_size=5))
def test_proportions_share_out_the_stores_rows_exactly(n_rows: list[int], weights: list[float]) -> None:
    streams = [Stream(f"{i}.zarr", proportion=w) for i, w in enumerate(weights[: len(n_rows)])]
    counts = epoch_counts(streams, n_rows)
    assert sum(counts) == sum(n_rows)
    exact = [sum(n_rows) * w / sum(weights[: len(n_rows)]) for w in weights[: len(n_rows)]]
    assert all(abs(c - x) < 1 for c, x in zip(counts, exact, strict=True))
