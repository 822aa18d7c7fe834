"""A uniform sample of K lines of text files, read without shuffling the rest (``shuffle_lines(head_count=K)``).

Once the lines of every block are counted, the sample is planned as
positions: K of the ``n`` lines, drawn uniformly from the seed (distinct, or
with replacement), each a block and a line inside it. Only the blocks that hold
a position are read, and only those lines are kept; the sample, gathered in
memory, is then put in a uniformly random order. The plan depends only on the
seed and the counts, never on the workers.

Without replacement, the number of positions in each block is drawn from the
multivariate hypergeometric distribution, then the positions inside each
block uniformly without replacement: together a uniformly chosen set of K
lines, with memory for K positions whatever the size of the input. (Beyond
``10**9`` lines, which NumPy's sampler does not take, ``Generator.choice`` over
all lines is used instead.) With replacement, K positions are drawn
independently and uniformly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from .._errors import DaskShuffleValueError
from .._random import make_rng
from ._text_source import Lines, TextSource, _memory_pool

__all__ = ["order_sample", "plan_sample", "read_sample"]

#: The most lines NumPy's multivariate hypergeometric sampler takes.
_HYPERGEOMETRIC_LIMIT = 10**9


def _positions(n_lines: NDArray[np.int64], n_sample: int, rng: np.random.Generator, replace: bool) -> NDArray[np.int64]:
    """Sorted positions among all ``n_lines.sum()`` lines: ``n_sample`` of them."""
    total = int(n_lines.sum())
    if replace:
        return np.sort(rng.integers(0, total, n_sample, dtype=np.int64))
    if total >= _HYPERGEOMETRIC_LIMIT:
        return np.sort(rng.choice(total, n_sample, replace=False, shuffle=False).astype(np.int64))
    per_block = rng.multivariate_hypergeometric(n_lines, n_sample)
    starts = np.concatenate([[0], np.cumsum(n_lines)]).astype(np.int64)
    chosen = [
        np.sort(rng.choice(int(n_lines[block]), int(count), replace=False)).astype(np.int64) + starts[block]
        for block, count in enumerate(per_block.tolist())
        if count
    ]
    return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)


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
    positions = _positions(
        n_lines, n_sample, make_rng(seed, "sample-lines-replace" if replace else "sample-lines"), replace
    )
    starts = np.concatenate([[0], np.cumsum(n_lines)]).astype(np.int64)
    blocks = np.searchsorted(starts, positions, side="right") - 1
    cuts = np.flatnonzero(np.diff(blocks)) + 1
    return [
        (int(group_blocks[0]), group - starts[group_blocks[0]])
        for group, group_blocks in zip(np.split(positions, cuts), np.split(blocks, cuts), strict=True)
        if len(group)
    ]


def order_sample(parts: Sequence[Lines], seed: int) -> Lines:
    """The sampled lines of every block (in block order), in a uniformly random order."""
    rows = pa.concat_arrays(list(parts), memory_pool=_memory_pool()) if parts else pa.array([], pa.large_binary())
    order = make_rng(seed, "sample-order").permutation(len(rows))
    return pc.take(rows, pa.array(order, type=pa.int64()), memory_pool=_memory_pool())


def read_sample(source: TextSource, block: int, lines: NDArray[np.int64]) -> Lines:
    """Lines ``lines`` of block ``block``, in that order (a task: the rest of the block is dropped here)."""
    rows = source.read_lines(block)
    if len(lines) and int(lines[-1]) >= len(rows):
        raise DaskShuffleValueError(
            f"Expected at least {int(lines[-1]) + 1:,} lines in block {block} of "
            f"{source.files[source.block(block).file].path!r}, as counted. Got {len(rows):,} instead; "
            "do not change a source while it is being sampled."
        )
    # take copies the few lines kept: the task's result does not hold on to its whole block.
    return pc.take(rows, pa.array(lines, type=pa.int64()), memory_pool=_memory_pool())
