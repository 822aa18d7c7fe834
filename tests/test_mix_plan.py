"""The pure plan of a mixture: every epoch's units of each stream, their copies and samples (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from daskshuffle.epochs._streams import Stream, epoch_counts, stream_offsets
from daskshuffle.epochs._unit_plan import epoch_runs, unit_bounds

piles = st.lists(st.integers(2, 12), min_size=1, max_size=5)


@st.composite
def mixtures(draw: st.DrawFn) -> tuple[list[np.ndarray], list[int]]:
    stores = draw(st.lists(piles, min_size=1, max_size=3))
    offsets = [np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64) for sizes in stores]
    counts = [draw(st.integers(0, 4 * int(o[-1]))) for o in offsets]
    return offsets, counts


@given(mixtures(), st.integers(0, 2**32), st.integers(0, 50), st.integers(1, 6))
def test_each_epoch_has_each_streams_rows_in_units_that_stay_in_their_store(
    mixture: tuple[list[np.ndarray], list[int]], seed: int, epoch: int, unit_rows: int
) -> None:
    store_offsets, counts = mixture
    offsets = stream_offsets(store_offsets)
    starts = np.concatenate([[0], np.cumsum([int(o[-1]) for o in store_offsets])])
    sizes = np.diff(starts)
    segments = np.stack([starts[:-1], np.zeros_like(sizes), sizes, np.arange(len(sizes))], axis=1)
    bounds = unit_bounds(int(offsets[-1]), [unit_rows] * len(sizes), segments)
    runs = epoch_runs(bounds, seed, epoch, starts, counts)
    np.testing.assert_array_equal(runs, epoch_runs(bounds, seed, epoch, starts, counts))
    rows = np.concatenate([np.arange(a, b) for a, b in runs.tolist()] or [np.zeros(0, np.int64)])
    assert len(rows) == sum(counts)
    times = np.bincount(rows, minlength=int(offsets[-1]))
    for stream, count in enumerate(counts):
        first, last = int(starts[stream]), int(starts[stream + 1])
        mine = times[first:last]
        assert mine.sum() == count
        assert set(mine.tolist()) <= {count // (last - first), -(-count // (last - first))}
    for a, b in runs.tolist():
        assert b - a <= unit_rows and np.searchsorted(starts, a, "right") == np.searchsorted(starts, b - 1, "right")


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=5), st.lists(st.floats(0.01, 100), min_size=5, max_size=5))
def test_proportions_share_out_the_stores_rows_exactly(n_rows: list[int], weights: list[float]) -> None:
    streams = [Stream(f"{i}.zarr", proportion=w) for i, w in enumerate(weights[: len(n_rows)])]
    counts = epoch_counts(streams, n_rows)
    assert sum(counts) == sum(n_rows)
    exact = [sum(n_rows) * w / sum(weights[: len(n_rows)]) for w in weights[: len(n_rows)]]
    assert all(abs(c - x) < 1 for c, x in zip(counts, exact, strict=True))
