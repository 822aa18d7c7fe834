"""Reading a Zarr pile store at the machine's read speed, and checking what it reads.

zarr-python spends about 0.3 to 0.5 ms on every chunk it reads, whatever its
size. A pile is a contiguous run of rows, so the reader here skips zarr: it
works out which chunk files of every variable hold the rows, reads each whole
file with one call (``os.preadv`` straight into the output array for a local
file stored without compressor; ``fsspec`` ``cat_ranges`` of many files at
once on any other filesystem), verifies each chunk's crc32c, decodes with
numcodecs, and checks every size (all of which is ``_zarr_chunks``). File reads, crc32c of large buffers and decoding
release the GIL, so the loader's prefetch threads read piles in parallel; a
reader opened with ``threads=k`` also spreads the chunks of one read over a
pool of ``k`` threads of its own (measured no faster on a busy 2-core machine,
hence not the default).

It understands the codec pipelines a pile store may hold: ``bytes``
(little-endian), optionally one compressor (blosc, zstd or gzip), optionally
``crc32c`` last. Any other variable (another pipeline, fixed-length strings,
a pile store of format version 1) is read through zarr, without checks.

A missing chunk file is an error when the store records that every chunk was
written (format version 2); a truncated or corrupted one always is. The error,
:class:`~daskshuffle.CorruptPileStoreError`, names the store, the pile, the
variable and the file.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import zarr
from numpy.typing import NDArray

from .._errors import DaskShuffleValueError, IncompletePileStoreError, SourceNotFoundError
from .._paths import exists, filesystem, normalize
from ._base import PileReader, check_pile_metadata, select_variables
from ._layout import LAYOUT_KEY
from ._zarr import _METADATA_KEY, ArrayRows, _concat, _read_in_runs, _take
from ._zarr_chunks import ChunkFiles, Chunks, chunks_of

__all__ = ["ZarrPileReader"]

#: The chunks of one variable are read in tasks of about this many bytes, spread over the pool.
TASK_NBYTES = 2 * 2**20
#: Fallback reads through zarr go in runs of whole chunks of about this size.
READ_NBYTES = 32 * 2**20


def _shutdown(pool: ThreadPoolExecutor) -> None:
    pool.shutdown(wait=False, cancel_futures=True)


class ZarrPileReader(PileReader[ArrayRows]):
    """A complete Zarr pile store, opened read-only.

    Safe to use from several threads at once, and to pickle (into torch
    ``DataLoader`` workers). Reads run in the caller's thread; with
    ``threads=k`` the chunks of one read are spread over a pool of ``k``
    threads, made again after pickling, which :meth:`close` (or ``with``) joins.

    Examples
    --------
    >>> reader = ZarrPileReader("piles.zarr")
    >>> pile = reader.read_pile(0)
    >>> pile["x"].shape == (reader.pile_offsets[1], 8)
    True
    >>> reader.close()
    """

    def __init__(
        self,
        store: str | os.PathLike[str],
        variables: Sequence[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        batch_format: str = "numpy",
        threads: int = 0,
    ) -> None:
        if batch_format != "numpy":
            raise DaskShuffleValueError(
                f"Expected batch_format='numpy' for a Zarr pile store, whose batches are dicts of numpy arrays. "
                f"Got {batch_format!r} instead; 'arrow' and 'pandas' batches come from Parquet pile stores."
            )
        if not exists(store, storage_options):
            raise SourceNotFoundError(
                f"Expected an existing pile store. Got {os.fspath(store)!r}, which does not exist, instead."
            )
        try:
            group = zarr.open_group(normalize(store), mode="r", storage_options=storage_options)
        except (FileNotFoundError, ValueError, zarr.errors.BaseZarrError) as error:
            raise IncompletePileStoreError(
                f"Expected a Zarr pile store. Got {os.fspath(store)!r}, which is not a Zarr group ({error}), instead."
            ) from error
        metadata = group.attrs.get(_METADATA_KEY)
        self.store = os.fspath(store)
        if not isinstance(metadata, dict):
            raise IncompletePileStoreError(
                f"Expected a pile store written by daskshuffle. Got {self.store!r}, which has no daskshuffle metadata, "
                "instead."
            )
        check_pile_metadata(metadata, self.store)
        self.metadata = metadata
        names = select_variables(metadata, variables)
        self.arrays: dict[str, zarr.Array[Any]] = {}
        for name in names:
            array = group.get(name)
            if not isinstance(array, zarr.Array):
                raise IncompletePileStoreError(
                    f"Expected pile store {self.store!r} to hold an array {name!r}. Got {type(array).__name__} instead; "
                    "shuffle the source again."
                )
            self.arrays[name] = array
        fs, root = filesystem(store, storage_options)
        self._files = ChunkFiles(fs, self.store)
        written = (metadata.get(LAYOUT_KEY) or {}).get("variables", {})
        self._chunks: dict[str, Chunks] = {}
        if metadata.get("format_version", 1) >= 2:
            for name, array in self.arrays.items():
                chunks = chunks_of(array, f"{root}/{array.path}", name in written)
                if chunks is not None:
                    self._chunks[name] = chunks
        self.threads = threads
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    # -- pickling and closing ------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_lock": None, "_pool": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Join the reader's threads. Reading again starts new ones."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ZarrPileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="daskshuffle-zarr-reader")
                weakref.finalize(self, _shutdown, self._pool)
            return self._pool

    # -- reading -------------------------------------------------------------
    def read_rows(self, start: int, stop: int) -> ArrayRows:
        return self._read(start, stop, None)

    def read_pile(self, pile: int) -> ArrayRows:
        offsets = self.pile_offsets
        return self._read(int(offsets[pile]), int(offsets[pile + 1]), pile)

    def _read(self, start: int, stop: int, pile: int | None) -> ArrayRows:
        stop = max(start, min(stop, self.n_rows))
        rows: ArrayRows = {}
        tasks: list[tuple[Chunks, NDArray[Any], int, int]] = []
        for name, array in self.arrays.items():
            chunks = self._chunks.get(name)
            if chunks is None:
                rows[name] = _read_in_runs(array, start, stop, READ_NBYTES)
                continue
            rows[name] = np.empty((stop - start, *chunks.row_shape), dtype=chunks.dtype)
            if stop == start:
                continue
            first, last = start // chunks.chunk_rows, (stop - 1) // chunks.chunk_rows + 1
            step = max(1, TASK_NBYTES // max(chunks.chunk_nbytes, 1))
            tasks += [(chunks, rows[name], index, min(index + step, last)) for index in range(first, last, step)]
        self._run(tasks, start, stop, pile)
        return rows

    def _run(self, tasks: list[tuple[Chunks, NDArray[Any], int, int]], start: int, stop: int, pile: int | None) -> None:
        """Run ``tasks``, the first here and the others in the pool; raise the first error once all are done."""
        if not tasks:
            return
        futures: list[Future[None]] = []
        if self.threads > 0 and len(tasks) > 1:
            pool = self._executor()
            futures = [pool.submit(self._files.read, *task, start, stop, pile) for task in tasks[1:]]
        errors: list[BaseException] = []
        try:
            for task in tasks if not futures else tasks[:1]:
                self._files.read(*task, start, stop, pile)
        except BaseException as error:
            errors.append(error)
        # Every task writes into the output: wait for all of them, even after an error.
        for future in futures:
            try:
                future.result()
            except BaseException as error:
                errors.append(error)
        if errors:
            raise errors[0]

    # -- rows in memory --------------------------------------------------------
    def take(self, rows: ArrayRows, index: NDArray[np.intp]) -> ArrayRows:
        return _take(rows, index)

    def concat(self, parts: Sequence[ArrayRows]) -> ArrayRows:
        return _concat(parts)

    def n_rows_of(self, rows: ArrayRows) -> int:
        return len(next(iter(rows.values()))) if rows else 0

    @classmethod
    def recognizes(cls, store: str, storage_options: dict[str, Any] | None = None) -> bool:
        return exists(f"{normalize(store)}/zarr.json", storage_options)
