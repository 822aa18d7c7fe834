"""The orders a :class:`~daskshuffle.PileLoader` can yield an epoch in: one pure function each, in :data:`ORDERS`.

Every order has the signature ``order(pile_offsets, seed, epoch, divisions,
options) -> EpochOrder``: from the store's pile offsets, the seed, the epoch,
the cuts of the epoch's stream between ranks (or lanes: MosaicML's canonical
nodes) and the order's :class:`OrderOptions`, it gives the store row at every
position of the epoch's stream, and the positions where the loader's reads
start (:attr:`EpochOrder.bounds`). The loader cuts that stream between ranks
and batches exactly as it cuts ``"piles"``; a read holds the rows of one unit
``bounds[u]:bounds[u + 1]`` at once, reading them from the store in runs
(:func:`unit_reads`). Pure numpy, like :mod:`daskshuffle.plan._epoch_plan`: no I/O,
no dask, no zarr. Randomness comes only from :func:`~daskshuffle._random.make_rng`
keyed by ``(seed, purpose, epoch, ...)``.

The *sample space* of an epoch is the piles laid end to end in the epoch's
visiting order (:func:`~daskshuffle.plan._epoch_plan.epoch_pile_order`), each in
stored order. A pile plays the part of a MosaicML shard, or of a tf.data file.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import ClassVar, Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .._errors import DaskShuffleTypeError, DaskShuffleValueError
from .._parse import Settings, parse_nbytes, parse_positive_int
from .._random import make_rng
from ._epoch_plan import epoch_pile_order, stream_rows

__all__ = [
    "ORDERS",
    "ORDER_CLASSES",
    "ORDER_OPTIONS",
    "PILES_BUDGET_NBYTES",
    "READ_GAPS",
    "Buffer",
    "EpochOrder",
    "Interleave",
    "Naive",
    "Order",
    "OrderName",
    "OrderOptions",
    "Piles",
    "Py1b",
    "Py1br",
    "Py1e",
    "Py1s",
    "Py2s",
    "buffer_stream",
    "division_cuts",
    "interleave_stream",
    "order_from_options",
    "parse_order",
    "parse_piles_in_memory",
    "refuse_order_keywords",
    "unit_reads",
]

IntArray = NDArray[np.int64]
#: The orders that need no options, which may be given by name.
OrderName = Literal["piles", "naive", "py1s", "py2s"]
#: Rows between two needed rows up to which a unit reads them in one run rather than two.
READ_GAP = 256
#: The units of "buffer" and "interleave", in buffers: a row stays in the buffer for about a buffer's
#: outputs, so a unit of ``k`` buffers reads about ``k + 5`` buffers of rows (about twice each row per epoch
#: for 4, five times for 1).
BUFFERS_PER_UNIT = 4


@dataclass(frozen=True)
class OrderOptions(Settings):
    """The parameters of an order; each order uses the ones :data:`ORDER_OPTIONS` names, the others are ``None``."""

    shuffle_block_size: int | None = None
    buffer_size: int | None = None
    cycle_length: int | None = None


class EpochOrder(NamedTuple):
    """An epoch's stream: ``rows[i]`` is the store row at position ``i``; reads start at ``bounds``.

    ``bounds`` runs from 0 to the number of rows; a unit ``bounds[u]:bounds[u + 1]``
    is read and held at once, and never straddles a division.
    """

    rows: IntArray
    bounds: IntArray


OrderFunction = Callable[[IntArray, int, int, IntArray, OrderOptions], EpochOrder]


def division_cuts(n_rows: int, n_divisions: int, share: int) -> IntArray:
    """The cuts of an epoch's stream between ``n_divisions`` ranks (or lanes) of ``share`` rows, and the tail.

    Examples
    --------
    >>> division_cuts(10, 3, 3).tolist()
    [0, 3, 6, 9, 10]
    >>> division_cuts(9, 3, 3).tolist()
    [0, 3, 6, 9]
    """
    return np.unique(np.append(np.arange(n_divisions + 1, dtype=np.int64) * share, n_rows)).astype(np.int64)


# -- helpers -----------------------------------------------------------------------------------------


def _space(pile_offsets: IntArray, seed: int, epoch: int) -> tuple[IntArray, IntArray]:
    """The sample space: store rows of the piles in the epoch's visiting order, and where each pile ends."""
    visit = epoch_pile_order(seed, epoch, len(pile_offsets) - 1)
    sizes = np.diff(pile_offsets)[visit]
    ends = np.cumsum(sizes).astype(np.int64)
    shift = np.repeat(pile_offsets[:-1][visit] - (ends - sizes), sizes)
    return (np.arange(int(pile_offsets[-1]), dtype=np.int64) + shift).astype(np.int64), ends


def _bounds(*cuts: NDArray[np.integer] | Sequence[int]) -> IntArray:
    return np.unique(np.concatenate([np.asarray(c, dtype=np.int64) for c in cuts])).astype(np.int64)


def _shuffle_units(rows: IntArray, bounds: IntArray, seed: int, purpose: str, epoch: int) -> IntArray:
    """``rows`` with each unit ``bounds[u]:bounds[u + 1]`` shuffled, from ``(seed, purpose, epoch, bounds[u])``."""
    out = rows.copy()
    for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        out[start:stop] = rows[start:stop][make_rng(seed, purpose, epoch, start).permutation(stop - start)]
    return out


def _blocks(divisions: IntArray, size: int) -> IntArray:
    """Cuts every ``size`` positions from the start of each division."""
    return _bounds(*[np.arange(a, b, size) for a, b in itertools.pairwise(divisions.tolist())], divisions)


def buffer_stream(stream: IntArray, buffer_size: int, rng: np.random.Generator) -> IntArray:
    """tf.data's ``shuffle(buffer_size)`` over ``stream``: fill a buffer, hand out a random slot, refill it.

    Row ``stream[p]`` comes out at a position ``>= p - buffer_size + 1``.
    Pure Python per row: about a second per million rows.

    Examples
    --------
    >>> out = buffer_stream(np.arange(6), 2, np.random.default_rng(0))
    >>> sorted(out.tolist())
    [0, 1, 2, 3, 4, 5]
    """
    n, size = len(stream), min(buffer_size, len(stream))
    buffer = np.asarray(stream[:size], dtype=np.int64).copy()
    out = np.empty(n, dtype=np.int64)
    # Slots are drawn in bulk: draw i is uniform over the buffer as it is at output i.
    fill = size
    for i, u in enumerate(rng.random(n).tolist()):
        live = size if fill < n else size - (i - (n - size))
        slot = int(u * live)
        out[i] = buffer[slot]
        if fill < n:
            buffer[slot] = stream[fill]
            fill += 1
        else:  # the input is spent: close the gap with the last live element
            buffer[slot] = buffer[live - 1]
    return out


def interleave_stream(files: list[IntArray], cycle_length: int) -> IntArray:
    """tf.data's ``interleave(cycle_length, block_length=1)``: ``cycle_length`` files read a row at a time in turn.

    A file that ends is replaced, in its place in the cycle, by the next.

    Examples
    --------
    >>> interleave_stream([np.arange(0, 3), np.arange(3, 5), np.arange(5, 7)], 2).tolist()
    [0, 3, 1, 4, 2, 5, 6]
    """
    lists = [f.tolist() for f in files if len(f)]
    # Each open file: its rows and the next one to read.
    open_files, waiting = [[rows, 0] for rows in lists[:cycle_length]], lists[cycle_length:][::-1]
    out: list[int] = []
    while open_files:
        kept = []
        for span in open_files:
            rows, at = span
            out.append(rows[at])
            if at + 1 < len(rows):
                kept.append([rows, at + 1])
            elif waiting:
                kept.append([waiting.pop(), 0])
        open_files = kept
    return np.asarray(out, dtype=np.int64)


def _per_division(
    space: IntArray, ends: IntArray, divisions: IntArray, make: Callable[[int, IntArray, list[IntArray]], IntArray]
) -> IntArray:
    """``make(d, stream, parts)`` for each division ``d``: its stream and its parts of piles, laid end to end."""
    out = np.empty_like(space)
    for d, (a, b) in enumerate(zip(divisions[:-1].tolist(), divisions[1:].tolist(), strict=True)):
        cuts = np.concatenate([[a], ends[(ends > a) & (ends < b)], [b]])
        parts = [space[s:e] for s, e in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True)]
        out[a:b] = make(d, space[a:b], parts)
    return out


# -- the orders ------------------------------------------------------------------------------------


def piles(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """The loader's own: piles in a random order, each shuffled whole (a read per pile)."""
    rows = stream_rows(offsets, seed, epoch, 0, int(offsets[-1]))
    ends = np.cumsum(np.diff(offsets)[epoch_pile_order(seed, epoch, len(offsets) - 1)])
    return EpochOrder(rows, _bounds([0], ends))


def naive(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """A uniform permutation of all rows: each division reads, at once, every pile it has a row of."""
    return EpochOrder(make_rng(seed, "order-naive", epoch).permutation(int(offsets[-1])).astype(np.int64), divisions)


def py1s(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """Piles in a random order, cut between divisions, each part shuffled alone (a boundary pile's parts in stored order)."""
    space, ends = _space(offsets, seed, epoch)
    bounds = _bounds([0], ends, divisions)
    return EpochOrder(_shuffle_units(space, bounds, seed, "order-py1s", epoch), bounds)


def py2s(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """Piles in a random order, each shuffled, then cut between divisions and each part shuffled again."""
    first = piles(offsets, seed, epoch, divisions, options)
    bounds = _bounds(first.bounds, divisions)
    return EpochOrder(_shuffle_units(first.rows, bounds, seed, "order-py2s", epoch), bounds)


def py1b(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """Piles in a random order, each division cut into blocks of ``shuffle_block_size`` rows, each block shuffled."""
    space, _ = _space(offsets, seed, epoch)
    bounds = _blocks(divisions, int(options.shuffle_block_size or 1))
    return EpochOrder(_shuffle_units(space, bounds, seed, "order-py1b", epoch), bounds)


def py1br_bounds(divisions: IntArray, block: int, seed: int, epoch: int) -> IntArray:
    """py1br's blocks: sizes uniform in ``[0.75, 1.25) * block``; each division's first block cut short at random."""
    low, high = max(1, int(0.75 * block)), max(2, int(1.25 * block))
    cuts = [divisions]
    for d, (a, b) in enumerate(zip(divisions[:-1].tolist(), divisions[1:].tolist(), strict=True)):
        rng = make_rng(seed, "order-py1br-blocks", epoch, d)
        sizes = rng.integers(low, high, size=(b - a) // low + 2)
        sizes[0] = rng.integers(1, sizes[0] + 1)  # the stagger: divisions do not start new blocks in step
        starts = a + np.cumsum(sizes)
        cuts.append(starts[starts < b])
    return _bounds([0], *cuts)


def py1br(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """py1b with blocks of random sizes in ``[0.75, 1.25) * shuffle_block_size``, staggered between divisions."""
    space, _ = _space(offsets, seed, epoch)
    bounds = py1br_bounds(divisions, int(options.shuffle_block_size or 1), seed, epoch)
    return EpochOrder(_shuffle_units(space, bounds, seed, "order-py1br", epoch), bounds)


def py1e_ranges(
    offsets: IntArray, seed: int, epoch: int, divisions: IntArray, block: int
) -> tuple[IntArray, IntArray, IntArray]:
    """py1e's extended ranges: the sample space, and the ``[low, high)`` of positions each of its rows is spread over.

    A pile's part of ``m`` rows at ``[s, e)`` of a division ``[a, b)`` spreads
    over ``[s - (block - m) / 2, e + (block - m) / 2)``, clipped to the division.
    """
    space, ends = _space(offsets, seed, epoch)
    cuts = _bounds([0], ends, divisions)
    sizes = np.diff(cuts)
    pad = np.maximum(0.0, (block - sizes) / 2)
    division = np.searchsorted(divisions, cuts[:-1], side="right") - 1
    low = np.maximum(cuts[:-1] - pad, divisions[division])
    high = np.minimum(cuts[1:] + pad, divisions[division + 1])
    return space, np.repeat(low, sizes), np.repeat(high, sizes)


def py1e(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """Each pile's rows spread at random over its range extended to ``shuffle_block_size`` rows, in each division."""
    block = int(options.shuffle_block_size or 1)
    space, low, high = py1e_ranges(offsets, seed, epoch, divisions, block)
    keys = low + (high - low) * make_rng(seed, "order-py1e", epoch).random(len(space))
    rows = np.empty_like(space)
    for a, b in zip(divisions[:-1].tolist(), divisions[1:].tolist(), strict=True):
        rows[a:b] = space[a:b][np.argsort(keys[a:b], kind="stable")]
    return EpochOrder(rows, _blocks(divisions, block))


def buffer(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """Piles in a random order, in stored order, through a shuffle buffer of ``buffer_size`` rows per division."""
    size = int(options.buffer_size or 1)
    space, ends = _space(offsets, seed, epoch)
    rows = _per_division(
        space,
        ends,
        divisions,
        lambda d, stream, _: buffer_stream(stream, size, make_rng(seed, "order-buffer", epoch, d)),
    )
    return EpochOrder(rows, _blocks(divisions, BUFFERS_PER_UNIT * size))


def interleave(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """Piles in a random order, ``cycle_length`` at a time read a row each in turn, into a buffer of ``buffer_size``."""
    size, cycle = int(options.buffer_size or 1), int(options.cycle_length or 1)
    space, ends = _space(offsets, seed, epoch)

    def make(d: int, stream: IntArray, parts: list[IntArray]) -> IntArray:
        return buffer_stream(interleave_stream(parts, cycle), size, make_rng(seed, "order-interleave", epoch, d))

    return EpochOrder(_per_division(space, ends, divisions, make), _blocks(divisions, BUFFERS_PER_UNIT * size))


#: Every order, by name: one pure function each, with one signature.
ORDERS: dict[str, OrderFunction] = {
    "piles": piles,
    "naive": naive,
    "py1s": py1s,
    "py2s": py2s,
    "py1b": py1b,
    "py1br": py1br,
    "py1e": py1e,
    "buffer": buffer,
    "interleave": interleave,
}
#: Rows a read may take between two rows its unit needs, by order (others: :data:`READ_GAP`). The units of these
#: orders are stretches of the sample space, read exactly: rows between two of their runs belong to other units.
READ_GAPS: dict[str, int] = {"py1s": 0, "py1b": 0, "py1br": 0}
#: The options each order needs.
ORDER_OPTIONS: dict[str, tuple[str, ...]] = {
    "piles": (),
    "naive": (),
    "py1s": (),
    "py2s": (),
    "py1b": ("shuffle_block_size",),
    "py1br": ("shuffle_block_size",),
    "py1e": ("shuffle_block_size",),
    "buffer": ("buffer_size",),
    "interleave": ("buffer_size", "cycle_length"),
}


# -- the orders as objects: each carries its own options -------------------------------------------


@dataclass(frozen=True)
class Order:
    """An order of a loader's epochs, with its options: what ``PileLoader(order=...)`` takes.

    Each subclass is one order of :data:`ORDERS`, named by :attr:`name`; its
    fields are the options that order needs, checked when it is made.
    """

    #: The order's name in :data:`ORDERS` and in a loader's settings.
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for field in fields(self):
            object.__setattr__(self, field.name, parse_positive_int(getattr(self, field.name), field.name))

    @property
    def options(self) -> OrderOptions:
        """The order's options that go into its stream; those it does not use are ``None``."""
        return OrderOptions(**{name: getattr(self, name) for name in ORDER_OPTIONS[self.name]})

    def piles_held(self) -> tuple[int | None, int]:
        """The store piles a read shuffles together: a number, or ``None`` and the bytes of piles to fit.

        One, for every order but :class:`Piles`: what a read holds is the
        order's own options.
        """
        return 1, 0


#: Bytes of the piles a loader mixes at once with ``Piles(piles_in_memory="auto")``.
PILES_BUDGET_NBYTES = 64 * 2**20


def parse_piles_in_memory(value: object) -> tuple[int | None, int]:
    """``piles_in_memory`` as a number of piles, or ``None`` and the bytes of piles to fit (``"auto"``, ``"256MiB"``)."""
    if value == "auto":
        return None, PILES_BUDGET_NBYTES
    if isinstance(value, str):
        return None, parse_nbytes(value, "piles_in_memory")
    return parse_positive_int(value, "piles_in_memory"), 0


@dataclass(frozen=True)
class Piles(Order):
    """The loader's own order (the default): piles in a random order, each shuffled whole, or groups of them.

    Parameters
    ----------
    piles_in_memory : int or str, default "auto"
        Piles shuffled together: each epoch deals the piles into groups of
        this many, afresh, and reads and shuffles each group as one pile.
        With 1, a pile's rows stay together from epoch to epoch: rows that
        shared a batch meet again about ``n_piles`` times as often as with
        independent shuffles (``daskshuffle.quality`` measures it); with
        ``k``, about ``n_piles / k**2 + 1`` times, for ``k`` times the memory
        (and ``prefetch + 1`` groups held at once). ``"auto"`` holds as many
        of the largest pile (of the variables read) as 64 MiB holds, but no
        more than ``ceil(sqrt(2 * n_piles))``, which is already within 2x of
        independent epochs; a size such as ``"1GiB"`` sets that budget. The
        number a loader chooses is its ``settings.piles_in_memory``, and goes
        into its state. Piles larger than the budget are read one at a time,
        as with 1: ``quality.report(..., loader=loader)`` then says so. With
        several stores, one pile at a time.

    Examples
    --------
    >>> Piles().name, Piles(piles_in_memory=4).piles_held(), Piles("1KiB").piles_held()
    ('piles', (4, 0), (None, 1024))
    """

    name: ClassVar[str] = "piles"
    piles_in_memory: int | str = "auto"

    def __post_init__(self) -> None:
        given, _ = parse_piles_in_memory(self.piles_in_memory)
        if given is not None:
            object.__setattr__(self, "piles_in_memory", given)

    def piles_held(self) -> tuple[int | None, int]:
        return parse_piles_in_memory(self.piles_in_memory)


@dataclass(frozen=True)
class Naive(Order):
    """One uniform permutation of all rows: a rank holds every pile it has a row of (small data only).

    Examples
    --------
    >>> Naive().name
    'naive'
    """

    name: ClassVar[str] = "naive"


@dataclass(frozen=True)
class Py1s(Order):
    """MosaicML's ``py1s``: piles in a random order, the stream cut between ranks, each part shuffled alone.

    Examples
    --------
    >>> Py1s().name
    'py1s'
    """

    name: ClassVar[str] = "py1s"


@dataclass(frozen=True)
class Py2s(Order):
    """MosaicML's ``py2s``: as :class:`Py1s`, but a boundary pile is shuffled before it is cut, then again.

    Examples
    --------
    >>> Py2s().name
    'py2s'
    """

    name: ClassVar[str] = "py2s"


@dataclass(frozen=True)
class Py1b(Order):
    """MosaicML's ``py1b``: piles in a random order, each rank's stream cut into blocks, each block shuffled.

    Parameters
    ----------
    shuffle_block_size : int
        Rows of a block: what a read holds.

    Examples
    --------
    >>> Py1b(shuffle_block_size=4096)
    Py1b(shuffle_block_size=4096)
    """

    name: ClassVar[str] = "py1b"
    shuffle_block_size: int


@dataclass(frozen=True)
class Py1br(Order):
    """MosaicML's ``py1br``: :class:`Py1b` with block sizes drawn in ``[0.75, 1.25) * shuffle_block_size``.

    Each rank's first block is cut short at random; a read holds up to 1.25 blocks.

    Parameters
    ----------
    shuffle_block_size : int
        Rows of a block, on average.

    Examples
    --------
    >>> Py1br(shuffle_block_size=4096).options.shuffle_block_size
    4096
    """

    name: ClassVar[str] = "py1br"
    shuffle_block_size: int


@dataclass(frozen=True)
class Py1e(Order):
    """MosaicML's ``py1e``: each pile's rows spread at random over its place extended to a block.

    A read holds about 2 blocks, and rows are read about twice.

    Parameters
    ----------
    shuffle_block_size : int
        Rows a pile's rows are spread over, at least.

    Examples
    --------
    >>> Py1e(shuffle_block_size=4096).name
    'py1e'
    """

    name: ClassVar[str] = "py1e"
    shuffle_block_size: int


@dataclass(frozen=True)
class Buffer(Order):
    """tf.data's ``shuffle(buffer_size)``: piles in a random order, each in stored order, through a shuffle buffer.

    A read holds about 9 buffers, and rows are read about twice.

    Parameters
    ----------
    buffer_size : int
        Rows of the shuffle buffer.

    Examples
    --------
    >>> Buffer(buffer_size=10_000)
    Buffer(buffer_size=10000)
    """

    name: ClassVar[str] = "buffer"
    buffer_size: int


@dataclass(frozen=True)
class Interleave(Order):
    """tf.data's ``interleave(cycle_length)`` then ``shuffle(buffer_size)``: piles read a row each in turn.

    Parameters
    ----------
    cycle_length : int
        Piles read at once, a row of each in turn.
    buffer_size : int
        Rows of the shuffle buffer they go through.

    Examples
    --------
    >>> Interleave(cycle_length=4, buffer_size=10_000).options
    OrderOptions(shuffle_block_size=None, buffer_size=10000, cycle_length=4)
    """

    name: ClassVar[str] = "interleave"
    cycle_length: int
    buffer_size: int


#: Every order's class, by name.
ORDER_CLASSES: dict[str, type[Order]] = {
    cls.name: cls for cls in (Piles, Naive, Py1s, Py2s, Py1b, Py1br, Py1e, Buffer, Interleave)
}


def _spelled(order: type[Order]) -> str:
    """How to make ``order`` in code: ``ds.orders.Py1b(shuffle_block_size=...)``."""
    return f"ds.orders.{order.__name__}({', '.join(f'{field.name}=...' for field in fields(order))})"


def parse_order(order: object) -> Order:
    """``order`` as an :class:`Order`: one already made, or the name of an order that needs no options.

    Examples
    --------
    >>> parse_order("py1s"), parse_order(Py1b(shuffle_block_size=4096))
    (Py1s(), Py1b(shuffle_block_size=4096))
    """
    if isinstance(order, Order):
        return order
    if not isinstance(order, str):
        raise DaskShuffleTypeError(
            f"Expected order to be an order of daskshuffle.orders or the name of one. Got {order!r} instead.",
            parameter="order",
        )
    if order not in ORDER_CLASSES:
        raise DaskShuffleValueError(
            f"Expected order to be one of {sorted(ORDERS)}. Got {order!r} instead.", parameter="order"
        )
    chosen = ORDER_CLASSES[order]
    if ORDER_OPTIONS[order]:
        raise DaskShuffleValueError(
            f"Expected order={_spelled(chosen)}, with its options. Got order={order!r} instead; the order "
            f"{order!r} needs {', '.join(ORDER_OPTIONS[order])}.",
            parameter="order",
        )
    return chosen()


def order_from_options(name: object, options: Mapping[str, object]) -> Order:
    """The order named ``name`` with ``options`` (given by keyword): the options it needs, no others.

    For the functions that take an order's name and its options side by side,
    as :func:`daskshuffle.quality.orders.piles` does.

    Examples
    --------
    >>> order_from_options("py1b", {"shuffle_block_size": 4096, "buffer_size": None})
    Py1b(shuffle_block_size=4096)
    """
    if not isinstance(name, str) or name not in ORDER_CLASSES:
        raise DaskShuffleValueError(
            f"Expected order to be one of {sorted(ORDERS)}. Got {name!r} instead.", parameter="order"
        )
    chosen = ORDER_CLASSES[name]
    required = [f.name for f in fields(chosen) if f.default is MISSING]
    taken = {f.name for f in fields(chosen)}
    for option, value in options.items():
        if option in required and value is None:
            raise DaskShuffleValueError(
                f"Expected {option} with order={name!r}. Got None instead; order={name!r} needs {', '.join(required)}.",
                parameter=option,
            )
        if option not in taken and value is not None:
            users = sorted(o for o, cls in ORDER_CLASSES.items() if option in {f.name for f in fields(cls)})
            raise DaskShuffleValueError(
                f"Expected no {option} with order={name!r}. Got {option}={value!r} instead; it applies to "
                f"order={' or '.join(map(repr, users))}.",
                parameter=option,
            )
    return chosen(**{option: value for option, value in options.items() if option in taken and value is not None})


#: The keywords that were an order's options, before the order carried them.
_ORDER_KEYWORDS = {
    "shuffle_block_size": "Py1b",
    "buffer_size": "Buffer",
    "cycle_length": "Interleave",
    "piles_in_memory": "Piles",
}


def refuse_order_keywords(keywords: Mapping[str, object], function: str) -> None:
    """Refuse ``keywords`` left over by ``function``'s signature, naming the new spelling of an order's options.

    Examples
    --------
    >>> refuse_order_keywords({"shuffle_block_size": 4096}, "PileLoader")
    Traceback (most recent call last):
    ...
    daskshuffle._errors.DaskShuffleTypeError: Expected an order's options inside the order, ...
    """
    for name, value in keywords.items():
        if name not in _ORDER_KEYWORDS:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")
        example = ORDER_CLASSES[_ORDER_KEYWORDS[name].lower()]
        raise DaskShuffleTypeError(
            f"Expected an order's options inside the order, as order={_spelled(example)}. Got {name}={value!r} as a "
            f"keyword of {function} instead; pass order=ds.orders.{example.__name__}({name}={value!r}) (ds.orders: "
            "daskshuffle.orders).",
            parameter=name,
        )


def unit_reads(rows: IntArray, gap: int = READ_GAP) -> tuple[list[tuple[int, int]], NDArray[np.intp]]:
    """The runs of store rows ``[start, stop)`` that hold ``rows``, and where each of ``rows`` is in those runs read end to end.

    Needed rows with at most ``gap`` rows between them are read in one run:
    fewer, larger reads, for up to ``gap`` rows more per run in memory.

    Examples
    --------
    >>> runs, index = unit_reads(np.array([7, 2, 3, 900]))
    >>> runs, index.tolist()
    ([(2, 8), (900, 901)], [5, 0, 1, 6])
    """
    needed = np.unique(rows)
    if not len(needed):
        return [], np.zeros(0, dtype=np.intp)
    breaks = np.flatnonzero(np.diff(needed) > gap + 1) + 1
    starts = needed[np.concatenate([[0], breaks])]
    stops = needed[np.concatenate([breaks - 1, [len(needed) - 1]])] + 1
    begins = np.concatenate([[0], np.cumsum(stops - starts)[:-1]])
    run = np.searchsorted(starts, rows, side="right") - 1
    index = (begins[run] + rows - starts[run]).astype(np.intp)
    return list(zip(starts.tolist(), stops.tolist(), strict=True)), index
