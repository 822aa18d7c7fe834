"""Two-level plans: reads that stay large however large the data.

Pure numpy, like :mod:`daskshuffle._plan`. A merge reads, from every block, the
range of its group of piles: about ``block x group / data`` bytes, which falls
with the square of the data (1 MiB at 4 GiB with 64 MiB blocks and groups,
64 KiB at 64 GiB, 0.4 KiB at 10 TiB). With two levels, pass 1 sends each row to
one of ``S`` *super-piles*; a second pass reads each super-pile's pieces (one
per first-level block, about ``block / S`` bytes each) in spans of about a
block, and sends each row to one of that super-pile's piles; the merge then
reads, from the second-level blocks of one super-pile only, reads ``S`` times
larger than a single level's. ``S = sqrt(data / group)`` makes the two equal.

Uniformity: super-pile ``s`` holds piles ``[lo_s, hi_s)``; a row goes to
``s`` with probability ``(hi_s - lo_s) / M`` (first level), then to each of
``s``'s piles with probability ``1 / (hi_s - lo_s)`` (second level),
independently of every other row: every row's pile is uniform over the
``M`` piles and independent, exactly as with one level. Draws are keyed by
seeds derived from the shuffle's seed, never by the seed itself, so a
single-level plan of the same seed is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from ._errors import DaskShuffleValueError
from ._plan import IntArray, Plan
from ._random import make_rng

__all__ = [
    "MIN_READS",
    "MIN_READ_NBYTES",
    "TwoLevelPlan",
    "make_two_level_plan",
    "merge_read_nbytes",
    "super_piles_for",
    "wants_two_levels",
]

#: With ``levels="auto"``, a merge whose reads of pieces would be smaller than this, and at least
#: :data:`MIN_READS` of them, uses two levels instead: a few thousand small reads cost less than a
#: pass. On object storage a read (a GET) costs 10-50 ms, so reads of 1 MiB are already small there;
#: a local file read costs microseconds, and a second pass pays off only for reads of a few KiB
#: (``benchmarks/RESULTS.md``: 1 KiB reads, 1.8x faster with two levels).
MIN_READ_NBYTES = {"local": 64 * 2**10, "object": 2**20}
MIN_READS = 10_000


def derived_seed(seed: int, level: int) -> int:
    """The seed of level ``level``'s draws: from ``(seed, "level", level)``."""
    return int(make_rng(seed, "level", level).integers(0, 2**63 - 1))


def merge_read_nbytes(data_nbytes: float, block_nbytes: float, group_nbytes: float, n_super: int = 1) -> float:
    """About how many bytes each read of a merge takes, with ``n_super`` super-piles (1: a single level).

    Examples
    --------
    >>> merge_read_nbytes(4 * 2**30, 64 * 2**20, 64 * 2**20) / 2**20
    1.0
    """
    return block_nbytes * min(group_nbytes, data_nbytes) * n_super / max(data_nbytes, 1.0)


def wants_two_levels(data_nbytes: float, block_nbytes: float, n_blocks: int, storage: str) -> bool:
    """Whether ``levels="auto"`` uses two levels: at least ``MIN_READS`` merge reads of under ``MIN_READ_NBYTES``.

    ``storage`` is where the pieces go: ``"local"`` or ``"object"`` (a URL).

    Examples
    --------
    >>> gib = 2**30
    >>> [wants_two_levels(size * gib, 64 * 2**20, size * 16, "object") for size in (4, 8)]
    [False, True]
    """
    n_reads = n_blocks * math.ceil(data_nbytes / max(block_nbytes, 1.0))  # a read per block and group of piles
    small = merge_read_nbytes(data_nbytes, block_nbytes, block_nbytes) < MIN_READ_NBYTES[storage]
    return small and n_reads >= MIN_READS


def super_piles_for(data_nbytes: float, block_nbytes: float, group_nbytes: float, n_piles: int) -> int:
    """How many super-piles make a second level's two kinds of reads about equal: ``sqrt(data / group)``.

    At least 2 and at most half the piles (each super-pile holds two piles or more).

    Examples
    --------
    >>> super_piles_for(64 * 2**30, 64 * 2**20, 64 * 2**20, n_piles=512)
    32
    """
    wanted = round(math.sqrt(max(data_nbytes, 1.0) / max(group_nbytes, 1.0)))
    return max(2, min(wanted, n_piles // 2))


def super_pile_bounds(n_piles: int, n_super: int) -> IntArray:
    """``(n_super + 1,)``: super-pile ``s`` holds piles ``bounds[s]:bounds[s + 1]``, as equal as can be.

    Examples
    --------
    >>> super_pile_bounds(10, 4).tolist()
    [0, 3, 6, 8, 10]
    """
    if not 1 <= n_super <= n_piles:
        raise DaskShuffleValueError(f"Expected between 1 and {n_piles} super-piles. Got {n_super} instead.")
    sizes = np.full(n_super, n_piles // n_super, dtype=np.int64)
    sizes[: n_piles % n_super] += 1
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


@dataclass(frozen=True, eq=False)
class TwoLevelPlan:
    """Where every row goes in a two-level shuffle.

    Attributes
    ----------
    first : Plan
        The source's blocks into ``n_super`` super-piles (its ``n_piles``).
    spans : (n_blocks2, 3) int64
        Second-level block ``k`` is super-pile ``spans[k, 0]``'s pieces of
        first-level blocks ``spans[k, 1]:spans[k, 2]``, in block order.
    second : Plan
        The second-level blocks into the ``M`` piles of the output; block ``k``
        sends rows only to its super-pile's piles.
    bounds : (n_super + 1,) int64
        Super-pile ``s`` holds piles ``bounds[s]:bounds[s + 1]``.
    """

    first: Plan
    spans: IntArray
    second: Plan
    bounds: IntArray

    @property
    def n_super(self) -> int:
        return self.first.n_piles

    @cached_property
    def reads(self) -> list[list[tuple[int, int, int]]]:
        """For each second-level block, its reads of first-level pieces: ``(block, start, stop)``."""
        offsets = self.first.piece_offsets
        return [
            [
                (block, int(offsets[block, s]), int(offsets[block, s + 1]))
                for block in range(first, stop)
                if offsets[block, s + 1] > offsets[block, s]
            ]
            for s, first, stop in self.spans.tolist()
        ]


def _first_level(block_lengths: IntArray, bounds: IntArray, seed: int) -> Plan:
    """Super-pile ``s`` drawn with probability proportional to its piles."""
    n_super = len(bounds) - 1
    pvals = np.diff(bounds) / bounds[-1]
    counts = np.zeros((len(block_lengths), n_super), dtype=np.int64)
    for block, length in enumerate(block_lengths.tolist()):
        if length:
            counts[block] = make_rng(seed, "counts", block).multinomial(length, pvals)
    return Plan(block_lengths=block_lengths, n_piles=n_super, seed=seed, counts=counts)


def _spans(first: Plan, block_rows: int) -> IntArray:
    """Cut each super-pile's run of first-level pieces into spans of about ``block_rows`` rows."""
    spans: list[tuple[int, int, int]] = []
    for s in range(first.n_piles):
        sizes = first.counts[:, s].tolist()
        start, filled = 0, 0
        for block, size in enumerate(sizes):
            if filled and filled + size > block_rows:
                spans.append((s, start, block))
                start, filled = block, 0
            filled += size
        if filled:
            spans.append((s, start, len(sizes)))
    return np.asarray(spans, dtype=np.int64).reshape(-1, 3)


def make_two_level_plan(
    block_lengths: NDArray[np.integer] | Sequence[int], n_piles: int, n_super: int, seed: int, block_rows: int
) -> TwoLevelPlan:
    """Draw a two-level plan: ``n_super`` super-piles, then ``n_piles`` piles; second-level blocks of ``block_rows``.

    Examples
    --------
    >>> plan = make_two_level_plan([40, 40, 40], n_piles=4, n_super=2, seed=0, block_rows=50)
    >>> int(plan.second.pile_sizes.sum()), plan.second.n_piles, plan.n_super
    (120, 4, 2)
    >>> bool((plan.second.counts[plan.spans[:, 0] == 0][:, 2:] == 0).all())  # super-pile 0's blocks fill piles 0, 1
    True
    """
    lengths = np.asarray(block_lengths, dtype=np.int64).reshape(-1)
    bounds = super_pile_bounds(n_piles, n_super)
    first = _first_level(lengths, bounds, derived_seed(seed, 1))
    spans = _spans(first, max(int(block_rows), 1))
    span_lengths = np.asarray([int(first.counts[a:b, s].sum()) for s, a, b in spans.tolist()], dtype=np.int64).reshape(
        -1
    )
    second_seed = derived_seed(seed, 2)
    counts = np.zeros((len(spans), n_piles), dtype=np.int64)
    for k, (s, length) in enumerate(zip(spans[:, 0].tolist(), span_lengths.tolist(), strict=True)):
        lo, hi = int(bounds[s]), int(bounds[s + 1])
        if length:
            counts[k, lo:hi] = make_rng(second_seed, "counts", k).multinomial(length, np.full(hi - lo, 1.0 / (hi - lo)))
    second = Plan(block_lengths=span_lengths, n_piles=n_piles, seed=second_seed, counts=counts)
    return TwoLevelPlan(first=first, spans=spans, second=second, bounds=bounds)
