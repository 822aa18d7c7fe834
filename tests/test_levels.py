"""Shuffles of several levels: the plan, the same output as its simulation, uniformity, and real runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import zarr
from conftest import Points, make_zarr_source, raise_at
from hypothesis import given, strategies as st
from scipy import stats
from simulate import simulate, simulate_levels

from daskshuffle import DaskShuffleValueError, PileLoader, shuffle_zarr
from daskshuffle.plan._level_plan import block_table, make_level_plan, split_bounds
from daskshuffle.plan._levels import auto_levels, fanout_for, level_plan_nbytes, level_read_nbytes, merge_read_nbytes
from daskshuffle.sources import open_zarr_sources


@given(
    st.lists(st.integers(0, 60), min_size=1, max_size=12),
    st.integers(4, 16),
    st.lists(st.integers(2, 3), min_size=1, max_size=2),
    st.integers(0, 2**32),
    st.integers(1, 80),
)
def test_level_plans_cover_every_row_once_in_their_super_piles(
    lengths: list[int], n_piles: int, fanouts: list[int], seed: int, block_rows: int
) -> None:
    if int(np.prod(fanouts)) > n_piles:
        fanouts = fanouts[:1]
    plan, order = simulate_levels(lengths, n_piles, fanouts, seed, block_rows=block_rows)
    np.testing.assert_array_equal(np.sort(order), np.arange(sum(lengths)))
    assert plan.n_levels == len(fanouts) + 1 and plan.n_super == int(np.prod(fanouts))
    for level in plan.levels:
        groups, target = level.group_bounds, level.fanout * block_rows
        assert groups[0] == 0 and groups[-1] == len(level.block_lengths) and (np.diff(groups) >= 0).all()
        # A group is blocks of one super-pile; each holds about a fanout of blocks' rows, less by under a block.
        group_rows = np.add.reduceat(level.block_lengths, groups[:-1]) if level.n_groups else np.zeros(0)
        ends = set(level.super_groups[1:].tolist())
        for g, rows in enumerate(group_rows.tolist()):
            assert g + 1 in ends or rows > target - max(lengths)
        for g in range(level.n_groups):
            table = block_table(*level.group_draw(g))
            np.testing.assert_array_equal(table.sum(axis=1), level.block_lengths[groups[g] : groups[g + 1]])
            np.testing.assert_array_equal(table.sum(axis=0), level.group_counts[g])
        assert level.span_lengths.sum() == sum(lengths)
    # A last-level block's rows go to its super-pile's piles only, all of them.
    for s in range(plan.n_super):
        counts = plan.counts[s]
        assert counts.shape == (plan.super_blocks[s + 1] - plan.super_blocks[s], plan.bounds[s + 1] - plan.bounds[s])
    np.testing.assert_array_equal(np.diff(plan.pile_offsets), plan.pile_sizes)
    assert plan.pile_sizes.sum() == sum(lengths)


@pytest.mark.slow
def test_a_groups_blocks_get_independent_multinomial_rows() -> None:
    """The chain of hypergeometric draws inside a group has the law of independent multinomial rows."""
    n_seeds, p0 = 20_000, 3 / 5
    first, both = np.zeros(4, dtype=np.int64), []
    # A group's counts per super-pile are multinomial (the plan draws them so); the table is drawn from them.
    totals = np.random.default_rng(0).multinomial(6, [p0, 1 - p0], size=n_seeds)
    for group, total in enumerate(totals):
        table = block_table(np.array([3, 3]), total, seed=1, group=group)
        first[table[0, 0]] += 1
        both.append((table[0, 0], table[1, 0]))
    expected = stats.binom.pmf(np.arange(4), 3, p0) * n_seeds
    p = stats.chisquare(first, expected).pvalue
    assert p > 1e-7, f"block 0's rows in super-pile 0: {first.tolist()} against {expected.round().tolist()} (p={p:.2g})"
    a, b = np.asarray(both).T
    r, p = stats.pearsonr(a, b)
    assert p > 1e-7, f"the blocks' counts are correlated: r={r:.3f} (p={p:.2g})"


@pytest.mark.parametrize("fanouts", [[195], [34, 34]])
def test_a_plan_for_1e10_rows_stays_small(fanouts: list[int]) -> None:
    """38,147 blocks into 16,384 piles: no blocks x piles matrix (that would be 5 GB)."""
    plan = make_level_plan(np.full(38_147, 262_144), n_piles=16_384, fanouts=fanouts, seed=0, block_rows=262_144)
    held = sum(a.nbytes for a in plan.counts) + sum(level.group_counts.nbytes for level in plan.levels)
    assert held < 32 * 2**20 and plan.pile_sizes.sum() == 38_147 * 262_144
    assert held <= level_plan_nbytes(38_147, fanouts, 16_384)


def test_super_piles_split_piles_evenly_and_balance_the_reads() -> None:
    assert split_bounds(np.array([5]), 2).tolist() == [0, 3, 5]
    assert split_bounds(np.array([512]), 32).tolist() == list(range(0, 513, 16))
    assert split_bounds(np.array([3, 3]), 2).tolist() == [0, 2, 3, 5, 6]
    gib, mib = 2**30, 2**20
    for data in (64 * gib, 1024 * gib, 10 * 1024 * gib, 100 * 1024 * gib):
        for n_levels in (2, 3, 4):
            first, second = level_read_nbytes(data, 64 * mib, 10**7, n_levels)
            assert 0.7 < second / first < 1.4, (data, n_levels)  # the kinds of read about equal
            assert min(first, second) > 30 * merge_read_nbytes(data, 64 * mib, 64 * mib)
    # With 64 MiB blocks on object storage, every read of 128 KiB or more, up to 100 TiB, in three levels at most.
    for data, n_levels in ((4 * gib, 1), (128 * gib, 2), (16 * 1024 * gib, 2), (100 * 1024 * gib, 3)):
        assert auto_levels(data, 64 * mib, data // (64 * mib), 10**7, "object") == n_levels
        assert n_levels == 1 or min(level_read_nbytes(data, 64 * mib, 10**7, n_levels)) >= 128 * 2**10
    assert fanout_for(100 * 1024 * gib, 64 * mib, n_piles=64, n_levels=4) == 3  # 27 super-piles of 2 piles or more


# -- uniformity: seeded, sized so that a correct shuffle fails less than once in 10^7 runs --


@pytest.mark.slow
def test_a_rows_pile_is_uniform_also_with_unequal_super_piles() -> None:
    """5 piles in super-piles of 3 and 2: the first level must weigh them 3:2, or piles 3-4 get too many rows."""
    n_seeds, n_piles = 4_000, 5
    landed = np.zeros(n_piles)
    for seed in range(n_seeds):
        levels, order = simulate_levels([4, 4, 4], n_piles, [2], seed, block_rows=5)
        offsets = levels.pile_offsets
        position = int(np.argsort(order)[7])
        landed[np.searchsorted(offsets, position, side="right") - 1] += 1
    p = stats.chisquare(landed).pvalue
    assert p > 1e-7, f"row 7 lands in piles {landed.tolist()} (p={p:.2g})"


@pytest.mark.slow
def test_a_rows_pile_is_uniform_in_three_levels_of_unequal_super_piles() -> None:
    """7 piles split 2 ways twice: super-piles of 4 and 3, then of 2, 2, 2 and 1."""
    n_seeds, n_piles = 2_500, 7
    landed = np.zeros(n_piles)
    for seed in range(n_seeds):
        plan, order = simulate_levels([3, 5, 4, 2], n_piles, [2, 2], seed, block_rows=2)
        assert plan.n_levels == 3 and plan.bounds.tolist() == [0, 2, 4, 6, 7]
        position = int(np.argsort(order)[6])
        landed[np.searchsorted(plan.pile_offsets, position, side="right") - 1] += 1
    p = stats.chisquare(landed).pvalue
    assert p > 1e-7, f"row 6 lands in piles {landed.tolist()} (p={p:.2g})"


@pytest.mark.slow
def test_materialized_two_level_positions_are_uniform_and_pairs_unordered() -> None:
    n_rows, n_seeds, bins = 60, 3_000, 10
    landing = {0: np.zeros(bins), 29: np.zeros(bins), 59: np.zeros(bins)}
    before = 0
    for seed in range(n_seeds):
        _, order = simulate_levels([25, 5, 30], 6, [3], seed, block_rows=10, group_nbytes=20)
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


def expected(source: str, n_piles: int, seed: int, block_nbytes: int, n_levels: int = 2) -> np.ndarray:
    """The store's order: its piles each stored in an order drawn from the seed, materialized or not."""
    fmt = open_zarr_sources(source, block_nbytes=block_nbytes)
    data = sum(fmt.block_lengths) * fmt.row_nbytes
    fanout = fanout_for(data, block_nbytes, n_piles, n_levels)
    block_rows = max(1, block_nbytes // fmt.row_nbytes)
    return simulate_levels(
        list(fmt.block_lengths),
        n_piles,
        [fanout] * (n_levels - 1),
        seed,
        block_rows=block_rows,
        group_nbytes=block_nbytes // fmt.row_nbytes,
    )[1]


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int, int], str]:
    """Zarr sources made once for the module, by ``(n_rows, chunk_rows)``: the tests only read them."""
    made: dict[tuple[int, int], str] = {}
    root = tmp_path_factory.mktemp("sources")

    def source(n_rows: int, chunk_rows: int) -> str:
        if (n_rows, chunk_rows) not in made:
            made[n_rows, chunk_rows] = make_zarr_source(
                root / f"{n_rows}-{chunk_rows}.zarr", n_rows, chunk_rows=chunk_rows
            )
        return made[n_rows, chunk_rows]

    return source


@pytest.mark.slow
@pytest.mark.parametrize(
    ("n_rows", "chunk_rows", "block_memory", "n_piles", "n_levels"),
    [
        (60, 1, 26, 4, 2),  # blocks of one row and spans of none: 60 blocks in 30 groups
        (210, 7, 200, 9, 2),  # a block is a chunk: 30 blocks, fanout 4
        (700, 50, 2_600, 16, 2),  # a block is two chunks
        (90, 1, 26, 8, 3),  # 90 one-row blocks through 4 super-piles
        (340, 7, 200, 27, 3),  # a short last block (4 rows of 7), 9 super-piles of 3 piles
        (800, 40, 520, 16, 4),  # a chunk larger than a block: 20 blocks, 8 super-piles
    ],
)
@pytest.mark.parametrize("materialize", [False, True])
def test_a_store_of_several_levels_is_its_simulation(
    tmp_path: Path,
    sources: Callable[[int, int], str],
    n_rows: int,
    chunk_rows: int,
    block_memory: int,
    n_piles: int,
    n_levels: int,
    materialize: bool,
) -> None:
    source = sources(n_rows, chunk_rows)
    options: dict[str, Any] = {"seed": 5, "levels": n_levels, "block_memory": block_memory, "materialize": materialize}
    result = shuffle_zarr(source, tmp_path / "piles.zarr", n_piles, **options)
    group = zarr.open_group(tmp_path / "piles.zarr", mode="r")
    ids = group["id"][:]
    np.testing.assert_array_equal(ids, expected(source, n_piles, 5, block_memory, n_levels))
    np.testing.assert_array_equal(group["x"][:, 0], ids)
    meta = group.attrs["daskshuffle"]
    assert meta["levels"]["n_levels"] == n_levels and result.n_piles == n_piles
    np.testing.assert_array_equal(np.diff(meta["pile_offsets"]), result.pile_sizes)
    with PileLoader(tmp_path / "piles.zarr", 64) as loader:
        np.testing.assert_array_equal(np.sort(np.concatenate([b["id"] for b in loader])), np.arange(n_rows))
    assert [p.name for p in tmp_path.iterdir()] == ["piles.zarr"], "no scratch left"
    assert [p.name for p in Path(source).parent.iterdir() if not p.name.endswith(".zarr")] == [], (
        "none beside the source"
    )


@pytest.mark.slow
def test_auto_uses_two_levels_only_where_reads_would_be_small_and_many(
    tmp_path: Path, sources: Callable[[int, int], str]
) -> None:
    source = sources(1_000, 5)  # 26 KB of 26-byte rows
    # 64 piles of 406 bytes. One read of the whole data; 10 blocks x 10 groups of 260-byte reads; 200 blocks
    # x 64 groups of one pile (a pile outgrows a block) of 2-byte reads, 12,800 of them.
    options: dict[str, dict[str, Any]] = {
        "large.zarr": {},
        "few.zarr": {"block_memory": 2_600},
        "many.zarr": {"block_memory": 250},
        "forced.zarr": {"block_memory": 250, "levels": 1},
    }
    levels, ids = {}, {}
    for name, chosen in options.items():
        shuffle_zarr(source, tmp_path / name, 64, seed=1, **chosen)
        group = zarr.open_group(tmp_path / name)
        levels[name], ids[name] = group.attrs["daskshuffle"].get("levels"), group["id"][:]
    assert [name for name, found in levels.items() if found] == ["many.zarr"]
    single = simulate(list(open_zarr_sources(source, block_nbytes=250).block_lengths), 64, 1)[1]
    np.testing.assert_array_equal(ids["forced.zarr"], single)
    n_levels = levels["many.zarr"]["n_levels"]
    assert n_levels > 1
    np.testing.assert_array_equal(ids["many.zarr"], expected(source, 64, 1, 250, n_levels=n_levels))
    # With 8 piles, each a group of its own, the merges make 200 x 8 reads: too few for a second level.
    shuffle_zarr(source, tmp_path / "eight.zarr", 8, seed=1, block_memory=250)
    assert "levels" not in zarr.open_group(tmp_path / "eight.zarr").attrs["daskshuffle"]


def test_bad_levels_are_refused(source: str, tmp_path: Path) -> None:
    with pytest.raises(DaskShuffleValueError, match=r"Expected levels to be 'auto' or 1 to 4\. Got 5"):
        shuffle_zarr(source, tmp_path / "a.zarr", 8, levels=5)
    with pytest.raises(DaskShuffleValueError, match=r"4 piles or more for 2 levels\. Got n_piles=2"):
        shuffle_zarr(source, tmp_path / "a.zarr", 2, levels=2)
    with pytest.raises(DaskShuffleValueError, match="8 piles or more for 3 levels"):
        shuffle_zarr(source, tmp_path / "a.zarr", 7, levels=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.zarr"]


@pytest.mark.parametrize("n_levels", [2, 3])
def test_levels_on_a_cluster_are_the_same_bytes(tmp_path: Path, cluster_client: Any, n_levels: int) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 3_000, chunk_rows=40)
    options: dict[str, Any] = {"seed": 2, "levels": n_levels, "block_memory": 2_000}
    shuffle_zarr(source, tmp_path / "threads.zarr", 12, **options)
    with cluster_client.as_current():
        shuffle_zarr(source, tmp_path / "cluster.zarr", 12, **options)
    for name in ("id", "x", "y"):
        np.testing.assert_array_equal(
            zarr.open_group(tmp_path / "threads.zarr")[name][:], zarr.open_group(tmp_path / "cluster.zarr")[name][:]
        )


@pytest.mark.parametrize(("n_levels", "interrupt_at"), [(2, 4), (3, 4), (3, 30)])
def test_an_interrupted_run_of_several_levels_continues(
    tmp_path: Path, points: Points, n_levels: int, interrupt_at: int
) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 1_500, chunk_rows=50)
    options: dict[str, Any] = {"seed": 4, "levels": n_levels, "block_memory": 2_600}
    shuffle_zarr(source, tmp_path / "whole.zarr", 8, **options)
    points.arm("scatter spans", raise_at(interrupt_at))  # in the second level, or (30) the third
    with dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
        shuffle_zarr(source, tmp_path / "piles.zarr", 8, **options)
    points.disarm("scatter spans")
    firsts = points.arm("scatter")
    with dask.config.set(scheduler="sync"):
        shuffle_zarr(source, tmp_path / "piles.zarr", 8, **options)
    assert not firsts, "the first level, done before the interruption, is not run again"
    for name in ("id", "x", "y"):
        np.testing.assert_array_equal(
            zarr.open_group(tmp_path / "piles.zarr")[name][:], zarr.open_group(tmp_path / "whole.zarr")[name][:]
        )


@pytest.mark.slow
def test_parquet_and_text_shuffle_in_two_levels(tmp_path: Path, points: Points) -> None:
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

    lines = np.arange(20_000)
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"i": int(i)}) + "\n" for i in lines))
    calls = points.arm("scatter spans")
    # Lines take levels="auto": 1 KiB blocks of 20,000 short lines (249 KB) into 64 piles of 3.9 KB would make
    # about 15,000 merge reads of a few bytes.
    result = shuffle_lines(tmp_path / "c.jsonl", tmp_path / "o.jsonl", 64, seed=0, block_memory="1KiB")
    out = [json.loads(line)["i"] for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert sorted(out) == lines.tolist() and out != lines.tolist() and result.n_rows == 20_000
    assert calls, "the second level ran"
