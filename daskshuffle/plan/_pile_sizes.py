"""What the scale model expects of the piles a plan draws: their sizes, the merge's groups, the reads they make.

Pure: numpy and math. Pile sizes are drawn as a plan draws them
(:func:`~daskshuffle.plan._plan.make_plan`) and grouped as a merge groups them
(:func:`~daskshuffle.plan._plan.merge_runs`) where that is cheap; otherwise,
and for the tails, from the binomial distribution of a pile's rows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._plan import make_plan, merge_runs

__all__ = ["DRAWN_PILES", "any_row_in", "binomial_sf", "merge_groups", "typical_largest"]

#: Up to this many piles the model draws pile sizes as a plan does and groups them as a merge does;
#: beyond, piles are taken at their mean size (their spread is then a small share of a group).
DRAWN_PILES = 100_000


def merge_groups(n_rows: int, row_nbytes: int, n_piles: int, block_nbytes: int) -> tuple[Any, Any]:
    """The merge's groups as (piles in a group, how many groups have that many), as arrays."""
    if n_piles <= DRAWN_PILES:
        # Pile sizes as a plan draws them: one block's counts have the distribution of the sum over blocks.
        sizes = make_plan([n_rows], n_piles, seed=0).pile_sizes
        found = np.bincount([stop - start for start, stop in merge_runs(sizes, row_nbytes, max(block_nbytes, 1))])
        present = np.nonzero(found)[0]
        return present.astype(np.float64), found[present].astype(np.float64)
    pile_nbytes = n_rows / n_piles * row_nbytes
    per_group = max(1, int(block_nbytes // max(pile_nbytes, 1.0)))
    full, rest = divmod(n_piles, per_group)
    kinds, counts = [float(per_group)], [float(full)]
    if rest:
        kinds.append(float(rest))
        counts.append(1.0)
    return np.array(kinds), np.array(counts)


def any_row_in(fraction: Any, lengths: Any) -> Any:
    """The chance that at least one of ``lengths`` rows falls in a ``fraction`` of the piles."""
    with np.errstate(divide="ignore"):
        return -np.expm1(lengths * np.log1p(-np.minimum(fraction, 1.0)))


def binomial_sf(threshold: int, n: int, p: float) -> float:
    """``P(X > threshold)`` for ``X ~ Binomial(n, p)``: summed exactly for a narrow spread, else a normal tail."""
    if threshold >= n:
        return 0.0
    if threshold < 0 or p >= 1.0:
        return 1.0
    mean, sd = n * p, math.sqrt(n * p * (1.0 - p))
    if sd > 50.0:
        return 0.5 * math.erfc((threshold + 0.5 - mean) / (sd * math.sqrt(2.0)))
    reach = 40.0 * sd + 50.0
    if threshold + 1 < mean - reach:
        return 1.0
    first, last = threshold + 1, min(n, math.ceil(max(threshold + 1, mean) + reach))
    log_term = math.lgamma(n + 1) - math.lgamma(first + 1) - math.lgamma(n - first + 1)
    log_term += first * math.log(p) + (n - first) * math.log1p(-p)
    log_odds = math.log(p) - math.log1p(-p)
    logs = []
    for k in range(first, last + 1):
        logs.append(log_term)
        log_term += math.log((n - k) / (k + 1)) + log_odds if k < n else 0.0
    peak = max(logs)
    return min(1.0, math.exp(peak) * math.fsum(math.exp(value - peak) for value in logs))


def typical_largest(n_rows: int, n_piles: int) -> int:
    """The median of the largest of ``n_piles`` pile sizes, by a normal tail and a union bound."""
    if n_piles == 1:
        return n_rows
    p = 1.0 / n_piles
    mean, sd = n_rows * p, math.sqrt(n_rows * p * (1.0 - p))
    tail = -math.expm1(math.log(0.5) / n_piles)  # P(one pile > x) that makes P(all piles <= x) = 1/2
    low, high = 0.0, 40.0
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if 0.5 * math.erfc(middle / math.sqrt(2.0)) > tail else (low, middle)
    return min(n_rows, math.ceil(mean + sd * low))
