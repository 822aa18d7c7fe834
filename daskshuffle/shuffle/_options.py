"""The options every shuffle shares, checked once at the boundary into one frozen :class:`ShuffleOptions`.

Each public shuffle writes these options out in its own ``def`` (``tests/test_options.py``
checks they agree) and hands its ``locals()`` to :func:`parse_shuffle_options`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .._errors import DaskShuffleTypeError
from .._parse import Settings, parse_bool, parse_levels, parse_n_piles, parse_nbytes, parse_path, parse_seed
from ..storage import normalize

__all__ = ["ShuffleOptions", "parse_shuffle_options"]


@dataclass(frozen=True)
class ShuffleOptions(Settings):
    """The checked common arguments of one shuffle, with ``dst`` and ``tmp`` absolute.

    Examples
    --------
    >>> options = parse_shuffle_options(dict(
    ...     dst="shuffled.zarr", n_piles=8, seed=0, overwrite=False, materialize=False, pile_memory="256MiB",
    ...     block_memory="64MiB", tmp=None, progress=False, storage_options=None, verify=False, levels="auto",
    ... ))
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
    #: Whether the seed was given: a drawn one gives way to the one an interrupted run of the same shuffle recorded.
    seed_given: bool = True
    verify: bool = False
    levels: int | Literal["auto"] = "auto"


def _parse_storage_options(value: object) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, Mapping):
        raise DaskShuffleTypeError(
            f"Expected storage_options to be None or a dict. Got {value!r} instead.", parameter="storage_options"
        )
    return dict(value) if value is not None else None


def parse_shuffle_options(arguments: Mapping[str, Any]) -> ShuffleOptions:
    """Check ``dst`` and the shared options among a shuffle's ``arguments``; draw the seed if ``None``.

    Paths are made absolute here, on the client: a cluster's workers may run in
    another directory, where a relative path names something else.
    """
    chosen_tmp = (
        parse_path(arguments["tmp"], "tmp") if arguments["tmp"] is not None and arguments["tmp"] != "" else None
    )
    return ShuffleOptions(
        dst=normalize(parse_path(arguments["dst"], "dst")),
        n_piles=parse_n_piles(arguments["n_piles"]),
        seed=parse_seed(arguments["seed"]),
        overwrite=parse_bool(arguments["overwrite"], "overwrite"),
        materialize=parse_bool(arguments["materialize"], "materialize"),
        pile_nbytes=parse_nbytes(arguments["pile_memory"], "pile_memory"),
        block_nbytes=parse_nbytes(arguments["block_memory"], "block_memory"),
        tmp=normalize(chosen_tmp) if chosen_tmp is not None else None,
        progress=parse_bool(arguments["progress"], "progress"),
        storage_options=_parse_storage_options(arguments["storage_options"]),
        seed_given=arguments["seed"] is not None,
        verify=parse_bool(arguments["verify"], "verify"),
        levels=parse_levels(arguments["levels"]),
    )
