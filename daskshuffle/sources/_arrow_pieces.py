"""Arrow IPC pieces, shared by the Parquet and DataFrame sources, and what they share with the Parquet pile store.

One uncompressed Arrow IPC file per block, one record batch per non-empty piece; the piece offsets sit in the file's
schema metadata, so the merge reads exactly the batches of its piles.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from ..formats import Pieces, concat, take
from ..pilestore import PIECE_OFFSETS, ParquetDestination, ParquetWriting, arrow_filesystem, arrow_sink
from ..storage import Location

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ArrowTables", "arrow_source"]


@contextlib.contextmanager
def arrow_source(location: Location) -> Iterator[Any]:
    """Where pyarrow reads the file at ``location``: memory-mapped on a local disk; elsewhere
    :meth:`~daskshuffle.storage.Location.reading`, each request within the request deadline."""
    if location.is_local:
        import pyarrow as pa

        with pa.memory_map(location.path) as source:
            yield source
    else:
        with location.reading() as source:
            yield source


class ArrowTables(Pieces["pa.Table"], ParquetDestination):
    """What the Parquet and DataFrame formats share: the schema, the blocks' lengths, rows in memory, Arrow IPC piece
    files and the pile store.

    ``source_names`` are the paths the store records (none for a DataFrame: data in memory or computed by dask has no
    path to record or to protect), ``identity`` their identity now.
    """

    kind: ClassVar[str] = "parquet"

    def __init__(
        self,
        *,
        schema: pa.Schema,
        lengths: Sequence[int],
        row_nbytes: int,
        writing: ParquetWriting,
        identity: list[dict[str, Any]],
        identify: Callable[[], list[dict[str, Any]]] | None = None,
        source_names: Sequence[str] = (),
    ) -> None:
        self.schema = schema
        self.identity = identity
        self.identify = identify
        self.source_names = list(source_names)
        self.writing = writing
        self.block_lengths = tuple(int(length) for length in lengths)
        self.row_nbytes = int(row_nbytes)

    @property
    def variables(self) -> list[str]:
        return list(self.schema.names)

    take = staticmethod(take)
    concat = staticmethod(concat)

    def _piece_file(self, tmp: Location, block: int) -> Location:
        return tmp.join(f"{block}.arrow")

    def prepare_pieces(self, tmp: Location) -> None:
        afs, root = arrow_filesystem(tmp)
        afs.create_dir(root, recursive=True)

    def write_pieces(self, tmp: Location, block: int, rows: pa.Table, piece_offsets: NDArray[np.int64]) -> None:
        # The IPC file format holds one dictionary per column: give every batch the same one.
        import pyarrow as pa

        rows = rows.unify_dictionaries().combine_chunks()
        # Where each written batch starts, and the end, as raw little-endian int64s (a merge reads them for every
        # range it reads): a block of a later level holds pieces of its super-pile's piles only.
        offsets = np.asarray(piece_offsets, dtype=np.int64)
        starts = np.append(offsets[:-1][np.diff(offsets) > 0], offsets[-1])
        schema = rows.schema.with_metadata({PIECE_OFFSETS: starts.astype("<i8").tobytes()})
        with arrow_sink(self._piece_file(tmp, block)) as sink, pa.ipc.new_file(sink, schema) as writer:
            for start, stop in zip(piece_offsets[:-1].tolist(), piece_offsets[1:].tolist(), strict=True):
                if stop > start:
                    for batch in rows.slice(start, stop - start).to_batches():
                        writer.write_batch(batch)

    def read_pieces(self, tmp: Location, block: int, start: int, stop: int) -> pa.Table:
        import pyarrow as pa

        if stop <= start:
            return self.schema.empty_table()
        with arrow_source(self._piece_file(tmp, block)) as source:
            reader = pa.ipc.open_file(source)
            # Where each written batch starts, and the end, as write_pieces records them.
            starts = np.frombuffer(reader.schema.metadata[PIECE_OFFSETS], dtype="<i8")[:-1].astype(np.int64)
            first = int(np.searchsorted(starts, start, side="right")) - 1
            last = int(np.searchsorted(starts, stop, side="left"))
            batches = [reader.get_batch(index) for index in range(first, last)]
        table = pa.Table.from_batches(batches, schema=reader.schema).replace_schema_metadata(self.schema.metadata)
        return table.slice(start - int(starts[first]), stop - start)
