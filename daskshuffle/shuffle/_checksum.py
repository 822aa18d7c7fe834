"""An order-independent checksum of rows: what :func:`~daskshuffle.verify` compares.

Each row of each variable is hashed to 64 bits and the hashes summed modulo
2**64: the sum ignores the order of the rows, and a changed, missing or extra
row changes it. A second sum over whole rows catches variables paired wrongly.

A variable-size value (string, binary, text line) of ``L`` bytes is read as
little-endian 64-bit words ``w[k]``, the last one padded with zero bytes, and
hashed to ``mix(mix(L + G) + sum(mix(w[k] ^ key(k))))`` modulo 2**64, where
``mix`` is splitmix64's finaliser, ``G`` the golden ratio's 64 bits and
``key(k) = mix((k % 4096 + 1) * G) ^ mix(k // 4096 * R)`` (``_ROUND``): the
hash depends on every byte, on its place in the value and on the value's
length, not on where the value lies in memory nor on ``verify.hash-nbytes``.
Values are read a chunk of words at a time from wherever they start (numpy
copies unaligned chunks), so hashing costs a few operations a word, not a byte.

Both sides of a comparison are hashed in one run: the sums are not kept, and
another version of daskshuffle may hash differently (this definition replaced
one that mixed every byte with its position, 6-14 times slower).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
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


def _mix(x: U64, scratch: U64 | None = None) -> U64:
    """A 64-bit finaliser (splitmix64), computed in place in ``x`` (a temporary of the caller's): every input bit
    changes about half the output bits. ``scratch``, an array of ``x``'s shape the caller is done with, saves
    allocating one (and the page faults of a fresh one)."""
    t = np.right_shift(x, np.uint64(30), out=scratch)
    x ^= t
    x *= np.uint64(0xBF58476D1CE4E5B9)
    np.right_shift(x, np.uint64(27), out=t)
    x ^= t
    x *= np.uint64(0x94D049BB133111EB)
    np.right_shift(x, np.uint64(31), out=t)
    x ^= t
    return x


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


#: The key of word ``k`` of a value is ``_KEYS[k % 4096] ^ mix(k // 4096 * _ROUND)`` (the second term is 0 below 4096).
_KEYS = _mix(np.arange(1, 4097, dtype=np.uint64) * _GOLDEN)
_KEYS.flags.writeable = False
_ROUND = np.uint64(0xD1B54A32D192ED03)
#: Words hashed together (a chunk) at most: a power of two, so chunks never straddle two rounds of ``_KEYS``.
_CHUNK_MAX = 256
_ALL = np.uint64(_MASK)


class _Buffers:
    """uint64 arrays that one :func:`_bytes_hashes` call reuses from window to window: fresh ones would be faulted
    in again each time the allocator had given their pages back (twice as slow, on short strings)."""

    def __init__(self) -> None:
        self._held: dict[str, U64] = {}

    def __call__(self, name: str, *shape: int) -> U64:
        size = int(np.prod(shape))
        held = self._held.get(name)
        if held is None or len(held) < size:
            grown = 0 if held is None else len(held) + len(held) // 4  # windows differ a little
            held = self._held[name] = np.empty(max(size, grown), dtype=np.uint64)
        return held[:size].reshape(shape)


def _keys(first_words: NDArray[np.int64], width: int, out: U64) -> U64:
    """The keys of words ``first .. first + width - 1`` for each of ``first_words`` (multiples of ``width``, a power
    of two up to ``_CHUNK_MAX``), one row each, in ``out``."""
    keys = _KEYS.reshape(-1, width).take((first_words % len(_KEYS)) // width, axis=0, out=out, mode="clip")
    rounds = first_words // len(_KEYS)
    if rounds.any():
        keys ^= _mix(rounds.astype(np.uint64) * _ROUND)[:, None]
    return keys


def _length_terms(lengths: NDArray[np.int64]) -> U64:
    """What a value's length adds to the sum of its words' terms."""
    return _mix(lengths.astype(np.uint64) + _GOLDEN)


def _chunks(data: NDArray[np.uint8], lo: int, hi: int, width: int) -> NDArray[np.void]:
    """``width`` words from every byte of ``data[lo:hi]``: a fancy index of it copies chunks of values that start
    anywhere. The bytes past ``hi`` are ``data``'s (zeros past its end): the values' last words are masked."""
    if hi + 8 * width > len(data):
        padded = np.zeros(hi - lo + 8 * width, dtype=np.uint8)
        padded[: hi - lo] = data[lo:hi]
        data, lo, hi = padded, 0, hi - lo
    return np.ndarray((hi - lo + 1,), dtype=np.dtype((np.void, 8 * width)), buffer=data, offset=lo, strides=(1,))


@lru_cache(maxsize=64)
def _short_tables(width: int) -> tuple[U64, U64]:
    """For values of at most ``width`` words, by length: each word's mask of the value's bytes, and what the
    length adds to the sum of all ``width`` words' terms (its own term, less those of the zero words past it)."""
    lengths = np.arange(8 * width + 1)
    bits = np.clip(8 * lengths[:, None] - 64 * np.arange(width), 0, 64)
    masks = np.array([[(1 << int(b)) - 1 for b in row] for row in bits], dtype=np.uint64)
    padding = np.concatenate([np.cumsum(_mix(_KEYS[:width][::-1].copy()), dtype=np.uint64)[::-1], [np.uint64(0)]])
    terms = _length_terms(lengths)
    terms -= padding[(lengths + 7) >> 3]
    masks.flags.writeable = terms.flags.writeable = False  # shared by every call
    return masks, terms


def _short_hashes(data: NDArray[np.uint8], offsets: NDArray[np.int64], width: int, buffers: _Buffers, out: U64) -> None:
    """:func:`_bytes_hashes` of values of at most ``width`` words (few), into ``out``: each is one chunk, the words
    past it zeroed, their terms taken off with the length's."""
    masks, length_terms = _short_tables(width)
    starts, lengths = offsets[:-1], np.diff(offsets)
    lo = int(starts[0])
    words = _chunks(data, lo, int(offsets[-1]), width)[starts - lo].view("<u8").reshape(-1, width)
    masked = masks.take(lengths, axis=0, out=buffers("a", len(lengths), width), mode="clip")
    words &= masked
    sums = length_terms.take(lengths, out=out, mode="clip")
    for column in range(width):
        words[:, column] ^= _KEYS[column]
    _mix(words.reshape(-1), masked.reshape(-1))
    for column in range(width):
        sums += words[:, column]
    _mix(sums, buffers("a", len(sums)))


def _word_sums(
    data: NDArray[np.uint8], offsets: NDArray[np.int64], width: int, buffers: _Buffers, first_word: int = 0
) -> U64:
    """``sum(mix(word[k] ^ key[first_word + k]))`` over the 64-bit words of each value ``data[offsets[i]:offsets[i +
    1]]`` (little-endian, the last one padded with zero bytes), hashed ``width`` words at a time."""
    starts, lengths = offsets[:-1], np.diff(offsets)
    n_words = (lengths + 7) >> 3
    n_chunks = np.maximum(-(-n_words // width), 1)  # an empty value takes a chunk too: fewer branches
    ends = np.cumsum(n_chunks)
    chunk = np.arange(ends[-1]) - np.repeat(ends - n_chunks, n_chunks)
    lo = int(starts[0])
    chunks_at = _chunks(data, lo, int(offsets[-1]), width)
    words = chunks_at[np.repeat(starts - lo, n_chunks) + 8 * width * chunk].view("<u8").reshape(-1, width)
    flat = words.reshape(-1)  # each value's words, then those of its last chunk past its end
    first = (ends - n_chunks) * width
    stop = first + n_words
    flat[np.maximum(stop - 1, first)] &= _ALL >> (((-lengths) & 7) << 3).astype(np.uint64)
    keys = _keys(first_word + width * chunk, width, buffers("a", len(chunk), width))
    words ^= keys
    sums = buffers("b", len(flat) + 1)
    sums[0] = 0
    np.cumsum(_mix(flat, keys.reshape(-1)), out=sums[1:])
    found: U64 = sums[stop] - sums[first]
    return found


def _chunk_width(mean_words: float) -> int:
    """Words hashed together: about ``sqrt(5 x words)`` (a chunk's fixed cost against the words past a value's
    end in its last chunk), a power of two."""
    return min(1 << max(0, round(float(np.log2(max(5 * mean_words, 1.0))) / 2)), _CHUNK_MAX)


def _window_hashes(
    data: NDArray[np.uint8], offsets: NDArray[np.int64], piece: int, out: U64, buffers: _Buffers
) -> None:
    """:func:`_bytes_hashes` of the values ``data[offsets[i]:offsets[i + 1]]`` into ``out``, a value longer than
    ``piece`` in pieces of ``piece`` bytes."""
    n_bytes, longest = int(offsets[-1] - offsets[0]), -(-int(np.diff(offsets).max()) // 8)
    width = _chunk_width(n_bytes / 8 / len(out))
    if longest <= 2 * width:
        _short_hashes(data, offsets, max(longest, 1), buffers, out)
        return
    if len(out) == 1 and n_bytes > piece:
        out[0] = 0
        for at in range(0, n_bytes, piece):
            part = offsets[0] + np.array([at, min(at + piece, n_bytes)])
            out += _word_sums(data, part, _CHUNK_MAX, buffers, at // 8)
    else:
        out[:] = _word_sums(data, offsets, width, buffers)
    out += _length_terms(np.diff(offsets))
    _mix(out)


def _bytes_hashes(offsets: NDArray[np.int64], data: NDArray[np.uint8]) -> U64:
    """A hash of each variable-size value ``data[offsets[i]:offsets[i + 1]]``: its 64-bit words (little-endian, the
    last padded with zero bytes), each mixed with its position in the value, summed with its length mixed, mixed.

    The values are hashed ``verify.hash-nbytes`` at a time, a longer value in pieces of about that size; the hashes
    depend on neither, nor on where the values lie in memory.
    """
    n_rows = len(offsets) - 1
    hashes = np.empty(n_rows, dtype=np.uint64)
    data = np.ascontiguousarray(data)
    at_once = int_setting("verify.hash-nbytes")
    piece = max(at_once // (8 * _CHUNK_MAX), 1) * 8 * _CHUNK_MAX  # whole chunks of any width
    buffers = _Buffers()
    first = 0
    while first < n_rows:
        # Rows whose bytes fit at_once (at least one row).
        last = int(np.searchsorted(offsets, offsets[first] + at_once, side="right")) - 1
        last = min(max(last, first + 1), n_rows)
        _window_hashes(data, offsets[first : last + 1], piece, hashes[first:last], buffers)
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
