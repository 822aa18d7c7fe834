"""A uniform sample of K lines of text files, read without shuffling the rest (``shuffle_lines(head_count=K)``).

One pass (each block keeps up to K of its lines while it is counted) when K times the blocks is at most
``lines.one-pass-lines``, else count, then read only the sampled lines. The lines each block gives are drawn from
the seed and the counts alone, never from the workers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from .._config import int_setting
from .._random import make_rng
from ._text_source import BlockCount, Lines, Run, TextSource, concat_lines, take_lines

__all__ = ["count_lines", "finish_sample", "keep_block_sample", "order_sample", "plan_sample"]

#: The most lines NumPy's multivariate hypergeometric sampler takes.
_HYPERGEOMETRIC_LIMIT = 10**9


def _per_block(n_lines: NDArray[np.int64], n_sample: int, rng: np.random.Generator, replace: bool) -> NDArray[np.int64]:
    """How many of the ``n_sample`` lines each block gives."""
    total = int(n_lines.sum())
    if replace:
        positions = rng.integers(0, total, n_sample, dtype=np.int64)
    elif total >= _HYPERGEOMETRIC_LIMIT:
        positions = rng.choice(total, n_sample, replace=False, shuffle=False).astype(np.int64)
    else:
        return rng.multivariate_hypergeometric(n_lines, n_sample).astype(np.int64)
    blocks = np.searchsorted(np.cumsum(n_lines), positions, side="right")
    return np.bincount(blocks, minlength=len(n_lines)).astype(np.int64)


def _rng(seed: int, purpose: str, replace: bool, *key: int) -> np.random.Generator:
    return make_rng(seed, purpose + ("-replace" if replace else ""), *key)


# -- count, then read ---------------------------------------------------------
def plan_sample(
    n_lines: NDArray[np.int64], n_sample: int, seed: int, *, replace: bool
) -> list[tuple[int, NDArray[np.int64]]]:
    """``(block, sorted line numbers inside it)`` for every block that holds a sampled line, in block order.

    Without replacement ``n_sample`` must not exceed the lines there are.

    Examples
    --------
    >>> plan = plan_sample(np.array([5, 0, 3]), 4, seed=0, replace=False)
    >>> sum(len(lines) for _, lines in plan), all(block in (0, 2) for block, _ in plan)
    (4, True)
    """
    n_lines = np.asarray(n_lines, dtype=np.int64)
    rng = _rng(seed, "sample-lines", replace)
    plan = []
    for block, count in enumerate(_per_block(n_lines, n_sample, rng, replace).tolist()):
        if count:
            size = int(n_lines[block])
            lines = rng.integers(0, size, count) if replace else rng.choice(size, count, replace=False)
            plan.append((block, np.sort(lines).astype(np.int64)))
    return plan


def read_sample(source: TextSource, block: int, lines: NDArray[np.int64]) -> Lines:
    """Lines ``lines`` of block ``block``, in that order (a task: the rest of the block is dropped here)."""
    rows = source.counted_lines(block, int(lines[-1]) + 1 if len(lines) else 0, sampled=True)
    return take_lines(rows, lines)


# -- one pass -----------------------------------------------------------------
def keep_block_sample(rows: Lines, block: int, n_keep: int, seed: int, *, replace: bool) -> Lines:
    """Up to ``n_keep`` lines of ``rows``, uniformly chosen, in a uniformly random order (or drawn with replacement)."""
    rng = _rng(seed, "sample-block", replace, block)
    if not len(rows):
        return take_lines(rows, np.zeros(0, dtype=np.int64))
    if replace:
        return take_lines(rows, rng.integers(0, len(rows), n_keep))
    return take_lines(rows, rng.choice(len(rows), min(n_keep, len(rows)), replace=False))


def count_and_sample(source: TextSource, block: int, n_keep: int, seed: int, replace: bool) -> tuple[BlockCount, Lines]:
    """The lines of block ``block`` counted, and up to ``n_keep`` of them kept (a task of the one-pass sample)."""
    count, rows = source.read_counted(block)
    return count, keep_block_sample(rows, block, n_keep, seed, replace=replace)


def finish_sample(
    kept: Sequence[Lines], n_lines: NDArray[np.int64], n_sample: int, seed: int, *, replace: bool
) -> Lines:
    """The sample from what each block kept: the first of them, as many as its block gives, in a random order."""
    per_block = _per_block(np.asarray(n_lines, dtype=np.int64), n_sample, _rng(seed, "sample-lines", replace), replace)
    return order_sample([rows.slice(0, int(count)) for rows, count in zip(kept, per_block, strict=True) if count], seed)


def order_sample(parts: Sequence[Lines], seed: int) -> Lines:
    """The sampled lines of every block (in block order), in a uniformly random order."""
    rows = concat_lines(parts)
    return take_lines(rows, make_rng(seed, "sample-order").permutation(len(rows)))


# -- the step -----------------------------------------------------------------
def count_lines(
    source: TextSource, run: Run, head_count: int | None = None, seed: int = 0, *, replace: bool = False
) -> tuple[list[BlockCount], Lines | None, int]:
    """The counts of every block, the sample of ``head_count`` lines in its output order, and the tasks run.

    The sample is ``None`` without ``head_count``, or when it takes every
    line (without ``replace``): then the lines are shuffled out of core
    instead. One pass when ``head_count`` times the blocks is at most
    ``lines.one-pass-lines``, else count, then read.
    """
    blocks = range(source.n_blocks)
    key = (source.files, source.block_nbytes, source.header, source.delimiter)
    if head_count is None:
        counts = run(source.count_block, [(block,) for block in blocks], repr(key))
        return counts, None, len(counts)
    token = repr((*key, seed, head_count, replace))
    kept = None
    if head_count * source.n_blocks <= int_setting("lines.one-pass-lines"):
        results = run(count_and_sample, [(source, block, head_count, seed, replace) for block in blocks], token)
        counts, kept = [count for count, _ in results], [rows for _, rows in results]
    else:
        counts = count_lines(source, run)[0]
    n_lines = np.array([count.n_lines for count in counts], dtype=np.int64)
    if not replace and head_count >= n_lines.sum():
        return counts, None, len(counts)
    if kept is not None:
        return counts, finish_sample(kept, n_lines, head_count, seed, replace=replace), len(counts)
    plan = plan_sample(n_lines, head_count, seed, replace=replace)
    parts = run(read_sample, [(source, block, lines) for block, lines in plan], token)
    return counts, order_sample(parts, seed), len(counts) + len(plan)
