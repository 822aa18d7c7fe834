"""Elastic determinism: a rank's batches joined from its lanes (:func:`~daskshuffle.epochs._epoch_plan.lane_ranges`).

Rank ``r`` of ``W`` yields micro-batch ``t`` of each of lanes ``r L / W`` to
``(r + 1) L / W - 1``, one after the other, so the rows of a global step, laid
end to end, are the same for every ``W`` that divides ``L``. The price: a rank
holds ``L / W`` reads at once (and reads ahead in each lane) instead of one.
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
    piles: LoaderReads, plans: list[BatchPlan], epoch: int, closes: int, allocate: Allocate | None = None
) -> Generator[dict[str, Any], None, None]:
    """A rank's batches: micro-batch ``t`` of each of its lanes' ``plans``, joined lane by lane.

    Each lane reads through a :class:`ReadAhead` of its own (of the iteration
    begun when the loader had closed ``closes`` times); all are closed when
    the iteration ends or stops.
    """
    lanes = [
        prefetched_batches(piles, plan, [Read(epoch, *s) for s in plan.segments], ReadAhead(piles, closes))
        for plan in plans
    ]
    try:
        for parts in zip(*lanes, strict=True):
            yield _join(parts, allocate)
    finally:
        for lane in lanes:
            lane.close()
