"""The kinds of data daskshuffle shuffles, behind one small interface, and what every kind shares (internal).

The bottom of the data packages: ``sources`` and ``readers`` stand on ``pilestore``, which stands on this.
"""

from ._arrow_arrays import concat, dense_values, is_nested, take, to_numpy
from ._base import (
    ARRAY_KINDS,
    NUMERIC_KINDS,
    CollectionSource,
    Destination,
    FileFormat,
    FileSource,
    Format,
    Pieces,
    Rows,
)
from ._crc32c import crc32c
from ._parquet_fetched import (
    Fetched,
    FetchedFile,
    NotFetchedError,
    Range,
    bytes_of,
    coalesce,
    column_chunk_bytes,
    fetch_spans,
    footer_tail,
    read_footer,
    with_footer_tails,
)
from ._rows import ArrayRows, ArrayRowsMethods, Variable, read_in_runs, run_rows

__all__ = [
    "ARRAY_KINDS",
    "NUMERIC_KINDS",
    "ArrayRows",
    "ArrayRowsMethods",
    "CollectionSource",
    "Destination",
    "Fetched",
    "FetchedFile",
    "FileFormat",
    "FileSource",
    "Format",
    "NotFetchedError",
    "Pieces",
    "Range",
    "Rows",
    "Variable",
    "bytes_of",
    "coalesce",
    "column_chunk_bytes",
    "concat",
    "crc32c",
    "dense_values",
    "fetch_spans",
    "footer_tail",
    "is_nested",
    "read_footer",
    "read_in_runs",
    "run_rows",
    "take",
    "to_numpy",
    "with_footer_tails",
]
