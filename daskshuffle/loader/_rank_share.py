"""A rank's share of every epoch: which positions of the stream it yields, the plans that read them, its batches."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from .._errors import DaskShuffleValueError
from .._parse import parse_count
from ..epochs import BatchPlan, lane_ranges, n_batches, plan_batches, rank_range
from ._batches import Allocate
from ._lanes import lane_batches
from ._loader_state import LoaderSettings
from ._prefetch import Read, ReadAhead, prefetched_batches
from ._reads import LoaderReads

__all__ = ["RankShare"]


@dataclass(frozen=True)
class RankShare:
    """The positions of each epoch's stream a rank yields: ``lanes``, each cut into ``n_batches`` parts of ``micro`` rows.

    Without lanes (``settings.n_lanes``), one lane: the rank's contiguous
    range, cut every ``batch_size`` positions. With lanes, the rank's lanes,
    a batch being a micro-batch of each.
    """

    piles: LoaderReads
    settings: LoaderSettings
    lanes: list[tuple[int, int]]
    micro: int
    n_batches: int

    @classmethod
    def make(cls, piles: LoaderReads, settings: LoaderSettings, n_rows: int) -> RankShare:
        s = settings
        if s.n_lanes is None:
            lanes = [rank_range(n_rows, s.world_size, s.rank, s.batch_size, s.drop_last)]
        else:
            lanes = lane_ranges(n_rows, s.n_lanes, s.world_size, s.rank, s.batch_size, s.drop_last)
        micro = s.divisions[1]
        share = cls(piles, s, lanes, micro, n_batches(lanes[0][1] - lanes[0][0], micro, s.drop_last))
        if share.n_batches == 0:
            raise DaskShuffleValueError(
                f"Expected every rank to get at least one batch per epoch. Got none: {n_rows:,} rows over "
                f"world_size={s.world_size} with batch_size={s.batch_size} and drop_last={s.drop_last} instead; "
                "use a smaller batch_size, drop_last=False or fewer ranks."
            )
        return share

    @property
    def range(self) -> tuple[int, int]:
        """The positions of the stream this rank yields, from its first lane's start to its last lane's end."""
        return self.lanes[0][0], self.lanes[-1][1]

    def plans(self, epoch: int, start: int = 0, stop: int | None = None) -> list[BatchPlan]:
        """The plan of batches ``start:stop`` of ``epoch``: one per lane."""
        epoch, start = parse_count(epoch, "epoch"), parse_count(start, "start")
        stop = self.n_batches if stop is None else min(parse_count(stop, "stop"), self.n_batches)
        offsets = self.piles.epoch_reads.layout(epoch)
        return [plan_batches(offsets, lane, self.micro, start, max(start, stop)) for lane in self.lanes]

    def piles_read(self, epoch: int) -> list[int]:
        """The store piles read in ``epoch``, in reading order (lane after lane)."""
        reads = self.piles.epoch_reads
        return [
            pile
            for plan in self.plans(epoch)
            for segment in plan.segments
            for pile in reads.piles_of(epoch, segment.pile)
        ]

    def batches(
        self,
        epoch: int,
        start: int,
        stop: int | None,
        closes: int,
        read_ahead: ReadAhead | None = None,
        allocate: Allocate | None = None,
    ) -> Generator[Any, None, None]:
        """Batches ``start:stop`` of ``epoch``, read ahead as the loader's prefetch budget holds.

        With the loader's own ``read_ahead`` (one lane only), the first reads of
        the next epoch follow this epoch's last ones, so that starting the next
        epoch does not wait for a read either, and ``read_ahead`` stays open.
        Otherwise each lane reads through a pool of its own, closed when the
        batches end. The iteration began when the loader had closed ``closes``
        times: once it closes again, its reads start nothing more.
        """
        plans = self.plans(epoch, start, stop)
        if len(plans) > 1:
            return lane_batches(self.piles, plans, epoch, closes, allocate)
        reads = [Read(epoch, *segment) for segment in plans[0].segments]
        if read_ahead is None:
            return prefetched_batches(self.piles, plans[0], reads, ReadAhead(self.piles, closes), allocate)
        ahead = [Read(epoch + 1, *segment) for segment in self.plans(epoch + 1)[0].segments]
        return prefetched_batches(self.piles, plans[0], reads + ahead, read_ahead, allocate, keep_open=True)
