"""Declare a public shuffle once: its signature and docs from its own parameters and the common options.

:func:`common_options` is the decorator of every public shuffle: it checks at
import that the shuffle's ``**options: Unpack[ShuffleKeywords]`` names the
options of :data:`~daskshuffle.plan._options.COMMON_OPTIONS`, builds the public
signature that lists them with their defaults (what ``help``, the API reference
and ``shuffle_options`` checks read), binds each call to it, and writes the
options' docs and the ``Returns`` section into the docstring.
"""

from __future__ import annotations

import functools
import inspect
import re
import textwrap
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, Unpack, cast

from ._options import COMMON_OPTIONS

__all__ = ["common_options"]

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

        # The function wrapped shows the same signature: griffe (the API reference) reads the unwrapped function.
        shuffle.__signature__ = public.__signature__ = signature  # type: ignore[attr-defined]
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
                "declare its name and default once, in daskshuffle.plan._options.COMMON_OPTIONS."
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
