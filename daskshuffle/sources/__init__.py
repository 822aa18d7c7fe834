"""What users bring: each kind of source opened and checked before anything is written, cut into blocks,
read, and scattered into pieces. The shuffles alone use this package; the text format's destination (a
plain text file, never read back by the loader) lives here with its source.
"""

from typing import TYPE_CHECKING

from .._faces import lazy_names

_LAZY = {
    "._zarr": ["SourceLike", "ZarrFormat", "open_zarr_sources"],
    "._xarray": ["ARRAY_NAME", "XarrayFormat", "open_arrays_source", "open_xarray_source"],
    "._parquet": ["COMPRESSIONS", "identify_parquet_sources", "open_parquet_sources"],
    "._dataframe": ["open_dataframe_source"],
    "._text": ["BlockCount", "TextFormat", "TextSource", "open_text_sources", "parse_delimiter", "parse_sources"],
    "._text_lines": ["Lines"],
    "._text_sample": [
        "count_and_sample",
        "finish_sample",
        "order_sample",
        "plan_sample",
        "read_sample",
    ],
    "._text_shards": ["ShardedTextFormat", "output_compression", "parse_output_files", "write_shards"],
}
if TYPE_CHECKING:
    from ._dataframe import open_dataframe_source
    from ._parquet import COMPRESSIONS, identify_parquet_sources, open_parquet_sources
    from ._text import BlockCount, TextFormat, TextSource, open_text_sources, parse_delimiter, parse_sources
    from ._text_lines import Lines
    from ._text_sample import (
        count_and_sample,
        finish_sample,
        order_sample,
        plan_sample,
        read_sample,
    )
    from ._text_shards import ShardedTextFormat, output_compression, parse_output_files, write_shards
    from ._xarray import ARRAY_NAME, XarrayFormat, open_arrays_source, open_xarray_source
    from ._zarr import SourceLike, ZarrFormat, open_zarr_sources

__all__ = [
    "ARRAY_NAME",
    "COMPRESSIONS",
    "BlockCount",
    "Lines",
    "ShardedTextFormat",
    "SourceLike",
    "TextFormat",
    "TextSource",
    "XarrayFormat",
    "ZarrFormat",
    "count_and_sample",
    "finish_sample",
    "identify_parquet_sources",
    "open_arrays_source",
    "open_dataframe_source",
    "open_parquet_sources",
    "open_text_sources",
    "open_xarray_source",
    "open_zarr_sources",
    "order_sample",
    "output_compression",
    "parse_delimiter",
    "parse_output_files",
    "parse_sources",
    "plan_sample",
    "read_sample",
    "write_shards",
]

if not TYPE_CHECKING:  # type checkers see the names imported above, and no catch-all
    __getattr__, __dir__ = lazy_names(__name__, _LAZY)
