"""How many levels, and how wide: reads that stay large however large the data.

A one-level merge reads about ``block x group / data`` bytes from every block, falling with the
square of the data. With ``L`` levels each level but the last splits every super-pile ``S`` ways:
later passes read ``block / S`` and the merge ``S^(L - 1)`` times more than one level's;
``S = (data / group)^(1/L)`` makes the two equal, for one more pass over the data a level.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MAX_LEVELS", "MIN_READ_NBYTES", "auto_levels", "fanout_for", "level_plan_nbytes"]

#: With ``levels="auto"``, a merge whose reads of pieces would be smaller than this, and at least
#: :data:`MIN_READS` of them, uses two levels instead (``benchmarks/RESULTS.md``).
MIN_READ_NBYTES = {"local": 64 * 2**10, "object": 64 * 2**10}
MIN_READS = 10_000


#: The most levels a shuffle takes: each is one more pass over the data.
MAX_LEVELS = 4
#: What ``levels="auto"`` weighs a level against, by where the pieces go: the seconds a read costs
#: beyond its bytes, and the bytes a second a pass moves, per task (``benchmarks/RESULTS.md``).
READ_SECONDS = {"local": 95e-6, "object": 250e-6}
PASS_NBYTES_PER_SECOND = {"local": 90e6, "object": 280e6}


def merge_read_nbytes(data_nbytes: float, block_nbytes: float, group_nbytes: float, n_super: int = 1) -> float:
    """About how many bytes each read of a merge takes, with ``n_super`` super-piles (1: a single level).

    Examples
    --------
    >>> merge_read_nbytes(4 * 2**30, 64 * 2**20, 64 * 2**20) / 2**20
    1.0
    """
    return block_nbytes * min(group_nbytes, data_nbytes) * n_super / max(data_nbytes, 1.0)


def group_nbytes(data_nbytes: float, block_nbytes: float, n_piles: int) -> float:
    """About the bytes of a merge group: whole piles, about a block of them, or one pile if piles are larger.

    Examples
    --------
    >>> gib, mib = 2**30, 2**20
    >>> group_nbytes(16 * gib, 64 * mib, 512) / mib, group_nbytes(128 * gib, 64 * mib, 512) / mib
    (64.0, 256.0)
    """
    return max(float(block_nbytes), data_nbytes / max(n_piles, 1))


def wants_two_levels(data_nbytes: float, block_nbytes: float, n_blocks: int, n_piles: int, storage: str) -> bool:
    """Whether ``levels="auto"`` uses two levels: at least ``MIN_READS`` merge reads of under ``MIN_READ_NBYTES``.

    Examples
    --------
    >>> gib, mib = 2**30, 2**20
    >>> [wants_two_levels(size * gib, 64 * mib, size * 16, 10**6, "object") for size in (64, 128)]
    [False, True]
    >>> wants_two_levels(128 * gib, 64 * mib, 128 * 16, 512, "object")  # piles of 256 MiB: reads of 128 KiB
    False
    """
    group = group_nbytes(data_nbytes, block_nbytes, n_piles)
    n_reads = n_blocks * math.ceil(data_nbytes / group)  # a read per block and group of piles
    small = merge_read_nbytes(data_nbytes, block_nbytes, group) < MIN_READ_NBYTES[storage]
    return small and n_reads >= MIN_READS


def fanout_for(data_nbytes: float, block_nbytes: float, n_piles: int, n_levels: int) -> int:
    """The super-piles each level splits into so that every kind of read is about equal: ``(data / block)^(1/L)``.

    At least 2, and at most ``(n_piles / 2)^(1/(L - 1))``.

    Examples
    --------
    >>> gib, mib = 2**30, 2**20
    >>> fanout_for(64 * gib, 64 * mib, n_piles=512, n_levels=2), fanout_for(10 * 1024 * gib, 64 * mib, 10**5, 3)
    (32, 55)
    """
    wanted = round((max(data_nbytes, 1.0) / max(block_nbytes, 1.0)) ** (1.0 / n_levels))
    widest = math.floor((n_piles // 2) ** (1.0 / max(n_levels - 1, 1)) + 1e-9)
    return int(max(2, min(wanted, widest)))


def level_read_nbytes(data_nbytes: float, block_nbytes: float, n_piles: int, n_levels: int) -> tuple[float, float]:
    """``(pass reads, merge reads)``: about how large the reads of ``n_levels`` levels are (pass reads: 0 for one).

    Merge groups are taken as a block of piles.

    Examples
    --------
    >>> gib, mib = 2**30, 2**20
    >>> [round(size / 1024) for size in level_read_nbytes(10 * 1024 * gib, 64 * mib, 10**5, 3)]
    [1192, 1210]
    """
    if n_levels == 1:
        return 0.0, merge_read_nbytes(data_nbytes, block_nbytes, block_nbytes)
    fanout = fanout_for(data_nbytes, block_nbytes, n_piles, n_levels)
    merge = merge_read_nbytes(data_nbytes, block_nbytes, block_nbytes, fanout ** (n_levels - 1))
    return block_nbytes / fanout, merge


def auto_levels(data_nbytes: float, block_nbytes: float, n_blocks: int, n_piles: int, storage: str) -> int:
    """The levels ``levels="auto"`` uses: one unless its reads are small and many (:func:`wants_two_levels`).

    Then two, and one more while some read is under ``MIN_READ_NBYTES`` and a level saves more in
    reads than its pass costs, up to :data:`MAX_LEVELS`.

    Examples
    --------
    >>> gib, mib = 2**30, 2**20
    >>> [auto_levels(size * gib, 64 * mib, size * 16, 10**6, "object") for size in (4, 128, 16 * 1024, 100 * 1024)]
    [1, 2, 2, 3]
    >>> auto_levels(gib, mib, 1024, 512, "local")  # a third level saves 3 s of reads for a 12 s pass
    2
    """
    if n_piles < 4 or not wants_two_levels(data_nbytes, block_nbytes, n_blocks, n_piles, storage):
        return 1

    def seconds(n_levels: int) -> float:
        fanout = fanout_for(data_nbytes, block_nbytes, n_piles, n_levels)
        n_groups = math.ceil(data_nbytes / max(block_nbytes, 1.0))
        n_reads = (n_levels - 1) * n_blocks * fanout + n_blocks * n_groups / fanout ** (n_levels - 1)
        return float(n_levels * data_nbytes / PASS_NBYTES_PER_SECOND[storage] + n_reads * READ_SECONDS[storage])

    chosen, cost = 2, seconds(2)
    for n_levels in range(3, MAX_LEVELS + 1):
        large = min(level_read_nbytes(data_nbytes, block_nbytes, n_piles, chosen))
        if large >= MIN_READ_NBYTES[storage] or 2 ** (n_levels - 1) > n_piles // 2:
            break
        deeper = seconds(n_levels)
        if deeper >= cost:
            break
        chosen, cost = n_levels, deeper
    return chosen


def level_plan_nbytes(n_blocks: int, fanouts: list[int], n_piles: int) -> int:
    """About the bytes a :class:`~daskshuffle.plan._level_plan.LevelPlan` holds on the client.

    Examples
    --------
    >>> level_plan_nbytes(1_000, [10], 512) // 1024
    455
    """
    int64 = np.dtype(np.int64).itemsize
    total, super_piles = float(n_blocks + 2 * n_piles + 1), 1
    for fanout in fanouts:
        total += 5.0 * n_blocks + 2.0 * super_piles * fanout
        super_piles *= fanout
    total += n_blocks * n_piles / super_piles
    return int(int64 * total)
