"""The small interface every kind of data implements, so that the plan and the graph never branch on it.

A format is three protocols: a source of blocks (:class:`FileSource`, read by
the pass-1 tasks, or :class:`CollectionSource`, computed by a dask collection's
tasks), rows in memory and the pieces between the passes (:class:`Pieces`), and
the destination (:class:`Destination`). A format is pickled into every task, so
it holds only plain, picklable state. ``Rows`` is its in-memory container of
rows: a dict of numpy arrays, a ``pyarrow.Table``, a buffer of lines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, Protocol, Self, TypeAlias, TypeVar, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from .._config import int_setting
from .._threads import each
from ..plan import merge_runs
from ..storage import Location

__all__ = [
    "ARRAY_KINDS",
    "NUMERIC_KINDS",
    "CollectionSource",
    "Destination",
    "FileFormat",
    "FileSource",
    "Format",
    "Pieces",
    "Rows",
]

#: The dtype kinds of fixed-size numbers: booleans, integers, floats, complex, durations and datetimes.
#: What xarray variables, PyTorch tensors and the pile reader's direct path take.
NUMERIC_KINDS = "biufcmM"
#: What a Zarr array may hold to be shuffled: numbers and fixed-length byte or unicode strings.
ARRAY_KINDS = NUMERIC_KINDS + "SU"

Rows = TypeVar("Rows")
Rows_co = TypeVar("Rows_co", covariant=True)
Rows_contra = TypeVar("Rows_contra", contravariant=True)


class Source(Protocol):
    """What planning needs of a source: its blocks' lengths, its rows' size, a description."""

    #: Name recorded in the pile store's metadata ("zarr", "parquet", "text").
    kind: ClassVar[str]

    #: Rows in each input block, in source order.
    block_lengths: tuple[int, ...]

    #: Bytes one row takes in memory (an estimate for variable-size rows).
    row_nbytes: int

    #: The source's paths or URLs, as the store records them (none for data in memory or a dask collection).
    source_names: list[str]

    #: What the source is when it is opened: entries of :mod:`daskshuffle.storage._identity` (its files' sizes and
    #: versions, or the dask token of a collection). The store records them (``source_identity``): a rerun whose
    #: sources changed is refused rather than given the old store. Empty: no identity.
    identity: list[dict[str, Any]]

    #: How each of :attr:`source_names` is reached, where not by its name with the shuffle's ``storage_options``
    #: (objects a user opened, such as a ``zarr.Group`` whose store has options of its own): the workers are checked
    #: against these, and ``verify=True`` reads this format's blocks again, as the shuffle read them, rather than
    #: opening the sources again by name. ``None``: by name.
    source_locations: list[Location] | None = None

    #: Takes :attr:`identity` again (``None``: it cannot change, a dask token, or there is none).
    identify: Callable[[], list[dict[str, Any]]] | None = None

    def identify_source_again(self) -> list[dict[str, Any]]:
        """:attr:`identity` taken again, now, from the files the shuffle read (not listed again): a shuffle
        whose sources changed while it read them is refused rather than written from two states of them."""
        return list(self.identity) if self.identify is None else self.identify()


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
    schedulers. So the graph (``_inputs``) stays where the shuffle is planned:
    it is not pickled.
    """

    #: What :meth:`block_inputs` returns; ``None`` in a task.
    _inputs: Any

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_inputs": None}

    def block_inputs(self) -> tuple[Mapping[Any, Any], Sequence[Any]]:
        """The collection's graph and one key per block, in block order."""
        if self._inputs is None:
            raise RuntimeError("block_inputs runs where the shuffle was planned, with the collection's graph")
        inputs: tuple[Mapping[Any, Any], Sequence[Any]] = self._inputs
        return inputs

    def rows_of_block(self, block: int, value: Any) -> Rows_co:
        """The rows of block ``block`` from ``value``, the computed value of its key."""
        ...


class Pieces(Protocol[Rows]):
    """Rows in memory, and the pieces between the passes: written once by pass 1, read once by the merge."""

    def take(self, rows: Rows, index: NDArray[np.intp]) -> Rows:
        """The rows at ``index``, in that order."""
        ...

    def concat(self, parts: Sequence[Rows]) -> Rows:
        """The rows of ``parts`` one after the other (``parts`` is never empty)."""
        ...

    def slice(self, rows: Rows, start: int, stop: int) -> Rows:
        """Rows ``start:stop``; by default those of an Arrow table or array."""
        sliced: Rows = rows.slice(start, stop - start)  # type: ignore[attr-defined]
        return sliced

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
            parts = each(lambda read: self.read_pieces(tmp, *read), reads, int_setting("shuffle.piece-readers"))
        else:
            parts = [self.read_pieces(tmp, *read) for read in reads]
        return self.take(self.concat(parts), order)

    def combine_piece_info(self, infos: Sequence[Any]) -> Any:
        """Combine what :meth:`write_pieces` returned for every block (in block order)."""
        return None


class Destination(Protocol[Rows_contra]):
    """The pile store (or shuffled copy) a shuffle writes."""

    #: Whether the destination is files that it puts in place itself, whole or not at all (text files
    #: written under temporary names and renamed at the end), rather than a directory (a pile store):
    #: the shuffle then writes at ``dst`` rather than building beside it and swapping, and leaves
    #: ``dst`` alone after a failure.
    moves_into_place: ClassVar[bool] = False

    def for_plan(self, pile_rows: float, *, materialize: bool, storage: Literal["local", "object"] = "local") -> Self:
        """This format with its destination's layout chosen for piles of ``pile_rows`` rows on average.

        ``storage`` is where the destination is: a local disk, or object
        storage. Runs once, after planning and before anything is written. By
        default the layout depends on neither.
        """
        return self

    def merge_runs(self, pile_sizes: NDArray[np.int64], row_nbytes: int, target_nbytes: int) -> list[tuple[int, int]]:
        """The merge groups, runs ``[start, stop)`` of whole piles that one task assembles and writes.

        By default about ``target_nbytes`` each. Runs before anything is
        written, so a destination that cannot be cut as asked raises here.
        """
        return merge_runs(pile_sizes, row_nbytes, target_nbytes)

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
