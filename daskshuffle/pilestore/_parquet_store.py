"""Rows as Arrow tables, shared by the Parquet and DataFrame formats: Arrow IPC pieces and the Parquet pile store.

The destination is a directory of ``part-<first row>.parquet`` files whose row
groups never straddle a pile, with the metadata in ``_daskshuffle.json``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .._config import int_setting
from .._errors import Argument, DaskShuffleValueError, IncompletePileStoreError
from .._threads import each
from ..formats import Destination
from ..plan import split_piles
from ..storage import Location, bounded
from ._metadata import ROW_GROUP_ROWS_KEY, RUN_KEY, check_pile_metadata, check_store_exists, metadata_disagrees, seal_of
from ._parquet_layout import AUTO, column_options

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

__all__ = [
    "METADATA_FILE",
    "PART",
    "PART_BINDING",
    "PIECE_OFFSETS",
    "ParquetDestination",
    "ParquetWriting",
    "arrow_filesystem",
    "arrow_sink",
    "part_binding",
    "part_name",
    "read_sidecar",
]

#: The sidecar with the shuffle's metadata; Parquet readers skip names starting with "_".
METADATA_FILE = "_daskshuffle.json"
PART = re.compile(r"part-(\d+)\.parquet")
#: The key of an Arrow IPC piece file's schema metadata that records its pieces' offsets.
PIECE_OFFSETS = b"daskshuffle.piece_offsets"
#: The key of a part file's key-value metadata that binds it to its run and place: ``{"run", "first_row"}``.
PART_BINDING = b"daskshuffle.part"


def arrow_filesystem(location: Location) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem for ``location`` (native and memory-mapped on a local disk) and the path in it.

    Where this format hands a location to pyarrow.
    """
    import pyarrow.fs as pafs

    if location.is_local:
        return pafs.LocalFileSystem(use_mmap=True), location.path
    return pafs.PyFileSystem(pafs.FSSpecHandler(location.fs)), location.path


@contextlib.contextmanager
def arrow_sink(location: Location) -> Iterator[Any]:
    """Where pyarrow writes the file at ``location``: natively on a local disk; elsewhere
    :meth:`~daskshuffle.storage.Location.writing`, each request within the request deadline."""
    if location.is_local:
        import pyarrow.fs as pafs

        with pafs.LocalFileSystem().open_output_stream(location.path) as sink:
            yield sink
    else:
        with location.writing() as sink:
            yield sink


def part_name(start: int) -> str:
    # Zero-padded so that every reader's lexicographic file order is row order.
    return f"part-{start:015d}.parquet"


def read_sidecar(store: Location) -> dict[str, Any]:
    """The sidecar of a Parquet pile store, checked to be complete and of this format version."""
    where = store.url
    try:
        # One request for a store that is there (on object storage, each costs tens of milliseconds).
        metadata = json.loads(bounded(store.fs, "cat_file", f"{store.path}/{METADATA_FILE}", what=METADATA_FILE))
    except TimeoutError:  # no answer in the deadline: asking again would not help
        raise
    except (OSError, ValueError) as error:  # ValueError: not JSON, nor UTF-8
        check_store_exists(store, where)  # no store, or refused credentials, named as such
        if not isinstance(error, FileNotFoundError | NotADirectoryError | ValueError):
            raise
        raise IncompletePileStoreError(
            f"Expected a Parquet pile store written by daskshuffle. Got {where!r}, which has no readable "
            f"{METADATA_FILE}, instead."
        ) from error
    check_pile_metadata(metadata, where)
    return dict(metadata)


def part_binding(sidecar: Mapping[str, Any], where: str) -> tuple[str, int]:
    """The run every part file of the store at ``where`` is bound to, and the rows of its row groups, from its
    ``sidecar``: both written when the store is created, so a store without them is refused as damaged."""
    run, every = sidecar.get(RUN_KEY), sidecar.get(ROW_GROUP_ROWS_KEY)
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise metadata_disagrees(where, f"the rows of its row groups, {ROW_GROUP_ROWS_KEY}", f"{every!r}")
    if not isinstance(run, str) or not run:  # every part file is bound to it: without it nothing can be checked
        raise metadata_disagrees(where, f"the run that wrote it, {RUN_KEY}", f"{run!r}")
    return run, every


@dataclass(frozen=True)
class ParquetWriting:
    """How a Parquet pile store is written: its codec, its largest row group, its number of files."""

    compression: str = AUTO
    row_group_size: int | None = None
    n_output_files: int | None = None


#: Bytes of rows a row group holds by default: a unit the loader reads (and decodes) whole (``benchmarks/RESULTS.md``).
ROW_GROUP_NBYTES = 2 * 2**20


def row_group_cuts(start: int, stop: int, every: int) -> list[int]:
    """Where row groups of store rows ``start:stop`` (one pile's) end: every multiple of ``every``, and ``stop``.

    Examples
    --------
    >>> row_group_cuts(5, 23, 8)
    [8, 16, 23]
    """
    return [*range((start // every + 1) * every, stop, every), stop]


class ParquetDestination(Destination["pa.Table"]):
    """A Parquet pile store of ``schema``: a file per merge group, row groups within piles.

    Row groups end at every pile's end and at every multiple of
    ``row_group_size`` store rows (by default, rows of about
    :data:`ROW_GROUP_NBYTES`), recorded as :data:`ROW_GROUP_ROWS_KEY`; with
    ``n_output_files``, the piles are cut into that many files of near-equal
    rows (each a merge group).
    """

    schema: pa.Schema
    writing: ParquetWriting

    #: Bytes of a row, about (the sources' size over their rows): what a row group's bytes are counted in.
    row_nbytes: int

    def row_group_rows(self) -> int:
        """The most rows of a row group: ``row_group_size``, or about :data:`ROW_GROUP_NBYTES` of rows."""
        return self.writing.row_group_size or max(1, ROW_GROUP_NBYTES // max(1, int(self.row_nbytes)))

    def merge_runs(self, pile_sizes: NDArray[np.int64], row_nbytes: int, target_nbytes: int) -> list[tuple[int, int]]:
        n_files, n_piles = self.writing.n_output_files, len(pile_sizes)
        if n_files is None:
            return super().merge_runs(pile_sizes, row_nbytes, target_nbytes)
        if n_files > n_piles:
            raise DaskShuffleValueError(
                (
                    "Expected ",
                    Argument("n_output_files"),
                    " to be at most ",
                    Argument("n_piles"),
                    ", since a file holds whole piles. Got ",
                    Argument("n_output_files", n_files),
                    f" with {n_piles} piles instead; ",
                    Argument("n_piles", n_files, passed=True),
                    " or more.",
                ),
                parameter="n_output_files",
            )
        runs = split_piles(pile_sizes, n_files)
        # A merge task holds its group: a file may be as large as a group or as the largest pile, no larger.
        limit = max(target_nbytes, int(pile_sizes.max(initial=0)) * row_nbytes)
        largest = max(int(pile_sizes[start:stop].sum()) * row_nbytes for start, stop in runs)
        if largest > limit:
            needed = -(-int(pile_sizes.sum()) * row_nbytes // limit)
            raise DaskShuffleValueError(
                (
                    "Expected every one of ",
                    Argument("n_output_files", n_files),
                    f" files to fit in one merge task ({limit:,} bytes, the larger of ",
                    Argument("block_memory"),
                    f" and the largest pile). Got files of up to {largest:,} bytes instead; ",
                    Argument("n_output_files", min(max(needed + 1, n_files + 1), n_piles), passed=True),
                    " or more, or a larger ",
                    Argument("block_memory"),
                    ".",
                ),
                parameter="n_output_files",
            )
        return runs

    def write_alignment(self) -> int:
        return 1  # one file per merge group: no two tasks ever share a file

    def _write_sidecar(self, dst: Location, metadata: Mapping[str, Any]) -> None:
        dst.join(METADATA_FILE).write_whole(json.dumps(dict(metadata)).encode())

    def create_destination(self, dst: Location, n_rows: int, metadata: Mapping[str, Any]) -> None:
        dst.makedirs()
        self._write_sidecar(dst, {**metadata, ROW_GROUP_ROWS_KEY: self.row_group_rows()})
        if n_rows == 0:  # readers need at least one file to know the schema
            self.write_rows(dst, 0, self.schema.empty_table(), None)

    def write_rows(self, dst: Location, start: int, rows: pa.Table, piece_info: Any) -> None:
        sidecar = json.loads(bounded(dst.fs, "cat_file", f"{dst.path}/{METADATA_FILE}", what=METADATA_FILE))
        pile_offsets = np.asarray(sidecar["pile_offsets"], dtype=np.int64)
        stop = start + rows.num_rows
        # Row groups never straddle a pile: the loader reads a pile, or a unit, as whole row groups and nothing more.
        cuts = pile_offsets[(pile_offsets > start) & (pile_offsets < stop)] - start
        bounds = [0, *cuts.tolist(), rows.num_rows]
        rows = rows.replace_schema_metadata(self.schema.metadata)
        files = self._part_files(dst, rows, bounds)
        run, every = part_binding(sidecar, dst.url)

        def write(file: tuple[int, int]) -> None:
            a, b = file
            part = rows.slice(bounds[a], bounds[b] - bounds[a])
            self._write_part(
                dst, start + bounds[a], part, [bound - bounds[a] for bound in bounds[a : b + 1]], run, every
            )

        each(write, files, int_setting("shuffle.parts-at-once"))

    def _part_files(self, dst: Location, rows: pa.Table, bounds: list[int]) -> list[tuple[int, int]]:
        """The part files of rows cut at ``bounds`` (piles), as runs ``[a, b)`` of piles: one unless on object storage."""
        n_piles = len(bounds) - 1
        if dst.is_local or self.writing.n_output_files is not None or n_piles < 2 or rows.num_rows == 0:
            return [(0, n_piles)]
        row_nbytes = max(rows.nbytes / rows.num_rows, 1.0)
        # Part files of whole piles of about this size, written at once: one request streams at one connection's speed.
        part_nbytes = int_setting("shuffle.remote-part-nbytes")
        files, first = [], 0
        for pile in range(1, n_piles + 1):
            if (bounds[pile] - bounds[first]) * row_nbytes >= part_nbytes or pile == n_piles:
                files.append((first, pile))
                first = pile
        return files

    def _write_part(
        self,
        dst: Location,
        start: int,
        rows: pa.Table,
        bounds: Sequence[int],
        run: str,
        every: int,
    ) -> None:
        """Write ``rows`` (rows ``start:`` of the store, piles cut at ``bounds``) as one part file of ``run``.

        Row groups end at each pile's end and at every multiple of ``every`` store rows.
        """
        import pyarrow.parquet as pq

        dictionary, codecs = column_options(rows, self.writing.compression)  # see _parquet_layout
        # The file says which run wrote it, and where: a file moved or left over is refused.
        binding = json.dumps({"run": run, "first_row": start}).encode()
        schema = self.schema.with_metadata({**(self.schema.metadata or {}), PART_BINDING: binding})
        with (
            arrow_sink(dst.join(part_name(start))) as sink,
            pq.ParquetWriter(
                sink, schema, compression=codecs, use_dictionary=dictionary, write_page_checksum=True
            ) as writer,
        ):
            for a, b in itertools.pairwise(bounds):
                if rows.num_rows == 0:
                    writer.write_table(rows.replace_schema_metadata(schema.metadata))
                    continue
                first = a
                for cut in row_group_cuts(start + a, start + b, every) if b > a else []:
                    size = cut - start - first  # cut is a store row; first a row of this part
                    writer.write_table(
                        rows.slice(first, size).replace_schema_metadata(schema.metadata), row_group_size=size
                    )
                    first += size

    def finalize_destination(self, dst: Location, metadata: Mapping[str, Any]) -> None:
        metadata = {**metadata, ROW_GROUP_ROWS_KEY: self.row_group_rows()}
        self._write_sidecar(dst, {**metadata, "seal": seal_of(metadata)})

    def discard_destination(self, dst: Location) -> None:
        # Part files are a valid Parquet dataset to other readers: leave none of them.
        parts = [f"{dst.path}/{name}" for name in dst.names() if PART.fullmatch(name)]
        if parts:
            with dst.reaching():  # one batch of deletes, within the request deadline
                bounded(dst.fs, "rm", parts, what=f"the part files of {dst.url}")
