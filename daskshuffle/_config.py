"""daskshuffle's tuning knobs: one donfig configuration (:class:`Config`), as ``zarr.config`` and ``dask.config`` are.

Each default's reason is in ``docs/configuration.md``. A value is read where it is used, through
:func:`int_setting` and :func:`float_setting`, which check it, once when a reader, loader or task is
made; one that two processes must agree on is read once on the client and travels with the shuffle.
"""

from __future__ import annotations

from typing import Any

import donfig

from ._errors import DaskShuffleTypeError, DaskShuffleValueError
from ._parse import parse_nbytes, parse_positive_int

__all__ = ["config", "float_setting", "int_setting"]

_MiB = 2**20

#: Every knob and its default; ``docs/configuration.md`` has one row for each, with its reason.
DEFAULTS: dict[str, dict[str, Any]] = {
    "fetch": {
        "threads": 16,
        "in-flight": 256,
        "kept-nbytes": 64 * _MiB,
        "timeout": 30.0,
    },
    "loader": {
        "read-ahead-nbytes": 256 * _MiB,
        "units-budget-least-nbytes": 128 * _MiB,
        "units-budget-most-nbytes": 4096 * _MiB,
    },
    "zarr-reader": {
        "task-nbytes": 2 * _MiB,
        "local-task-nbytes": 512 * 2**10,
        "spare-arrays": 2,
        "direct-nbytes": 128 * 2**10,
    },
    "parquet-reader": {
        "footer-threads": 16,
        "footers-kept": 64,
        "range-nbytes": 8 * _MiB,
        "group-threads": 2,
    },
    "shuffle": {
        "run-nbytes": 16 * _MiB,
        "remote-threads": 16,
        "piece-readers": 16,
        "parts-at-once": 8,
        "part-nbytes": 4 * _MiB,
        "remote-runs": 16,
        "remote-run-chunks": 10,
        "remote-part-nbytes": 16 * _MiB,
        "parquet-range-nbytes": 8 * _MiB,
        "parquet-footers-at-once": 1024,
    },
    "lines": {
        "one-pass-lines": 2**18,
    },
    # 1 MiB: temporaries of 4-7 bytes a byte; 256 KiB hashed JSON lines 1.3 times slower (more windows).
    "verify": {"hash-nbytes": _MiB},
    "quality": {"chunk-rows": 2**22},
    "torch": {"shared-nbytes": 4 * _MiB},
}


class Config(donfig.Config):  # type: ignore[misc]
    """daskshuffle's tuning knobs (``docs/configuration.md``): ``get``, ``set`` (also as a context manager), ``refresh``.

    A key is ``"section.name"``; environment variables ``DASKSHUFFLE_SECTION__NAME`` and YAML files
    in ``~/.config/daskshuffle`` are read at first use.

    Examples
    --------
    >>> import daskshuffle as ds
    >>> ds.config.get("fetch.in-flight")
    256
    >>> with ds.config.set({"loader.read-ahead-nbytes": "1GiB"}):
    ...     ds.config.get("loader.read-ahead-nbytes")
    '1GiB'
    """

    def __repr__(self) -> str:
        return "daskshuffle.config"


#: The configuration: ``daskshuffle.config``.
config = Config("daskshuffle", defaults=[DEFAULTS])


def _name(key: str) -> str:
    return f"daskshuffle.config[{key!r}]"


def int_setting(key: str) -> int:
    """The positive integer ``key`` is set to; a key ending in ``-nbytes`` also takes a size such as ``"64MiB"``.

    Examples
    --------
    >>> with config.set({"fetch.kept-nbytes": "1MiB"}):
    ...     int_setting("fetch.kept-nbytes")
    1048576
    """
    value = config.get(key)
    if key.endswith("-nbytes"):
        return parse_nbytes(value, _name(key))
    return parse_positive_int(value, _name(key))


def float_setting(key: str) -> float:
    """The number of at least 0 that ``key`` is set to.

    Examples
    --------
    >>> float_setting("fetch.timeout")
    30.0
    """
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DaskShuffleTypeError(f"Expected {_name(key)} to be a number. Got {value!r} instead.")
    if not value >= 0:
        raise DaskShuffleValueError(f"Expected {_name(key)} to be a number of at least 0. Got {value!r} instead.")
    return float(value)
