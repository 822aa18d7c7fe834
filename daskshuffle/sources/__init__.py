"""What users bring, opened and checked before anything is written, cut into blocks, read and scattered into
pieces; used by the shuffles alone (so the text format's destination, read back only to verify it, lives here too)."""

from ._dataframe import open_dataframe_source
from ._found import parse_sources
from ._parquet import COMPRESSIONS, list_parquet_sources, open_parquet_sources
from ._text import TextFormat, parse_delimiter
from ._text_sample import count_lines
from ._text_shards import open_text_output
from ._text_source import TextSource, open_text_sources
from ._undecodable import decoding, uncomputable
from ._xarray import ARRAY_NAME, XarrayFormat, open_arrays_source, open_xarray_source
from ._zarr_source import SourceLike, ZarrFormat, open_zarr_sources

__all__ = [
    "ARRAY_NAME",
    "COMPRESSIONS",
    "SourceLike",
    "TextFormat",
    "TextSource",
    "XarrayFormat",
    "ZarrFormat",
    "count_lines",
    "decoding",
    "list_parquet_sources",
    "open_arrays_source",
    "open_dataframe_source",
    "open_parquet_sources",
    "open_text_output",
    "open_text_sources",
    "open_xarray_source",
    "open_zarr_sources",
    "parse_delimiter",
    "parse_sources",
    "uncomputable",
]
