"""A rank's share of every epoch: which positions of the stream it yields, the plans that read them, its batches.

With lanes (elastic determinism), rank ``r`` of ``W`` yields micro-batch ``t``
of each of lanes ``r L / W`` to ``(r + 1) L / W - 1``, one after the other, so
the rows of a global step are the same for every ``W`` that divides ``L``; the
price is ``L / W`` reads held at once instead of one.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from .._errors import DaskShuffleValueError
from .._parse import parse_count
from ..epochs import BatchPlan, lane_ranges, n_batches, plan_batches
from ._batches import Allocate, join
from ._loader_state import LoaderSettings
from ._prefetch import Read, ReadAhead, prefetched_batches
from ._reads import LoaderReads

__all__ = ["RankShare"]


class RankShare:
    """The positions of each epoch's stream a rank yields: ``lanes``, each cut into ``n_batches`` parts of ``micro`` rows.

    Without lanes (``settings.n_lanes``), one lane: the rank's contiguous range.
    """

    def __init__(self, piles: LoaderReads, settings: LoaderSettings, n_rows: int) -> None:
        s = settings
        if n_rows == 0:
            raise DaskShuffleValueError(
                "Expected a pile store with rows to load. Got one of 0 rows instead; its sources were empty: "
                "shuffle sources that hold rows."
            )
        n_lanes, self.micro = s.divisions
        self.piles = piles
        self.lanes = lane_ranges(n_rows, n_lanes, s.world_size, s.rank, s.batch_size, s.drop_last)
        self.n_batches = n_batches(self.lanes[0][1] - self.lanes[0][0], self.micro, s.drop_last)
        if self.n_batches == 0:
            raise DaskShuffleValueError(
                f"Expected every rank to get at least one batch per epoch. Got none: {n_rows:,} rows over "
                f"world_size={s.world_size} with batch_size={s.batch_size} and drop_last={s.drop_last} instead; "
                "use a smaller batch_size, drop_last=False or fewer ranks."
            )

    def plans(self, epoch: int, start: int = 0, stop: int | None = None) -> list[BatchPlan]:
        """The plan of batches ``start:stop`` of ``epoch``: one per lane."""
        epoch, start = parse_count(epoch, "epoch"), parse_count(start, "start")
        stop = self.n_batches if stop is None else min(parse_count(stop, "stop"), self.n_batches)
        offsets = self.piles.epoch_reads.layout(epoch)
        return [plan_batches(offsets, lane, self.micro, start, max(start, stop)) for lane in self.lanes]

    def batches(
        self,
        epoch: int,
        start: int,
        stop: int | None,
        closes: int,
        read_ahead: ReadAhead | None = None,
        allocate: Allocate | None = None,
    ) -> Generator[Any, None, None]:
        """Batches ``start:stop`` of ``epoch``, of an iteration begun when the loader had closed ``closes`` times.

        With the loader's own ``read_ahead`` (one lane only), the next epoch's
        first reads follow this one's last, and ``read_ahead`` stays open.
        """
        plans = self.plans(epoch, start, stop)
        if len(plans) > 1:
            return _lane_batches(self.piles, plans, epoch, closes, allocate)
        reads = [Read(epoch, *segment) for segment in plans[0].segments]
        if read_ahead is None:
            return prefetched_batches(self.piles, plans[0], reads, ReadAhead(self.piles, closes), allocate)
        ahead = [Read(epoch + 1, *segment) for segment in self.plans(epoch + 1)[0].segments]
        return prefetched_batches(self.piles, plans[0], reads + ahead, read_ahead, allocate, keep_open=True)


def _lane_batches(
    piles: LoaderReads, plans: list[BatchPlan], epoch: int, closes: int, allocate: Allocate | None = None
) -> Generator[dict[str, Any], None, None]:
    """A rank's batches: micro-batch ``t`` of each of its lanes' ``plans`` joined, each lane read by its own pool."""
    lanes = [
        prefetched_batches(piles, plan, [Read(epoch, *s) for s in plan.segments], ReadAhead(piles, closes))
        for plan in plans
    ]
    try:
        for parts in zip(*lanes, strict=True):
            yield join(parts, allocate)
    finally:
        for lane in lanes:
            lane.close()
