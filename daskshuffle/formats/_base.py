"""The small interface every kind of data implements.

The plan and the graph never branch on the kind of data. A shuffle's format is
four small protocols, each implemented whole by every kind: a source of blocks
(:class:`FileSource`, read by the pass-1 tasks, or :class:`CollectionSource`,
computed by a dask collection's tasks), rows in memory (:class:`RowsInMemory`),
the pieces between the passes (:class:`Pieces`) and the destination
(:class:`Destination`). A finished pile store is read through a
:class:`PileReader`. A format instance is pickled into every task, so it holds
only plain, picklable state: paths, URLs, open read-only handles that pickle,
and small metadata.

``Rows`` is the format's in-memory container of rows: a dict of numpy arrays
for Zarr, a ``pyarrow.Table`` for Parquet, a buffer of lines for text.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Generic, Protocol, Self, TypeAlias, TypeVar, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from .._errors import CorruptPileStoreError, DaskShuffleValueError, IncompletePileStoreError, UnfinishedShuffleError
from ..plan._plan import fingerprint, group_piles
from ..storage._cache import Cache
from ..storage._location import Location

__all__ = [
    "ARRAY_KINDS",
    "FORMAT_VERSION",
    "NUMERIC_KINDS",
    "CollectionFormat",
    "CollectionSource",
    "Destination",
    "FileFormat",
    "FileSource",
    "Format",
    "Pieces",
    "PileReader",
    "Rows",
    "RowsInMemory",
    "Source",
    "check_pile_metadata",
    "check_recorded_rows",
    "metadata_disagrees",
    "select_variables",
]

#: The dtype kinds of fixed-size numbers: booleans, integers, floats, complex, durations and datetimes.
#: What xarray variables, PyTorch tensors and the pile reader's direct path take.
NUMERIC_KINDS = "biufcmM"
#: What a Zarr array may hold to be shuffled: numbers and fixed-length byte or unicode strings.
ARRAY_KINDS = NUMERIC_KINDS + "SU"

#: Version of the pile store layout written into every store's metadata. Version 2
#: (Zarr) records its layout, a crc32c per chunk and every chunk written.
FORMAT_VERSION = 2
#: Versions this release reads: a version 1 store is read as it was, without checks.
READABLE_VERSIONS = (1, 2)
#: Piece reads a merge keeps in flight on object storage (a format without a concurrent read of its own).
PIECE_READERS = 16
#: Keys a destination adds to the metadata after the shuffle fingerprinted it (the shuffle fingerprints it
#: marked incomplete): a Zarr store's layout (``_layout.LAYOUT_KEY``) and an xarray store's dimension.
ADDED_AFTER_FINGERPRINT = ("layout", "dim")
#: What to do about a pile store whose metadata disagrees with itself or with its data.
_REMEDY = (
    "shuffle the source again with overwrite=True, or restore the metadata from a copy and check the store against "
    "its source with `daskshuffle verify`"
)

Rows = TypeVar("Rows")
Rows_co = TypeVar("Rows_co", covariant=True)
Rows_contra = TypeVar("Rows_contra", contravariant=True)


class Source(Protocol):
    """What planning needs of a source: its blocks' lengths, its rows' size, a description."""

    #: Name recorded in the pile store's metadata ("zarr", "parquet", "text").
    kind: ClassVar[str]

    @property
    def block_lengths(self) -> tuple[int, ...]:
        """Rows in each input block, in source order."""
        ...

    @property
    def row_nbytes(self) -> int:
        """Bytes one row takes in memory (an estimate for variable-size rows)."""
        ...

    def describe_source(self) -> list[Any]:
        """A JSON-serialisable description of the source, for the metadata."""
        ...


class FileSource(Source, Protocol[Rows_co]):
    """A source whose pass-1 tasks read their blocks themselves (files, stores, URLs)."""

    def read_block(self, block: int) -> Rows_co:
        """Read every row of input block ``block``."""
        ...


@runtime_checkable
class CollectionSource(Source, Protocol[Rows_co]):
    """A source that is a dask collection (a dask DataFrame, a dask-backed xarray dataset).

    Its blocks are computed by the collection's own tasks, and the pass-1 task
    of a block receives the block's value: computing a partition inside a task
    instead would pickle the collection's whole graph into every task and nest
    schedulers. The format must not pickle the graph into every task (drop it
    in ``__getstate__``).
    """

    def block_inputs(self) -> tuple[Mapping[Any, Any], Sequence[Any]]:
        """The collection's graph and one key per block, in block order."""
        ...

    def rows_of_block(self, block: int, value: Any) -> Rows_co:
        """The rows of block ``block`` from ``value``, the computed value of its key."""
        ...


class RowsInMemory(Protocol[Rows]):
    """The operations on the format's in-memory container of rows."""

    def take(self, rows: Rows, index: NDArray[np.intp]) -> Rows:
        """The rows at ``index``, in that order."""
        ...

    def concat(self, parts: Sequence[Rows]) -> Rows:
        """The rows of ``parts`` one after the other (``parts`` is never empty)."""
        ...

    def slice(self, rows: Rows, start: int, stop: int) -> Rows:
        """Rows ``start:stop``."""
        ...


class Pieces(RowsInMemory[Rows], Protocol[Rows]):
    """The pieces between the passes: written once by pass 1, read once by the merge."""

    def prepare_pieces(self, tmp: Location) -> None:
        """Create what the piece files of ``tmp`` need before pass 1 runs."""

    def write_pieces(self, tmp: Location, block: int, rows: Rows, piece_offsets: NDArray[np.int64]) -> Any:
        """Write block ``block``'s rows, already in piece order, and return small metadata.

        ``piece_offsets`` (``n_piles + 1``) delimits the pieces in ``rows``. The
        return value of every block reaches :meth:`combine_piece_info`.
        """
        ...

    def scatter_block(
        self, tmp: Location, block: int, rows: Rows, order: NDArray[np.intp], piece_offsets: NDArray[np.int64]
    ) -> Any:
        """Write ``take(rows, order)``, block ``block``'s rows in piece order, as :meth:`write_pieces` does.

        This is what a pass-1 task does with a block it has read. The default
        takes, then writes: two copies of the block at its peak. A format that
        can reorder and write a slice at a time overrides it and holds one.
        """
        return self.write_pieces(tmp, block, self.take(rows, order), piece_offsets)

    def read_pieces(self, tmp: Location, block: int, start: int, stop: int) -> Rows:
        """Rows ``start:stop`` of the pieces block ``block`` wrote."""
        ...

    def gather_pieces(self, tmp: Location, reads: Sequence[tuple[int, int, int]], order: NDArray[np.intp]) -> Rows:
        """The rows of every ``(block, start, stop)`` of ``reads``, one after the other, taken at ``order``.

        This is what a merge task assembles (``reads`` is never empty). The
        default concatenates, then reorders: two copies of the rows at its peak.
        A format that can read rows straight into their final positions
        overrides it and holds one.
        """
        if not tmp.is_local and len(reads) > 1:
            # An object store answers each request after tens of milliseconds: keep many in flight.
            with ThreadPoolExecutor(min(len(reads), PIECE_READERS), thread_name_prefix="daskshuffle-pieces") as pool:
                parts = list(pool.map(lambda read: self.read_pieces(tmp, *read), reads))
        else:
            parts = [self.read_pieces(tmp, *read) for read in reads]
        return self.take(self.concat(parts), order)

    def combine_piece_info(self, infos: Sequence[Any]) -> Any:
        """Combine what :meth:`write_pieces` returned for every block (in block order)."""
        return None


class Destination(Protocol[Rows_contra]):
    """The pile store (or shuffled copy) a shuffle writes."""

    #: Whether the destination puts its output in place itself, whole or not at all (text files
    #: written under temporary names and renamed at the end): the shuffle then writes at ``dst``
    #: rather than building beside it and swapping, and leaves ``dst`` alone after a failure.
    places_itself: ClassVar[bool] = False

    def for_plan(self, pile_rows: float, *, materialize: bool) -> Self:
        """This format with its destination's layout chosen for piles of ``pile_rows`` rows on average.

        Runs once, after planning and before anything is written. By default
        the layout does not depend on the plan.
        """
        return self

    def group_piles(self, pile_sizes: NDArray[np.int64], row_nbytes: int, target_nbytes: int) -> list[tuple[int, int]]:
        """The merge groups, runs ``[start, stop)`` of whole piles that one task assembles and writes.

        By default about ``target_nbytes`` each. Runs before anything is
        written, so a destination that cannot be cut as asked raises here.
        """
        return group_piles(pile_sizes, row_nbytes, target_nbytes)

    def write_alignment(self) -> int:
        """Writes must start and stop at multiples of this many rows (or at the end)."""
        ...

    def create_destination(self, dst: Location, n_rows: int, metadata: Mapping[str, Any]) -> None:
        """Create an empty destination for ``n_rows`` rows, marked incomplete."""
        ...

    def write_rows(self, dst: Location, start: int, rows: Rows_contra, piece_info: Any) -> None:
        """Write ``rows`` at output row ``start``; the range respects :meth:`write_alignment`."""
        ...

    def finalize_destination(self, dst: Location, metadata: Mapping[str, Any]) -> None:
        """Record ``metadata`` and mark the destination complete. Runs last."""
        ...

    def stored_rows(self, dst: Location, rows: Rows_contra) -> Any:
        """``rows`` as the destination stores them, and its pile reader reads them back (for ``verify``).

        By default unchanged; a destination that encodes values (xarray's CF
        encodings) encodes them here as it does when it writes them.
        """
        return rows

    def resume_destination(self, dst: Location) -> None:
        """Before an interrupted run continues: remove what a task killed mid-write left that is not output.

        The tasks that did not finish run again and rewrite their output whole;
        by default nothing else needs doing.
        """
        return None

    def discard_destination(self, dst: Location) -> None:
        """Clean up after a run that failed before :meth:`finalize_destination`.

        By default the destination stays, marked incomplete; a format whose
        output cannot carry that mark (a plain text file) removes what it wrote.
        """


class FileFormat(FileSource[Rows], Pieces[Rows], Destination[Rows], Protocol[Rows]):
    """A kind of data whose blocks are read from storage by the pass-1 tasks."""


class CollectionFormat(CollectionSource[Rows], Pieces[Rows], Destination[Rows], Protocol[Rows]):
    """A kind of data whose blocks are computed by a dask collection's own tasks."""


#: What the plan and the graph work with: a source of either kind, its pieces and its destination.
Format: TypeAlias = FileFormat[Rows] | CollectionFormat[Rows]


class PileReader(ABC, Generic[Rows]):
    """A complete pile store opened for reading."""

    #: The ``daskshuffle`` metadata recorded by the shuffle.
    metadata: Mapping[str, Any]
    #: Whether a read is mostly decoding in calls that release the GIL (a codec, a Parquet
    #: reader), rather than copying bytes: the loader then reads in a background thread
    #: beside any consumer (see :mod:`daskshuffle.loader._prefetch`).
    decodes: bool = False
    #: Whether reads are requests to a store that serves many at once (object storage): the
    #: loader then starts the requests of the reads ahead of it (:meth:`fetch`), within its
    #: read-ahead budget, so that many are in flight while the consumer works.
    fetches: bool = False

    @property
    def n_rows(self) -> int:
        return int(self.metadata["n_rows"])

    @property
    def pile_offsets(self) -> NDArray[np.int64]:
        return np.asarray(self.metadata["pile_offsets"], dtype=np.int64)

    @abstractmethod
    def read_rows(self, start: int, stop: int) -> Rows:
        """Rows ``start:stop`` of the store."""

    def read_pile(self, pile: int) -> Rows:
        """Every row of pile ``pile``, as stored.

        What the loader calls. A reader that checks what it reads raises
        :class:`~daskshuffle.CorruptPileStoreError` naming the pile, the
        variable and the file.
        """
        offsets = self.pile_offsets
        return self.read_rows(int(offsets[pile]), int(offsets[pile + 1]))

    def read_piles(self, piles: Sequence[int]) -> Rows:
        """Every row of store piles ``piles``, one pile after the other (a group the loader shuffles as one).

        By default each pile is read, then the piles are concatenated and
        their arrays go back to the reader (:meth:`recycle`); a reader that can
        read each pile straight into its slice of one set of arrays overrides it.
        """
        parts = [self.read_pile(pile) for pile in piles]
        if len(parts) == 1:
            return parts[0]
        rows = self.concat(parts)
        for part in parts:
            arrays = self.as_arrays(part)
            if arrays is not None:
                self.recycle(arrays)
        return rows

    def start_pile(self, pile: int) -> Any:
        """A read of ``pile`` that other threads may help with (``help(limit)``, ``result()``), or ``None``.

        The loader's consumer and its background thread then share the read
        (:class:`~daskshuffle.loader._prefetch.PileJob`). By default ``None``:
        the pile is read whole by :meth:`read_pile` in one thread.
        """
        return None

    def recycle(self, rows: dict[str, NDArray[Any]]) -> None:
        """Take back the arrays of rows read here that nothing uses any more, to read other rows into.

        By default nothing is kept.
        """

    @abstractmethod
    def take(self, rows: Rows, index: NDArray[np.intp]) -> Rows:
        """The rows at ``index``, in that order."""

    @abstractmethod
    def concat(self, parts: Sequence[Rows]) -> Rows:
        """The rows of ``parts`` one after the other."""

    @abstractmethod
    def n_rows_of(self, rows: Rows) -> int:
        """How many rows ``rows`` holds."""

    # -- for the loader --------------------------------------------------------
    @classmethod
    def recognizes(cls, store: Location) -> bool:
        """Whether ``store`` looks like a pile store of this kind.

        A cheap look at the layout, without reading data; opening the store
        does the real checks (complete, format version, variables).
        """
        return False

    def to_batch(self, rows: Rows) -> Any:
        """What the loader yields for ``rows``: by default ``rows`` itself.

        A format can hand out something more convenient than its working
        container here (a ``pandas.DataFrame`` for a ``pyarrow.Table``).
        """
        return rows

    def as_arrays(self, rows: Rows) -> dict[str, NDArray[Any]] | None:
        """``rows`` as numpy arrays that batches are gathered from directly, or ``None``.

        The loader gathers each batch with ``numpy.take`` into new arrays, one
        copy, when the piles of the batch give arrays (of equal dtypes); it
        calls :meth:`take`, :meth:`concat` and :meth:`to_batch` otherwise. A
        reader returns arrays only where the two give the same batches. By
        default, rows that are already a dict of numpy arrays.
        """
        if isinstance(rows, dict) and all(isinstance(values, np.ndarray) for values in rows.values()):
            return rows
        return None

    def fetch(self, start: int, stop: int) -> None:
        """Start fetching the files of rows ``start:stop``, to be read by ``read_rows(start, stop)`` (or the pile).

        Only where :attr:`fetches`; by default nothing.
        """

    def forget(self, start: int, stop: int) -> None:
        """Drop what :meth:`fetch` started for rows ``start:stop`` and was not read; by default nothing."""

    #: Whether :meth:`use_cache` keeps the store's files on a local disk (a remote store of a kind that can).
    caches: bool = False

    def use_cache(self, cache: Cache) -> None:
        """Keep the files read from now on in ``cache``, and read them from there when they are in it.

        Only where :attr:`caches`; by default nothing.
        """

    @property
    def fetched_nbytes(self) -> int:
        """Bytes of rows fetched (or being fetched) ahead and not read yet."""
        return 0

    def close(self) -> None:
        """Release what the reader holds open. The loader calls it when it closes; by default nothing."""


class AppendedStoreError(IncompletePileStoreError):
    """A Zarr pile store with several generations, opened as one: ``open_pile_reader`` reads it with the metadata found."""

    def __init__(self, message: str, metadata: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.metadata = dict(metadata)


def check_pile_metadata(metadata: Mapping[str, Any], where: str) -> None:
    """Refuse a pile store of a format version this release cannot read or whose shuffle did not finish."""
    if metadata.get("format_version") not in READABLE_VERSIONS:
        raise IncompletePileStoreError(
            f"Expected a pile store of format version {' or '.join(map(str, READABLE_VERSIONS))}. Got version "
            f"{metadata.get('format_version')!r} in {where!r} instead; shuffle the source again with this version "
            "of daskshuffle."
        )
    if not metadata.get("complete"):
        raise UnfinishedShuffleError(
            f"Expected a complete pile store. Got {where!r}, whose shuffle did not finish, instead; run the shuffle again."
        )


def _fingerprints(metadata: Mapping[str, Any]) -> tuple[str, ...]:
    """What the fingerprint of ``metadata`` may be, one for each way a writer records it.

    A shuffle fingerprints its metadata before the destination adds its keys
    and marks it complete; appending, removing and compacting generations
    fingerprint the whole of what they write.
    """
    whole = {key: value for key, value in metadata.items() if key != "fingerprint"}
    shuffled = {key: value for key, value in whole.items() if key not in ADDED_AFTER_FINGERPRINT}
    return fingerprint(whole), fingerprint({**shuffled, "complete": False})


def metadata_disagrees(where: str, expected: str, got: str) -> CorruptPileStoreError:
    """The error for a pile store at ``where`` whose metadata disagrees with itself or its data."""
    return CorruptPileStoreError(
        f"Expected the metadata of the pile store {where!r} to agree with itself and with its data: {expected}. "
        f"Got {got} instead; the metadata was edited or damaged: {_REMEDY}."
    )


def check_recorded_rows(metadata: Mapping[str, Any], where: str, lengths: Mapping[str, int]) -> None:
    """Refuse metadata that disagrees with itself or with the data, before any row is read.

    ``lengths`` are the rows the data holds, by what holds them (each array of
    a Zarr store, as its own metadata records it; the part files of a Parquet
    store). Checks that the pile offsets start at 0 and never fall, that the
    last one is ``n_rows`` and every length, that there are ``n_piles`` piles,
    and (from format version 2) the fingerprint: the shuffle recorded it, so a
    change to any of these or to anything else it recorded is caught, an edit
    that keeps them consistent included. Reads nothing.
    """
    try:
        offsets = np.asarray(metadata["pile_offsets"], dtype=np.int64)
        n_rows, n_piles = int(metadata["n_rows"]), int(metadata["n_piles"])
    except (KeyError, TypeError, ValueError) as error:
        raise metadata_disagrees(where, "integers n_rows, n_piles and pile_offsets", f"{error!r}") from error
    if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0:
        first = int(offsets.flat[0]) if offsets.size else "none"
        raise metadata_disagrees(where, "pile_offsets to start at 0", f"pile_offsets[0] = {first}")
    falls = np.flatnonzero(np.diff(offsets) < 0)
    if falls.size:
        pile = int(falls[0])
        raise metadata_disagrees(
            where,
            "pile_offsets that never fall",
            f"pile_offsets[{pile + 1}] = {int(offsets[pile + 1]):,} after pile_offsets[{pile}] = {int(offsets[pile]):,}",
        )
    last = int(offsets[-1])
    if n_rows != last:
        raise metadata_disagrees(
            where, "n_rows to equal the last pile offset", f"n_rows = {n_rows:,} and pile_offsets[-1] = {last:,}"
        )
    if n_piles != len(offsets) - 1:
        raise metadata_disagrees(
            where, "an offset for each pile and the end", f"n_piles = {n_piles:,} and {len(offsets):,} pile_offsets"
        )
    for name, length in lengths.items():
        if length != last:
            raise metadata_disagrees(
                where, f"{name} to hold the n_rows the metadata records", f"n_rows = {last:,} and {length:,} in {name}"
            )
    recorded = metadata.get("fingerprint")
    if metadata.get("format_version", 1) >= 2 and recorded not in _fingerprints(metadata):
        raise metadata_disagrees(
            where,
            f"the fingerprint it records, {recorded!r}",
            f"metadata whose fingerprint is {_fingerprints(metadata)[0 if 'generations' in metadata else 1]!r}",
        )


def select_variables(metadata: Mapping[str, Any], variables: Sequence[str] | None) -> list[str]:
    """The recorded variables to read: all of them, or ``variables`` if they are all recorded."""
    names = list(metadata["variables"])
    if variables is None:
        return names
    unknown = [name for name in variables if name not in names]
    if unknown:
        raise DaskShuffleValueError(f"Expected variables among {names}. Got unknown {unknown} instead.")
    return list(variables)
