"""The arguments every shuffle shares, checked once at the boundary.

Each public shuffle (``shuffle_zarr``, ``shuffle_parquet``, ``shuffle_dataframe``,
``shuffle_xarray``, ``shuffle_lines``) hands its common keyword arguments to
:func:`parse_shuffle_options` and passes the frozen :class:`ShuffleOptions` on;
the command line takes its defaults from the constants here. A new common
option is added in this module, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .._errors import DaskShuffleTypeError
from .._parse import Settings, parse_bool, parse_levels, parse_n_piles, parse_nbytes, parse_path, parse_seed

__all__ = [
    "DEFAULT_BLOCK_MEMORY",
    "DEFAULT_LINES_BLOCK_MEMORY",
    "DEFAULT_LINES_PILE_MEMORY",
    "DEFAULT_N_PILES",
    "DEFAULT_PARQUET_COMPRESSION",
    "DEFAULT_PILE_MEMORY",
    "PARQUET_COMPRESSIONS",
    "ShuffleOptions",
    "lines_block_memory",
    "parse_shuffle_options",
]

#: Piles of a pile store (``shuffle_zarr``, ``shuffle_parquet``, ...).
DEFAULT_N_PILES = 512
#: The largest pile a pile store's shuffle allows.
DEFAULT_PILE_MEMORY = "256MiB"
#: About how much of the source one pass-1 task reads.
DEFAULT_BLOCK_MEMORY = "64MiB"
#: ``shuffle_lines`` holds about two copies of a block or a pile (plus offsets):
#: these keep a worker thread near 100 MB however large the input is.
DEFAULT_LINES_PILE_MEMORY = "32MiB"
DEFAULT_LINES_BLOCK_MEMORY = "16MiB"
#: The codecs a Parquet pile store can be written with, and the default.
PARQUET_COMPRESSIONS = ("auto", "snappy", "zstd", "lz4", "gzip", "brotli", "none")
DEFAULT_PARQUET_COMPRESSION = "auto"


@dataclass(frozen=True)
class ShuffleOptions(Settings):
    """The checked common arguments of one shuffle.

    Examples
    --------
    >>> options = parse_shuffle_options(dst="shuffled.zarr", n_piles=8, seed=0)
    >>> options.pile_nbytes
    268435456
    >>> ShuffleOptions.from_dict(options.to_dict()) == options
    True
    """

    dst: str
    n_piles: int | Literal["auto"]
    seed: int
    overwrite: bool
    materialize: bool
    pile_nbytes: int
    block_nbytes: int
    tmp: str | None
    progress: bool
    storage_options: dict[str, Any] | None
    #: Whether the seed was given (else it was drawn): a drawn seed gives way to the one an
    #: interrupted run of the same shuffle recorded, so that the same call continues it.
    seed_given: bool = True
    #: Prove the store holds the source's rows once it is written (``daskshuffle.verify``).
    verify: bool = False
    #: Levels of scatter before the merge: 1, 2, or "auto" (two where one would make the merge's reads small).
    levels: int | Literal["auto"] = "auto"


def _parse_storage_options(value: object) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, Mapping):
        raise DaskShuffleTypeError(
            f"Expected storage_options to be None or a dict. Got {value!r} instead.", parameter="storage_options"
        )
    return dict(value) if value is not None else None


#: The arguments every public shuffle takes, with their defaults.
_COMMON_ARGUMENTS: dict[str, object] = {
    "dst": None,
    "n_piles": DEFAULT_N_PILES,
    "seed": None,
    "overwrite": False,
    "materialize": False,
    "pile_memory": DEFAULT_PILE_MEMORY,
    "block_memory": DEFAULT_BLOCK_MEMORY,
    "tmp": None,
    "progress": False,
    "storage_options": None,
    "verify": False,
    "levels": "auto",
}


def parse_shuffle_options(arguments: Mapping[str, object] | None = None, /, **given: object) -> ShuffleOptions:
    """Check a shuffle's common arguments, in the order a user reads them; draw the seed if ``None``.

    The arguments are read from ``arguments`` (a public shuffle passes its own
    ``locals()``, so that each reads them the same way) and from ``given``,
    which wins; other names in ``arguments`` are left to the caller, and
    arguments given nowhere take their defaults.
    """
    unknown = sorted(set(given) - set(_COMMON_ARGUMENTS))
    if unknown:
        raise TypeError(f"parse_shuffle_options() got unexpected arguments {unknown}")
    chosen = {name: value for name, value in (arguments or {}).items() if name in _COMMON_ARGUMENTS}
    values = {**_COMMON_ARGUMENTS, **chosen, **given}
    tmp = values["tmp"]
    return ShuffleOptions(
        dst=parse_path(values["dst"], "dst"),
        n_piles=parse_n_piles(values["n_piles"]),
        seed=parse_seed(values["seed"]),
        overwrite=parse_bool(values["overwrite"], "overwrite"),
        materialize=parse_bool(values["materialize"], "materialize"),
        pile_nbytes=parse_nbytes(values["pile_memory"], "pile_memory"),
        block_nbytes=parse_nbytes(values["block_memory"], "block_memory"),
        tmp=parse_path(tmp, "tmp") if tmp is not None and tmp != "" else None,
        progress=parse_bool(values["progress"], "progress"),
        storage_options=_parse_storage_options(values["storage_options"]),
        seed_given=values["seed"] is not None,
        verify=parse_bool(values["verify"], "verify"),
        levels=parse_levels(values["levels"]),
    )


def lines_block_memory(block_memory: object, pile_memory: object) -> object:
    """``shuffle_lines``' default block: ``DEFAULT_LINES_BLOCK_MEMORY``, or half the pile if that is less."""
    if block_memory is not None:
        return block_memory
    half_pile = max(parse_nbytes(pile_memory, "pile_memory") // 2, 1)
    return min(parse_nbytes(DEFAULT_LINES_BLOCK_MEMORY, "block_memory"), half_pile)
