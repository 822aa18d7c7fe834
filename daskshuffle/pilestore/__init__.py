"""The pile store's on-disk format: its keys, version, metadata and checks, layout, generations and writers.

Every change of the format touches this package alone. The shuffles write
through it (:class:`ZarrDestination`, :class:`ParquetDestination`); the readers
of :mod:`daskshuffle.readers` check what they open with it.
"""

from typing import TYPE_CHECKING

from .._faces import lazy_names
from ._metadata import (
    FORMAT_VERSION,
    METADATA_KEY,
    READABLE_VERSIONS,
    AppendedStoreError,
    check_pile_metadata,
    check_recorded_rows,
    check_store_exists,
    metadata_disagrees,
    read_metadata,
    select_variables,
)

_LAZY = {
    "._layout": [
        "CHUNK_NBYTES",
        "COMPRESSIBLE_RATIO",
        "LAYOUT_KEY",
        "Layout",
        "VariableLayout",
        "choose_chunk_rows",
        "choose_codec",
        "choose_layout",
        "create_arrays",
        "for_writing",
        "sample_rows",
        "xarray_encoding",
    ],
    "._zarr_store": ["ZarrDestination"],
    "._parquet_store": [
        "METADATA_FILE",
        "PART",
        "PIECE_OFFSETS",
        "ParquetDestination",
        "ParquetWriting",
        "arrow_filesystem",
        "part_name",
        "read_sidecar",
    ],
    "._parquet_layout": ["AUTO", "column_options", "leaf_paths"],
    "._generations": [
        "GENERATIONS_KEY",
        "array_types",
        "create_compacted",
        "ensure_group",
        "entry_of",
        "finish_compacted",
        "generation_location",
        "generation_path",
        "orphans",
        "read_root",
        "remove_generation",
        "sources_of",
        "union",
        "write_root",
        "write_rows",
    ],
}
if TYPE_CHECKING:
    from ._generations import (
        GENERATIONS_KEY,
        array_types,
        create_compacted,
        ensure_group,
        entry_of,
        finish_compacted,
        generation_location,
        generation_path,
        orphans,
        read_root,
        remove_generation,
        sources_of,
        union,
        write_root,
        write_rows,
    )
    from ._layout import (
        CHUNK_NBYTES,
        COMPRESSIBLE_RATIO,
        LAYOUT_KEY,
        Layout,
        VariableLayout,
        choose_chunk_rows,
        choose_codec,
        choose_layout,
        create_arrays,
        for_writing,
        sample_rows,
        xarray_encoding,
    )
    from ._parquet_layout import AUTO, column_options, leaf_paths
    from ._parquet_store import (
        METADATA_FILE,
        PART,
        PIECE_OFFSETS,
        ParquetDestination,
        ParquetWriting,
        arrow_filesystem,
        part_name,
        read_sidecar,
    )
    from ._zarr_store import ZarrDestination

__all__ = [
    "AUTO",
    "CHUNK_NBYTES",
    "COMPRESSIBLE_RATIO",
    "FORMAT_VERSION",
    "GENERATIONS_KEY",
    "LAYOUT_KEY",
    "METADATA_FILE",
    "METADATA_KEY",
    "PART",
    "PIECE_OFFSETS",
    "READABLE_VERSIONS",
    "AppendedStoreError",
    "Layout",
    "ParquetDestination",
    "ParquetWriting",
    "VariableLayout",
    "ZarrDestination",
    "array_types",
    "arrow_filesystem",
    "check_pile_metadata",
    "check_recorded_rows",
    "check_store_exists",
    "choose_chunk_rows",
    "choose_codec",
    "choose_layout",
    "column_options",
    "create_arrays",
    "create_compacted",
    "ensure_group",
    "entry_of",
    "finish_compacted",
    "for_writing",
    "generation_location",
    "generation_path",
    "leaf_paths",
    "metadata_disagrees",
    "orphans",
    "part_name",
    "read_metadata",
    "read_root",
    "read_sidecar",
    "remove_generation",
    "sample_rows",
    "select_variables",
    "sources_of",
    "union",
    "write_root",
    "write_rows",
    "xarray_encoding",
]

if not TYPE_CHECKING:  # type checkers see the names imported above, and no catch-all
    __getattr__, __dir__ = lazy_names(__name__, _LAZY)
