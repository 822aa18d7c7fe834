"""Elastic determinism: lanes, so that a run saved with some number of ranks continues with another.

With ``PileLoader(..., n_lanes=L)`` the epoch's stream is cut into ``L`` lanes
as if among ``L`` ranks (:func:`~daskshuffle.plan._epoch_plan.lane_ranges`), each
yielding micro-batches of ``G / L`` rows, ``G`` being the global batch
(``world_size * batch_size``). Global step ``t`` is micro-batch ``t`` of every
lane, lane by lane; rank ``r`` of ``W`` (``W`` dividing ``L``) yields the
micro-batches of lanes ``r L / W`` to ``(r + 1) L / W - 1``, one after the other.
So the rows of a global step, and their order when ranks' batches are laid
end to end, are the same for every ``W`` that divides ``L`` with ``G`` held
fixed, and a state saved with 8 ranks loads into a loader of 4 or 2. MosaicML
Streaming calls lanes canonical nodes.

The price: a rank reads ``L / W`` lanes at once, each one pile at a time, so
it holds ``L / W`` piles (and reads ahead in each lane) instead of one.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from .._errors import DaskShuffleValueError
from .._parse import parse_positive_int
from ..plan._epoch_plan import BatchPlan
from ._batches import Allocate
from ._prefetch import Prefetcher, Read, ShuffledPiles, prefetched_batches

__all__ = ["check_lanes", "lane_batches"]


def check_lanes(n_lanes: object, world_size: int, batch_size: int, batch_format: str) -> int:
    """``n_lanes``, checked against the ranks and the batch: every rank gets whole lanes and whole micro-batches."""
    lanes = parse_positive_int(n_lanes, "n_lanes")
    if lanes % world_size:
        raise DaskShuffleValueError(
            f"Expected n_lanes to be a multiple of world_size={world_size}. Got n_lanes={lanes} instead; each rank "
            "reads whole lanes: choose n_lanes as a multiple of every world size the run may use (8 serves 1, 2, 4 "
            "and 8 ranks).",
            parameter="n_lanes",
        )
    per_rank = lanes // world_size
    if batch_size % per_rank:
        raise DaskShuffleValueError(
            f"Expected batch_size to be a multiple of n_lanes / world_size = {per_rank}. Got batch_size={batch_size} "
            "instead; a rank's batch is a micro-batch of each of its lanes.",
            parameter="batch_size",
        )
    if batch_format != "numpy":
        raise DaskShuffleValueError(
            f"Expected batch_format='numpy' with n_lanes. Got {batch_format!r} instead; lanes' micro-batches are "
            "joined as numpy arrays.",
            parameter="batch_format",
        )
    return lanes


def _join(parts: tuple[dict[str, Any], ...], allocate: Allocate | None) -> dict[str, Any]:
    if len(parts) == 1 and allocate is None:
        return parts[0]
    if allocate is None:
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    layout = {name: (values.dtype, values.shape[1:]) for name, values in parts[0].items()}
    out = dict(allocate(sum(len(next(iter(part.values()))) for part in parts), layout))
    for name, values in out.items():
        np.concatenate([part[name] for part in parts], out=values)
    return out


def lane_batches(
    piles: ShuffledPiles, plans: list[BatchPlan], epoch: int, prefetch: int, allocate: Allocate | None = None
) -> Generator[dict[str, Any], None, None]:
    """A rank's batches: micro-batch ``t`` of each of its lanes' ``plans``, joined lane by lane.

    Each lane reads through a :class:`Prefetcher` of its own, one pile at a
    time; all are closed when the iteration ends or stops.
    """
    lanes = [
        prefetched_batches(
            piles,
            plan,
            [Read(epoch, *s) for s in plan.segments],
            Prefetcher(piles, prefetch),
            prefetch,
        )
        for plan in plans
    ]
    try:
        for parts in zip(*lanes, strict=True):
            yield _join(parts, allocate)
    finally:
        for lane in lanes:
            lane.close()
