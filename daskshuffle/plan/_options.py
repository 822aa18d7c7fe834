"""The arguments every shuffle shares: declared once, checked once at the boundary.

:data:`COMMON_OPTIONS` holds each common option's name, default and doc, and
:class:`ShuffleKeywords` (:class:`TextKeywords` for ``shuffle_lines``) its type.
Each public shuffle (``shuffle_zarr``, ``shuffle_parquet``, ``shuffle_dataframe``,
``shuffle_xarray``, ``shuffle_lines``) declares only its own parameters,
``n_piles`` and ``**options: Unpack[ShuffleKeywords]``, so that a type checker
checks its callers' keywords, and is declared with
:func:`~daskshuffle.plan._declare.common_options`, which checks at import that
the two agree, gives it the public signature and docs of every option, and
fills in the defaults of each call. It hands its options to
:func:`parse_shuffle_options` and passes the frozen :class:`ShuffleOptions` on.
The command line declares its options of a shuffle from :data:`COMMON_OPTIONS`
too (their names and defaults), and takes its other defaults from the
constants here. A new common option is added in this module, once (its type in
``ShuffleKeywords``, checked against it).
"""

from __future__ import annotations

import inspect
import os
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, TypedDict

from .._errors import DaskShuffleTypeError, DaskShuffleValueError
from .._parse import Settings, parse_bool, parse_levels, parse_n_piles, parse_nbytes, parse_path, parse_seed

__all__ = [
    "COMMON_OPTIONS",
    "DEFAULT_BLOCK_MEMORY",
    "DEFAULT_LINES_BLOCK_MEMORY",
    "DEFAULT_LINES_PILE_MEMORY",
    "DEFAULT_N_PILES",
    "DEFAULT_PARQUET_COMPRESSION",
    "DEFAULT_PILE_MEMORY",
    "PARQUET_COMPRESSIONS",
    "TEXT_DEFAULTS",
    "TEXT_FIXED",
    "CommonOption",
    "ShuffleKeywords",
    "ShuffleOptions",
    "TextKeywords",
    "lines_block_memory",
    "parse_forwarded_options",
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
class CommonOption:
    """One argument that every public shuffle takes: its default, its type as the docs show it, and its doc."""

    name: str
    default: object
    kind: str
    doc: str

    def describe(self, default: object, note: str = "") -> str:
        """The numpydoc entry of this option with ``default`` (a shuffle's own, or the common one)."""
        if default is None:
            header = f"{self.name} : {self.kind}, optional"
        elif isinstance(default, str):
            header = f'{self.name} : {self.kind}, default "{default}"'
        else:
            header = f"{self.name} : {self.kind}, default {default!r}"
        body = textwrap.fill(f"{self.doc} {note}".strip(), width=80, break_on_hyphens=False)
        return header + "\n" + textwrap.indent(body, "    ")


#: The arguments every public shuffle takes after ``dst``, with their defaults and docs, in the order a user reads
#: them. A public shuffle takes ``n_piles`` itself and the others as ``**options: Unpack[ShuffleKeywords]``, declared
#: with ``plan._declare.common_options``, which checks both at import.
COMMON_OPTIONS: tuple[CommonOption, ...] = (
    CommonOption(
        "n_piles",
        DEFAULT_N_PILES,
        'int or "auto"',
        'Number of piles. ``"auto"`` picks the fewest piles that fit ``pile_memory``.',
    ),
    CommonOption(
        "seed",
        None,
        "int",
        "Same seed, same source and same parameters give the same output, whatever the cluster. ``None`` draws a "
        "seed and records it (``ShuffleResult.seed``); a resumable shuffle interrupted and called again with "
        "``None`` continues with the seed it drew. (A loader's ``seed=None`` means the store's recorded seed "
        "instead: the loader reads the order a shuffle drew.)",
    ),
    CommonOption("overwrite", False, "bool", "Replace ``dst`` if it exists (only once every check has passed)."),
    CommonOption("materialize", False, "bool", "Write a fully shuffled copy instead of a pile store."),
    CommonOption(
        "pile_memory",
        DEFAULT_PILE_MEMORY,
        "int or str",
        'The largest pile allowed, in bytes or as a size such as "256MiB", checked at planning time, before '
        "anything is written.",
    ),
    CommonOption(
        "block_memory",
        DEFAULT_BLOCK_MEMORY,
        "int or str",
        'About how much of the source one pass-1 task reads, in bytes or as a size such as "64MiB".',
    ),
    CommonOption(
        "tmp",
        None,
        "path or URL",
        "A directory for the pieces between the passes; they go to a subdirectory named after ``dst``, removed at "
        "the end, also after an error. ``tmp`` itself is never removed. By default ``<dst>.daskshuffle-tmp``, next "
        "to ``dst``; for a ``dst`` on object storage, this machine's temporary directory instead when every worker "
        "sees it and it has room for 2.5 times the data (a local disk writes and reads them faster than requests).",
    ),
    CommonOption(
        "progress",
        False,
        "bool",
        "Show a progress bar while the tasks run: in a Jupyter kernel with a distributed client, distributed's "
        "widget (with ``ipywidgets``); in a terminal or a kernel without one, text. Then the bar's last state as one "
        "line, which a log or a saved notebook keeps (a log gets only that line).",
    ),
    CommonOption("storage_options", None, "dict", "Passed to fsspec for URLs."),
    CommonOption(
        "verify",
        False,
        "bool",
        "Once the output is written, prove it holds exactly the source's rows (:func:`daskshuffle.verify`: an "
        "order-independent checksum of every variable on both sides, about a third of the shuffle's time); "
        "``VerificationError`` if not.",
    ),
    CommonOption(
        "levels",
        "auto",
        '{"auto", 1, 2, 3, 4}',
        "Levels of scatter before the merge. With one, the merge reads about ``block_memory**2 / data`` bytes from "
        "every block (``block_memory / n_piles`` once a pile outgrows a block), which falls with the data's size; with ``L``, rows go first to about ``(data / "
        "block_memory)^(1/L)`` super-piles, each split as many ways again by every level but the last, then to "
        'piles, keeping reads large for one more write and read of the data a level. ``"auto"`` adds a level '
        "where fewer would make ten thousand reads or more of under 64 KiB, and more while a level costs less "
        "than the reads it saves (two from about 256 GiB with the defaults and ``n_piles='auto'``, three from about "
        "66 TiB); "
        ":func:`daskshuffle.explain` shows the choice.",
    ),
)
_BY_NAME = {option.name: option for option in COMMON_OPTIONS}

#: ``shuffle_lines``' own defaults, for text: a task holds about two copies of a block or a pile (plus
#: offsets), and these keep a worker thread near 100 MB however large the input is; with ``n_piles="auto"``
#: the piles follow from ``pile_memory``. Its ``block_memory=None`` is :func:`lines_block_memory`.
TEXT_DEFAULTS: Mapping[str, object] = MappingProxyType(
    {"n_piles": "auto", "pile_memory": DEFAULT_LINES_PILE_MEMORY, "block_memory": None}
)
#: Common options that ``shuffle_lines`` does not take, and the value it runs with: its output is a text file,
#: always fully shuffled.
TEXT_FIXED: Mapping[str, object] = MappingProxyType({"materialize": True})


class _Keywords(TypedDict, total=False):
    """The keyword options of every public shuffle (:data:`COMMON_OPTIONS` but ``n_piles``), and their types.

    The keys are checked against :data:`COMMON_OPTIONS` when a shuffle is
    declared (``common_options``), and the defaults against the types by the tests.
    """

    seed: int | None
    overwrite: bool
    pile_memory: int | str
    tmp: str | os.PathLike[str] | None
    progress: bool
    storage_options: dict[str, Any] | None
    verify: bool
    levels: int | Literal["auto"]


class ShuffleKeywords(_Keywords, total=False):
    """The keyword options of a shuffle into a pile store: ``shuffle(src, dst, n_piles, **options)``."""

    materialize: bool
    block_memory: int | str


class TextKeywords(_Keywords, total=False):
    """The keyword options of ``shuffle_lines``: no ``materialize`` (:data:`TEXT_FIXED`); ``block_memory`` may be ``None``."""

    block_memory: int | str | None


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


def parse_shuffle_options(arguments: Mapping[str, object] | None = None, /, **given: object) -> ShuffleOptions:
    """Check a shuffle's common arguments, in the order a user reads them; draw the seed if ``None``.

    The arguments are read from ``arguments`` (a public shuffle passes its
    ``options``, which :func:`common_options` filled in, so that each reads
    them the same way) and from ``given`` (``dst``, ``n_piles``, and what a
    shuffle decides itself), which wins. With ``arguments``, every common option
    must be in one of them (a shuffle that lost an option fails here rather
    than run with a default); without, the options not given take their
    defaults.
    """
    names = {"dst", *_BY_NAME}
    unknown = sorted((set(given) | set(arguments or {})) - names)
    if unknown:
        raise TypeError(f"parse_shuffle_options() got unexpected arguments {unknown}")
    chosen = dict(arguments or {})
    if arguments is not None:
        missing = sorted(names - set(chosen) - set(given))
        if missing:
            raise TypeError(f"Expected every common option from the shuffle. Got none for {missing} instead.")
    values = {"dst": None, **{option.name: option.default for option in COMMON_OPTIONS}, **chosen, **given}
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


def parse_forwarded_options(
    shuffle: Callable[..., Any], options: object, *, decided: Sequence[str], parameter: str, why: str
) -> dict[str, Any]:
    """``options`` for ``shuffle``, checked now rather than when it runs: its parameters, but not those ``decided``.

    ``append`` and ``EpochShuffler`` take ``shuffle_options={...}`` and pass
    them on to a shuffle that runs later (in the background, for the epochs).

    Examples
    --------
    >>> def shuffle(src, dst, n_piles=512, *, seed=None, overwrite=False): ...
    >>> parse_forwarded_options(shuffle, {"n_pile": 8}, decided=["seed"], parameter="shuffle_options", why="")
    Traceback (most recent call last):
    ...
    daskshuffle._errors.DaskShuffleTypeError: Expected shuffle_options to hold arguments of shuffle. Got ['n_pile'] instead; ...
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(name, str) for name in options):
        raise DaskShuffleTypeError(
            f"Expected {parameter} to be a dict of arguments. Got {options!r} instead.", parameter=parameter
        )
    for name in decided:
        if name in options:
            raise DaskShuffleValueError(
                f"Expected {parameter} without {name!r}. Got it instead; {why}.",
                parameter=parameter,
            )
    taken = inspect.signature(shuffle).parameters
    if not any(taken_parameter.kind is inspect.Parameter.VAR_KEYWORD for taken_parameter in taken.values()):
        unknown = sorted(set(options) - set(taken))
        if unknown:
            raise DaskShuffleTypeError(
                f"Expected {parameter} to hold arguments of {getattr(shuffle, '__name__', 'the shuffle')}. Got "
                f"{unknown} instead; it takes {[name for name in taken if name not in ('src', 'dst')]}.",
                parameter=parameter,
            )
    return dict(options)
