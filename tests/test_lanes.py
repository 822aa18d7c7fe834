"""An order's lanes (order=Piles(n_lanes=L)): the same global steps for every world size that divides L, and resume across them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import make_zarr_source

import daskshuffle
from daskshuffle import DaskShuffleValueError, PileLoader
from daskshuffle.orders import Order, Piles, Py1b

N_ROWS, LANES, GLOBAL_BATCH = 3_000, 8, 64
LANED = Piles(n_lanes=LANES)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    source = make_zarr_source(tmp_path / "raw.zarr", N_ROWS, chunk_rows=100)
    daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", 12, seed=4)
    return tmp_path / "piles.zarr"


def global_steps(store: Path, world_size: int, epoch: int = 0, order: Order = LANED) -> list[np.ndarray]:
    """Each global step: the ranks' batches laid end to end, rank by rank."""
    per_rank = []
    for rank in range(world_size):
        with PileLoader(store, GLOBAL_BATCH // world_size, rank=rank, world_size=world_size, order=order) as loader:
            loader.set_epoch(epoch)
            per_rank.append([batch["id"] for batch in loader])
    assert len({len(batches) for batches in per_rank}) == 1, "every rank the same number of batches"
    return [np.concatenate(step) for step in zip(*per_rank, strict=True)]


def test_global_steps_are_the_same_for_every_world_size_that_divides_the_lanes(store: Path) -> None:
    reference = global_steps(store, 1)
    ids = np.concatenate(reference)
    assert len(np.unique(ids)) == len(ids) and len(ids) >= N_ROWS - LANES * GLOBAL_BATCH // LANES
    for world_size in (2, 4, 8):
        steps = global_steps(store, world_size)
        assert len(steps) == len(reference)
        for got, want in zip(steps, reference, strict=True):
            np.testing.assert_array_equal(got, want)
    # A new epoch, a new order; still the same across world sizes.
    other = global_steps(store, 2, epoch=1)
    assert not np.array_equal(other[0], reference[0])
    np.testing.assert_array_equal(np.concatenate(other), np.concatenate(global_steps(store, 4, epoch=1)))


def test_a_run_saved_with_four_ranks_continues_with_two(store: Path) -> None:
    steps = global_steps(store, 1)
    states = []
    for rank in range(4):
        with PileLoader(store, GLOBAL_BATCH // 4, rank=rank, world_size=4, order=LANED) as loader:
            batches = iter(loader)
            for _ in range(5):
                next(batches)
            states.append(loader.state_dict())
    assert len({(state["epoch"], state["batches"], state["settings_fingerprint"]) for state in states}) == 1
    resumed = []
    for rank in range(2):
        with PileLoader(store, GLOBAL_BATCH // 2, rank=rank, world_size=2, order=LANED) as loader:
            loader.load_state_dict(states[rank])  # any rank's state: the position is global
            resumed.append([batch["id"] for batch in loader])
    for got, want in zip([np.concatenate(step) for step in zip(*resumed, strict=True)], steps[5:], strict=True):
        np.testing.assert_array_equal(got, want)
    with (
        PileLoader(store, GLOBAL_BATCH, order=Piles(n_lanes=LANES // 2)) as other,
        pytest.raises(DaskShuffleValueError, match="n_lanes"),
    ):
        other.load_state_dict(states[0])
    with PileLoader(store, 16, world_size=2, order=LANED) as other, pytest.raises(DaskShuffleValueError):
        other.load_state_dict(states[0])  # another global batch


def test_ranges_of_batches_and_piles_with_lanes(store: Path) -> None:
    with PileLoader(store, 16, rank=1, world_size=4, order=LANED) as loader:
        whole = [batch["id"] for batch in loader]
        part = [batch["id"] for batch in loader.iter_batches(0, 3, 7)]
        for got, want in zip(part, whole[3:7], strict=True):
            np.testing.assert_array_equal(got, want)
        assert loader.piles(0) and set(loader.piles(0)) <= set(range(12))
        with pytest.raises(DaskShuffleValueError, match="n_lanes"):
            loader.plan(0)


def test_lanes_that_do_not_fit_are_refused(store: Path) -> None:
    """The combinations of lanes, ranks, batch and batch format: tests/test_combinations.py."""
    with pytest.raises(DaskShuffleValueError, match="Expected n_lanes to be a positive integer") as error:
        PileLoader(store, 64, order=Piles(n_lanes=0))
    assert error.value.parameter == "n_lanes"
    with pytest.raises(DaskShuffleValueError, match="Expected n_lanes to be a multiple of world_size"):
        PileLoader(store, 64, order=Piles(n_lanes=6), world_size=4)
    with pytest.raises(DaskShuffleValueError, match="Expected n_lanes to be a multiple of world_size"):
        PileLoader(store, 64, order=Py1b(shuffle_block_size=100, n_lanes=6), world_size=4)


def test_lanes_given_to_the_loader_are_an_unexpected_keyword(store: Path) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_lanes'"):
        PileLoader(store, 64, n_lanes=LANES)  # type: ignore[call-arg]
