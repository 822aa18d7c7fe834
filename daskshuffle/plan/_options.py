"""The arguments every shuffle shares: declared once, checked once at the boundary.

Each public shuffle (``shuffle_zarr``, ``shuffle_parquet``, ``shuffle_dataframe``,
``shuffle_xarray``, ``shuffle_lines``) declares only its own parameters,
``n_piles`` and ``**options: Unpack[ShuffleKeywords]``, and is declared with
:func:`common_options`, which checks at import that those name every option of
:data:`COMMON_OPTIONS`, gives it the public signature that lists them all with
their defaults, binds each call to it, and writes their docs into its
docstring; it hands its options to :func:`parse_shuffle_options` and passes the
frozen :class:`ShuffleOptions` on. The command line declares its options of a
shuffle from :data:`COMMON_OPTIONS` too (their names and defaults), and takes
its other defaults from the constants of ``_option_set``. A new common option
is added there, once (and to ``ShuffleKeywords``, which is checked against it).
"""

from __future__ import annotations

import functools
import inspect
import re
import textwrap
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, Unpack, cast

from .._errors import DaskShuffleTypeError, DaskShuffleValueError
from .._parse import Settings, parse_bool, parse_levels, parse_n_piles, parse_nbytes, parse_path, parse_seed
from ._option_set import (
    COMMON_OPTIONS,
    DEFAULT_BLOCK_MEMORY,
    DEFAULT_LINES_BLOCK_MEMORY,
    DEFAULT_LINES_PILE_MEMORY,
    DEFAULT_N_PILES,
    DEFAULT_PARQUET_COMPRESSION,
    DEFAULT_PILE_MEMORY,
    PARQUET_COMPRESSIONS,
    TEXT_DEFAULTS,
    TEXT_FIXED,
    CommonOption,
    ShuffleKeywords,
    TextKeywords,
)

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
    "common_options",
    "lines_block_memory",
    "parse_forwarded_options",
    "parse_shuffle_options",
]


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


_BY_NAME = {option.name: option for option in COMMON_OPTIONS}

_Shuffle = TypeVar("_Shuffle", bound=Callable[..., Any])
#: The docstring line that stands for the entries of every common option a shuffle takes.
_PLACEHOLDER = re.compile(r"^(?P<indent>[ ]*)\{options\}$", re.MULTILINE)
#: A numpydoc section's header: its title, underlined.
_SECTION = re.compile(r"^(?P<indent>[ ]*)(?P<title>[A-Z][a-z]+(?: [A-Z][a-z]+)?)\n(?P=indent)-+$", re.MULTILINE)
#: What every public shuffle returns, written into its docstring after its parameters.
_RETURNS = """Returns
-------
ShuffleResult
    What was written: its path, rows, piles and their sizes, and the seed
    (the one drawn, with ``seed=None``).
"""


def common_options(
    *,
    defaults: Mapping[str, object] | None = None,
    fixed: Mapping[str, object] | None = None,
    notes: Mapping[str, str] | None = None,
) -> Callable[[_Shuffle], _Shuffle]:
    """Declare a public shuffle: its signature and docs, from its own parameters and the common options.

    The shuffle declares its own parameters, ``n_piles`` with its common
    default (or the one ``defaults`` gives), and ``**options:
    Unpack[ShuffleKeywords]`` (``TextKeywords`` for text), whose keys must be
    the other options of :data:`COMMON_OPTIONS` but the ``fixed`` ones: else
    importing the module fails. The declared shuffle's signature lists them
    all, the options keyword-only with their defaults; a call is bound to it
    first (an unknown keyword is a ``TypeError``, as for any function), and the
    shuffle receives every option, defaults filled in. The ``{options}`` line
    of its docstring becomes every option's numpydoc entry (with ``notes``
    added to them), and the ``Returns`` section is written after its
    parameters, each of which must be documented.

    Examples
    --------
    >>> @common_options()
    ... def shuffle_nothing(dst, n_piles=512, **options):
    ...     pass
    Traceback (most recent call last):
    ...
    TypeError: Expected shuffle_nothing to take **options: Unpack[ShuffleKeywords] (or TextKeywords). Got ...
    """
    chosen_defaults = dict(defaults or {})
    chosen_fixed = dict(fixed or {})
    chosen_notes = dict(notes or {})

    def declare(shuffle: _Shuffle) -> _Shuffle:
        name = shuffle.__qualname__
        unknown = sorted((set(chosen_defaults) | set(chosen_fixed) | set(chosen_notes)) - set(_BY_NAME))
        if unknown:
            raise TypeError(f"Expected common options of {name}. Got {unknown} instead; see COMMON_OPTIONS.")
        signature = _public_signature(shuffle, chosen_defaults, chosen_fixed)
        shuffle.__doc__ = _document(
            name, shuffle.__doc__ or "", list(signature.parameters), chosen_defaults, chosen_fixed, chosen_notes
        )

        @functools.wraps(shuffle)
        def public(*args: Any, **kwargs: Any) -> Any:
            # As Python checks a function's arguments: an unknown keyword first, then the others.
            unknown = [keyword for keyword in kwargs if keyword not in signature.parameters]
            if unknown:
                raise TypeError(f"{name}() got an unexpected keyword argument {unknown[0]!r}")
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as error:
                raise TypeError(f"{name}() {error}") from None
            bound.apply_defaults()
            return shuffle(**bound.arguments)

        public.__signature__ = signature  # type: ignore[attr-defined]
        return cast("_Shuffle", public)

    return declare


def _public_signature(
    shuffle: Callable[..., Any], defaults: Mapping[str, object], fixed: Mapping[str, object]
) -> inspect.Signature:
    """``shuffle``'s own parameters, then the options of its ``**options``, keyword-only, with their defaults."""
    name = shuffle.__qualname__
    declared = inspect.signature(shuffle)
    own = [parameter for parameter in declared.parameters.values() if parameter.kind is not parameter.VAR_KEYWORD]
    if "dst" not in declared.parameters or any(
        parameter.kind in (parameter.POSITIONAL_ONLY, parameter.VAR_POSITIONAL) for parameter in own
    ):
        raise TypeError(f"Expected {name} to take dst, and no positional-only or *args. Got {declared} instead.")
    keywords = _keywords(shuffle, declared)
    for option in COMMON_OPTIONS:
        default = defaults.get(option.name, option.default)
        parameter = declared.parameters.get(option.name)
        if option.name in fixed and option.name in keywords:
            raise TypeError(f"Expected the options of {name} without {option.name}, which it fixes. Got it instead.")
        if option.name in fixed or option.name in keywords:
            if parameter is not None:
                raise TypeError(
                    f"Expected {name} to take {option.name} only from **options. Got a parameter {option.name} "
                    "instead; declare its type once, in ShuffleKeywords, and its default in COMMON_OPTIONS."
                )
        elif parameter is None or type(parameter.default) is not type(default) or parameter.default != default:
            got = "no such parameter" if parameter is None else f"{option.name}={parameter.default!r}"
            raise TypeError(
                f"Expected {name} to take the common option {option.name}={default!r}. Got {got} instead; "
                "declare its name and default once, in daskshuffle.plan._option_set.COMMON_OPTIONS."
            )
    unknown = sorted(set(keywords) - set(_BY_NAME))
    if unknown:
        raise TypeError(f"Expected the options of {name} to be common options. Got {unknown} instead.")
    common = [
        inspect.Parameter(
            option.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=defaults.get(option.name, option.default),
            annotation=keywords[option.name],
        )
        for option in COMMON_OPTIONS
        if option.name in keywords
    ]
    return declared.replace(parameters=[*own, *common])


def _keywords(shuffle: Callable[..., Any], declared: inspect.Signature) -> dict[str, object]:
    """The options of ``shuffle``'s ``**options: Unpack[...]``, each with its type as its ``TypedDict`` spells it."""
    annotation: object = None
    for parameter in declared.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            annotation = parameter.annotation
            if isinstance(annotation, str):  # postponed: resolved where the shuffle was written
                stand_in = types.SimpleNamespace(__annotations__={"options": annotation})
                annotation = typing.get_type_hints(stand_in, getattr(shuffle, "__globals__", {}))["options"]
    keywords = typing.get_args(annotation)[0] if typing.get_origin(annotation) is Unpack else None
    if keywords is None or not typing.is_typeddict(keywords):
        raise TypeError(
            f"Expected {shuffle.__qualname__} to take **options: Unpack[ShuffleKeywords] (or TextKeywords). Got "
            f"{annotation!r} instead."
        )
    return {
        key: value.__forward_arg__ if isinstance(value, typing.ForwardRef) else value
        for key, value in keywords.__annotations__.items()
    }


def _document(
    name: str,
    doc: str,
    parameters: Sequence[str],
    defaults: Mapping[str, object],
    fixed: Mapping[str, object],
    notes: Mapping[str, str],
) -> str:
    """``doc`` with its ``{options}`` line replaced by every option's entry and ``Returns`` after its parameters."""
    if len(_PLACEHOLDER.findall(doc)) != 1:
        raise TypeError(f"Expected the docstring of {name} to hold one line {{options}}. Got none or several instead.")
    entries = "\n".join(
        option.describe(defaults.get(option.name, option.default), notes.get(option.name, ""))
        for option in COMMON_OPTIONS
        if option.name not in fixed
    )
    doc = _PLACEHOLDER.sub(lambda match: textwrap.indent(entries, match["indent"]), doc)
    sections = list(_SECTION.finditer(doc))
    titles = [section["title"] for section in sections]
    if "Parameters" not in titles or "Returns" in titles:
        raise TypeError(f"Expected the docstring of {name} to have Parameters and no Returns. Got {titles} instead.")
    at = titles.index("Parameters")
    indent = sections[at]["indent"]
    end = sections[at + 1].start() if at + 1 < len(sections) else len(doc.rstrip())
    documented = {
        part.strip()
        for line in doc[sections[at].end() : end].splitlines()
        if line.startswith(indent) and line[len(indent) : len(indent) + 1].strip()
        for part in line.split(" :")[0].split(",")
    }
    missing = [parameter for parameter in parameters if parameter not in documented]
    if missing:
        raise TypeError(f"Expected the docstring of {name} to document every parameter. Got none for {missing}.")
    returns = textwrap.indent(_RETURNS, indent) + "\n"
    return doc[:end] + returns + doc[end:] if at + 1 < len(sections) else doc[:end] + "\n\n" + returns + indent


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
