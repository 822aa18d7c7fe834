"""The scale model (``daskshuffle.explain``, ``daskshuffle plan``): agrees with real plans, and its properties."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import make_zarr_source
from hypothesis import assume, given, settings, strategies as st

import daskshuffle
from daskshuffle._cli._common import cli
from daskshuffle._errors import DaskShuffleValueError
from daskshuffle._parse import parse_nbytes
from daskshuffle._random import make_rng
from daskshuffle.plan._level_plan import block_table
from daskshuffle.plan._plan import Plan, make_plan, plan_nbytes
from daskshuffle.plan._scale import MAX_TASK_MEMORY, binomial_sf, explain, typical_largest
from daskshuffle.shuffle._graph import _merge, _scatter, shuffle_graph
from daskshuffle.shuffle._store_plan import plan_within_budget
from daskshuffle.sources import open_zarr_sources
from daskshuffle.storage._location import Location

#: make_zarr_source's rows: x (4 float32), y (int16), id (int64).
ROW_NBYTES = 26


def _real_shuffle(path: Path, n_rows: int, chunk_rows: int, n_piles: Any, block_rows: int, pile_rows: int) -> dict:
    """What a real Zarr shuffle of this size plans: its format's blocks, its plan and its graph's tasks."""
    make_zarr_source(path, n_rows, chunk_rows=chunk_rows)
    fmt = open_zarr_sources(str(path), block_nbytes=block_rows * ROW_NBYTES)
    plan = plan_within_budget(fmt.block_lengths, n_piles, 3, fmt.row_nbytes, pile_rows * ROW_NBYTES)
    assert isinstance(plan, Plan)
    graph, _ = shuffle_graph(
        fmt,
        plan,
        tmp=Location.of("memory://unused/tmp"),
        dst=Location.of("memory://unused/dst"),
        merge_nbytes=block_rows * ROW_NBYTES,
    )
    scatters = [task for task in graph.values() if isinstance(task, tuple) and task[0] is _scatter]
    merges = [task for task in graph.values() if isinstance(task, tuple) and task[0] is _merge]
    # A merge task reads, from every block, the range of its piles when it holds rows (as ``_merge`` does).
    reads = sum(int((task[6].sum(axis=1) > 0).sum()) for task in merges)
    arrays = [plan.counts, plan.piece_offsets, plan.block_lengths, plan.pile_sizes, plan.pile_offsets]
    return {
        "row_nbytes": fmt.row_nbytes,
        "n_blocks": plan.n_blocks,
        "n_piles": plan.n_piles,
        "scatter_tasks": len(scatters),
        "merge_tasks": len(merges),
        "pieces": int((plan.counts > 0).sum()),
        "reads": reads,
        "plan_nbytes": sum(array.nbytes for array in arrays),
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("n_rows", "chunk_rows", "n_piles", "block_rows", "pile_rows"),
    [
        (5_000, 10, 8, 200, 5_000),  # groups of several piles
        (5_000, 25, 64, 50, 5_000),  # a pile per group, pieces of a row or two
        (3_001, 7, None, 700, 5_000),  # the default number of piles; a short last block
        (4_000, 20, "auto", 400, 300),  # as many piles as pile_memory needs
        (2_000, 5, 3, 5_000, 5_000),  # one block
    ],
)
def test_the_model_agrees_with_a_real_plan(
    tmp_path: Path, n_rows: int, chunk_rows: int, n_piles: Any, block_rows: int, pile_rows: int
) -> None:
    model = explain(
        n_rows,
        ROW_NBYTES,
        n_piles=n_piles,
        block_memory=block_rows * ROW_NBYTES,
        pile_memory=pile_rows * ROW_NBYTES,
        levels=1,
    )
    real = _real_shuffle(
        tmp_path / "src.zarr", n_rows, chunk_rows, n_piles if n_piles is not None else 512, block_rows, pile_rows
    )
    assert real["row_nbytes"] == model.row_nbytes
    assert (
        (model.n_blocks, model.n_piles) == (real["n_blocks"], real["n_piles"]) == (real["scatter_tasks"], model.n_piles)
    )
    assert model.plan_nbytes == real["plan_nbytes"] == plan_nbytes(model.n_blocks, model.n_piles)
    assert model.passes[0]["read_nbytes"] == n_rows * real["row_nbytes"]
    # Groups, pieces and reads depend on the draw: the model's are another draw's, or expectations.
    assert abs(model.n_groups - real["merge_tasks"]) <= max(2, 0.1 * real["merge_tasks"])
    assert abs(model.n_pieces - real["pieces"]) <= 0.03 * real["pieces"] + 3
    assert abs(model.n_reads - real["reads"]) <= 0.1 * real["reads"] + 2
    assert model.read_nbytes == pytest.approx(n_rows * ROW_NBYTES / model.n_reads)


def test_the_overflow_bound_holds_against_drawn_plans() -> None:
    """The union bound is at least the rate at which real plans overflow, and near it when small."""
    n_rows, n_piles, capacity = 2_000, 20, 125  # mean 100, sd 9.7: a pile over 125 rows is 2.7 sd out
    model = explain(n_rows, 1, n_piles=n_piles, block_memory=500, pile_memory=capacity)
    draws = 4_000
    overflows = sum(make_plan([500] * 4, n_piles, seed).pile_sizes.max() > capacity for seed in range(draws))
    rate, sd = overflows / draws, math.sqrt(model.overflow_probability / draws)
    assert rate <= model.overflow_probability + 6 * sd
    assert model.overflow_probability <= 1.2 * rate + 6 * sd
    # The typical largest pile is the median of the largest: about half the plans exceed it.
    largest = [make_plan([2_000], n_piles, seed).pile_sizes.max() for seed in range(draws)]
    assert 0.3 < np.mean(np.array(largest) >= model.largest_pile_rows) < 0.7


@pytest.mark.parametrize(("n", "p"), [(200, 0.1), (50, 0.5), (10_000, 0.001), (1_000_000, 0.3), (7, 1 / 7)])
def test_the_binomial_tail_is_the_sum_of_its_terms(n: int, p: float) -> None:
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    for threshold in sorted({0, int(mean), int(mean + sd), int(mean + 4 * sd), n - 1, n}):
        terms = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(threshold + 1, n + 1)] if n < 5000 else None
        found = binomial_sf(threshold, n, p)
        if terms is not None:
            assert found == pytest.approx(math.fsum(terms), rel=1e-6, abs=1e-300)
        else:  # the normal tail, against a seeded draw of a million binomials
            drawn = make_rng(0, "test-binomial").binomial(n, p, 1_000_000)
            assert found == pytest.approx(float(np.mean(drawn > threshold)), abs=0.005)


def test_the_largest_pile_of_a_single_pile_is_every_row() -> None:
    assert typical_largest(1234, 1) == 1234
    assert explain(1234, 8, n_piles=1).overflow_probability == 0.0


sizes = st.integers(min_value=1, max_value=2**34)


@given(
    rows=st.integers(min_value=1, max_value=10**12),
    row_bytes=st.integers(min_value=1, max_value=2**16),
    n_piles=st.one_of(st.none(), st.just("auto"), st.integers(min_value=1, max_value=5_000)),
    block=st.integers(min_value=2**10, max_value=2**31),
)
def test_reads_carry_the_data_and_counts_stay_in_bounds(rows: int, row_bytes: int, n_piles: Any, block: int) -> None:
    # A given number of piles (512 by default) whose piles cannot fit pile_memory is refused: give them room.
    fit = 0 if n_piles == "auto" else -(-rows // (n_piles or 512)) * row_bytes
    arguments = {"n_piles": n_piles, "block_memory": block, "pile_memory": max(row_bytes, 2**28, fit)}
    try:
        model = explain(rows, row_bytes, **arguments)
    except DaskShuffleValueError as error:
        # Millions of blocks of a few rows: a plan larger than its budget on the client, refused as a shuffle would.
        assert "Expected a plan that takes at most" in str(error) and error.parameter == "n_piles"
        return
    assert model.n_reads * model.read_nbytes == pytest.approx(model.data_nbytes, rel=1e-9)
    assert model.n_groups <= model.n_reads <= (model.n_blocks + model.n_super) * model.n_groups
    assert model.n_blocks <= model.n_pieces <= (model.n_blocks + model.n_super) * (model.n_piles + model.n_super)
    assert model.n_groups <= model.n_piles
    assert model.n_blocks == -(-rows // model.block_rows)
    assert sum(step["read_nbytes"] for step in model.passes) == (model.levels + 1) * model.data_nbytes
    assert 0.0 <= model.overflow_probability <= 1.0
    assert rows / model.n_piles <= model.largest_pile_rows <= rows
    assert bool(model.advice) == model.below_knee


@given(
    rows=st.integers(min_value=1, max_value=10**11),
    row_bytes=st.integers(min_value=1, max_value=2**12),
    n_piles=st.one_of(st.none(), st.integers(min_value=1, max_value=2_000)),
)
def test_more_rows_never_make_fewer_reads_or_blocks(rows: int, row_bytes: int, n_piles: Any) -> None:
    # One level throughout: where "auto" switches to two, reads and pieces change kind.
    small = explain(rows, row_bytes, n_piles=n_piles, pile_memory="1PiB", levels=1)
    large = explain(2 * rows, row_bytes, n_piles=n_piles, pile_memory="1PiB", levels=1)
    assert large.n_blocks >= small.n_blocks
    assert large.n_pieces >= small.n_pieces
    assert large.n_reads >= small.n_reads
    assert large.plan_nbytes >= small.plan_nbytes


@given(
    rows=st.integers(min_value=1, max_value=10**9),
    n_piles=st.integers(min_value=1, max_value=1_000),
    pile=st.integers(min_value=1, max_value=10**7),
)
def test_more_pile_memory_never_raises_the_chance_of_overflow(rows: int, n_piles: int, pile: int) -> None:
    assume(-(-rows // n_piles) <= pile)  # else the piles cannot fit, however drawn: refused
    tight = explain(rows, 1, n_piles=n_piles, pile_memory=pile)
    loose = explain(rows, 1, n_piles=n_piles, pile_memory=2 * pile)
    assert loose.overflow_probability <= tight.overflow_probability


@settings(max_examples=25)  # each example models a dozen layouts of up to 10^10 rows
@given(rows=st.integers(min_value=10**6, max_value=10**10), row_bytes=st.integers(min_value=8, max_value=2**12))
def test_the_advice_keeps_reads_above_min_read(rows: int, row_bytes: int) -> None:
    n_piles = None if -(-rows // 512) * row_bytes <= 2**28 else "auto"  # the default 512 piles, where they fit
    model = explain(rows, row_bytes, n_piles=n_piles)
    if not model.below_knee:
        assert model.read_nbytes >= model.min_read_nbytes or model.n_blocks == 1
        return
    if model.advice.startswith("levels=2 makes"):
        assert not explain(rows, row_bytes, n_piles=n_piles, levels=2).below_knee
        return
    block = re.search(r"block_memory='([^']+)'", model.advice)
    assert block is not None, model.advice
    if model.advice.startswith("no layout"):  # none will do: the best one is named, and falls short
        assert parse_nbytes(block.group(1).replace(" ", ""), "block_memory") == MAX_TASK_MEMORY
        return
    piles = "auto" if "n_piles='auto'" in model.advice else n_piles
    better = explain(rows, row_bytes, n_piles=piles, block_memory=block.group(1).replace(" ", ""), levels=model.levels)
    assert not better.below_knee


def test_the_defaults_pass_the_knee_between_100_gib_and_1_tib() -> None:
    """Reads of one level shrink with the square of the data (1 KiB rows); two levels keep them up."""
    reads = {
        size: explain(size // 1024, 1024, n_piles="auto" if size == 2**40 else None, levels=1)
        for size in (2**30, 16 * 2**30, 100 * 2**30, 2**40)
    }
    assert not reads[2**30].below_knee and not reads[16 * 2**30].below_knee and not reads[100 * 2**30].below_knee
    assert reads[2**40].below_knee
    assert reads[100 * 2**30].read_nbytes == 128 * 2**10  # 64 MiB blocks x 200 MiB piles / 100 GiB
    assert reads[100 * 2**30].n_reads == 1_600 * 512
    two = explain(2**40 // 1024, 1024, n_piles="auto")  # levels="auto"
    assert two.levels == 2 and not two.below_knee and two.read_nbytes > 30 * reads[2**40].read_nbytes


def test_explain_checks_its_arguments() -> None:
    with pytest.raises(daskshuffle.DaskShuffleValueError, match="Expected rows to be a positive whole number") as error:
        explain(0, 8)
    assert error.value.parameter == "rows"
    with pytest.raises(daskshuffle.DaskShuffleTypeError, match="Expected row_bytes"):
        explain(10, 1.5)  # type: ignore[arg-type]
    with pytest.raises(daskshuffle.DaskShuffleValueError, match="Expected pile_memory to hold at least one row"):
        explain(10, 2**20, pile_memory="512KiB")
    with pytest.raises(daskshuffle.DaskShuffleValueError, match="Expected min_read to be a size"):
        explain(10, 8, min_read="big")


def test_explain_takes_rows_as_the_command_line_does() -> None:
    """``daskshuffle plan --rows 1e10`` takes a whole number written as a float, and so does ``explain``."""
    assert str(explain(1e10, 256, n_piles="auto")) == str(explain(10**10, 256, n_piles="auto"))
    assert explain(np.float64(2e6), 8).n_blocks == explain(2 * 10**6, 8).n_blocks
    with pytest.raises(daskshuffle.DaskShuffleValueError, match=r"Expected rows to be a positive whole number"):
        explain(1e6 + 0.5, 8)
    with pytest.raises(daskshuffle.DaskShuffleValueError, match=r"Expected rows to be a positive whole number"):
        explain(float("inf"), 8)
    with pytest.raises(daskshuffle.DaskShuffleTypeError, match=r"Expected rows to be a positive whole number"):
        explain("1e6", 8)  # type: ignore[arg-type]


def test_explain_with_byte_counts_loads_no_dask() -> None:
    code = (
        "import sys, daskshuffle\n"
        "model = daskshuffle.explain(10**9, 100, block_memory=2**26, pile_memory=2**28, min_read=2**20)\n"
        "print(model.n_blocks, sorted({m.split('.')[0] for m in sys.modules} & {'dask', 'zarr', 'pyarrow'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["1491", "[]"]


def test_the_command_prints_the_model_and_its_json() -> None:
    runner = CliRunner()
    shown = runner.invoke(
        cli, ["plan", "--rows", "1e9", "--row-bytes", "1KiB", "--n-piles", "auto", "--workers", "100", "--levels", "1"]
    )
    assert shown.exit_code == 0, shown.output
    model = explain(10**9, 1024, n_piles="auto", workers=100, levels=1)
    assert shown.output == str(model) + "\n"
    assert re.search(
        r"^reads +58,899,738 per variable of 17 KiB: below min_read=64 KiB: past the knee$", shown.output, re.M
    )
    assert re.search(r"^advice +levels=2 makes reads of 529 KiB \(pass 2\) and 2.04 MiB \(merge\)", shown.output, re.M)
    assert not explain(10**9, 1024, n_piles="auto", levels=2).below_knee
    as_json = runner.invoke(
        cli,
        ["plan", "--rows", "1_000_000", "--row-bytes", "256", "--n-piles", "64", "--block-memory", "32MiB", "--json"],
    )
    assert as_json.exit_code == 0, as_json.output
    figures = json.loads(as_json.output)
    assert figures == json.loads(json.dumps(explain(10**6, 256, n_piles=64, block_memory="32MiB").to_dict()))
    assert (figures["n_piles"], figures["n_piles_from"], figures["n_blocks"]) == (64, "given", 8)
    assert figures["below_knee"] is False and figures["advice"] == ""


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["--rows", "0", "--row-bytes", "8"],
            "Invalid value for '--rows': Expected --rows to be a positive whole number",
        ),
        (["--rows", "1.5", "--row-bytes", "8"], "Invalid value for '--rows': Expected a whole number"),
        (["--rows", "10", "--row-bytes", "lots"], "Invalid value for '--row-bytes': Expected --row-bytes to be a size"),
        (["--rows", "10", "--row-bytes", "8", "--min-read", "x"], "Invalid value for '--min-read'"),
    ],
)
def test_the_command_reports_a_bad_option_as_a_usage_error(arguments: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["plan", *arguments])
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.parametrize(("n_rows", "block_rows", "n_piles"), [(20_000, 100, 64), (50_000, 400, 256), (9_999, 37, 10)])
def test_the_two_level_model_agrees_with_a_two_level_plan(n_rows: int, block_rows: int, n_piles: int) -> None:
    from daskshuffle.plan._level_plan import make_level_plan

    model = explain(n_rows, ROW_NBYTES, n_piles=n_piles, block_memory=block_rows * ROW_NBYTES, levels=2)
    lengths = [min(block_rows, n_rows - start) for start in range(0, n_rows, block_rows)]
    plan = make_level_plan(lengths, n_piles, [model.n_super], seed=1, block_rows=block_rows)
    level = plan.levels[0]
    assert model.levels == 2 and plan.n_super == model.n_super and model.n_blocks == len(lengths)
    first_reads = sum(int(np.count_nonzero(block_table(*level.group_draw(g)))) for g in range(level.n_groups))
    assert abs(model.n_first_reads - first_reads) <= 0.05 * model.n_first_reads  # a block misses a super-pile if tiny
    spans = int(np.count_nonzero(level.span_lengths))
    assert level.n_spans - plan.n_super <= spans <= level.n_spans  # a short last group may miss a super-pile
    assert len(lengths) <= level.n_spans <= len(lengths) + plan.n_super
    held = sum(a.nbytes for a in (plan.block_lengths, level.group_counts, *plan.counts))
    assert held <= model.plan_nbytes <= 3 * held + 2**16
    assert [entry["read_nbytes"] for entry in model.passes] == [n_rows * ROW_NBYTES] * 3


def test_auto_levels_follow_the_shuffles_rule() -> None:
    gib = 2**30
    # Reads of a block by a group of 64 MiB each: 64 KiB at 64 GiB, 32 KiB (4 million of them) at 128 GiB.
    for storage in ("object", "local"):
        assert explain(64 * gib // 1024, 1024, n_piles=8192, storage=storage).levels == 1
        assert explain(128 * gib // 1024, 1024, n_piles=8192, storage=storage).levels == 2
        # With the default 512 piles, a pile outgrows a block past 32 GiB: a group is one pile, and a merge
        # reads a block's rows of it, block / 512 = 128 KiB at any size.
        model = explain(128 * gib // 1024, 1024, storage=storage)
        assert model.levels == 1 and model.read_nbytes == 128 * 2**10
    assert explain(100 * 1024 * gib // 1024, 1024, n_piles="auto").levels == 3  # a third level pays at 100 TiB
    assert explain(100 * 1024 * gib // 1024, 1024, n_piles="auto", storage="local").levels == 2
    assert "levels=2 makes reads" in explain(gib, 1024, n_piles="auto", levels=1).advice
