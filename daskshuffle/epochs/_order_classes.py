"""The orders as objects, each carrying its own options: what ``PileLoader(order=...)`` takes.

Each class is :class:`Piles` (the loader's own) or one order of :data:`~daskshuffle.epochs._orders.ORDERS`, re-exported
by :mod:`daskshuffle.orders`; :func:`parse_order` and :func:`order_from_options`
make one from what a user passes. Every order also takes
``n_lanes``: the lanes cut whatever order it is into streams (elastic
determinism, :mod:`daskshuffle.loader._rank_share`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, ClassVar, Literal

from .._errors import DaskShuffleTypeError, DaskShuffleValueError
from .._parse import parse_nbytes, parse_positive_int
from ._epoch_order import OrderOptions

__all__ = [
    "ORDER_CLASSES",
    "ORDER_OPTIONS",
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
    "order_from_options",
    "parse_order",
]

#: The orders that need no options, which may be given by name.
OrderName = Literal["piles", "naive", "py1s", "py2s"]


@dataclass(frozen=True, repr=False)
class Order:
    """An order of a loader's epochs, with its options: what ``PileLoader(order=...)`` takes.

    Each subclass is :class:`Piles` or one order of :data:`ORDERS`, named by :attr:`name`; its
    fields are the options that order needs, checked when it is made. Every
    order also takes ``n_lanes`` (by keyword).

    Parameters
    ----------
    n_lanes : int, optional
        Elastic determinism: cut each epoch's order into this many lanes, as
        if among that many ranks, so that the rows of each global step (all
        ranks together, with ``world_size * batch_size`` fixed) are the same
        for any ``world_size`` that divides ``n_lanes``, and a loader's state
        saved with one world size loads with another. A rank then holds
        ``n_lanes / world_size`` reads at once; numpy batches only. By default
        (``None``) no lanes: the order is cut between the ranks themselves.

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

    @property
    def options(self) -> OrderOptions:
        """The order's options that go into its stream; those it does not use are ``None``."""
        return OrderOptions(**{name: getattr(self, name) for name in ORDER_OPTIONS[self.name]})


def _option_fields(order: type[Order]) -> list[Field[object]]:
    """The options of ``order`` itself, without the lanes every order takes."""
    return [option for option in fields(order) if option.name != "n_lanes"]


@dataclass(frozen=True, repr=False)
class Piles(Order):
    """The loader's own order (the default): units of whole chunks, dealt into groups under a budget, each group mixed.

    What is read: the store in *units* of whole chunks (a Parquet store's
    row groups), a few MiB each. Every epoch deals the units afresh into
    groups of up to half the budget, reads each group at once and hands its
    rows out in one uniform permutation of the group; batches run across
    groups. A store is stored in a uniform random order of its rows (each
    pile shuffled when written), so every unit is a uniform sample and each
    epoch is exactly a uniform permutation. The stores of a mixture
    (:class:`~daskshuffle.Stream`) and the generations of an appended store
    are read the same way, their units dealt together.

    Memory: about the budget, two groups (the one being used and the next),
    plus a batch and the read-ahead's fetches (``PileLoader(prefetch=)``).

    Across epochs: rows of one unit always share a group, so two rows that
    shared a batch meet in one again about ``data * unit / group**2 + 1``
    times as often as under independent shuffles (bytes; ``daskshuffle.quality``
    measures it). ``"auto"`` sizes the budget so that this stays near 2:
    two groups of ``sqrt(data * unit)`` bytes, from
    ``loader.units-budget-least-nbytes`` (128 MiB) to
    ``loader.units-budget-most-nbytes`` (4 GiB) and a sixteenth of the
    process's memory (``daskshuffle.config``). A larger budget gives epochs
    closer to independent, for its memory.

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

    Its one option is ``n_lanes``, which every order takes (:class:`Order`).

    Examples
    --------
    >>> Naive().name
    'naive'
    """

    name: ClassVar[str] = "naive"


@dataclass(frozen=True, repr=False)
class Py1s(Order):
    """MosaicML's ``py1s``: piles in a random order, the stream cut between ranks, each part shuffled alone.

    Its one option is ``n_lanes``, which every order takes (:class:`Order`).

    Examples
    --------
    >>> Py1s().name
    'py1s'
    """

    name: ClassVar[str] = "py1s"


@dataclass(frozen=True, repr=False)
class Py2s(Order):
    """MosaicML's ``py2s``: as :class:`Py1s`, but a boundary pile is shuffled before it is cut, then again.

    Its one option is ``n_lanes``, which every order takes (:class:`Order`).

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
    >>> Py1br(shuffle_block_size=4096).options.shuffle_block_size
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
#: The options of each order that go into its stream (:class:`OrderOptions`): its fields but the lanes, and ``Piles``'
#: budget, which is its own.
ORDER_OPTIONS: dict[str, tuple[str, ...]] = {
    name: tuple(option.name for option in _option_fields(cls) if option.name != "budget")
    for name, cls in ORDER_CLASSES.items()
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
    if ORDER_OPTIONS[order]:
        spelled = f"ds.orders.{chosen.__name__}({', '.join(f'{option}=...' for option in ORDER_OPTIONS[order])})"
        raise DaskShuffleValueError(
            f"Expected order={spelled}, with its options. Got order={order!r} instead; the order "
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
            f"Expected order to be one of {sorted(ORDER_CLASSES)}. Got {name!r} instead.", parameter="order"
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
    given: dict[str, Any] = {o: v for o, v in options.items() if o in taken and v is not None}
    return chosen(**given)  # each checked by the order as it is made
