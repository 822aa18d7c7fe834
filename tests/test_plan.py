"""The pure plan: exhaustive and property tests. No I/O, no dask."""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from scipy import stats
from simulate import simulate

from daskshuffle._random import make_rng
from daskshuffle.plan._plan import (
    ShuffleSettings,
    auto_n_piles,
    block_order,
    fingerprint,
    group_order,
    make_plan,
    merge_runs,
    split_piles,
)

GOLDEN = Path(__file__).parent / "golden" / "plan_seed7.json"

block_lists = st.lists(st.integers(0, 60), min_size=0, max_size=6)
piles = st.integers(1, 12)
seeds = st.integers(0, 2**63 - 1)


@given(block_lists, piles, seeds)
def test_counts_split_every_block(lengths: list[int], n_piles: int, seed: int) -> None:
    plan = make_plan(lengths, n_piles, seed)
    assert plan.counts.shape == (len(lengths), n_piles)
    assert (plan.counts >= 0).all()
    assert plan.counts.sum(axis=1).tolist() == lengths
    assert plan.pile_offsets[0] == 0 and plan.pile_offsets[-1] == sum(lengths)
    assert np.array_equal(np.diff(plan.pile_offsets), plan.pile_sizes)
    assert np.array_equal(plan.piece_offsets[:, -1], lengths)


@given(block_lists, piles, seeds)
def test_same_seed_same_plan(lengths: list[int], n_piles: int, seed: int) -> None:
    a, b = make_plan(lengths, n_piles, seed), make_plan(lengths, n_piles, seed)
    assert np.array_equal(a.counts, b.counts)


@given(st.integers(1, 200), piles, seeds, st.integers(0, 5))
def test_block_order_is_pieces_in_source_order(length: int, n_piles: int, seed: int, block: int) -> None:
    counts = make_rng(seed, "test", block).multinomial(length, [1 / n_piles] * n_piles)
    order = block_order(counts, seed, block)
    assert sorted(order.tolist()) == list(range(length))
    edges = np.concatenate([[0], np.cumsum(counts)])
    for pile in range(n_piles):
        piece = order[edges[pile] : edges[pile + 1]]
        assert (np.diff(piece) > 0).all(), "a piece keeps its rows in source order"


@given(block_lists, piles, seeds, st.integers(1, 80))
@settings(max_examples=200)
def test_simulated_shuffle_is_a_permutation_with_piles_in_place(
    lengths: list[int], n_piles: int, seed: int, group_rows: int
) -> None:
    plan, order = simulate(lengths, n_piles, seed, group_nbytes=group_rows)
    assert sorted(order.tolist()) == list(range(sum(lengths)))
    # Every row sits in the pile its block's assignment sent it to.
    starts = np.concatenate([[0], np.cumsum(lengths)])
    expected_pile = np.empty(sum(lengths), dtype=np.int64)
    for block in range(len(lengths)):
        rows = np.arange(starts[block], starts[block + 1])[block_order(plan.counts[block], seed, block)]
        expected_pile[rows] = np.repeat(np.arange(n_piles), plan.counts[block])
    for pile in range(n_piles):
        members = order[plan.pile_offsets[pile] : plan.pile_offsets[pile + 1]]
        assert (expected_pile[members] == pile).all()


@given(block_lists, piles, seeds, st.integers(1, 80))
def test_grouping_does_not_change_the_output(lengths: list[int], n_piles: int, seed: int, rows: int) -> None:
    _, whole = simulate(lengths, n_piles, seed)
    _, grouped = simulate(lengths, n_piles, seed, group_nbytes=rows)
    assert np.array_equal(whole, grouped)


def test_group_order_example() -> None:
    counts = np.array([[1, 2], [1, 0]])
    order = group_order(counts, 0, 0)
    assert sorted(order[:2].tolist()) == [0, 3] and sorted(order[2:].tolist()) == [1, 2]  # piles end to end
    assert order.tolist() == [0, 3, 2, 1]  # each shuffled by its own generator


@given(st.lists(st.integers(0, 50), max_size=40), st.integers(1, 8), st.integers(1, 200))
def test_group_piles_cover_in_order_within_budget(sizes: list[int], row_nbytes: int, target: int) -> None:
    groups = merge_runs(np.array(sizes, dtype=np.int64), row_nbytes, target)
    flat = [pile for start, stop in groups for pile in range(start, stop)]
    assert flat == list(range(len(sizes)))
    for start, stop in groups:
        assert stop > start
        nbytes = sum(sizes[start:stop]) * row_nbytes
        assert nbytes <= target or stop - start == 1 or sum(sizes[start : stop - 1]) == 0


@given(st.integers(0, 10**9), st.integers(1, 10_000), st.integers(1, 10**10))
def test_auto_n_piles_leaves_six_sigma_headroom(n_rows: int, row_nbytes: int, pile_nbytes: int) -> None:
    assume(pile_nbytes >= row_nbytes)  # a pile that cannot hold a row is choose_layout's error
    m = auto_n_piles(n_rows, row_nbytes, pile_nbytes)
    expected = n_rows / m
    if pile_nbytes < 7 * row_nbytes:  # not even one row plus six sigma fits: one row expected per pile
        assert m == max(1, n_rows)
        return
    if expected >= 1:
        assert (expected + 6 * math.sqrt(expected)) * row_nbytes <= pile_nbytes * (1 + 1e-9)
    if m > 1:  # and it is the fewest such piles
        fewer = n_rows / (m - 1)
        assert fewer + 6 * math.sqrt(fewer) > (pile_nbytes // row_nbytes) * (1 - 1e-9)


def test_purposes_and_keys_are_independent_streams() -> None:
    draws = {
        key: make_rng(*key).integers(0, 2**62, 4).tolist()
        for key in [(0, "epoch", 1), (1, "epoch", 0), (0, "epoch", 0), (0, "rows", 1), (1, "rows", 0)]
    }
    assert len({tuple(v) for v in draws.values()}) == len(draws), "seed + epoch must not alias"


def test_settings_round_trip_and_fingerprint() -> None:
    settings_ = ShuffleSettings(n_piles=8, seed=3, materialize=True)
    assert ShuffleSettings.from_dict(json.loads(json.dumps(settings_.to_dict()))) == settings_
    assert fingerprint(settings_.to_dict()) == fingerprint(dict(reversed(settings_.to_dict().items())))
    assert fingerprint(settings_.to_dict()) != fingerprint({**settings_.to_dict(), "seed": 4})


def test_seeded_order_matches_golden_file() -> None:
    """A change that silently alters the output of a given seed must fail here."""
    plan, order = simulate([7, 0, 12, 5], 3, seed=7)
    found = {"counts": plan.counts.tolist(), "order": order.tolist()}
    if os.environ.get("DASKSHUFFLE_UPDATE_GOLDEN"):  # a deliberate change of outputs rewrites it
        GOLDEN.write_text(json.dumps(found) + "\n")
    assert found == json.loads(GOLDEN.read_text())


# -- uniformity: seeded, sized so that a correct shuffle fails less than once in 10^7 runs --


@pytest.mark.slow
def test_materialized_position_of_fixed_rows_is_uniform() -> None:
    """Over many seeds, where a given row lands is uniform over the output."""
    n_rows, n_seeds, bins = 60, 6_000, 10
    lengths = [25, 5, 30]
    landing = {0: np.zeros(bins), 29: np.zeros(bins), 59: np.zeros(bins)}
    for seed in range(n_seeds):
        _, order = simulate(lengths, 4, seed, group_nbytes=20)
        positions = np.argsort(order)
        for row, counts in landing.items():
            counts[positions[row] * bins // n_rows] += 1
    for row, counts in landing.items():
        p = stats.chisquare(counts).pvalue
        assert p > 1e-7, f"row {row} lands non-uniformly: {counts.tolist()} (p={p:.2g})"


@pytest.mark.slow
def test_materialized_pairs_are_unordered() -> None:
    """Two rows of the same block come out in either order with probability 1/2,
    also when they share a pile (the in-pile shuffle must mix sources)."""
    n_seeds = 4_000
    before = 0
    for seed in range(n_seeds):
        _, order = simulate([20, 20], 2, seed)
        positions = np.argsort(order)
        before += positions[0] < positions[1]
    p = stats.binomtest(before, n_seeds, 0.5).pvalue
    assert p > 1e-7, f"row 0 precedes row 1 in {before}/{n_seeds} runs (p={p:.2g})"


@given(st.lists(st.integers(0, 50), min_size=1, max_size=40), st.data())
def test_split_piles_gives_exactly_the_runs_asked_for_of_near_equal_rows(sizes: list[int], data: st.DataObject) -> None:
    pile_sizes = np.array(sizes, dtype=np.int64)
    n_parts = data.draw(st.integers(1, len(sizes)))
    runs = split_piles(pile_sizes, n_parts)
    assert len(runs) == n_parts and runs[0][0] == 0 and runs[-1][1] == len(sizes)
    assert all(start < stop for start, stop in runs) and all(a[1] == b[0] for a, b in itertools.pairwise(runs))
    share = pile_sizes.sum() / n_parts
    rows = [int(pile_sizes[start:stop].sum()) for start, stop in runs]
    if min(sizes) > 0 and share >= max(sizes):
        # Every cut is the boundary nearest its target, at most half a pile away.
        assert max(abs(r - share) for r in rows) <= max(sizes) + 1e-9
