"""Source data that does not decode: a damaged chunk or page named, with what to do, rather than a codec's error.

A codec raises its own error for bytes it cannot decode (numcodecs' zstd and
blosc a ``RuntimeError``, zlib its ``zlib.error``, zarr a ``ValueError`` for a
chunk of the wrong size, pyarrow an ``ArrowInvalid`` or ``ArrowIOError`` for a
corrupt page). A read of the source, on the client (the layout's sample) or
in a task on a worker, turns those into a :class:`DaskShuffleValueError` that
names the file and the chunk. Errors of storage itself (``OSError``: a file
missing, access refused) are left as they are.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import DaskShuffleValueError
from ..storage import reaching

if TYPE_CHECKING:
    import zarr

__all__ = ["DECODE_ERRORS", "decoded_chunks", "undecodable", "undecodable_parquet"]

#: What codecs raise for bytes they cannot decode.
DECODE_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, ValueError, zlib.error)


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
def decoded_chunks(array: zarr.Array[Any], url: str, start: int, stop: int) -> Iterator[None]:
    """Read rows ``start:stop`` of ``array`` (at ``url``) inside: a chunk that does not decode is named in the error.

    So is a request storage did not serve (:class:`~daskshuffle.StorageAccessError`, as every request's).

    Examples
    --------
    >>> import zarr
    >>> array = zarr.open_array("raw.zarr/x", mode="r")
    >>> with decoded_chunks(array, "raw.zarr/x", 0, 100):
    ...     values = array[0:100]
    >>> values.shape
    (100, 8)
    """
    try:
        with reaching(url):  # storage that does not serve a chunk is named as such, not as a chunk that does not decode
            yield
    except DECODE_ERRORS as error:
        if isinstance(error, DaskShuffleValueError):
            raise
        key = _first_failing_chunk(array, start, stop)
        where = f"the chunk {url}/{key}" if key is not None else f"rows {start:,} to {stop:,} of {url}"
        raise undecodable(where, error) from error
