"""Which piles each merge task of a shuffle takes, and what of the plan it carries.

Plain numpy over the plan: the merge groups are runs of whole piles as the
destination cuts them, and an output chunk that two groups share is written by
a seam task from both groups' fragments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from ..formats import Format

__all__ = ["MergeGroup", "MergeLayout", "aligned", "compact", "merge_columns_of", "merge_groups"]


@dataclass(frozen=True)
class MergeGroup:
    """Piles ``[pile_start, pile_stop)``, which are output rows ``[row_start, row_stop)``."""

    pile_start: int
    pile_stop: int
    row_start: int
    row_stop: int


class MergeLayout(Protocol):
    """What the merge stage needs of a plan: a :class:`~daskshuffle.plan._plan.Plan` or one of several levels."""

    @property
    def n_rows(self) -> int: ...
    @property
    def n_piles(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def pile_sizes(self) -> NDArray[np.int64]: ...
    @property
    def pile_offsets(self) -> NDArray[np.int64]: ...
    def merge_columns(self, start: int, stop: int) -> tuple[int, NDArray[np.int64], NDArray[np.int64]]: ...


def merge_groups(fmt: Format[Any], plan: MergeLayout, merge_nbytes: int) -> list[MergeGroup]:
    """The merge tasks' groups of whole piles, as the destination cuts them."""
    offsets = plan.pile_offsets
    return [
        MergeGroup(start, stop, int(offsets[start]), int(offsets[stop]))
        for start, stop in fmt.merge_runs(plan.pile_sizes, fmt.row_nbytes, merge_nbytes)
    ]


def aligned(start: int, stop: int, n_rows: int, alignment: int) -> tuple[int, int]:
    """The widest ``[a, b)`` inside ``[start, stop)`` made of whole output chunks."""
    a = min(-(-start // alignment) * alignment, stop)
    b = max(stop if stop == n_rows else stop // alignment * alignment, a)
    return a, b


def compact(values: NDArray[np.int64]) -> NDArray[Any]:
    """``values`` (counts or offsets, never negative) in the smallest unsigned type that holds them."""
    largest = int(values.max(initial=0))
    dtype = next(t for t in (np.uint8, np.uint16, np.uint32, np.uint64) if largest <= np.iinfo(t).max)
    return values.astype(dtype)


def merge_columns_of(plan: MergeLayout, group: MergeGroup) -> tuple[int, NDArray[Any], NDArray[Any]]:
    """The columns of the plan that one merge task carries, each in the smallest type that holds it."""
    first_block, counts, read_starts = plan.merge_columns(group.pile_start, group.pile_stop)
    return first_block, compact(counts), compact(read_starts)
