"""Which settings of a loader go together: every combination it refuses, in one function, before any store opens."""

from __future__ import annotations

from .._errors import DaskShuffleValueError
from ._order_classes import Order

__all__ = ["check_combination"]


def check_combination(
    order: Order,
    *,
    n_streams: int | None = None,
    world_size: int = 1,
    batch_size: int = 1,
    batch_format: str = "numpy",
) -> None:
    """Refuse a combination of a loader's settings that cannot be read.

    ``n_streams`` is the stores of a mixture (``None`` for a plain store).

    Examples
    --------
    >>> from daskshuffle.epochs._order_classes import Piles, Py1s
    >>> check_combination(Piles(n_lanes=8), world_size=2, batch_size=64)
    >>> check_combination(Py1s(), n_streams=2)
    Traceback (most recent call last):
    ...
    daskshuffle._errors.DaskShuffleValueError: Expected order='piles' ... Got order='py1s' instead; ...
    """
    n_lanes = world_size if order.n_lanes is None else order.n_lanes  # no lanes: a rank is one lane
    if n_lanes % world_size:
        raise DaskShuffleValueError(
            f"Expected n_lanes to be a multiple of world_size={world_size}. Got n_lanes={n_lanes} instead; each rank "
            "reads whole lanes: choose n_lanes as a multiple of every world size the run may use (8 serves 1, 2, 4 "
            "and 8 ranks).",
            parameter="n_lanes",
        )
    per_rank = n_lanes // world_size
    if batch_size % per_rank:
        raise DaskShuffleValueError(
            f"Expected batch_size to be a multiple of n_lanes / world_size = {per_rank}. Got batch_size={batch_size} "
            "instead; a rank's batch is a micro-batch of each of its lanes.",
            parameter="batch_size",
        )
    if order.n_lanes is not None and batch_format != "numpy":
        raise DaskShuffleValueError(
            f"Expected batch_format='numpy' with n_lanes. Got {batch_format!r} instead; lanes' micro-batches are "
            "joined as numpy arrays.",
            parameter="batch_format",
        )
    if n_streams is not None and (order.name != "piles" or batch_format == "xarray"):
        given = f"order={order.name!r}" if order.name != "piles" else f"batch_format={batch_format!r}"
        raise DaskShuffleValueError(
            "Expected order='piles' (ds.orders.Piles()) and a batch_format other than 'xarray' with several "
            f"streams. Got {given} instead; a mixture deals the units of its stores into groups, as "
            "order='piles' reads one store.",
            parameter="store",
        )
