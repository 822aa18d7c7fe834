"""Shuffle quality: every metric on orders whose answer is known, the reference orders, the pictures, the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from conftest import Configure, make_zarr_source
from hypothesis import given, strategies as st

import daskshuffle
from daskshuffle import DaskShuffleValueError, quality
from daskshuffle._cli._common import cli
from daskshuffle.epochs import unit_excess
from daskshuffle.orders import Piles, Py1b
from daskshuffle.quality import orders

N = 200_000


def verdicts(order: np.ndarray, **options: object) -> dict[tuple[str, str], str]:
    table = quality.report(order, **options)  # type: ignore[arg-type]
    return {(row.metric, row.scale): row.verdict for row in table.itertuples()}


def test_uniform_orders_pass_every_measure() -> None:
    # Fixed seeds: each measure's band is five standard deviations, so a correct metric fails one seed in a million.
    for seed in range(3):
        table = quality.report(orders.uniform(N, seed), batch_size=256, block_size=1000, n_piles=50)
        assert set(table["verdict"]) == {"as uniform"}, quality.summary(table)
        table = quality.report(orders.uniform(N, seed), previous=orders.uniform(N, seed + 10), batch_size=256)
        assert set(table["verdict"]) == {"as uniform"}, quality.summary(table)


def test_no_shuffle_and_a_reversal_fail_everywhere() -> None:
    for order in (orders.identity(N), orders.identity(N)[::-1].copy()):
        table = quality.report(order, batch_size=256)
        assert set(table["verdict"]) == {"not uniform"}, quality.summary(table)
    values = quality.report(orders.identity(N)[::-1].copy()).set_index("metric")["value"]
    assert values["rank correlation"] == pytest.approx(-1.0) and values["displacement"] == pytest.approx(0.5, 1e-3)


@pytest.mark.parametrize("block", [64, 2_000])
def test_block_local_shuffles_are_flagged_below_their_block_and_pass_well_above(block: int) -> None:
    # Blocks in a uniformly random order, each shuffled whole: order survives inside a block only.
    order = orders.shard_local(N, block, seed=1)
    found = verdicts(order, batch_size=32 if block == 64 else 256)
    if block == 64:
        assert found[("spread", "batch")] == "not uniform"  # a batch of 32 lies in one or two blocks
        # 2,000 rows are 31 blocks: a spread of about 1 - 1/31, still order at this scale; 20,000 rows are
        # 312 blocks (1 - 1/312), inside the uniform band.
        assert found[("spread", "1%")] == "not uniform"
        assert found[("spread", "10%")] == "as uniform"
    else:
        assert found[("spread", "batch")] == "not uniform"
        assert found[("spread", "1%")] == "not uniform"  # 2,000 rows: one block
    spread = quality.report(order, batch_size=256).set_index(["metric", "scale"])["value"]
    assert spread[("spread", "10%")] > spread[("spread", "1%")], "coarser scales mix more blocks"


def test_a_shuffle_buffer_keeps_order_at_every_scale_above_the_buffer() -> None:
    found = verdicts(orders.shuffle_buffer(N, buffer_size=1_000, seed=0), batch_size=256)
    assert found[("spread", "batch")] == "not uniform" and found[("spread", "10%")] == "not uniform"
    assert found[("rank correlation", "all")] == "not uniform"


def test_diversity_counts_distinct_blocks_per_batch() -> None:
    # Batches of 100 rows taken whole from blocks of 100: one block each, against about 63 for uniform.
    table = quality.report(orders.shard_local(N, 100, seed=0), batch_size=100, block_size=100)
    row = table[table["metric"] == "diversity"].iloc[0]
    expected = (1 - (1 - 100 / N) ** 100) * (N / 100)
    assert row["value"] == pytest.approx(1 / expected, rel=0.02) and row["verdict"] == "not uniform"


def test_groups_of_units_are_uniform_within_an_epoch_and_meet_again_as_predicted_across_epochs() -> None:
    # Piles of 5,000, units of 1,000, groups of 5,000 rows (a budget of two groups): 5 units a group.
    first, second = (orders.piles(N, 40, seed=3, epoch=e, order=Piles(budget=10_000), unit_rows=1_000) for e in (0, 1))
    found = verdicts(second, batch_size=256, n_piles=40, previous=first)
    assert found.pop(("co-batch overlap", "batch 256")) == "not uniform"
    assert set(found.values()) == {"as uniform"}
    table = quality.report(second, batch_size=256, previous=first)
    overlap = table[table["metric"] == "co-batch overlap"].iloc[0]
    # Batch-mates share a unit 1/5 of the time and then a group again: n_units / k**2 + 1 = 8.6x uniform predicted,
    # a little less where batches run across groups (8.2 to 8.4 over seeds 0 to 3).
    assert 7 < overlap["value"] / overlap["uniform"] < 10
    assert overlap["value"] / overlap["uniform"] == pytest.approx(unit_excess(N, 1_000, 5_000), rel=0.12)
    # A budget that holds every unit at once gives independent epochs.
    first, second = (orders.piles(N, 40, seed=3, epoch=e, order=Piles(budget=2 * N), unit_rows=1_000) for e in (0, 1))
    assert set(verdicts(second, batch_size=256, previous=first).values()) == {"as uniform"}


@pytest.mark.parametrize(("budget", "group_rows"), [("2KiB", 50), ("8KiB", 157), (40_000, 769)])
def test_the_piles_order_is_what_a_real_loader_yields(tmp_path: Path, budget: int | str, group_rows: int) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 3_000, chunk_rows=100)
    daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", 8, seed=5, block_memory=2_600, chunk_rows=50)
    with daskshuffle.PileLoader(tmp_path / "piles.zarr", 100, order=Piles(budget=budget)) as loader:
        # Rows of 26 bytes (x 4 float32, y int16, id int64): half the budget in rows, one unit (a chunk) at least.
        assert (loader.settings.unit_rows, loader.settings.group_rows) == (50, group_rows)
        for epoch in (0, 2):
            loader.set_epoch(epoch)
            yielded = np.concatenate([batch["id"] for batch in loader])
            # 2,600-byte blocks of 26-byte rows: pass 1 over blocks of 100 rows.
            reference = orders.piles(
                3_000, 8, seed=5, epoch=epoch, order=Piles(budget=budget), unit_rows=50, row_nbytes=26, block_rows=100
            )
            np.testing.assert_array_equal(yielded, reference)


def test_the_piles_order_takes_the_loaders_settings_and_no_others() -> None:
    with pytest.raises(
        DaskShuffleValueError, match=r"Expected order=Piles\(budget=...\) with a size .* and unit_rows="
    ):
        orders.piles(1_000, 4, order=Piles(budget="1MiB"))
    with pytest.raises(DaskShuffleValueError, match=r"Got order=Piles\(budget='auto'\)"):
        orders.piles(1_000, 4, order="piles", unit_rows=10)
    with pytest.raises(DaskShuffleValueError, match=r"unit_rows= with order=Piles\(...\) only"):
        orders.piles(1_000, 4, order=Py1b(shuffle_block_size=100), unit_rows=10)


@given(st.integers(1, 3_000), st.integers(1, 300), st.integers(0, 2**20))
def test_reference_orders_are_permutations(n: int, size: int, seed: int) -> None:
    made = [
        orders.uniform(n, seed),
        orders.shuffle_buffer(n, size, seed),
        orders.interleave(n, max(1, n // size), 3, size, seed),
        orders.shard_local(n, size, seed),
        orders.piles(n, min(size, n), seed, order=Piles(budget=2 * size), unit_rows=max(1, size // 3)),
    ]
    for order in made:
        np.testing.assert_array_equal(np.sort(order), np.arange(n))


def test_orders_that_are_not_permutations_are_refused() -> None:
    for bad, message in [
        (np.array([0, 1, 1]), "1 positions missing"),
        (np.array([0.0, 1.0]), "integer"),
        (np.array([[0, 1]]), "1-d"),
        (np.array([0, 5]), "out of range"),
        (np.array([0]), "2 rows or more"),
    ]:
        with pytest.raises(DaskShuffleValueError, match=message):
            quality.report(bad)


def test_pictures_are_written(tmp_path: Path) -> None:
    image = quality._pictures.hilbert_image(orders.identity(4 * 4), side=4)
    assert image[0, 0] == 0.0 and np.nanmax(image) == pytest.approx(15 / 16)
    # Neighbours along the curve are neighbours in the grid: consecutive positions one cell apart.
    x, y = quality._pictures.hilbert_xy(np.arange(64), 8)
    assert (np.abs(np.diff(x)) + np.abs(np.diff(y)) == 1).all() and len(set(zip(x, y, strict=True))) == 64
    quality.plot_orders({"none": orders.identity(5_000), "uniform": orders.uniform(5_000)}, tmp_path / "o.png")
    # An order on storage is drawn from the rows at the picture's positions, as the same order in memory is.
    uniform = orders.uniform(10_000, seed=3)
    stored = zarr.create_array(tmp_path / "order.zarr", shape=uniform.shape, chunks=(1_000,), dtype=uniform.dtype)
    stored[:] = uniform
    on_disk, in_memory = (quality._pictures.hilbert_image(order, side=16) for order in (stored, uniform))
    assert np.array_equal(on_disk, in_memory, equal_nan=True)
    assert (tmp_path / "o.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_alone_draws_into_quality_png(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``daskshuffle quality piles.zarr --png``, as the README writes it, needs no file name."""
    source = make_zarr_source(tmp_path / "raw.zarr", 2_000, chunk_rows=100)
    daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", 4, seed=1)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["quality", "piles.zarr", "--batch-size", "64", "--png"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "quality.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "quality.png" in result.output
    # What the loader's units in groups predict for the next epoch, beside what was measured.
    assert "epoch independence" in result.output and "units of" in result.output


def test_the_command_line_on_a_store_and_on_ids(tmp_path: Path) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 4_000, chunk_rows=100)
    daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", 8, seed=1)
    runner = CliRunner()
    result = runner.invoke(
        cli, ["quality", str(tmp_path / "piles.zarr"), "--batch-size", "64", "--png", str(tmp_path / "q.png")]
    )
    assert result.exit_code == 0, result.output
    assert "co-batch overlap" in result.output  # epoch 1 against epoch 0
    assert (tmp_path / "q.png").exists()
    np.save(tmp_path / "ids.npy", orders.uniform(4_000, 2))
    result = runner.invoke(cli, ["quality", str(tmp_path / "ids.npy"), "--batch-size", "64", "--json"])
    assert result.exit_code == 0, result.output
    import json

    assert {row["verdict"] for row in json.loads(result.output)} == {"as uniform"}
    result = runner.invoke(cli, ["quality", str(tmp_path / "raw.zarr")])
    assert result.exit_code == 1 and "pile store" in result.output


def test_an_order_in_a_zarr_array_is_measured_in_chunks_with_the_same_result(
    tmp_path: Path, configure: Configure
) -> None:
    import zarr

    configure({"quality.chunk-rows": 7_000})  # many chunks, none aligned with the windows or batches
    order = orders.shard_local(50_000, 300, seed=2)
    stored = zarr.create_array(tmp_path / "ids.zarr", shape=order.shape, chunks=(4_096,), dtype="i8")
    stored[:] = order
    in_memory = quality.report(order, batch_size=128, block_size=300)
    on_storage = quality.report(zarr.open_array(tmp_path / "ids.zarr", mode="r"), batch_size=128, block_size=300)
    assert list(in_memory["verdict"]) == list(on_storage["verdict"])
    np.testing.assert_allclose(in_memory["value"], on_storage["value"], rtol=1e-9)
    quality.plot_orders({"stored": zarr.open_array(tmp_path / "ids.zarr", mode="r")}, tmp_path / "stored.png")
    bad = zarr.create_array(tmp_path / "bad.zarr", shape=(10,), chunks=(4,), dtype="i8")
    bad[:] = np.zeros(10, dtype=np.int64)
    with pytest.raises(DaskShuffleValueError, match="9 positions missing"):
        quality.report(bad)


def test_the_label_mix_of_batches_is_flagged_where_labels_stay_sorted() -> None:
    labels = np.repeat(np.arange(10), N // 10)  # sorted in ten long runs, as data sorted by time often is
    for seed in range(3):
        row = (
            quality.report(orders.uniform(N, seed), batch_size=256, labels=labels).set_index("metric").loc["label mix"]
        )
        assert row["verdict"] == "as uniform" and row["uniform"] == pytest.approx(row["value"], rel=0.05)
    for order in (orders.shuffle_buffer(N, 2_000), orders.shard_local(N, 2_000)):
        row = quality.report(order, batch_size=256, labels=labels).set_index("metric").loc["label mix"]
        assert row["verdict"] == "not uniform" and row["value"] > 0.8  # most batches hold one label
    with pytest.raises(DaskShuffleValueError, match="a label for each"):
        quality.report(orders.uniform(100), labels=np.zeros(99))


def test_the_report_of_a_loader_says_when_its_budget_holds_too_few_units(tmp_path: Path) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 3_000, chunk_rows=100)
    daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", 30, seed=5, chunk_rows=50)
    for budget, advised in (("auto", False), ("2KiB", True)):
        with daskshuffle.PileLoader(tmp_path / "piles.zarr", 100, order=Piles(budget=budget)) as loader:
            yielded = np.concatenate([batch["id"] for batch in loader])
            table = quality.report(yielded, batch_size=100, loader=loader)
        epochs = table[table["metric"] == "epoch independence"].iloc[0]
        assert (epochs["verdict"] == "not uniform") == advised
        assert ("advice" in table.attrs) == advised
        if advised:
            assert "EpochShuffler" in quality.summary(table) and "units of 50 rows" in table.attrs["advice"]


def test_the_command_line_says_how_to_measure_a_store_without_positions(tmp_path: Path) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 2_000, chunk_rows=100)
    daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", 4, seed=1, variables=["x", "y"])
    result = CliRunner().invoke(cli, ["quality", str(tmp_path / "piles.zarr"), "--batch-size", "64"])
    assert result.exit_code == 2, result.output  # a usage error, naming the option
    message = " ".join(result.output.split())
    assert "Invalid value for --ids" in message
    assert "in the variable 'id', which quality measures the order by. Got only ['x', 'y'] instead." in message
    assert "pass --ids NAME" in message and "shuffle it again" in message and "daskshuffle quality ORDER.npy" in message
    # A variable that holds positions, named by --ids, is measured.
    result = CliRunner().invoke(cli, ["quality", str(tmp_path / "piles.zarr"), "--batch-size", "64", "--ids", "y"])
    assert result.exit_code == 0, result.output
