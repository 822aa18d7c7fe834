"""A mixture of pile stores as one sample space: each store's rows after the rows of the stores before it.

Pure numpy. The loader reads a mixture as it reads one store: in units of
whole chunks of each store, dealt into groups afresh every epoch
(:func:`~daskshuffle.epochs._unit_plan.epoch_runs` gives each stream's copies of
its units and the sample of units for its rows left over).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["stream_offsets"]

IntArray = NDArray[np.int64]


def stream_offsets(pile_offsets: Sequence[IntArray]) -> tuple[IntArray, IntArray]:
    """The stores' piles laid end to end: the union's pile offsets, and the first pile of each store (and the end).

    Examples
    --------
    >>> offsets, first_piles = stream_offsets([np.array([0, 4, 6]), np.array([0, 3])])
    >>> offsets.tolist(), first_piles.tolist()
    ([0, 4, 6, 9], [0, 2, 3])
    """
    parts, shift = [np.zeros(1, dtype=np.int64)], 0
    for offsets in pile_offsets:
        parts.append(np.asarray(offsets[1:], dtype=np.int64) + shift)
        shift += int(offsets[-1])
    first_piles = np.concatenate([[0], np.cumsum([len(offsets) - 1 for offsets in pile_offsets])])
    return np.concatenate(parts).astype(np.int64), first_piles.astype(np.int64)
