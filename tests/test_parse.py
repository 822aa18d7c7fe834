"""The boundary's parse helpers: what they accept, and errors that name the argument."""

from __future__ import annotations

from typing import Any

import pytest

import daskshuffle as ds
from daskshuffle import _parse


@pytest.mark.parametrize(
    ("parse", "value", "parameter"),
    [
        (lambda value: _parse.parse_positive_int(value, "batch_size"), 0, "batch_size"),
        (lambda value: _parse.parse_nbytes(value, "pile_memory"), "lots", "pile_memory"),
        (_parse.parse_seed, -1, "seed"),
        (lambda value: _parse.parse_variables(value, "columns"), [], "columns"),
        (lambda value: _parse.parse_count(value, "epoch"), True, "epoch"),
    ],
)
def test_parse_errors_name_their_parameter(parse: Any, value: object, parameter: str) -> None:
    with pytest.raises(ds.DaskShuffleError) as caught:
        parse(value)
    assert caught.value.parameter == parameter
    assert isinstance(caught.value, ValueError | TypeError)


def test_settings_round_trip_and_refuse_other_keys() -> None:
    from daskshuffle.plan._options import parse_shuffle_options
    from daskshuffle.plan._plan import ShuffleSettings

    for settings in (
        ShuffleSettings(n_piles=8, seed=1, materialize=False),
        parse_shuffle_options(dst="out.zarr", seed=0),
    ):
        assert type(settings).from_dict(settings.to_dict()) == settings
        with pytest.raises(ds.DaskShuffleValueError, match=f"Expected {type(settings).__name__} with the keys"):
            type(settings).from_dict({**settings.to_dict(), "extra": 1})
