"""Reading a Zarr pile store at the machine's read speed, and checking what it reads.

zarr-python spends a fixed time on every chunk, whatever its size, so the reader
skips zarr: it reads the chunk files that hold a run of rows itself, each whole
file in one call, and checks and decodes them (:mod:`._zarr_chunks`). Each
chunk's crc32c is compared with the one its run recorded for that variable and
place, so a chunk swapped with another is an error, never wrong rows.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from .._config import int_setting
from .._errors import CorruptPileStoreError, IncompletePileStoreError
from ..formats import ArrayRows, ArrayRowsMethods
from ..pilestore import (
    LAYOUT_KEY,
    check_arrays,
    check_recorded_rows,
    open_arrays,
    read_tables,
    select_variables,
)
from ..storage import Cache, Location, Request
from ._opened import Opened
from ._pile_reader import PileReader, RowsKind
from ._zarr_chunks import ChunkFiles, Chunks, chunks_of
from ._zarr_open import check_shapes, open_store

if TYPE_CHECKING:
    import zarr

__all__ = ["ZarrPileReader"]

#: ``(chunks, out, first, last, start, stop)``: chunks ``first:last``, rows ``start:stop`` read into ``out``.
Task = tuple[Chunks, NDArray[Any], int, int, int, int]


class ZarrPileReader(PileReader[ArrayRows]):
    """A complete Zarr pile store, opened read-only.

    Safe to use from several threads at once, and to pickle (into torch
    ``DataLoader`` workers). Reads run in the caller's thread.

    Examples
    --------
    >>> reader = ZarrPileReader("piles.zarr")
    >>> reader.read_pile(0)["x"].shape
    (108, 8)
    >>> reader.close()
    """

    kind = "Zarr"
    batch_formats: ClassVar[Mapping[str, str]] = {"numpy": "dicts of numpy arrays", "xarray": "xarray.Dataset batches"}

    def _open(
        self,
        location: Location,
        variables: Sequence[str] | None,
        *,
        metadata: Mapping[str, Any] | None = None,
        group: zarr.Group | None = None,
        opened: Opened | None = None,
    ) -> None:
        """``opened``: the root a failed read looks at, to tell a store that changed from damage (a generation's: the
        root listing it)."""
        group, metadata = open_store(location, self.store, metadata, group)
        self.metadata = metadata
        opened = opened or Opened.of(location, metadata)
        # Arrays gone or disagreeing with the metadata read: a compaction or a new shuffle may have replaced them.
        with opened.unchanged(self.store):
            self._open_variables(location, group, variables, opened)

    def _open_variables(
        self, location: Location, group: zarr.Group, variables: Sequence[str] | None, watched: Opened
    ) -> None:
        import zarr

        metadata = self.metadata
        names = select_variables(metadata, variables)
        self.arrays: dict[str, zarr.Array[Any]] = {}
        # On object storage the crc32c tables are fetched while the arrays open: one round trip less to open.
        paths = {name: f"{group.path}/{name}".lstrip("/") for name in names}  # each array's path, as zarr names it
        early = None
        if not location.is_local:
            pool = ThreadPoolExecutor(1, thread_name_prefix="daskshuffle-open-tables")
            early = pool.submit(read_tables, location, metadata, paths)
            pool.shutdown(wait=False)  # its thread ends with its one task
        try:
            opened = open_arrays(location, group, names)
        except (ValueError, TypeError, KeyError, zarr.errors.BaseZarrError) as error:  # an array's zarr.json
            raise CorruptPileStoreError(
                f"Expected the arrays {names} of the pile store {self.store!r} to open. Got {type(error).__name__}: "
                f"{error} instead; the store is damaged: shuffle the source again, or restore it from a copy."
            ) from error
        for name, array in zip(names, opened, strict=True):
            if not isinstance(array, zarr.Array):
                raise IncompletePileStoreError(
                    f"Expected pile store {self.store!r} to hold an array {name!r}. Got {type(array).__name__} instead; "
                    "shuffle the source again."
                )
            self.arrays[name] = array
        check_recorded_rows(
            metadata,
            self.store,
            {f"array {name!r}": int(array.shape[0]) if array.ndim else 0 for name, array in self.arrays.items()},
        )
        fs, root = location.fs, location.path
        self._files = ChunkFiles(fs, self.store, watched)
        self._fetches = self._files.fetches
        check_arrays(metadata, self.store, self.arrays)
        written = (metadata.get(LAYOUT_KEY) or {}).get("variables", {})
        check_shapes(self.store, self.arrays, written)
        tables = read_tables(location, metadata, paths) if early is None else early.result()
        self._chunks = {
            name: chunks_of(array, f"{root}/{array.path}", self.store, tables[name])
            for name, array in self.arrays.items()
        }
        # The chunks of one variable are read in tasks of about this many bytes: a cancelled read stops after one.
        self._task_nbytes = int_setting(
            "zarr-reader.local-task-nbytes" if self._files.local else "zarr-reader.task-nbytes"
        )
        self._spare_arrays = int_setting("zarr-reader.spare-arrays")
        self._lock = threading.Lock()
        self._spare: dict[str, list[NDArray[Any]]] = {}
        self._offsets = self.pile_offsets  # a property that makes the array again on every call
        self._largest_pile = int(np.diff(self._offsets).max()) if len(self._offsets) > 1 else 0
        self.rows: RowsKind[ArrayRows] = ArrayRowsMethods()
        if self.batch_format == "xarray":
            from ._xarray_batches import DatasetRows  # xarray loads only for xarray batches

            self.rows = DatasetRows(location, names)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_lock": None, "_spare": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def close(self) -> None:
        """Stop every read and fetch, and let go of the arrays kept for reuse."""
        super().close()
        with self._lock:
            self._spare = {}

    def _requests(self, start: int, stop: int) -> tuple[Sequence[Request], int]:
        """Every chunk file of rows ``start:stop``, of every variable, but those cached (read from the local disk)."""
        paths = [
            chunks.path(index)
            for chunks in self._chunks.values()
            for index in range(start // chunks.chunk_rows, (stop - 1) // chunks.chunk_rows + 1)
        ]
        cache = self._files.cache
        if cache is not None:
            paths = [path for path in paths if not cache.holds(path)]
        return paths, (stop - start) * sum(chunks.row_nbytes for chunks in self._chunks.values())

    def use_cache(self, cache: Cache) -> None:
        if self._fetches is not None:
            self._files.cache = self._store_cache(cache)

    def read_rows(self, start: int, stop: int) -> ArrayRows:
        return self._read([(start, stop)], None)

    def read_pile(self, pile: int) -> ArrayRows:
        offsets = self._offsets
        return self._read([(int(offsets[pile]), int(offsets[pile + 1]))], pile, self._largest_pile)

    def read_runs(self, runs: Sequence[tuple[int, int]]) -> ArrayRows:
        return self._read(runs or [(0, 0)], None)

    def member_chunk_rows(self) -> list[dict[str, tuple[int, int]]]:
        return [{name: (chunks.chunk_rows, chunks.row_nbytes) for name, chunks in self._chunks.items()}]

    def _read(self, runs: Sequence[tuple[int, int]], pile: int | None, capacity: int = 0) -> ArrayRows:
        """Rows of each of ``runs`` (of ``pile``, if one), read one after the other into one set of arrays.

        The arrays hold at least ``capacity`` rows and as many as the longest
        run times the runs, so that once recycled they take any later read.
        """
        runs = [(start, max(start, min(stop, self.n_rows))) for start, stop in runs]
        n_rows = sum(stop - start for start, stop in runs)
        capacity = max(capacity, max(stop - start for start, stop in runs) * len(runs))
        rows = {name: self._empty(chunks, n_rows, capacity) for name, chunks in self._chunks.items()}
        for start, stop in runs:  # every request of the read goes out at once
            self._fetch(start, stop, None, counted=False)
        tasks: list[Task] = []
        offset = 0
        for start, stop in runs:
            if stop == start:
                continue
            for name, chunks in self._chunks.items():
                first, last = start // chunks.chunk_rows, (stop - 1) // chunks.chunk_rows + 1
                step = max(1, self._task_nbytes // max(chunks.chunk_nbytes, 1))
                out = rows[name][offset : offset + stop - start]
                tasks += [
                    (chunks, out, index, min(index + step, last), start, stop) for index in range(first, last, step)
                ]
            offset += stop - start
        read = self._under_way.begin()
        for task in tasks:  # a cancelled read stops before its next task, or at once in a wait for a fetch
            read.check()
            self._files.read(*task, pile, read)
        return rows

    def _empty(self, chunks: Chunks, n_rows: int, capacity: int) -> NDArray[Any]:
        """An array for ``n_rows`` rows of ``chunks``: a recycled one if large enough, else one of ``capacity`` rows."""
        with self._lock:
            spare = self._spare.get(chunks.name, [])
            for position, values in enumerate(spare):
                if len(values) >= n_rows:
                    return spare.pop(position)[:n_rows]
            spare.clear()
        return np.empty((capacity, *chunks.row_shape), dtype=chunks.dtype)[:n_rows]

    def recycle(self, rows: ArrayRows) -> None:
        """Keep arrays read here that nothing uses any more (``zarr-reader.spare-arrays`` a variable) to read into.

        Large arrays come from ``mmap``: a new one faults in every page again.
        """
        with self._lock:
            for name, values in rows.items():
                whole = values.base if isinstance(values.base, np.ndarray) else None
                spare = self._spare.setdefault(name, [])
                if whole is not None and len(spare) < self._spare_arrays and whole.dtype == values.dtype:
                    spare.append(whole)
