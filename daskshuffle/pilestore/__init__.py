"""The pile store's on-disk format: its keys, version, metadata and checks, layout, generations and writers.

Every change of the format touches this package alone. The shuffles write
through it (:class:`ZarrDestination`, :class:`ParquetDestination`); the readers
of :mod:`daskshuffle.readers` check what they open with it.
"""

from . import _generations as generations
from ._binding import carries_crc, check_arrays, read_tables
from ._generations import GENERATIONS_KEY, generation_location, read_root, sources_of
from ._groups import bounded_node, find_group, group_metadata, open_arrays, open_group, unbounded, zarr_store
from ._layout import LAYOUT_KEY, sample_rows, xarray_encoding
from ._metadata import (
    FORMAT_VERSION,
    METADATA_KEY,
    RUN_KEY,
    AppendedStoreError,
    check_pile_metadata,
    check_recorded_rows,
    check_store_exists,
    check_variable_names,
    metadata_attribute,
    metadata_disagrees,
    new_run,
    parse_metadata_attribute,
    read_metadata,
    select_variables,
)
from ._parquet_store import (
    METADATA_FILE,
    PART,
    PART_BINDING,
    PIECE_OFFSETS,
    ParquetDestination,
    ParquetWriting,
    arrow_filesystem,
    arrow_sink,
    part_binding,
    part_name,
    read_sidecar,
)
from ._zarr_store import ZarrDestination

__all__ = [
    "FORMAT_VERSION",
    "GENERATIONS_KEY",
    "LAYOUT_KEY",
    "METADATA_FILE",
    "METADATA_KEY",
    "PART",
    "PART_BINDING",
    "PIECE_OFFSETS",
    "RUN_KEY",
    "AppendedStoreError",
    "ParquetDestination",
    "ParquetWriting",
    "ZarrDestination",
    "arrow_filesystem",
    "arrow_sink",
    "bounded_node",
    "carries_crc",
    "check_arrays",
    "check_pile_metadata",
    "check_recorded_rows",
    "check_store_exists",
    "check_variable_names",
    "find_group",
    "generation_location",
    "generations",
    "group_metadata",
    "metadata_attribute",
    "metadata_disagrees",
    "new_run",
    "open_arrays",
    "open_group",
    "parse_metadata_attribute",
    "part_binding",
    "part_name",
    "read_metadata",
    "read_root",
    "read_sidecar",
    "read_tables",
    "sample_rows",
    "select_variables",
    "sources_of",
    "unbounded",
    "xarray_encoding",
    "zarr_store",
]
