"""Reading pile stores fast: one reader per kind of store; :func:`open_pile_reader` opens any."""

from ._cancel import ReadCancelledError
from ._generations import GenerationsReader
from ._open import open_pile_reader
from ._pile_reader import ComposedReader, PileReader, RowsKind
from ._zarr_reader import ZarrPileReader

__all__ = [
    "ComposedReader",
    "GenerationsReader",
    "PileReader",
    "ReadCancelledError",
    "RowsKind",
    "ZarrPileReader",
    "open_pile_reader",
]
