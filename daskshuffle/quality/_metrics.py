"""How shuffled an order is, each measure next to what a uniform shuffle of the same size gives.

Every metric has a known expected value and standard deviation under a uniform permutation of the
same size, so each reads as "as uniform" or "not, at this scale". Vectorised numpy, in chunks where
an intermediate would be as large as the order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._config import int_setting
from .._errors import DaskShuffleValueError

__all__ = [
    "Measure",
    "bin_counts",
    "cobatch_overlap",
    "contingency",
    "displacement",
    "diversity",
    "label_mix",
    "lag_correlation",
    "parse_order",
    "rank_correlation",
    "spread",
]

#: Standard deviations from the uniform expectation at which a measure is called "not uniform":
#: a uniform shuffle is called so once in about 1.7 million measures (normal tails).
Z_BAND = 5.0


def chunk_rows() -> int:
    """Rows per chunk of the chunked computations (``quality.chunk-rows`` of ``daskshuffle.config``)."""
    return int_setting("quality.chunk-rows")


@dataclass(frozen=True)
class Measure:
    """One metric of one order at one scale, and what a uniform shuffle of the same size gives."""

    metric: str
    scale: str
    value: float
    uniform: float
    uniform_sd: float

    @property
    def low(self) -> float:
        return self.uniform - Z_BAND * self.uniform_sd

    @property
    def high(self) -> float:
        return self.uniform + Z_BAND * self.uniform_sd

    @property
    def verdict(self) -> str:
        return "as uniform" if self.low <= self.value <= self.high else "not uniform"


def parse_order(order: object) -> Any:
    """An order checked to be a permutation of ``0..n-1``: an int64 array, or an array on storage read in chunks.

    A ``zarr.Array`` (anything one-dimensional with ``shape``, ``dtype`` and
    slicing that gives numpy arrays) is not loaded: the measures read it
    :func:`chunk_rows` rows at a time, and the check holds one byte per row.
    """
    lazy = (
        not isinstance(order, (np.ndarray, list, tuple, range)) and hasattr(order, "shape") and hasattr(order, "dtype")
    )
    values: Any = order if lazy else np.asarray(order)
    shape, dtype = tuple(values.shape), np.dtype(values.dtype)
    if len(shape) != 1 or dtype.kind not in "iu":
        raise DaskShuffleValueError(
            f"Expected an order: a 1-d array of integer source positions. Got an array of shape {shape} "
            f"and dtype {dtype} instead.",
            parameter="order",
        )
    n = shape[0]
    if n < 2:
        raise DaskShuffleValueError(f"Expected an order of 2 rows or more. Got {n} instead.", parameter="order")
    seen = np.zeros(n, dtype=bool)
    outside = 0
    for _, part in _chunks(values):
        inside = (part >= 0) & (part < n)
        outside += int((~inside).sum())
        seen[part[inside]] = True
    if outside or not seen.all():
        missing = int(n - seen.sum())
        raise DaskShuffleValueError(
            f"Expected a permutation of 0..{n - 1}: every source position once. Got {missing:,} positions missing "
            f"and {outside:,} out of range instead; pass the ids of one whole epoch, numbered from 0.",
            parameter="order",
        )
    return values if lazy else values.astype(np.int64, copy=False)


def rows_of(order: Any, start: int, stop: int) -> NDArray[np.int64]:
    """Positions ``start:stop`` of an order, as an int64 numpy array (read from storage if it lives there)."""
    return np.asarray(order[start:stop]).astype(np.int64, copy=False)


def _chunks(order: Any, extra: int = 0) -> Iterator[tuple[int, NDArray[np.int64]]]:
    """The order :func:`chunk_rows` positions at a time (and ``extra`` more, where there are): each chunk's start and rows."""
    n, chunk = int(order.shape[0]), chunk_rows()
    for start in range(0, n, chunk):
        yield start, rows_of(order, start, min(start + chunk + extra, n))


def _windows(order: Any, size: int) -> Iterator[NDArray[np.int64]]:
    """The order's whole windows of ``size`` positions, a chunk of them at a time: one window a row."""
    n_windows, per = int(order.shape[0]) // size, max(1, chunk_rows() // size)
    for a in range(0, n_windows, per):
        yield rows_of(order, a * size, min(a + per, n_windows) * size).reshape(-1, size)


def rank_correlation(order: Any) -> Measure:
    """Spearman's rho between output and source position: 0 for uniform (sd ``1/sqrt(n-1)``), 1 for no shuffle."""
    n, squares = int(order.shape[0]), 0.0
    for start, part in _chunks(order):
        d = (part - np.arange(start, start + len(part), dtype=np.int64)).astype(np.float64)
        squares += float(np.dot(d, d))
    rho = 1.0 - 6.0 * squares / (n * (n * n - 1.0))
    return Measure("rank correlation", "all", rho, 0.0, 1.0 / math.sqrt(n - 1))


def displacement(order: Any) -> Measure:
    """Mean ``|order[i] - i|`` over ``n``: about 1/3 for uniform (Spearman's footrule), 0 for no shuffle."""
    n = int(order.shape[0])
    total = sum(float(np.abs(part - np.arange(start, start + len(part))).sum()) for start, part in _chunks(order))
    # The footrule of a uniform permutation: mean (n^2 - 1) / 3, variance (n + 1)(2n^2 + 7) / 45.
    mean, sd = (n * n - 1.0) / 3.0, math.sqrt((n + 1.0) * (2.0 * n * n + 7.0) / 45.0)
    return Measure("displacement", "all", total / n / n, mean / n / n, sd / n / n)


def spread(order: Any, window: int, scale: str) -> Measure:
    """How far apart the sources of ``window`` consecutive outputs are, as a share of the uniform spread.

    The mean, over windows, of the variance of their source positions, over
    what a uniform sample of that size gives: 1 for uniform, about
    ``(window / n)**2`` where order survives at this scale (a buffer or a
    shard that keeps its rows together). The uniform band uses the variance
    of a sample variance of the uniform distribution (excess kurtosis -1.2).
    """
    n = int(order.shape[0])
    window = max(2, min(int(window), n))
    n_windows = n // window
    variance = sum(float(rows.astype(np.float64).var(axis=1, ddof=1).sum()) for rows in _windows(order, window))
    population = (n * n - 1.0) / 12.0 * n / (n - 1.0)  # E of a ddof=1 variance of a sample without replacement
    value = variance / n_windows / population
    sd = math.sqrt(max(2.0 / (window - 1) - 1.2 / window, 0.0) / n_windows)
    return Measure("spread", scale, value, 1.0, sd)


def contingency(order: Any) -> Measure:
    """Chi-square of the source-bin x output-bin table over its degrees of freedom: 1 for uniform.

    Each axis is cut in as many equal bins as keep 20 rows expected per cell, at most 100;
    the table's margins are fixed, so under a uniform permutation the statistic has about
    ``(bins - 1)**2`` degrees of freedom.
    """
    n = int(order.shape[0])
    bins = max(2, min(100, int(math.sqrt(n / 20))))
    table = bin_counts(order, bins).astype(np.float64)
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / n
    chi2 = float(((table - expected) ** 2 / np.maximum(expected, 1e-12)).sum())
    dof = (bins - 1) ** 2
    return Measure("contingency", f"{bins}x{bins}", chi2 / dof, 1.0, math.sqrt(2.0 / dof))


def bin_counts(order: Any, bins: int) -> NDArray[np.int64]:
    """``(bins, bins)``: how many rows of each output bin came from each source bin (equal bins of positions)."""
    n, counts = int(order.shape[0]), np.zeros(bins * bins, dtype=np.int64)
    for start, part in _chunks(order):
        out = np.arange(start, start + len(part), dtype=np.int64) * bins // n
        counts += np.bincount(out * bins + part * bins // n, minlength=bins * bins)
    return counts.reshape(bins, bins)


def lag_correlation(order: Any, lag: int = 1) -> Measure:
    """Correlation of the source positions of outputs ``lag`` apart: about 0 for uniform (sd ``1/sqrt(n)``)."""
    n, chunk = int(order.shape[0]), chunk_rows()
    mean = (n - 1) / 2.0  # the mean of a permutation of 0..n-1
    products, squares = 0.0, 0.0
    for start, part in _chunks(order, extra=lag):
        values = part.astype(np.float64) - mean
        body = values[: min(chunk, n - start)]
        squares += float(np.dot(body, body))
        products += float(np.dot(values[:-lag], values[lag:])) if len(values) > lag else 0.0
    r = products / squares
    return Measure("lag correlation", f"lag {lag}", r, -1.0 / (n - 1), 1.0 / math.sqrt(n))


def diversity(order: Any, batch_size: int, block_size: int) -> Measure:
    """Distinct source blocks (of ``block_size`` rows) per batch, over what a uniform batch holds.

    A batch of ``s`` rows drawn uniformly from ``n`` touches block ``b`` with
    probability ``p = 1 - C(n - size_b, s) / C(n, s)``; the band treats blocks
    as independent, which overstates the variance (a safe side for a false alarm).
    """
    n = int(order.shape[0])
    batch_size, block_size = max(1, min(batch_size, n)), max(1, min(block_size, n))
    n_batches, found = n // batch_size, 0
    for batches in _windows(order, batch_size):
        blocks = np.sort(batches // block_size, axis=1)
        found += int((np.diff(blocks, axis=1) != 0).sum()) + len(blocks)
    distinct = found / n_batches
    n_blocks = -(-n // block_size)
    sizes = np.full(n_blocks, block_size, dtype=np.float64)
    sizes[-1] = n - block_size * (n_blocks - 1)
    # log C(n - k, s) - log C(n, s) = sum over j < s of log(1 - k / (n - j)), summed in closed form with lgamma.
    log_miss = np.array([_log_ratio(n, int(k), batch_size) for k in np.unique(sizes)])
    miss = dict(zip(np.unique(sizes).tolist(), np.exp(log_miss).tolist(), strict=True))
    p = np.array([1.0 - miss[k] for k in sizes.tolist()])
    expected = float(p.sum())
    sd = math.sqrt(float((p * (1 - p)).sum()) / n_batches)
    return Measure("diversity", f"batch {batch_size}, block {block_size}", distinct / expected, 1.0, sd / expected)


def label_mix(order: Any, labels: Any, batch_size: int, draws: int = 8, seed: int = 0) -> Measure:
    """How far each batch's label mix is from the whole data's: the mean total variation distance.

    ``labels[j]`` is the label of the row at source position ``j``. The
    uniform expectation and band come from ``draws`` uniform shuffles of the
    same labels into batches of the same size (no closed form covers every
    label distribution); the band is widened by half to allow for so few draws.
    """
    n = int(order.shape[0])
    codes = np.unique(np.asarray(labels), return_inverse=True)[1].reshape(-1).astype(np.int64)
    if len(codes) != n:
        raise DaskShuffleValueError(
            f"Expected a label for each of the {n:,} rows. Got {len(codes):,} labels instead.", parameter="labels"
        )
    n_labels = int(codes.max()) + 1
    whole = np.bincount(codes, minlength=n_labels) / n
    batch_size = max(1, min(batch_size, n))

    def distance(positions: Any) -> float:
        total = 0.0
        for batches in _windows(positions, batch_size):
            batch = np.arange(batches.size) // batch_size
            counts = np.bincount(batch * n_labels + codes[batches.reshape(-1)], minlength=len(batches) * n_labels)
            total += float(np.abs(counts.reshape(-1, n_labels) / batch_size - whole).sum()) / 2
        return total / (n // batch_size)

    value = distance(order)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0x1ABE1,)))
    uniform = np.array([distance(rng.permutation(n)) for _ in range(draws)])
    return Measure("label mix", f"batch {batch_size}", value, float(uniform.mean()), 1.5 * float(uniform.std(ddof=1)))


def _log_ratio(n: int, k: int, s: int) -> float:
    """``log(C(n - k, s) / C(n, s))``, ``-inf`` when ``s > n - k``."""
    if s > n - k:
        return -math.inf
    return math.lgamma(n - k + 1) - math.lgamma(n - k - s + 1) - math.lgamma(n + 1) + math.lgamma(n - s + 1)


def cobatch_overlap(first: Any, second: Any, batch_size: int) -> Measure:
    """Of the pairs of rows that share a batch in one epoch, the share that share one in the next.

    Uniform, independent epochs give ``(s - 1) / (n - 1)`` for batches of
    ``s``; a loader whose batches draw from the same few piles every epoch
    gives far more. ``first`` and ``second`` are the two epochs' orders.
    """
    n = int(first.shape[0])
    if int(second.shape[0]) != n:
        raise DaskShuffleValueError(
            f"Expected two epochs of the same rows. Got {n:,} and {int(second.shape[0]):,} rows instead.",
            parameter="previous",
        )
    batch_of = np.empty((2, n), dtype=np.int64)  # in memory: two epochs' batches of every row
    batch_of[0, rows_of(first, 0, n)] = np.arange(n) // batch_size
    batch_of[1, rows_of(second, 0, n)] = np.arange(n) // batch_size
    n_second = int(batch_of[1].max()) + 1
    joint = np.bincount(batch_of[0] * n_second + batch_of[1])
    together = float((joint * (joint - 1) // 2).sum())
    sizes = np.bincount(batch_of[0])
    pairs = float((sizes * (sizes - 1) // 2).sum())
    q = (batch_size - 1.0) / (n - 1.0)
    # A cell of the (batch in epoch 0) x (batch in epoch 1) table holds about Poisson(s^2 / n) rows: the pairs
    # in it, C(c, 2), have variance l^2 / 2 + l^3; summed over the W^2 cells and divided by W s^2 / 2 pairs.
    n_batches, lam = n / batch_size, batch_size * batch_size / n
    sd = 2.0 * math.sqrt(0.5 + lam) / (n_batches * batch_size)
    return Measure("co-batch overlap", f"batch {batch_size}", together / pairs, q, sd)
