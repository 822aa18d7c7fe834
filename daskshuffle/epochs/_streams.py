"""``Stream``: one pile store of a mixture, with how many of its rows each epoch takes (pure: no I/O)."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._errors import Argument, DaskShuffleTypeError, DaskShuffleValueError
from .._parse import parse_path, parse_positive_int

__all__ = ["Stream", "epoch_counts", "parse_streams", "stream_offsets"]


@dataclass(frozen=True)
class Stream:
    """A pile store in a mixture, and how many of its rows every epoch takes.

    Give at most one of ``repeat``, ``choose`` and ``proportion`` (by default ``repeat=1``), as
    MosaicML Streaming's ``Stream`` takes them. The streams' units are dealt into the epoch's groups
    together, as one store's are; a row's copies are kept apart within a group.

    Parameters
    ----------
    store : path or URL
        A complete pile store. Every stream of a loader must have the same
        variables, with the same dtypes, and be of the same kind.
    repeat : float, optional
        Copies of each row per epoch, > 0: every row ``floor(repeat)`` times, and a uniform sample
        drawn afresh each epoch for the fraction (``repeat=0.3`` is a uniform 30% of the rows).
    choose : int, optional
        Rows per epoch, >= 1, as ``repeat=choose / n_rows``.
    proportion : float, optional
        Share of the epoch (the rows of all streams together), > 0, relative to the other streams';
        every stream of a loader has one, or none does.

    Examples
    --------
    >>> import daskshuffle as ds
    >>> _ = ds.shuffle_zarr("raw.zarr", "more.zarr", n_piles=4, seed=1)
    >>> streams = [ds.Stream("piles.zarr", repeat=0.5), ds.Stream("more.zarr", choose=1500)]
    >>> with ds.PileLoader(streams, batch_size=100, seed=0) as loader:
    ...     ids = [int(i) for batch in loader for i in batch["id"]]
    >>> len(ids), max(ids.count(i) for i in set(ids))
    (2000, 3)
    """

    store: str | os.PathLike[str]
    repeat: float | None = None
    choose: int | None = None
    proportion: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "store", parse_path(self.store, "store"))
        given = [name for name in ("repeat", "choose", "proportion") if getattr(self, name) is not None]
        if len(given) > 1:
            raise DaskShuffleValueError(
                f"Expected at most one of repeat, choose and proportion. Got {' and '.join(given)} instead; "
                "each says how many rows the stream puts into an epoch.",
                parameter=given[-1],
            )
        for name in ("repeat", "proportion"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _parse_positive_float(value, name))
        if self.choose is not None:
            object.__setattr__(self, "choose", parse_positive_int(self.choose, "choose"))

    def to_dict(self) -> dict[str, Any]:
        """The stream as recorded in a loader's state: its store and the weight given."""
        weight = {name: getattr(self, name) for name in ("repeat", "choose", "proportion")}
        return {"store": os.fspath(self.store), **{k: v for k, v in weight.items() if v is not None}}


def _parse_positive_float(value: object, name: str) -> float:
    message = ("Expected ", Argument(name), f" to be a positive number. Got {value!r} instead.")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise DaskShuffleTypeError(message, parameter=name)
    if not math.isfinite(float(value)) or value <= 0:
        raise DaskShuffleValueError(message, parameter=name)
    return float(value)


def parse_streams(value: object) -> list[Stream] | None:
    """``None`` for one plain store; the streams of a mixture otherwise (a :class:`Stream`, or a list of paths and streams).

    Examples
    --------
    >>> parse_streams("piles.zarr") is None
    True
    >>> [stream.repeat for stream in parse_streams(["a.zarr", Stream("b.zarr", repeat=2)])]
    [None, 2.0]
    """
    if isinstance(value, Stream):
        return [value]
    if isinstance(value, str | os.PathLike):
        return None
    if not isinstance(value, Sequence) or not all(isinstance(v, str | os.PathLike | Stream) for v in value):
        raise DaskShuffleTypeError(
            f"Expected store to be a path or URL, a Stream, or a list of them. Got {value!r} instead.",
            parameter="store",
        )
    if not value:
        raise DaskShuffleValueError("Expected at least one store. Got an empty list instead.", parameter="store")
    streams = [v if isinstance(v, Stream) else Stream(v) for v in value]
    with_proportion = [s.proportion is not None for s in streams]
    if any(with_proportion) and not all(with_proportion):
        plain = [os.fspath(s.store) for s, given in zip(streams, with_proportion, strict=True) if not given]
        raise DaskShuffleValueError(
            f"Expected a proportion for every stream or for none. Got none for {plain} instead; a proportion is a "
            "share of the epoch, which the other streams' repeat or choose would leave undefined.",
            parameter="proportion",
        )
    return streams


def epoch_counts(streams: Sequence[Stream], n_rows: Sequence[int]) -> list[int]:
    """The rows each stream puts into every epoch, given the rows ``n_rows`` of each store.

    With proportions the epoch's ``sum(n_rows)`` rows are shared out by largest remainders.

    Examples
    --------
    >>> epoch_counts([Stream("a", repeat=2.5), Stream("b", choose=7), Stream("c")], [10, 4, 3])
    [25, 7, 3]
    >>> epoch_counts([Stream("a", proportion=1), Stream("b", proportion=2)], [10, 0])
    [3, 7]
    """
    if streams and streams[0].proportion is not None:
        total = sum(n_rows)
        weights = [float(s.proportion or 0) for s in streams]
        exact = [total * w / sum(weights) for w in weights]
        counts = [math.floor(x) for x in exact]
        by_remainder = sorted(range(len(exact)), key=lambda i: (counts[i] - exact[i], i))
        for i in by_remainder[: total - sum(counts)]:
            counts[i] += 1
        return counts
    counts = []
    for stream, n in zip(streams, n_rows, strict=True):
        if stream.choose is not None:
            counts.append(stream.choose)
        else:
            counts.append(math.floor((1.0 if stream.repeat is None else stream.repeat) * n + 0.5))
    return counts


def stream_offsets(pile_offsets: Sequence[NDArray[np.int64]]) -> NDArray[np.int64]:
    """The stores' piles laid end to end: the pile offsets of their union.

    Examples
    --------
    >>> stream_offsets([np.array([0, 4, 6]), np.array([0, 3])]).tolist()
    [0, 4, 6, 9]
    """
    parts, shift = [np.zeros(1, dtype=np.int64)], 0
    for offsets in pile_offsets:
        parts.append(np.asarray(offsets[1:], dtype=np.int64) + shift)
        shift += int(offsets[-1])
    return np.concatenate(parts).astype(np.int64)
