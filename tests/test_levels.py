"""Two-level shuffles: the plan, the same output as its simulation, uniformity, and real runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import zarr
from conftest import make_zarr_source
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats
from simulate import simulate, simulate_two_levels

from daskshuffle import DaskShuffleValueError, PileLoader, shuffle_zarr
from daskshuffle._levels import (
    make_two_level_plan,
    merge_read_nbytes,
    super_pile_bounds,
    super_piles_for,
    two_level_plan_nbytes,
)
from daskshuffle.formats._zarr import open_zarr_sources


@given(
    st.lists(st.integers(0, 60), min_size=1, max_size=12),
    st.integers(2, 12),
    st.data(),
    st.integers(0, 2**32),
    st.integers(1, 80),
)
def test_two_level_plans_cover_every_row_once_in_their_super_piles(
    lengths: list[int], n_piles: int, data: st.DataObject, seed: int, block_rows: int
) -> None:
    n_super = data.draw(st.integers(1, n_piles))
    plan, order = simulate_two_levels(lengths, n_piles, n_super, seed, block_rows=block_rows)
    np.testing.assert_array_equal(np.sort(order), np.arange(sum(lengths)))
    bounds, groups = plan.bounds, plan.group_bounds
    assert groups[0] == 0 and groups[-1] == len(lengths) and (np.diff(groups) > 0).all()
    # Groups of about n_super blocks' worth of rows: less by under a block, and never more groups than that makes.
    target, group_rows = n_super * block_rows, np.add.reduceat(np.asarray(lengths), groups[:-1])
    assert (group_rows[:-1] > target - max(lengths)).all()
    assert plan.n_groups <= max(1, -(-sum(lengths) // target))
    for g in range(plan.n_groups):
        table = plan.block_table(g)
        np.testing.assert_array_equal(table.sum(axis=1), lengths[groups[g] : groups[g + 1]])
        np.testing.assert_array_equal(table.sum(axis=0), plan.group_counts[g])
    # A span's rows go to its super-pile's piles only, all of them.
    for s in range(n_super):
        counts = plan.span_counts[s]
        assert counts.shape == (plan.n_groups, bounds[s + 1] - bounds[s])
        np.testing.assert_array_equal(counts.sum(axis=1), plan.group_counts[:, s])
    np.testing.assert_array_equal(np.diff(plan.pile_offsets), plan.pile_sizes)
    assert plan.pile_sizes.sum() == sum(lengths)


@pytest.mark.slow
def test_a_groups_blocks_get_independent_multinomial_rows() -> None:
    """The chain of hypergeometric draws inside a group has the law of independent multinomial rows."""
    n_seeds, p0 = 20_000, 3 / 5
    first, both = np.zeros(4, dtype=np.int64), []
    for seed in range(n_seeds):
        plan = make_two_level_plan([3, 3], n_piles=5, n_super=2, seed=seed, block_rows=3)
        assert plan.n_groups == 1
        table = plan.block_table(0)
        first[table[0, 0]] += 1
        both.append((table[0, 0], table[1, 0]))
    expected = stats.binom.pmf(np.arange(4), 3, p0) * n_seeds
    p = stats.chisquare(first, expected).pvalue
    assert p > 1e-7, f"block 0's rows in super-pile 0: {first.tolist()} against {expected.round().tolist()} (p={p:.2g})"
    a, b = np.asarray(both).T
    r, p = stats.pearsonr(a, b)
    assert p > 1e-7, f"the blocks' counts are correlated: r={r:.3f} (p={p:.2g})"


def test_a_plan_for_1e10_rows_stays_small() -> None:
    """38,147 blocks into 16,384 piles: no blocks x piles matrix (that would be 5 GB)."""
    plan = make_two_level_plan(np.full(38_147, 262_144), n_piles=16_384, n_super=195, seed=0, block_rows=262_144)
    held = sum(a.nbytes for a in (plan.group_counts, *plan.span_counts))
    assert held < 32 * 2**20 and plan.pile_sizes.sum() == 38_147 * 262_144
    assert held + plan.block_lengths.nbytes <= two_level_plan_nbytes(38_147, 195, 16_384, plan.n_groups)


def test_super_piles_split_piles_evenly_and_balance_the_reads() -> None:
    assert super_pile_bounds(5, 2).tolist() == [0, 3, 5]
    assert super_pile_bounds(512, 32).tolist() == list(range(0, 513, 16))
    with pytest.raises(DaskShuffleValueError):
        super_pile_bounds(4, 5)
    gib, mib = 2**30, 2**20
    for data in (64 * gib, 1024 * gib, 10 * 1024 * gib):
        n_super = super_piles_for(data, 64 * mib, 64 * mib, n_piles=10**6)
        second = merge_read_nbytes(data, 64 * mib, 64 * mib, n_super)
        first = 64 * mib / n_super
        assert 0.9 < second / first < 1.1  # the two levels' reads about equal
        assert min(first, second) > 128 * 1024  # where one level reads 64 KiB, 4 KiB, 0.4 KiB
        assert min(first, second) > 30 * merge_read_nbytes(data, 64 * mib, 64 * mib)


# -- uniformity: seeded, sized so that a correct shuffle fails less than once in 10^7 runs --


@pytest.mark.slow
def test_a_rows_pile_is_uniform_also_with_unequal_super_piles() -> None:
    """5 piles in super-piles of 3 and 2: the first level must weigh them 3:2, or piles 3-4 get too many rows."""
    n_seeds, n_piles = 4_000, 5
    landed = np.zeros(n_piles)
    for seed in range(n_seeds):
        levels, order = simulate_two_levels([4, 4, 4], n_piles, 2, seed, block_rows=5)
        offsets = levels.pile_offsets
        position = int(np.argsort(order)[7])
        landed[np.searchsorted(offsets, position, side="right") - 1] += 1
    p = stats.chisquare(landed).pvalue
    assert p > 1e-7, f"row 7 lands in piles {landed.tolist()} (p={p:.2g})"


@pytest.mark.slow
def test_materialized_two_level_positions_are_uniform_and_pairs_unordered() -> None:
    n_rows, n_seeds, bins = 60, 6_000, 10
    landing = {0: np.zeros(bins), 29: np.zeros(bins), 59: np.zeros(bins)}
    before = 0
    for seed in range(n_seeds):
        _, order = simulate_two_levels([25, 5, 30], 6, 3, seed, block_rows=10, materialize=True, group_nbytes=20)
        positions = np.argsort(order)
        for row, counts in landing.items():
            counts[positions[row] * bins // n_rows] += 1
        before += positions[0] < positions[1]
    for row, counts in landing.items():
        p = stats.chisquare(counts).pvalue
        assert p > 1e-7, f"row {row} lands non-uniformly: {counts.tolist()} (p={p:.2g})"
    p = stats.binomtest(before, n_seeds, 0.5).pvalue
    assert p > 1e-7, f"row 0 precedes row 1 in {before}/{n_seeds} runs (p={p:.2g})"


# -- real shuffles -----------------------------------------------------------------------


def expected(source: str, n_piles: int, seed: int, block_nbytes: int, materialize: bool = False) -> np.ndarray:
    fmt = open_zarr_sources(source, block_nbytes=block_nbytes)
    data = sum(fmt.block_lengths) * fmt.row_nbytes
    n_super = super_piles_for(data, block_nbytes, block_nbytes, n_piles)
    block_rows = max(1, block_nbytes // fmt.row_nbytes)
    return simulate_two_levels(
        list(fmt.block_lengths),
        n_piles,
        n_super,
        seed,
        block_rows=block_rows,
        materialize=materialize,
        group_nbytes=block_nbytes // fmt.row_nbytes,
    )[1]


@pytest.mark.parametrize(
    ("n_rows", "chunk_rows", "block_memory", "n_piles"), [(200, 1, 26, 4), (700, 7, 200, 9), (700, 50, 2_600, 16)]
)
@pytest.mark.parametrize("materialize", [False, True])
def test_a_two_level_store_is_its_simulation(
    tmp_path: Path, n_rows: int, chunk_rows: int, block_memory: int, n_piles: int, materialize: bool
) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", n_rows, chunk_rows=chunk_rows)
    result = shuffle_zarr(
        source, tmp_path / "piles.zarr", n_piles, seed=5, levels=2, block_memory=block_memory, materialize=materialize
    )
    group = zarr.open_group(tmp_path / "piles.zarr", mode="r")
    ids = group["id"][:]
    np.testing.assert_array_equal(ids, expected(source, n_piles, 5, block_memory, materialize))
    np.testing.assert_array_equal(group["x"][:, 0], ids)
    meta = group.attrs["daskshuffle"]
    assert meta["levels"]["n_levels"] == 2 and result.n_piles == n_piles
    np.testing.assert_array_equal(np.diff(meta["pile_offsets"]), result.pile_sizes)
    with PileLoader(tmp_path / "piles.zarr", 64) as loader:
        np.testing.assert_array_equal(np.sort(np.concatenate([b["id"] for b in loader])), np.arange(n_rows))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["piles.zarr", "raw.zarr"], "no scratch left"


def test_auto_uses_two_levels_only_where_reads_would_be_small_and_many(tmp_path: Path) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 1_000, chunk_rows=5)  # 26 KB of 26-byte rows
    # One read of the whole data; 10 blocks x 10 groups of 260-byte reads; 200 blocks x 104 groups of 2-byte reads.
    options: dict[str, dict[str, Any]] = {
        "large.zarr": {},
        "few.zarr": {"block_memory": 2_600},
        "many.zarr": {"block_memory": 250},
        "forced.zarr": {"block_memory": 250, "levels": 1},
    }
    levels, ids = {}, {}
    for name, chosen in options.items():
        shuffle_zarr(source, tmp_path / name, 8, seed=1, **chosen)
        group = zarr.open_group(tmp_path / name)
        levels[name], ids[name] = group.attrs["daskshuffle"].get("levels"), group["id"][:]
    assert [name for name, found in levels.items() if found] == ["many.zarr"]
    single = simulate(list(open_zarr_sources(source, block_nbytes=250).block_lengths), 8, 1, materialize=False)[1]
    np.testing.assert_array_equal(ids["forced.zarr"], single)
    np.testing.assert_array_equal(ids["many.zarr"], expected(source, 8, 1, 250))


def test_bad_levels_are_refused(source: str, tmp_path: Path) -> None:
    with pytest.raises(DaskShuffleValueError, match="levels"):
        shuffle_zarr(source, tmp_path / "a.zarr", 8, levels=3)
    with pytest.raises(DaskShuffleValueError, match="n_piles of 4 or more"):
        shuffle_zarr(source, tmp_path / "a.zarr", 2, levels=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.zarr"]


def test_two_levels_on_a_cluster_are_the_same_bytes(tmp_path: Path, cluster_client: Any) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 3_000, chunk_rows=40)
    options: dict[str, Any] = {"seed": 2, "levels": 2, "block_memory": 2_000}
    shuffle_zarr(source, tmp_path / "threads.zarr", 12, **options)
    with cluster_client.as_current():
        shuffle_zarr(source, tmp_path / "cluster.zarr", 12, **options)
    for name in ("id", "x", "y"):
        np.testing.assert_array_equal(
            zarr.open_group(tmp_path / "threads.zarr")[name][:], zarr.open_group(tmp_path / "cluster.zarr")[name][:]
        )


def test_an_interrupted_two_level_run_continues(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from daskshuffle import _graph

    source = make_zarr_source(tmp_path / "raw.zarr", 1_500, chunk_rows=50)
    options: dict[str, Any] = {"seed": 4, "levels": 2, "block_memory": 2_600}
    shuffle_zarr(source, tmp_path / "whole.zarr", 8, **options)
    second = _graph._scatter_spans
    calls: list[int] = []

    def interrupted(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return second(*args)

    monkeypatch.setattr(_graph, "_scatter_spans", interrupted)
    with dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
        shuffle_zarr(source, tmp_path / "piles.zarr", 8, **options)
    monkeypatch.setattr(_graph, "_scatter_spans", second)
    firsts: list[int] = []
    scatter = _graph._scatter
    monkeypatch.setattr(_graph, "_scatter", lambda *a: (firsts.append(1), scatter(*a))[1])
    with dask.config.set(scheduler="sync"):
        shuffle_zarr(source, tmp_path / "piles.zarr", 8, **options)
    assert not firsts, "the first level, done before the interruption, is not run again"
    for name in ("id", "x", "y"):
        np.testing.assert_array_equal(
            zarr.open_group(tmp_path / "piles.zarr")[name][:], zarr.open_group(tmp_path / "whole.zarr")[name][:]
        )


@pytest.mark.slow
def test_parquet_and_text_shuffle_in_two_levels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import pandas as pd
    import pyarrow.parquet as pq

    from daskshuffle import shuffle_lines, shuffle_parquet

    ids = np.arange(6_000)
    pd.DataFrame({"id": ids, "s": [str(i) for i in ids]}).to_parquet(tmp_path / "raw.parquet", row_group_size=500)
    shuffle_parquet(tmp_path / "raw.parquet", tmp_path / "p.parquet", 12, seed=0, levels=2, block_memory="8KiB")
    table = pq.read_table(tmp_path / "p.parquet").to_pandas()
    np.testing.assert_array_equal(np.sort(table["id"]), ids)
    assert (table["s"] == table["id"].astype(str)).all()
    assert json.loads((tmp_path / "p.parquet" / "_daskshuffle.json").read_text())["levels"]["n_levels"] == 2
    from daskshuffle import _graph

    lines = np.arange(20_000)
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"i": int(i)}) + "\n" for i in lines))
    spans = _graph._scatter_spans
    calls: list[int] = []
    monkeypatch.setattr(_graph, "_scatter_spans", lambda *a: (calls.append(1), spans(*a))[1])
    # Lines take levels="auto": 1 KiB blocks of 20,000 short lines would make ~46,000 reads of a few bytes.
    result = shuffle_lines(tmp_path / "c.jsonl", tmp_path / "o.jsonl", 24, seed=0, block_memory="1KiB")
    out = [json.loads(line)["i"] for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert sorted(out) == lines.tolist() and out != lines.tolist() and result.n_rows == 20_000
    assert calls, "the second level ran"
