"""Reading pile stores fast: one reader per kind of store, each with its own fetch path.

:func:`open_pile_reader` opens a complete store of any kind; the loader and ``verify`` read through it.
"""

from ._cancel import ReadCancelledError
from ._generations import GenerationsReader
from ._open import open_pile_reader
from ._pile_reader import ComposedReader, PileReader
from ._zarr_reader import ZarrPileReader

__all__ = [
    "ComposedReader",
    "GenerationsReader",
    "PileReader",
    "ReadCancelledError",
    "ZarrPileReader",
    "open_pile_reader",
]
