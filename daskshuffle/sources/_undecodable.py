"""Source data that does not decode: a damaged chunk or page named, with what to do, rather than a codec's error.

Codecs raise their own errors (``RuntimeError``, ``zlib.error``, ``ValueError``, pyarrow's ``ArrowInvalid``); a read
of the source, on the client or in a task, turns them into a :class:`DaskShuffleValueError` that names the file and
the chunk. Storage's own errors (``OSError``) are left as they are. A dask array over a Zarr array reads it through
:class:`DecodedChunks`; a block of a dask array of unknown origin is named by its array and rows (:func:`uncomputable`).
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import DaskShuffleError, DaskShuffleValueError
from ..pilestore import unbounded
from ..storage import reaching

if TYPE_CHECKING:
    import zarr

__all__ = [
    "decoded_chunks",
    "decoding",
    "describe",
    "stored",
    "uncomputable",
    "undecodable",
    "undecodable_group",
    "undecodable_parquet",
]

#: What codecs raise for bytes they cannot decode.
DECODE_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, ValueError, zlib.error)


def stored(source: zarr.Group | zarr.Array[Any]) -> Any:
    """The store of a group or array, itself, not the wrapper that bounds its requests (``pilestore.zarr_store``)."""
    return unbounded(source.store)


def describe(source: zarr.Group | zarr.Array[Any]) -> str:
    """The URL of a group or array, for messages, metadata and overlap checks."""
    store, path = stored(source), source.store_path.path
    fs = getattr(store, "fs", None)
    if fs is None:  # a LocalStore or MemoryStore spells itself as a URL
        return str(type(source.store_path)(store, path))
    root = fs.unstrip_protocol(getattr(store, "path", "")).rstrip("/")
    return f"{root}/{path}" if path else root


def undecodable(what: str, error: BaseException) -> DaskShuffleValueError:
    """The error of source data (``what``: a file, a chunk of it) whose bytes do not decode (the codec's ``error``)."""
    return DaskShuffleValueError(
        f"Expected every chunk of the source to decode. Got {what}, which does not decode ({type(error).__name__}: "
        f"{str(error).strip()}), instead; the source file is damaged: restore it from a copy (or write the source again), "
        "then run the shuffle again."
    )


def undecodable_parquet(error: BaseException) -> bool:
    """Whether pyarrow's ``error``, reading a Parquet file, is of bytes that do not decode (not of storage).

    pyarrow raises ``ArrowInvalid`` or a plain ``OSError`` without an errno
    for a page or header it cannot decode; storage's errors carry an errno
    (``FileNotFoundError``, ``PermissionError``, ...) or are fsspec's own.
    """
    if isinstance(error, DaskShuffleValueError):
        return False
    return isinstance(error, ValueError) or (type(error) is OSError and error.errno is None)


def _first_failing_chunk(array: zarr.Array[Any], start: int, stop: int) -> str | None:
    """The key of the first chunk of rows ``start:stop`` of ``array`` that does not decode, read one at a time."""
    chunk_rows = int(array.chunks[0])
    for row_chunk in range(start // chunk_rows, -(-stop // chunk_rows)):
        for rest in np.ndindex(*array.cdata_shape[1:]):
            coords = (row_chunk, *rest)
            try:
                array.get_block_selection(coords)
            except DECODE_ERRORS:
                return str(array.metadata.encode_chunk_key(coords))
    return None


@contextlib.contextmanager
def decoded_chunks(array: zarr.Array[Any], start: int, stop: int) -> Iterator[None]:
    """Read rows ``start:stop`` of ``array`` inside: a chunk that does not decode is named in the error.

    So is a request storage did not serve (:class:`~daskshuffle.StorageAccessError`, as every request's).

    Examples
    --------
    >>> import zarr
    >>> array = zarr.open_array("raw.zarr/x", mode="r")
    >>> with decoded_chunks(array, 0, 100):
    ...     values = array[0:100]
    >>> values.shape
    (100, 8)
    """
    url = describe(array)
    try:
        with reaching(url):  # storage that does not serve a chunk is named as such, not as a chunk that does not decode
            yield
    except DECODE_ERRORS as error:
        if isinstance(error, DaskShuffleValueError):
            raise
        key = _first_failing_chunk(array, start, stop)
        where = f"the chunk {url}/{key}" if key is not None else f"rows {start:,} to {stop:,} of {url}"
        raise undecodable(where, error) from error


def undecodable_group(group: zarr.Group, url: str, error: BaseException) -> DaskShuffleValueError:
    """The error of the Zarr ``group`` at ``url`` that xarray could not open (the codec's ``error``): the chunk of
    a 1-d array (an index xarray reads when it opens a dataset) that does not decode named, if one does not."""
    for _, array in group.arrays():
        key = _first_failing_chunk(array, 0, array.shape[0]) if array.ndim == 1 else None
        if key is not None:
            return undecodable(f"the chunk {describe(array)}/{key}", error)
    return undecodable(f"a chunk of {url}", error)


def uncomputable(what: str, error: BaseException) -> DaskShuffleError | None:
    """The error of a block (``what``: of which array, which rows) of a dask array that did not compute; ``None``
    for an error to leave as it is (a daskshuffle error, storage's ``OSError``). Its cause is to be chained."""
    if isinstance(error, DaskShuffleError | OSError) or not isinstance(error, Exception):
        return None
    return DaskShuffleValueError(
        f"Expected every block of the source's dask arrays to compute. Got an error instead: {what} did not compute "
        f"({type(error).__name__}: {str(error).strip()}); fix what computes it (the cause is chained below), then "
        "run the shuffle again."
    )


def _zarr_behind(value: object) -> zarr.Array[Any] | None:
    """The Zarr array that ``value`` (a Zarr array, or xarray's lazy arrays over one) reads, if any."""
    import zarr

    for _ in range(16):  # xarray nests a few adapters: indexing, copy on write, CF decoding
        if isinstance(value, zarr.Array):
            return value
        inner = getattr(value, "array", None)
        value = getattr(value, "_array", None) if inner is None else inner
    return None


class DecodedChunks:
    """What a dask array reads its chunks from (``array``), over the Zarr array ``stored``: a chunk that does not
    decode is named, as :func:`decoded_chunks` names it.

    Examples
    --------
    >>> import zarr
    >>> source = decoding(zarr.open_array("raw.zarr/x", mode="r"))
    >>> source[0:100].shape
    (100, 8)
    """

    def __init__(self, array: Any, stored: zarr.Array[Any]) -> None:
        self.array = array
        self.stored = stored

    def __getitem__(self, key: Any) -> Any:
        rows = key[0] if isinstance(key, tuple) and key else key
        start, stop, _ = rows.indices(self.stored.shape[0]) if isinstance(rows, slice) else (0, self.stored.shape[0], 1)
        with decoded_chunks(self.stored, start, stop):
            return np.asarray(self.array[key])  # xarray's lazy arrays read here, not when indexed


def decoding(value: Any) -> Any:
    """``value``, data in a dask array's graph, as :class:`DecodedChunks` if it reads a Zarr array; else as it is."""
    stored = _zarr_behind(value)
    return value if stored is None else DecodedChunks(value, stored)
