"""The options every shuffle shares: documented once, checked once into one frozen :class:`ShuffleOptions`.

Each public shuffle writes these options out in its own ``def`` (``tests/test_options.py``
checks they agree), names their docs by a line ``{option, ...}`` that :func:`shared_docs` fills in,
and hands its ``locals()`` to :func:`parse_shuffle_options`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .._errors import DaskShuffleTypeError
from .._parse import Settings, parse_bool, parse_levels, parse_n_piles, parse_nbytes, parse_path, parse_seed
from ..storage import normalize

__all__ = ["ShuffleOptions", "parse_shuffle_options", "shared_docs"]

_Function = TypeVar("_Function", bound=Callable[..., Any])

#: The numpydoc entry of each shared option, as the shuffles into a pile store take it.
_SHARED_DOCS = {
    "n_piles": """n_piles : int or "auto", default 512
    Number of piles. ``"auto"`` picks the fewest piles that fit ``pile_memory``.""",
    "seed": """seed : int, optional
    Same seed, source and parameters give the same output on any cluster. ``None``
    draws a seed and records it (``ShuffleResult.seed``); a resumed shuffle keeps it.""",
    "overwrite": """overwrite : bool, default False
    Replace ``dst`` (a pile store or a text output) once every check has passed; a
    directory that holds anything else is never replaced.""",
    "materialize": """materialize : bool, default False
    Write a fully shuffled copy instead of a pile store.""",
    "pile_memory": """pile_memory : int or str, default "256MiB"
    The largest pile allowed, in bytes or a size such as "256MiB", checked before writing.""",
    "block_memory": """block_memory : int or str, default "64MiB"
    About how much of the source one pass-1 task reads, in bytes or a size such as "64MiB".""",
    "tmp": """tmp : path or URL, optional
    Where the pieces between the passes go (a subdirectory named after ``dst``, removed at the end
    even after an error). By default ``<dst>.daskshuffle-tmp``; for ``dst`` on object storage, this
    machine's temporary directory if every worker sees it and it has room for 2.5 times the data.""",
    "progress": """progress : bool, default False
    Show a progress bar while the tasks run (distributed's widget in Jupyter with a
    distributed client, text otherwise), then its last state as one line for a log.""",
    "storage_options": """storage_options : dict, optional
    Passed to fsspec for URLs.""",
    "verify": """verify : bool, default False
    Once written, prove the output holds exactly the source's rows
    (:func:`daskshuffle.verify`, about a third of the shuffle's time); ``VerificationError`` if not.""",
    "levels": """levels : {"auto", 1, 2, 3, 4}, default "auto"
    Levels of scatter before the merge. Each costs one more write and read of the data and
    keeps the merge's reads large; ``"auto"`` adds levels where they save more than they
    cost (:func:`daskshuffle.explain` shows the choice).""",
}


def shared_docs(function: _Function) -> _Function:
    """Fill each line ``{option, ...}`` of ``function``'s docstring with those shared options' entries; return it.

    Lines indented under the placeholder continue its last entry with what is the function's own.

    Examples
    --------
    >>> def shuffle(seed=None, overwrite=False):
    ...     '''Shuffle.
    ...
    ...     Parameters
    ...     ----------
    ...     {seed, overwrite}
    ...     '''
    >>> [line.strip() for line in shared_docs(shuffle).__doc__.splitlines() if " : " in line]
    ['seed : int, optional', 'overwrite : bool, default False']
    """
    if function.__doc__ is None:  # python -OO
        return function
    lines = []
    for line in function.__doc__.splitlines():
        stripped = line.strip()
        names = [name.strip() for name in stripped[1:-1].split(",")]
        if not (stripped.startswith("{") and stripped.endswith("}")) or not all(n in _SHARED_DOCS for n in names):
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        lines.extend(indent + entry for name in names for entry in _SHARED_DOCS[name].splitlines())
    function.__doc__ = "\n".join(lines)
    return function


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
    tmp = arguments["tmp"]
    return ShuffleOptions(
        dst=normalize(parse_path(arguments["dst"], "dst")),
        n_piles=parse_n_piles(arguments["n_piles"]),
        seed=parse_seed(arguments["seed"]),
        overwrite=parse_bool(arguments["overwrite"], "overwrite"),
        materialize=parse_bool(arguments["materialize"], "materialize"),
        pile_nbytes=parse_nbytes(arguments["pile_memory"], "pile_memory"),
        block_nbytes=parse_nbytes(arguments["block_memory"], "block_memory"),
        tmp=normalize(parse_path(tmp, "tmp")) if tmp is not None and tmp != "" else None,
        progress=parse_bool(arguments["progress"], "progress"),
        storage_options=_parse_storage_options(arguments["storage_options"]),
        seed_given=arguments["seed"] is not None,
        verify=parse_bool(arguments["verify"], "verify"),
        levels=parse_levels(arguments["levels"]),
    )
