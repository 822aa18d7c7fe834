"""The options every shuffle shares, checked once at the boundary into one frozen :class:`ShuffleOptions`.

Each public shuffle (``shuffle_zarr``, ``shuffle_xarray``, ``shuffle_parquet``,
``shuffle_dataframe``, ``shuffle_lines``, ``append``) writes these options out
in its own ``def``, with their defaults, as ``zarr.create_array`` writes its
parameters; ``tests/test_options.py`` checks that they agree. Their docs are
written once, in :data:`OPTION_DOCS`, and :func:`document_options` puts them in
each shuffle's ``Parameters`` section, as pandas' ``@doc`` does. Each shuffle
hands its arguments to :func:`parse_arguments` and passes the result on.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .._errors import DaskShuffleTypeError, DaskShuffleValueError
from .._parse import Settings, parse_bool, parse_levels, parse_n_piles, parse_nbytes, parse_path, parse_seed
from ..storage import _paths

__all__ = [
    "OPTION_DOCS",
    "ShuffleOptions",
    "document_options",
    "lines_block_memory",
    "parse_arguments",
    "parse_forwarded_options",
    "parse_shuffle_options",
]

Function = TypeVar("Function", bound=Callable[..., Any])

#: ``shuffle_lines`` holds about two copies of a block (plus offsets): this keeps a worker thread near 100 MB.
_LINES_BLOCK_NBYTES = 16 * 2**20


@dataclass(frozen=True)
class ShuffleOptions(Settings):
    """The checked common arguments of one shuffle, with ``dst`` and ``tmp`` absolute.

    Examples
    --------
    >>> options = parse_shuffle_options(
    ...     dst="shuffled.zarr", n_piles=8, seed=0, overwrite=False, materialize=False, pile_memory="256MiB",
    ...     block_memory="64MiB", tmp=None, progress=False, storage_options=None, verify=False, levels="auto",
    ... )
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
    #: Levels of scatter before the merge: 1 to 4, or "auto".
    levels: int | Literal["auto"] = "auto"


def _parse_storage_options(value: object) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, Mapping):
        raise DaskShuffleTypeError(
            f"Expected storage_options to be None or a dict. Got {value!r} instead.", parameter="storage_options"
        )
    return dict(value) if value is not None else None


def parse_shuffle_options(
    *,
    dst: object,
    n_piles: object,
    seed: object,
    overwrite: object,
    materialize: object,
    pile_memory: object,
    block_memory: object,
    tmp: object,
    progress: object,
    storage_options: object,
    verify: object,
    levels: object,
) -> ShuffleOptions:
    """Check a shuffle's common arguments, in the order a user reads them; draw the seed if ``None``.

    A public shuffle passes every one, its own defaults included: the defaults
    are written in each shuffle's ``def``, nowhere else. Paths are
    made absolute here, on the client, before any task is built: the workers of
    a cluster may run in any directory, where a relative path names something
    else (or nothing).
    """
    chosen_tmp = parse_path(tmp, "tmp") if tmp is not None and tmp != "" else None
    return ShuffleOptions(
        dst=_paths.normalize(parse_path(dst, "dst")),
        n_piles=parse_n_piles(n_piles),
        seed=parse_seed(seed),
        overwrite=parse_bool(overwrite, "overwrite"),
        materialize=parse_bool(materialize, "materialize"),
        pile_nbytes=parse_nbytes(pile_memory, "pile_memory"),
        block_nbytes=parse_nbytes(block_memory, "block_memory"),
        tmp=_paths.normalize(chosen_tmp) if chosen_tmp is not None else None,
        progress=parse_bool(progress, "progress"),
        storage_options=_parse_storage_options(storage_options),
        seed_given=seed is not None,
        verify=parse_bool(verify, "verify"),
        levels=parse_levels(levels),
    )


def parse_arguments(arguments: Mapping[str, object]) -> ShuffleOptions:
    """:func:`parse_shuffle_options` of ``dst`` and the shared options among a shuffle's ``arguments``.

    A shuffle passes its ``locals()`` as it begins (as ``pandas.read_csv``
    does), so that each option is named once, in its ``def``.

    Examples
    --------
    >>> def shuffle(src, dst, n_piles=8, *, seed=0, overwrite=False, materialize=False, pile_memory="256MiB",
    ...             block_memory="64MiB", tmp=None, progress=False, storage_options=None, verify=False, levels=1):
    ...     return parse_arguments(locals())
    >>> shuffle("raw.zarr", "shuffled.zarr").levels
    1
    """
    return parse_shuffle_options(**{name: arguments[name] for name in ("dst", *OPTION_DOCS)})


#: The shared options' docs, in the order every shuffle's signature lists them: ``(type, description)``.
#: :func:`document_options` writes each entry's default from the signature.
OPTION_DOCS: dict[str, tuple[str, str]] = {
    "n_piles": ('int or "auto"', 'Number of piles. ``"auto"`` picks the fewest piles that fit ``pile_memory``.'),
    "seed": (
        "int",
        "Same seed, same source and same parameters give the same output, whatever the cluster. ``None`` draws a "
        "seed and records it (``ShuffleResult.seed``); a resumable shuffle interrupted and called again with "
        "``None`` continues with the seed it drew. (A loader's ``seed=None`` means the store's recorded seed "
        "instead: the loader reads the order a shuffle drew.)",
    ),
    "overwrite": ("bool", "Replace ``dst`` if it exists (only once every check has passed)."),
    "materialize": ("bool", "Write a fully shuffled copy instead of a pile store."),
    "pile_memory": (
        "int or str",
        'The largest pile allowed, in bytes or as a size such as "256MiB", checked at planning time, before '
        "anything is written.",
    ),
    "block_memory": (
        "int or str",
        'About how much of the source one pass-1 task reads, in bytes or as a size such as "64MiB".',
    ),
    "tmp": (
        "path or URL",
        "A directory for the pieces between the passes; they go to a subdirectory named after ``dst``, removed at "
        "the end, also after an error. ``tmp`` itself is never removed. By default ``<dst>.daskshuffle-tmp``, next "
        "to ``dst``; for a ``dst`` on object storage, this machine's temporary directory instead when every worker "
        "sees it and it has room for 2.5 times the data (a local disk writes and reads them faster than requests).",
    ),
    "progress": (
        "bool",
        "Show a progress bar while the tasks run: in a Jupyter kernel with a distributed client, distributed's "
        "widget (with ``ipywidgets``); in a terminal or a kernel without one, text. Then the bar's last state as "
        "one line, which a log or a saved notebook keeps (a log gets only that line).",
    ),
    "storage_options": ("dict", "Passed to fsspec for URLs."),
    "verify": (
        "bool",
        "Once the output is written, prove it holds exactly the source's rows (:func:`daskshuffle.verify`: an "
        "order-independent checksum of every variable on both sides, about a third of the shuffle's time); "
        "``VerificationError`` if not.",
    ),
    "levels": (
        '{"auto", 1, 2, 3, 4}',
        "Levels of scatter before the merge. With one, the merge reads about ``block_memory**2 / data`` bytes "
        "from every block (``block_memory / n_piles`` once a pile outgrows a block), which falls with the data's "
        "size; with ``L``, rows go first to about ``(data / block_memory)^(1/L)`` super-piles, each split as many "
        "ways again by every level but the last, then to piles, keeping reads large for one more write and read "
        'of the data a level. ``"auto"`` adds a level where fewer would make ten thousand reads or more of under '
        "64 KiB, and more while a level costs less than the reads it saves (two from about 256 GiB with the "
        "defaults and ``n_piles='auto'``, three from about 66 TiB); :func:`daskshuffle.explain` shows the choice.",
    ),
}
#: The line of a shuffle's docstring that :func:`document_options` replaces with the shared options' entries.
OPTIONS_PLACEHOLDER = "{shared options}"


def _entry(name: str, default: object, description: str, indent: str) -> str:
    kind = OPTION_DOCS[name][0]
    given = (
        "optional" if default is None else f'default "{default}"' if isinstance(default, str) else f"default {default}"
    )
    body = textwrap.fill(
        description,
        88 - len(indent),
        initial_indent=indent + "    ",
        subsequent_indent=indent + "    ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    return f"{indent}{name} : {kind}, {given}\n{body}"


def document_options(*, instead: Mapping[str, str] | None = None, **more: str) -> Callable[[Function], Function]:
    """Write the shared options a shuffle takes into its docstring, where it says ``{shared options}``.

    Each entry is :data:`OPTION_DOCS`' text with the default of the
    shuffle's own signature; ``more[name]`` follows the text of ``name``,
    ``instead[name]`` replaces it. The function itself is returned, its
    ``__doc__`` set: nothing wraps it.

    Examples
    --------
    >>> @document_options(storage_options="Also for ``tmp``.")
    ... def shuffle(src, dst, *, storage_options=None):
    ...     \"\"\"Shuffle.
    ...
    ...     Parameters
    ...     ----------
    ...     {shared options}
    ...     \"\"\"
    >>> print(inspect.getdoc(shuffle))
    Shuffle.
    <BLANKLINE>
    Parameters
    ----------
    storage_options : dict, optional
        Passed to fsspec for URLs. Also for ``tmp``.
    """
    replaced = dict(instead or {})

    def document(function: Function) -> Function:
        doc = function.__doc__ or ""
        line = next((line for line in doc.splitlines() if line.strip() == OPTIONS_PLACEHOLDER), None)
        if line is None:
            raise DaskShuffleValueError(f"Expected {function.__name__}'s docstring to hold {OPTIONS_PLACEHOLDER}.")
        indent = line[: len(line) - len(line.lstrip())]
        parameters = inspect.signature(function).parameters
        entries = [
            _entry(
                name,
                parameters[name].default,
                replaced.get(name, text) + (" " + more[name] if name in more else ""),
                indent,
            )
            for name, (_, text) in OPTION_DOCS.items()
            if name in parameters
        ]
        function.__doc__ = doc.replace(line, "\n".join(entries), 1)
        return function

    return document


def lines_block_memory(block_memory: object, pile_memory: object) -> object:
    """``shuffle_lines``' default block: 16 MiB, or half the pile if that is less."""
    if block_memory is not None:
        return block_memory
    half_pile = max(parse_nbytes(pile_memory, "pile_memory") // 2, 1)
    return min(_LINES_BLOCK_NBYTES, half_pile)


def parse_forwarded_options(
    shuffle: Callable[..., Any], options: object, *, decided: Sequence[str], parameter: str, why: str
) -> dict[str, Any]:
    """``options`` for ``shuffle``, checked now rather than when it runs: its parameters, but not those ``decided``.

    ``EpochShuffler`` takes ``shuffle_options={...}`` and passes them on to a
    shuffle that runs later (in the background, for the epochs).

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
