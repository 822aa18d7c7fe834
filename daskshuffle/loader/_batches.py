"""Gathering a batch from the shuffled piles it takes rows of.

Batches are gathered from each pile as stored, at the positions of its
permutation, rather than from a shuffled copy (which would double the pile's
memory). Nothing is gathered from a pile before every variable is checked
against the rows its read records (:func:`check_pile`), and every ``take``
runs in numpy's default mode, which raises for a position out of range
(``"clip"`` or ``"wrap"`` would repeat a row wherever a check missed one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._errors import CorruptPileStoreError
from ..epochs import BatchPlan
from ..readers import RowsKind

__all__ = ["Allocate", "Layout", "gather_batches", "join"]

#: Each variable's dtype and the shape of one of its rows.
Layout = Mapping[str, tuple[np.dtype[Any], tuple[int, ...]]]
#: Makes the arrays a batch of ``n_rows`` rows of ``layout`` is gathered into.
Allocate = Callable[[int, Layout], Mapping[str, NDArray[Any]]]


def _empty(n_rows: int, layout: Layout) -> dict[str, NDArray[Any]]:
    return {name: np.empty((n_rows, *shape), dtype=dtype) for name, (dtype, shape) in layout.items()}


def _layout(arrays: Mapping[str, NDArray[Any]]) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
    return {name: (values.dtype, values.shape[1:]) for name, values in arrays.items()}


def check_positions(index: NDArray[np.intp], n_rows: int) -> None:
    """Raise ``IndexError`` unless every position of ``index`` is in ``0:n_rows`` (a bug of the plan), once a pile."""
    index = np.asarray(index, dtype=np.intp)
    if index.size and int(index.view(np.uintp).max()) >= n_rows:  # unsigned: a negative one is larger
        bad = index[(index < 0) | (index >= n_rows)]
        raise IndexError(
            f"Expected positions in 0:{n_rows}, the rows of the pile being gathered from. Got {bad.size:,} "
            f"out of range (the first {int(bad[0])}) instead; this is a bug in daskshuffle's plan: please report it."
        )


def check_pile(pile: Any, kind: RowsKind[Any]) -> None:
    """Raise unless every variable of ``pile`` (a ``ShuffledPile``) holds the rows its read records."""
    rows = pile.arrays if pile.arrays is not None else pile.rows
    if isinstance(rows, Mapping):
        lengths = {str(name): len(values) for name, values in rows.items()}
    else:  # a table, whose columns are of one length
        lengths = {"every variable": kind.n_rows_of(rows)}
    for name, length in lengths.items():
        if length != pile.n_rows:
            raise CorruptPileStoreError(
                f"Expected {pile.n_rows:,} rows of variable {name!r} in {pile.what}, as the store records. Got "
                f"{length:,} instead: the pile store is damaged, or was changed while it was read; check it with "
                "daskshuffle.verify, and shuffle it again."
            )
    check_positions(pile.order, pile.n_rows)


class _Batch:
    """One batch being gathered, part after part, so that a pile can be let go before the next is read."""

    def __init__(self, kind: RowsKind[Any], n_rows: int, allocate: Allocate | None) -> None:
        self.kind = kind
        self.n_rows = n_rows
        self.allocate = allocate or _empty
        self.out: dict[str, NDArray[Any]] | None = None
        self.filled = 0
        self.taken: list[Any] = []

    def add(self, pile: Any, index: NDArray[np.intp], layout: Layout | None) -> None:
        """Add the rows of ``pile`` at ``index`` (positions checked against the pile); ``layout``: its arrays'."""
        if pile.arrays is None or layout is None:
            self.taken.append(self.kind.take(pile.rows, index))
            return
        if self.out is None and len(index) == self.n_rows and self.allocate is _empty:
            # The whole batch from one pile: taken straight into new arrays, in the default mode, one copy.
            self.out = {name: values.take(index, axis=0) for name, values in pile.arrays.items()}
            self.filled = self.n_rows
            return
        if self.out is None:
            self.out = dict(self.allocate(self.n_rows, layout))
        elif _layout(self.out) != layout:
            # Piles whose dtypes differ (a Parquet column with nulls in one pile only): widen, as a concatenation would.
            wider = {
                name: (np.result_type(self.out[name], pile.arrays[name]), shape) for name, (_, shape) in layout.items()
            }
            out = dict(self.allocate(self.n_rows, wider))
            for name, values in out.items():
                values[: self.filled] = self.out[name][: self.filled]
            self.out = out
        stop = self.filled + len(index)
        for name, values in self.out.items():
            values[self.filled : stop] = pile.arrays[name].take(index, axis=0)
        self.filled = stop

    def result(self) -> Any:
        if self.out is not None:
            return self.out
        batch = self.kind.to_batch(self.taken[0] if len(self.taken) == 1 else self.kind.concat(self.taken))
        return batch if self.allocate is _empty else join([batch], self.allocate)


def join(parts: Sequence[Any], allocate: Allocate | None) -> Any:
    """The numpy batches ``parts`` as one, in the arrays ``allocate`` makes if given (one part alone: itself)."""
    if len(parts) == 1 and allocate is None:
        return parts[0]
    if allocate is None:
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    out = dict(allocate(sum(len(next(iter(part.values()))) for part in parts), _layout(parts[0])))
    for name, values in out.items():
        np.concatenate([part[name] for part in parts], out=values)
    return out


def gather_batches(
    kind: RowsKind[Any],
    plan: BatchPlan,
    segment: Callable[[int], Any],
    allocate: Allocate | None = None,
    release: Callable[[Any], None] | None = None,
) -> Iterator[Any]:
    """The batches of ``plan``, of rows of ``kind``; ``segment(i)`` gives the ``ShuffledPile`` of segment ``i``, asked for
    once, in order.

    ``release(pile)``, if given, is called once the batches gathered from ``pile`` are all made.
    """
    current: int = -1
    pile: Any = None
    layout: Layout | None = None
    try:
        for parts in plan:
            batch = _Batch(kind, sum(part.stop - part.start for part in parts), allocate)
            for part in parts:
                if part.segment != current:
                    if pile is not None and release is not None:
                        release(pile)
                    pile = None  # let the last pile go before the next is read (with nothing read ahead, here)
                    read = segment(part.segment)
                    # Once a pile: every variable holds its rows, every part's index is in them.
                    check_pile(read, kind)
                    current, pile = part.segment, read
                    layout = None if pile.arrays is None else _layout(pile.arrays)  # once a pile, not once a batch
                index = pile.order[part.start : part.stop]
                if len(index) != part.stop - part.start:  # a slice past the end is short, not an error
                    raise IndexError(
                        f"Expected positions {part.start}:{part.stop} of segment {part.segment}'s order. Got an order of "
                        f"{len(pile.order)} positions instead; this is a bug in daskshuffle's plan: please report it."
                    )
                batch.add(pile, index, layout)
            yield batch.result()
    finally:
        if pile is not None and release is not None:
            release(pile)  # the last pile too, however the batches end: its arrays may take the next read
