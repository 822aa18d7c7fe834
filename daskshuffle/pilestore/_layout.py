"""The layout of a Zarr pile store: chunk rows and codec per variable, and a checksum per chunk.

A pile store is written once and read many times, a whole pile at a time, so
its layout is chosen for that read (``docs/architecture.md``, "The pile store").
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numcodecs
import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    import zarr

__all__ = [
    "CHUNK_NBYTES",
    "COMPRESSIBLE_RATIO",
    "Layout",
    "choose_layout",
    "create_arrays",
]

#: The largest output chunk of the widest variable (and of a materialized copy).
CHUNK_NBYTES = 4 * 2**20
#: The smallest output chunk of the widest variable, however small its piles, by where the store is.
MIN_CHUNK_NBYTES = {"local": 256 * 2**10, "object": 2**20}
#: The widest variable's chunks hold about this fraction of a pile, by where the store is (``benchmarks/RESULTS.md``).
PILE_FRACTION = {"local": 16, "object": 2}
#: A narrow variable's chunk rows are at most this multiple of the widest one's (which
#: bounds the write alignment, and so the rows a merge keeps for a seam).
MAX_MULTIPLE = 8
#: Below this compression ratio, a compressor costs more reading time than it saves.
COMPRESSIBLE_RATIO = 1.1
#: Data blosc-lz4 does not compress is stored with lz4 and bit shuffle, or else zstd, where that saves a quarter.
ZSTD_RATIO = 4 / 3
#: Bytes of each variable compressed to choose its codec.
SAMPLE_NBYTES = 2**20
#: The record of a layout in the store's metadata.
LAYOUT_KEY = "layout"

NONE = "none"
FAST = "blosc-lz4-shuffle"
BITS = "blosc-lz4-bitshuffle"
SMALL = "blosc-zstd-shuffle"
USER = "user"


@dataclasses.dataclass(frozen=True)
class VariableLayout:
    """How one variable is stored: rows per chunk, codec name and the sampled ratio."""

    chunk_rows: int
    codec: str
    ratio: float | None = None


@dataclasses.dataclass(frozen=True)
class Layout:
    """The layout of every variable of a pile store, with a crc32c per chunk and every chunk written."""

    variables: Mapping[str, VariableLayout]

    def alignment(self) -> int:
        """Rows every write starts at: the largest chunk rows, a multiple of every other."""
        return max((variable.chunk_rows for variable in self.variables.values()), default=1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "checksum": "crc32c",
            "every_chunk_written": True,
            "variables": {name: dataclasses.asdict(variable) for name, variable in self.variables.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Layout:
        variables = data["variables"].items()
        return cls(
            {name: VariableLayout(value["chunk_rows"], value["codec"], value.get("ratio")) for name, value in variables}
        )


def choose_chunk_rows(
    row_nbytes: Mapping[str, int],
    pile_rows: float | None,
    chunk_rows: int | None = None,
    storage: Literal["local", "object"] = "local",
) -> dict[str, int]:
    """Rows per chunk of each variable, for piles of ``pile_rows`` rows (``None``: one sequential read).

    ``chunk_rows``, if given, is every variable's. ``storage`` is where the
    store is written: a local disk, or object storage (a URL).

    Examples
    --------
    >>> choose_chunk_rows({"x": 256, "id": 8}, pile_rows=16_384)
    {'x': 1024, 'id': 8192}
    >>> choose_chunk_rows({"x": 256, "id": 8}, pile_rows=2_000)
    {'x': 1024, 'id': 2048}
    >>> choose_chunk_rows({"x": 256, "id": 8}, pile_rows=16_384, storage="object")
    {'x': 8192, 'id': 32768}
    """
    if chunk_rows is not None:
        return dict.fromkeys(row_nbytes, chunk_rows)
    widest = max(1, *row_nbytes.values()) if row_nbytes else 1
    if pile_rows is None:
        # Larger chunks of a narrow variable would make a larger write alignment, and the rows a merge keeps for its seams.
        base = max(1, CHUNK_NBYTES // widest)
        limit = base
    else:
        fraction = int(pile_rows) // PILE_FRACTION[storage]
        base = max(1, min(CHUNK_NBYTES // widest, max(MIN_CHUNK_NBYTES[storage] // widest, fraction)))
        limit = max(base, 2 * int(pile_rows))
    chosen = {}
    for name, nbytes in row_nbytes.items():
        rows = base
        # Doubling keeps every chunk rows a power-of-two multiple of the base.
        while 2 * rows <= min(limit, base * MAX_MULTIPLE) and 2 * rows * max(nbytes, 1) <= base * widest:
            rows *= 2
        chosen[name] = rows
    return chosen


#: The blosc compressor, level and bit shuffle (else byte shuffle, of items wider than a byte) of each codec.
_BLOSC: dict[str, tuple[Literal["lz4", "zstd"], int, bool]] = {
    FAST: ("lz4", 5, False),
    BITS: ("lz4", 5, True),
    SMALL: ("zstd", 1, False),
}


def _shuffle(codec: str, itemsize: int) -> Literal["bitshuffle", "shuffle", "noshuffle"]:
    if _BLOSC[codec][2]:
        return "bitshuffle"
    return "shuffle" if itemsize > 1 else "noshuffle"


def _ratio(codec: str, data: NDArray[Any]) -> float:
    """How much ``codec`` compresses ``data``, with numcodecs' blosc: the codec zarr's ``BloscCodec`` wraps."""
    cname, clevel, _ = _BLOSC[codec]
    shuffle = {"bitshuffle": numcodecs.Blosc.BITSHUFFLE, "shuffle": numcodecs.Blosc.SHUFFLE}
    chosen = shuffle.get(_shuffle(codec, data.dtype.itemsize), numcodecs.Blosc.NOSHUFFLE)
    blosc = numcodecs.Blosc(cname=cname, clevel=clevel, shuffle=chosen, blocksize=0)
    return data.nbytes / max(1, len(blosc.encode(data)))


def choose_codec(sample: NDArray[Any] | None) -> tuple[str, float | None]:
    """The codec for a variable whose rows look like ``sample``, and the ratio it reached on it.

    Examples
    --------
    >>> choose_codec(np.zeros(100_000, dtype="i4"))[0]
    'blosc-lz4-shuffle'
    >>> choose_codec(np.random.default_rng(0).standard_normal(100_000).astype("f4"))[0]
    'none'
    >>> rng = np.random.default_rng(0)
    >>> choose_codec(rng.binomial(40, 0.5, 100_000).astype("u1"))[0]  # few values, no repeats
    'blosc-lz4-bitshuffle'
    >>> choose_codec(np.where(rng.random(100_000) < 0.5, 0, rng.integers(0, 256, 100_000)).astype("u1"))[0]
    'blosc-zstd-shuffle'
    """
    if sample is None or sample.nbytes == 0 or sample.dtype.kind in "SU":
        return NONE, None
    data = np.ascontiguousarray(sample)
    ratio = _ratio(FAST, data)
    if ratio >= COMPRESSIBLE_RATIO:
        return FAST, round(float(ratio), 3)
    for codec in (BITS, SMALL):  # the faster to decode first
        smaller = _ratio(codec, data)
        if smaller >= ZSTD_RATIO:
            return codec, round(float(smaller), 3)
    return NONE, round(float(ratio), 3)


def sample_rows(row_nbytes: int, n_rows: int) -> int:
    """Rows of a variable to sample for its codec: about ``SAMPLE_NBYTES``."""
    return int(min(n_rows, max(1, SAMPLE_NBYTES // max(row_nbytes, 1))))


def choose_layout(
    row_nbytes: Mapping[str, int],
    samples: Mapping[str, NDArray[Any] | None],
    pile_rows: float | None,
    *,
    chunk_rows: int | None = None,
    compressors: Any = "auto",
    storage: Literal["local", "object"] = "local",
) -> Layout:
    """Chunk rows and codec of every variable, for a store on ``storage``.

    ``samples`` holds a few rows of each variable (``None`` where none could be
    read: no compressor). ``compressors`` other than ``"auto"`` is the user's
    choice, used for every variable.
    """
    rows = choose_chunk_rows(row_nbytes, pile_rows, chunk_rows, storage)
    variables = {}
    for name in row_nbytes:
        if isinstance(compressors, str) and compressors == "auto":
            codec, ratio = choose_codec(samples.get(name))
        else:
            codec, ratio = USER, None
        variables[name] = VariableLayout(chunk_rows=rows[name], codec=codec, ratio=ratio)
    return Layout(variables=variables)


def codecs_of(layout: VariableLayout, itemsize: int, compressors: Any = "auto") -> tuple[Any, ...]:
    """The bytes-to-bytes codecs (zarr v3 ``compressors``) of a variable: its compressor, then crc32c."""
    from zarr.codecs import BloscCodec, Crc32cCodec

    if layout.codec == USER and isinstance(compressors, list | tuple):
        chosen = tuple(compressors)
    elif layout.codec == USER:
        chosen = () if compressors is None else (compressors,)
    elif layout.codec in _BLOSC:
        cname, clevel, _ = _BLOSC[layout.codec]
        shuffle = _shuffle(layout.codec, itemsize)
        chosen = (BloscCodec(cname=cname, clevel=clevel, shuffle=shuffle, typesize=itemsize, blocksize=0),)
    else:
        chosen = ()
    chosen = tuple(codec for codec in chosen if not (isinstance(codec, Crc32cCodec) or codec == {"name": "crc32c"}))
    return (*chosen, Crc32cCodec())  # last: the crc32c of every chunk as stored, which its table records


def xarray_encoding(layout: VariableLayout, itemsize: int, row_shape: Sequence[int]) -> dict[str, Any]:
    """The ``to_zarr(encoding=...)`` entry of a variable stored with ``layout`` (dim first)."""
    return {
        "chunks": (layout.chunk_rows, *row_shape),
        "compressors": codecs_of(layout, itemsize),
        "write_empty_chunks": True,
    }


def create_arrays(
    group: zarr.Group,
    variables: Sequence[Any],
    layout: Layout,
    n_rows: int,
    compressors: Any = "auto",
) -> None:
    """Create the empty arrays of ``variables`` (``Variable`` records of the Zarr format) in ``group``."""
    import zarr

    for variable in variables:
        chosen = layout.variables[variable.name]
        with warnings.catch_warnings():
            # Fixed-length strings are not yet in the Zarr v3 spec; zarr warns but writes them.
            warnings.simplefilter("ignore", zarr.errors.UnstableSpecificationWarning)
            group.create_array(
                variable.name,
                shape=(n_rows, *variable.row_shape),
                chunks=(chosen.chunk_rows, *variable.row_shape),
                dtype=variable.dtype,
                fill_value=variable.fill_value,
                attributes=variable.attributes,
                dimension_names=variable.dimension_names,
                compressors=codecs_of(chosen, variable.dtype.itemsize, compressors),
                config={"write_empty_chunks": True},
            )
