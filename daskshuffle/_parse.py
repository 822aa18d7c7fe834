"""Normalise public arguments once, at the boundary. Internals trust the result."""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Self, cast

from ._errors import Argument, DaskShuffleTypeError, DaskShuffleValueError
from ._random import MAX_SEED, draw_seed

__all__ = [
    "Settings",
    "format_number",
    "format_size",
    "parse_bool",
    "parse_n_piles",
    "parse_nbytes",
    "parse_path",
    "parse_positive_int",
    "parse_seed",
    "parse_variables",
    "parse_whole_number",
]


class Settings:
    """A frozen dataclass of settings that round-trips through a dict; ``from_dict`` refuses other keys."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(cast(Any, self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        names = [field.name for field in dataclasses.fields(cast(Any, cls))]
        if not isinstance(data, Mapping) or sorted(data) != sorted(names):
            raise DaskShuffleValueError(f"Expected {cls.__name__} with the keys {names}. Got {data!r} instead.")
        return cls(**{name: data[name] for name in names})


def _parse_int(value: object, name: str, *, low: int, expected: str) -> int:
    """An integer >= ``low``: another type is a ``TypeError``, a smaller integer a ``ValueError``."""
    message = ("Expected ", Argument(name), f" to be {expected}. Got {value!r} instead.")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise DaskShuffleTypeError(message, parameter=name)
    if value < low:
        raise DaskShuffleValueError(message, parameter=name)
    return int(value)


def parse_positive_int(value: object, name: str) -> int:
    return _parse_int(value, name, low=1, expected="a positive integer")


def parse_n_piles(value: object) -> int | Literal["auto"]:
    if value == "auto":
        return "auto"
    return parse_positive_int(value, "n_piles")


def parse_levels(value: object) -> int | Literal["auto"]:
    """``"auto"`` or 1 to ``MAX_LEVELS`` (4): the levels of scatter before the merge."""
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or value not in (1, 2, 3, 4):
        raise DaskShuffleValueError(
            f"Expected levels to be 'auto' or 1 to 4. Got {value!r} instead; 'auto' adds levels where fewer would "
            "make the merge's reads small.",
            parameter="levels",
        )
    return int(value)


def parse_seed(value: object) -> int:
    """``None`` draws a fresh seed; an integer must lie in ``[0, 2**63)``."""
    if value is None:
        return draw_seed()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise DaskShuffleTypeError(f"Expected seed to be None or an integer. Got {value!r} instead.", parameter="seed")
    seed = int(value)
    if not 0 <= seed <= MAX_SEED:
        raise DaskShuffleValueError(f"Expected seed to lie in [0, 2**63). Got {value!r} instead.", parameter="seed")
    return seed


#: Bytes of each unit a size may name, case-insensitive, as dask's ``parse_bytes`` reads them: decimal
#: (``kB``, ``MB``, ... or ``k``, ``M``, ...) and binary (``KiB``, ``MiB``, ... or ``Ki``, ``Mi``, ...).
_UNITS = {
    "": 1,
    "b": 1,
    **{f"{prefix}b": 1000**power for power, prefix in enumerate("kmgtp", start=1)},
    **{prefix: 1000**power for power, prefix in enumerate("kmgtp", start=1)},
    **{f"{prefix}ib": 1024**power for power, prefix in enumerate("kmgtp", start=1)},
    **{f"{prefix}i": 1024**power for power, prefix in enumerate("kmgtp", start=1)},
}
_SIZE = re.compile(r"(?P<number>[0-9]*\.?[0-9]*(?:e[+-]?[0-9]+)?)(?P<unit>[a-z]*)")


def size_in_bytes(text: str) -> int:
    """The bytes a size such as ``"256MiB"``, ``"64 MB"`` or ``"1e6"`` names; ``ValueError`` if it names none.

    The units and spellings are dask's (``dask.utils.parse_bytes``), without loading dask.

    Examples
    --------
    >>> size_in_bytes("256MiB"), size_in_bytes("64 kB"), size_in_bytes("1.5GiB"), size_in_bytes("MB")
    (268435456, 64000, 1610612736, 1000000)
    """
    found = _SIZE.fullmatch(text.replace(" ", "").lower())
    if found is None or found["unit"] not in _UNITS or (found["number"] in (".", "") and not found["unit"]):
        raise ValueError(f"Could not interpret {text!r} as a number of bytes.")
    number = float(found["number"]) if found["number"] not in ("", ".") else 1.0
    return int(number * _UNITS[found["unit"]])


def parse_nbytes(value: object, name: str) -> int:
    """A size in bytes: an integer or a string such as ``"256MiB"``."""
    if isinstance(value, str):
        try:
            value = size_in_bytes(value)
        except ValueError as error:
            raise DaskShuffleValueError(
                ("Expected ", Argument(name), f" to be a size such as '256MiB'. Got {value!r} instead."), parameter=name
            ) from error
    return parse_positive_int(value, name)


_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def format_size(nbytes: float) -> str:
    """A size as people read it, in the binary units :func:`parse_nbytes` takes: three significant digits.

    Examples
    --------
    >>> format_size(0), format_size(1536), format_size(50_200), format_size(2**40)
    ('0 B', '1.5 KiB', '49 KiB', '1 TiB')
    """
    value, unit = float(nbytes), 0
    while value >= 1024 and unit < len(_BINARY_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{format_number(value)} {_BINARY_UNITS[unit]}"


def format_number(value: float) -> str:
    """Three significant digits, without an exponent: ``0.0123``, ``1.5``, ``123``, ``12,345``."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def parse_bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise DaskShuffleTypeError(
            ("Expected ", Argument(name), f" to be True or False. Got {value!r} instead."), parameter=name
        )
    return value


def parse_path(value: object, name: str) -> str:
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise DaskShuffleTypeError(
            ("Expected ", Argument(name), f" to be a path or URL. Got {value!r} instead."), parameter=name
        )
    return os.fspath(value)


def parse_variables(value: object, name: str = "variables") -> list[str] | None:
    """``None`` (all of them) or a non-empty list of distinct names of variables (or columns)."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise DaskShuffleTypeError(
            ("Expected ", Argument(name), f" to be a list of names. Got {value!r} instead."), parameter=name
        )
    if not value:
        raise DaskShuffleValueError(
            ("Expected ", Argument(name), " to name at least one. Got an empty list instead."), parameter=name
        )
    if len(set(value)) != len(value):
        raise DaskShuffleValueError(
            ("Expected ", Argument(name), f" to name each once. Got {list(value)} instead."), parameter=name
        )
    return list(value)


def parse_whole_number(value: object, name: str) -> int:
    """A positive whole number, also written as a float (``1e10``), as a count of rows is on the command line."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool | numbers.Integral):
        number = float(value)
        if not math.isfinite(number) or number != int(number) or number < 1:
            raise DaskShuffleValueError(
                ("Expected ", Argument(name), f" to be a positive whole number such as 1e10. Got {value!r} instead."),
                parameter=name,
            )
        return int(number)
    return _parse_int(value, name, low=1, expected="a positive whole number such as 1e10")


def parse_count(value: object, name: str) -> int:
    """A nonnegative integer, such as a rank, an epoch or a prefetch depth."""
    return _parse_int(value, name, low=0, expected="an integer >= 0")
