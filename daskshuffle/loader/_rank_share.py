"""A rank's share of every epoch: which positions of the stream it yields, and the plans that read them."""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import DaskShuffleValueError
from .._parse import parse_count
from ..plan._epoch_plan import BatchPlan, lane_ranges, n_batches, plan_batches, rank_range
from ._loader_state import LoaderSettings
from ._prefetch import ShuffledPiles

__all__ = ["RankShare"]


@dataclass(frozen=True)
class RankShare:
    """The positions ``range`` of each epoch's stream a rank yields, cut into ``n_batches`` batches.

    Without lanes, one contiguous range cut every ``batch_size`` positions.
    With lanes (``settings.n_lanes``), ``lanes`` are the rank's lanes, each cut
    into micro-batches of ``micro`` rows, a batch being one of each.
    """

    piles: ShuffledPiles
    settings: LoaderSettings
    range: tuple[int, int]
    lanes: list[tuple[int, int]] | None
    micro: int
    n_batches: int

    @classmethod
    def make(cls, piles: ShuffledPiles, settings: LoaderSettings, n_rows: int) -> RankShare:
        s = settings
        if s.n_lanes is None:
            span = rank_range(n_rows, s.world_size, s.rank, s.batch_size, s.drop_last)
            share = cls(piles, s, span, None, s.batch_size, n_batches(span[1] - span[0], s.batch_size, s.drop_last))
        else:
            lanes = lane_ranges(n_rows, s.n_lanes, s.world_size, s.rank, s.batch_size, s.drop_last)
            micro = s.batch_size * s.world_size // s.n_lanes
            count = n_batches(lanes[0][1] - lanes[0][0], micro, s.drop_last)
            share = cls(piles, s, (lanes[0][0], lanes[-1][1]), lanes, micro, count)
        if share.n_batches == 0:
            raise DaskShuffleValueError(
                f"Expected every rank to get at least one batch per epoch. Got none: {n_rows:,} rows over "
                f"world_size={s.world_size} with batch_size={s.batch_size} and drop_last={s.drop_last} instead; "
                "use a smaller batch_size, drop_last=False or fewer ranks."
            )
        return share

    def plans(self, epoch: int, start: int = 0, stop: int | None = None) -> list[BatchPlan]:
        """The plan of batches ``start:stop`` of ``epoch``: one, or one per lane."""
        epoch, start = parse_count(epoch, "epoch"), parse_count(start, "start")
        stop = self.n_batches if stop is None else min(parse_count(stop, "stop"), self.n_batches)
        offsets, seed = self.piles.layout(epoch)[0], self.settings.seed
        visit = self.piles.visit_order(epoch)
        spans, size = ([self.range], self.settings.batch_size) if self.lanes is None else (self.lanes, self.micro)
        return [plan_batches(offsets, seed, epoch, span, size, start, max(start, stop), visit) for span in spans]

    def piles_read(self, epoch: int) -> list[int]:
        """The store piles read in ``epoch``, in reading order (lane after lane)."""
        groups = self.piles.layout(epoch)[1]
        segments = [segment for plan in self.plans(epoch) for segment in plan.segments]
        units = self.piles.units
        if units is not None:
            return [pile for segment in segments for pile in units.piles_of(epoch, segment.pile)]
        if groups is None:
            return [segment.pile for segment in segments]
        return [int(pile) for segment in segments for pile in groups[segment.pile]]
