"""The orders as objects, each carrying its own options: what ``PileLoader(order=...)`` takes.

Re-exported by :mod:`daskshuffle.orders`; :func:`parse_order` makes one from what a user passes, and
:func:`check_combination` refuses, in one function before any store opens, every combination of an
order with a loader's other settings that cannot be read.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields
from typing import ClassVar, Literal

from .._errors import DaskShuffleTypeError, DaskShuffleValueError
from .._parse import parse_nbytes, parse_positive_int

__all__ = [
    "Buffer",
    "Interleave",
    "Naive",
    "Order",
    "OrderName",
    "Piles",
    "Py1b",
    "Py1br",
    "Py1e",
    "Py1s",
    "Py2s",
    "check_combination",
    "parse_order",
]

#: The orders that need no options, which may be given by name.
OrderName = Literal["piles", "naive", "py1s", "py2s"]


@dataclass(frozen=True, repr=False)
class Order:
    """An order of a loader's epochs, with its options: what ``PileLoader(order=...)`` takes.

    Each subclass's fields are the options that order needs, checked when it is made.

    Parameters
    ----------
    n_lanes : int, optional
        Elastic determinism: cut each epoch's order into this many lanes, as if among that many
        ranks, so that each global step's rows (``world_size * batch_size`` fixed) are the same for
        any ``world_size`` dividing ``n_lanes``, and a state saved with one world size loads with
        another. A rank holds ``n_lanes / world_size`` reads at once; numpy batches only. ``None``:
        no lanes.

    Examples
    --------
    >>> Py1b(shuffle_block_size=4096, n_lanes=8)
    Py1b(shuffle_block_size=4096, n_lanes=8)
    >>> Piles(n_lanes=8).n_lanes, Piles().n_lanes
    (8, None)
    """

    #: The order's name in :data:`ORDER_CLASSES` and in a loader's settings.
    name: ClassVar[str] = ""
    n_lanes: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        for option in _option_fields(type(self)):
            object.__setattr__(self, option.name, self._parse_option(option.name, getattr(self, option.name)))
        if self.n_lanes is not None:
            object.__setattr__(self, "n_lanes", parse_positive_int(self.n_lanes, "n_lanes"))

    def _parse_option(self, name: str, value: object) -> object:
        """The order's option ``name`` as the order keeps it: a positive integer, unless the order says otherwise."""
        return parse_positive_int(value, name)

    def __repr__(self) -> str:
        shown = [f"{option.name}={getattr(self, option.name)!r}" for option in _option_fields(type(self))]
        lanes = [] if self.n_lanes is None else [f"n_lanes={self.n_lanes!r}"]
        return f"{type(self).__name__}({', '.join(shown + lanes)})"


def _option_fields(order: type[Order]) -> list[Field[object]]:
    """The options of ``order`` itself, without the lanes every order takes."""
    return [option for option in fields(order) if option.name != "n_lanes"]


@dataclass(frozen=True, repr=False)
class Piles(Order):
    """The loader's own order (the default): units of whole chunks, dealt into groups under a budget, each group mixed.

    What is read: the store in *units* of whole chunks (a Parquet store's row groups), a few MiB
    each. Every epoch deals the units afresh into groups of up to half the budget and hands each
    group's rows out in one uniform permutation; each pile is stored shuffled, so every epoch is
    exactly a uniform permutation. Mixtures and appended stores are read the same way.

    Memory: about the budget, two groups (the one being used and the next),
    plus a batch and the read-ahead's fetches (``PileLoader(prefetch=)``).

    Across epochs: batch-mates meet in a batch again about ``data * unit / group**2 + 1`` times as
    often as under independent shuffles (in bytes). ``"auto"`` keeps this near 2: two groups of
    ``sqrt(data * unit)`` bytes, within ``loader.units-budget-least-nbytes`` (128 MiB),
    ``loader.units-budget-most-nbytes`` (4 GiB) and a sixteenth of the process's memory.

    Parameters
    ----------
    budget : str or int, default "auto"
        Bytes of rows the loader holds: ``"auto"``, or a size such as
        ``"1GiB"``. The rows of a unit and of a group it gives are the
        loader's ``settings.unit_rows`` and ``settings.group_rows``, in its state.
    n_lanes : int, optional
        Lanes the order is cut into, as for :class:`Order` (by keyword).

    Examples
    --------
    >>> Piles().budget, Piles(budget="1KiB").budget, Piles("1GiB")
    ('auto', 1024, Piles(budget=1073741824))
    """

    name: ClassVar[str] = "piles"
    budget: int | str = "auto"

    def _parse_option(self, name: str, value: object) -> object:
        """``budget`` as ``"auto"`` or a number of bytes (an int, or a size such as ``"1GiB"``)."""
        if value == "auto":
            return "auto"
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise DaskShuffleTypeError(
                f"Expected budget to be 'auto' or a size such as '1GiB'. Got {value!r} instead.", parameter="budget"
            )
        return parse_nbytes(value, "budget")


@dataclass(frozen=True, repr=False)
class Naive(Order):
    """One uniform permutation of all rows: a rank holds every pile it has a row of (small data only).

    Examples
    --------
    >>> Naive().name
    'naive'
    """

    name: ClassVar[str] = "naive"


@dataclass(frozen=True, repr=False)
class Py1s(Order):
    """MosaicML's ``py1s``: piles in a random order, the stream cut between ranks, each part shuffled alone.

    Examples
    --------
    >>> Py1s().name
    'py1s'
    """

    name: ClassVar[str] = "py1s"


@dataclass(frozen=True, repr=False)
class Py2s(Order):
    """MosaicML's ``py2s``: as :class:`Py1s`, but a boundary pile is shuffled before it is cut, then again.

    Examples
    --------
    >>> Py2s().name
    'py2s'
    """

    name: ClassVar[str] = "py2s"


@dataclass(frozen=True, repr=False)
class Py1b(Order):
    """MosaicML's ``py1b``: piles in a random order, each rank's stream cut into blocks, each block shuffled.

    Parameters
    ----------
    shuffle_block_size : int
        Rows of a block: what a read holds.
    n_lanes : int, optional
        Lanes the order is cut into, as for :class:`Order` (by keyword).

    Examples
    --------
    >>> Py1b(shuffle_block_size=4096)
    Py1b(shuffle_block_size=4096)
    """

    name: ClassVar[str] = "py1b"
    shuffle_block_size: int


@dataclass(frozen=True, repr=False)
class Py1br(Order):
    """MosaicML's ``py1br``: :class:`Py1b` with block sizes drawn in ``[0.75, 1.25) * shuffle_block_size``.

    Each rank's first block is cut short at random; a read holds up to 1.25 blocks.

    Parameters
    ----------
    shuffle_block_size : int
        Rows of a block, on average.
    n_lanes : int, optional
        Lanes the order is cut into, as for :class:`Order` (by keyword).

    Examples
    --------
    >>> Py1br(shuffle_block_size=4096).shuffle_block_size
    4096
    """

    name: ClassVar[str] = "py1br"
    shuffle_block_size: int


@dataclass(frozen=True, repr=False)
class Py1e(Order):
    """MosaicML's ``py1e``: each pile's rows spread at random over its place extended to a block.

    A read holds about 2 blocks, and rows are read about twice.

    Parameters
    ----------
    shuffle_block_size : int
        Rows a pile's rows are spread over, at least.
    n_lanes : int, optional
        Lanes the order is cut into, as for :class:`Order` (by keyword).

    Examples
    --------
    >>> Py1e(shuffle_block_size=4096).name
    'py1e'
    """

    name: ClassVar[str] = "py1e"
    shuffle_block_size: int


@dataclass(frozen=True, repr=False)
class Buffer(Order):
    """tf.data's ``shuffle(buffer_size)``: piles in a random order, each in stored order, through a shuffle buffer.

    A read holds about 9 buffers, and rows are read about twice.

    Parameters
    ----------
    buffer_size : int
        Rows of the shuffle buffer.
    n_lanes : int, optional
        Lanes the order is cut into, as for :class:`Order` (by keyword).

    Examples
    --------
    >>> Buffer(buffer_size=10_000)
    Buffer(buffer_size=10000)
    """

    name: ClassVar[str] = "buffer"
    buffer_size: int


@dataclass(frozen=True, repr=False)
class Interleave(Order):
    """tf.data's ``interleave(cycle_length)`` then ``shuffle(buffer_size)``: piles read a row each in turn.

    Parameters
    ----------
    cycle_length : int
        Piles read at once, a row of each in turn.
    buffer_size : int
        Rows of the shuffle buffer they go through.
    n_lanes : int, optional
        Lanes the order is cut into, as for :class:`Order` (by keyword).

    Examples
    --------
    >>> Interleave(cycle_length=4, buffer_size=10_000)
    Interleave(cycle_length=4, buffer_size=10000)
    """

    name: ClassVar[str] = "interleave"
    cycle_length: int
    buffer_size: int


#: Every order's class, by name.
ORDER_CLASSES: dict[str, type[Order]] = {
    cls.name: cls for cls in (Piles, Naive, Py1s, Py2s, Py1b, Py1br, Py1e, Buffer, Interleave)
}


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
            f"Expected order to be one of {sorted(ORDER_CLASSES)}. Got {order!r} instead.", parameter="order"
        )
    chosen = ORDER_CLASSES[order]
    needed = [option.name for option in fields(chosen) if option.default is MISSING]
    if needed:
        spelled = f"ds.orders.{chosen.__name__}({', '.join(f'{option}=...' for option in needed)})"
        raise DaskShuffleValueError(
            f"Expected order={spelled}, with its options. Got order={order!r} instead; the order "
            f"{order!r} needs {', '.join(needed)}.",
            parameter="order",
        )
    return chosen()


def check_combination(
    order: Order,
    *,
    n_streams: int | None = None,
    world_size: int = 1,
    batch_size: int = 1,
    batch_format: str = "numpy",
) -> None:
    """Refuse a combination of a loader's settings that cannot be read.

    ``n_streams`` is the stores of a mixture (``None`` for a plain store).

    Examples
    --------
    >>> check_combination(Piles(n_lanes=8), world_size=2, batch_size=64)
    >>> check_combination(Py1s(), n_streams=2)
    Traceback (most recent call last):
    ...
    daskshuffle._errors.DaskShuffleValueError: Expected order='piles' ... Got order='py1s' instead; ...
    """
    n_lanes = world_size if order.n_lanes is None else order.n_lanes  # no lanes: a rank is one lane
    if n_lanes % world_size:
        raise DaskShuffleValueError(
            f"Expected n_lanes to be a multiple of world_size={world_size}. Got n_lanes={n_lanes} instead; each rank "
            "reads whole lanes: choose n_lanes as a multiple of every world size the run may use (8 serves 1, 2, 4 "
            "and 8 ranks).",
            parameter="n_lanes",
        )
    per_rank = n_lanes // world_size
    if batch_size % per_rank:
        raise DaskShuffleValueError(
            f"Expected batch_size to be a multiple of n_lanes / world_size = {per_rank}. Got batch_size={batch_size} "
            "instead; a rank's batch is a micro-batch of each of its lanes.",
            parameter="batch_size",
        )
    if order.n_lanes is not None and batch_format != "numpy":
        raise DaskShuffleValueError(
            f"Expected batch_format='numpy' with n_lanes. Got {batch_format!r} instead; lanes' micro-batches are "
            "joined as numpy arrays.",
            parameter="batch_format",
        )
    if n_streams is not None and (order.name != "piles" or batch_format == "xarray"):
        given = f"order={order.name!r}" if order.name != "piles" else f"batch_format={batch_format!r}"
        raise DaskShuffleValueError(
            "Expected order='piles' (ds.orders.Piles()) and a batch_format other than 'xarray' with several "
            f"streams. Got {given} instead; a mixture deals the units of its stores into groups, as "
            "order='piles' reads one store.",
            parameter="store",
        )
