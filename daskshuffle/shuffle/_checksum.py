"""An order-independent checksum of rows: what :func:`~daskshuffle.verify` compares.

Each row of each variable is hashed to 64 bits and the hashes summed modulo
2**64: the sum ignores the order of the rows, and a changed, missing or extra
row changes it. A second sum over whole rows catches variables paired wrongly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._config import int_setting

__all__ = ["add_checksums", "checksum"]

U64 = NDArray[np.uint64]
_MASK = 2**64 - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_NULL = np.uint64(0x6A09E667F3BCC909)


def _const(k: int) -> np.uint64:
    """The ``k``-th of a sequence of distinct 64-bit constants (computed in Python: no overflow warning)."""
    return np.uint64((k * 0x9E3779B97F4A7C15) & _MASK)


def _mix(x: U64) -> U64:
    """A 64-bit finaliser (splitmix64): every input bit changes about half the output bits."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _fixed_hashes(values: NDArray[Any]) -> U64:
    """A hash of each row's bytes, for arrays of fixed-size values (any row shape)."""
    if values.dtype.byteorder == ">":  # the same values hash the same in either byte order
        values = values.astype(values.dtype.newbyteorder("<"))
    n_rows = len(values)
    width = values.dtype.itemsize * int(np.prod(values.shape[1:], dtype=np.int64))
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(n_rows, width)
    if width % 8:
        padded = np.zeros((n_rows, -(-width // 8) * 8), dtype=np.uint8)
        padded[:, :width] = raw
        raw = padded
    words = raw.view(np.uint64)
    hashes = _mix(np.full(n_rows, _const(width + 1), dtype=np.uint64))
    for column in range(words.shape[1]):
        hashes = _mix(hashes ^ _mix(words[:, column] + _const(column + 2)))
    return hashes


def _bytes_hashes(offsets: NDArray[np.int64], data: NDArray[np.uint8]) -> U64:
    """A hash of each variable-size value ``data[offsets[i]:offsets[i + 1]]``."""
    n_rows = len(offsets) - 1
    hashes = np.empty(n_rows, dtype=np.uint64)
    first = 0
    at_once = int_setting("verify.hash-nbytes")  # each byte takes 8 while it is hashed
    while first < n_rows:
        # Rows whose bytes fit at_once (at least one row).
        last = int(np.searchsorted(offsets, offsets[first] + at_once, side="right")) - 1
        last = min(max(last, first + 1), n_rows)
        lo, hi = int(offsets[first]), int(offsets[last])
        row_of = np.repeat(np.arange(last - first), np.diff(offsets[first : last + 1]))
        position = np.arange(lo, hi, dtype=np.int64) - offsets[first:last][row_of]
        terms = _mix((position.astype(np.uint64) << np.uint64(8)) + data[lo:hi].astype(np.uint64) + _GOLDEN)
        sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(terms, dtype=np.uint64)])
        relative = offsets[first : last + 1] - lo
        per_row = sums[relative[1:]] - sums[relative[:-1]]
        lengths = np.diff(offsets[first : last + 1]).astype(np.uint64)
        hashes[first:last] = _mix(per_row ^ _mix(lengths + _GOLDEN))
        first = last
    return hashes


def _arrow_hashes(column: Any) -> U64:
    """A hash of each value of an Arrow column (chunked or not), nulls included."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        parts = [_arrow_hashes(chunk) for chunk in column.chunks]
        return np.concatenate(parts) if parts else np.empty(0, np.uint64)
    kind = column.type
    if pa.types.is_dictionary(kind):
        return _arrow_hashes(column.dictionary_decode())
    if pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind):
        hashes = _fixed_hashes(
            pc.fill_null(column, False if pa.types.is_boolean(kind) else 0).to_numpy(zero_copy_only=False)
        )
    elif pa.types.is_temporal(kind) and kind.bit_width in (32, 64):
        integers = column.view(pa.int64() if kind.bit_width == 64 else pa.int32())
        hashes = _fixed_hashes(pc.fill_null(integers, 0).to_numpy(zero_copy_only=False))
    elif (
        pa.types.is_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_large_binary(kind)
    ):
        binary = column.cast(pa.large_binary())
        _, offsets, data = binary.buffers()
        offsets_array = np.frombuffer(offsets, dtype=np.int64)[binary.offset : binary.offset + len(binary) + 1]
        hashes = _bytes_hashes(
            offsets_array, np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8)
        )
    else:  # nested and other types: each value's canonical text (slower, and rare in training data)
        texts = pa.array([repr(value).encode() for value in column.to_pylist()], type=pa.large_binary())
        return _arrow_hashes(texts) ^ _mix(np.full(len(column), _NULL, dtype=np.uint64))
    if column.null_count:
        hashes = np.where(column.is_null().to_numpy(zero_copy_only=False), _NULL, hashes)
    return hashes


def checksum(rows: Any, variables: Sequence[str]) -> dict[str, Any]:
    """Rows (a dict of numpy arrays or a ``pyarrow.Table``), and the sum of their hashes per variable and of whole
    rows: order-independent, and additive."""
    if isinstance(rows, Mapping):
        hashes = {name: _fixed_hashes(np.asarray(rows[name])) for name in variables}
    else:
        hashes = {name: _arrow_hashes(rows.column(name)) for name in variables}
    whole = np.zeros(len(next(iter(hashes.values()))) if hashes else 0, dtype=np.uint64)
    for index, name in enumerate(variables):
        whole = whole + _mix(hashes[name] ^ _const(index + 1))
    return {
        "n_rows": len(whole),
        "sums": {name: int(values.sum(dtype=np.uint64)) for name, values in hashes.items()},
        "rows": int(_mix(whole).sum(dtype=np.uint64)),
    }


def add_checksums(parts: Sequence[dict[str, Any]], variables: Sequence[str]) -> dict[str, Any]:
    """The checksum of the rows of all ``parts`` together: counts and sums added (modulo 2**64)."""
    return {
        "n_rows": sum(part["n_rows"] for part in parts),
        "sums": {name: sum(part["sums"][name] for part in parts) & _MASK for name in variables},
        "rows": sum(part["rows"] for part in parts) & _MASK,
    }
