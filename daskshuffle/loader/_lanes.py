"""Elastic determinism: lanes, so that a run saved with some number of ranks continues with another.

With an order's ``n_lanes=L`` (``PileLoader(..., order=ds.orders.Piles(n_lanes=L))``,
or any other order) the epoch's stream is cut into ``L`` lanes as if among
``L`` ranks (:func:`~daskshuffle.epochs._epoch_plan.lane_ranges`), each yielding
micro-batches of ``G / L`` rows, ``G`` being the global batch
(``world_size * batch_size``). Global step ``t`` is micro-batch ``t`` of every
lane, lane by lane; rank ``r`` of ``W`` (``W`` dividing ``L``) yields the
micro-batches of lanes ``r L / W`` to ``(r + 1) L / W - 1``, one after the other.
So the rows of a global step, and their order when ranks' batches are laid
end to end, are the same for every ``W`` that divides ``L`` with ``G`` held
fixed, and a state saved with 8 ranks loads into a loader of 4 or 2. MosaicML
Streaming calls lanes canonical nodes.

Which lanes fit the ranks and the batch is checked with the loader's other
combinations, in :func:`~daskshuffle.epochs._combinations.check_combination`.

The price: a rank reads ``L / W`` lanes at once, each one read at a time, so
it holds ``L / W`` reads (and reads ahead in each lane) instead of one.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from ..epochs import BatchPlan
from ._batches import Allocate
from ._prefetch import Read, ReadAhead, prefetched_batches
from ._reads import LoaderReads

__all__ = ["lane_batches"]


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
    piles: LoaderReads, plans: list[BatchPlan], epoch: int, allocate: Allocate | None = None
) -> Generator[dict[str, Any], None, None]:
    """A rank's batches: micro-batch ``t`` of each of its lanes' ``plans``, joined lane by lane.

    Each lane reads through a :class:`ReadAhead` of its own; all are closed
    when the iteration ends or stops.
    """
    lanes = [
        prefetched_batches(piles, plan, [Read(epoch, *s) for s in plan.segments], ReadAhead(piles)) for plan in plans
    ]
    try:
        for parts in zip(*lanes, strict=True):
            yield _join(parts, allocate)
    finally:
        for lane in lanes:
            lane.close()
