"""The kinds of data daskshuffle shuffles, behind one small interface.

Formats are internal; users call the public shuffles and the loader.
"""

from ._base import FORMAT_VERSION, Format, PileReader

__all__ = ["FORMAT_VERSION", "Format", "PileReader"]
