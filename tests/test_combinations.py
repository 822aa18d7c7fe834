"""Every combination of loader settings that cannot be read is refused in one place, before any store is opened.

Each case goes through ``PileLoader`` with stores that do not exist: the combination is refused by
:func:`~daskshuffle.epochs._order_classes.check_combination` before the loader looks for them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import daskshuffle as ds
from daskshuffle import DaskShuffleValueError, PileLoader
from daskshuffle.epochs._order_classes import Naive, Piles, Py1b, check_combination

#: (keywords of PileLoader, the parameter the error names, what the message says). ``MIXTURE`` stands for two stores.
REFUSED = [
    (
        {"order": ds.orders.Piles(n_lanes=6), "world_size": 4},
        "n_lanes",
        r"Expected n_lanes to be a multiple of world_size=4\. Got n_lanes=6",
    ),
    (
        {"order": ds.orders.Py1b(shuffle_block_size=100, n_lanes=6), "world_size": 4},
        "n_lanes",
        r"Expected n_lanes to be a multiple of world_size=4\. Got n_lanes=6",
    ),
    (
        {"order": ds.orders.Piles(n_lanes=8), "world_size": 2, "batch_size": 30},
        "batch_size",
        r"Expected batch_size to be a multiple of n_lanes / world_size = 4\. Got batch_size=30",
    ),
    (
        {"order": ds.orders.Piles(n_lanes=8), "batch_format": "xarray"},
        "batch_format",
        r"Expected batch_format='numpy' with n_lanes",
    ),
    (
        {"store": "MIXTURE", "order": ds.orders.Py1b(shuffle_block_size=100)},
        "store",
        r"Expected order='piles'.*with several streams\. Got order='py1b' instead",
    ),
    ({"store": "MIXTURE", "batch_format": "xarray"}, "store", r"with several streams\. Got batch_format='xarray'"),
]


@pytest.mark.parametrize(("options", "parameter", "match"), REFUSED)
def test_each_combination_is_refused_before_the_store_is_opened(
    tmp_path: Path, options: dict[str, object], parameter: str, match: str
) -> None:
    missing = [str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")]
    arguments: dict[str, object] = {"store": missing[0], "batch_size": 64, **options}
    if arguments["store"] == "MIXTURE":
        arguments["store"] = missing
    with pytest.raises(DaskShuffleValueError, match=match) as error:
        PileLoader(**arguments)  # type: ignore[arg-type]
    assert error.value.parameter == parameter
    assert not any(Path(path).exists() for path in missing)


def test_a_single_stream_is_a_mixture() -> None:
    with pytest.raises(DaskShuffleValueError, match="with several streams"):
        check_combination(Naive(), n_streams=1)


def test_the_combinations_that_go_together_pass() -> None:
    check_combination(Piles("1GiB", n_lanes=8), world_size=2, batch_size=64)
    check_combination(Py1b(shuffle_block_size=10, n_lanes=4), world_size=4, batch_size=3)
    check_combination(Naive(n_lanes=4), world_size=2, batch_size=2)
    check_combination(Piles(), n_streams=3, batch_format="arrow")
    check_combination(Piles("1GiB"), n_streams=2)  # a mixture deals its stores' units into groups


def test_a_budget_belongs_to_the_piles_order_alone() -> None:
    with pytest.raises(TypeError, match="budget"):
        ds.orders.Py1s(budget="1GiB")  # type: ignore[call-arg]
    check_combination(Naive(), batch_format="xarray")
