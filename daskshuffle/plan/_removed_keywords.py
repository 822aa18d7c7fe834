"""The keywords ``PileLoader`` and ``PileDataset`` no longer take, each refused with what to write instead.

An order's options (``shuffle_block_size=``, ``piles_in_memory=``, the lanes'
``n_lanes=``, ...) go inside the order (:mod:`daskshuffle.plan._order_classes`);
``progress=`` gave way to wrapping the loader in a progress bar of one's own.
The loaders gather them in ``**removed: Never``, so that a type checker flags
them too, and :func:`refuse_removed_keywords` names the new spelling.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._errors import DaskShuffleTypeError
from ._order_classes import ORDER_CLASSES, spelled_order

__all__ = ["refuse_removed_keywords"]

#: The keywords that were an order's options, before the order carried them, and the order each example names.
_ORDER_KEYWORDS = {
    "shuffle_block_size": "Py1b",
    "buffer_size": "Buffer",
    "cycle_length": "Interleave",
    "piles_in_memory": "Piles",
}


def _refuse_progress(value: object, function: str) -> DaskShuffleTypeError:
    return DaskShuffleTypeError(
        f"Expected no progress keyword: wrap the loader in a progress bar instead, as "
        f"`for batch in tqdm(loader)` (from tqdm import tqdm; the loader has len(), the batches of an epoch). "
        f"Got progress={value!r} as a keyword of {function} instead.",
        parameter="progress",
    )


def _refuse_lanes(value: object, function: str) -> DaskShuffleTypeError:
    return DaskShuffleTypeError(
        f"Expected the lanes inside the order, as order=ds.orders.Piles(n_lanes={value!r}) (every order takes "
        f"n_lanes). Got n_lanes={value!r} as a keyword of {function} instead; pass it to the order you use: "
        f"order=ds.orders.Piles(n_lanes={value!r}), ds.orders.Py1b(shuffle_block_size=..., n_lanes={value!r}), "
        "... (ds.orders: daskshuffle.orders).",
        parameter="n_lanes",
    )


def _refuse_order_option(name: str, value: object, function: str) -> DaskShuffleTypeError:
    example = ORDER_CLASSES[_ORDER_KEYWORDS[name].lower()]
    return DaskShuffleTypeError(
        f"Expected an order's options inside the order, as order={spelled_order(example)}. Got {name}={value!r} as "
        f"a keyword of {function} instead; pass order=ds.orders.{example.__name__}({name}={value!r}) (ds.orders: "
        "daskshuffle.orders).",
        parameter=name,
    )


def refuse_removed_keywords(keywords: Mapping[str, object], function: str) -> None:
    """Refuse ``keywords`` left over by ``function``'s signature, naming what to write instead.

    Raises
    ------
    DaskShuffleTypeError
        For a keyword ``function`` took before (an order's option, ``n_lanes``,
        ``progress``), with its new spelling.
    TypeError
        For any other keyword, as Python would.

    Examples
    --------
    >>> refuse_removed_keywords({"shuffle_block_size": 4096}, "PileLoader")
    Traceback (most recent call last):
    ...
    daskshuffle._errors.DaskShuffleTypeError: Expected an order's options inside the order, ...
    >>> refuse_removed_keywords({"n_lanes": 8}, "PileLoader")
    Traceback (most recent call last):
    ...
    daskshuffle._errors.DaskShuffleTypeError: Expected the lanes inside the order, as order=ds.orders.Piles(n_lanes=8) ...
    >>> refuse_removed_keywords({"progress": True}, "PileLoader")
    Traceback (most recent call last):
    ...
    daskshuffle._errors.DaskShuffleTypeError: Expected no progress keyword: wrap the loader in a progress bar instead, ...
    """
    for name, value in keywords.items():
        if name == "progress":
            raise _refuse_progress(value, function)
        if name == "n_lanes":
            raise _refuse_lanes(value, function)
        if name in _ORDER_KEYWORDS:
            raise _refuse_order_option(name, value, function)
        raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")
