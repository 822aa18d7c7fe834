"""The boundary's parse helpers: what they accept, and errors that name the argument."""

from __future__ import annotations

from typing import Any

import pytest
from dask.utils import parse_bytes
from hypothesis import given, strategies as st

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
    from daskshuffle.plan._plan import ShuffleSettings
    from daskshuffle.shuffle._options import parse_shuffle_options

    for settings in (
        ShuffleSettings(n_piles=8, seed=1, materialize=False),
        parse_shuffle_options(
            dict(
                dst="out.zarr",
                n_piles=512,
                seed=0,
                overwrite=False,
                materialize=False,
                pile_memory="256MiB",
                block_memory="64MiB",
                tmp=None,
                progress=False,
                storage_options=None,
                verify=False,
                levels="auto",
            )
        ),
    ):
        assert type(settings).from_dict(settings.to_dict()) == settings
        with pytest.raises(ds.DaskShuffleValueError, match=f"Expected {type(settings).__name__} with the keys"):
            type(settings).from_dict({**settings.to_dict(), "extra": 1})


_UNITS = [
    "",
    "b",
    "B",
    "k",
    "kB",
    "KB",
    "KiB",
    "ki",
    "M",
    "MB",
    "MiB",
    "mib",
    "G",
    "GB",
    "GiB",
    "T",
    "TB",
    "TiB",
    "P",
    "PiB",
]


@given(
    number=st.one_of(
        st.integers(min_value=0, max_value=10**6).map(str),
        st.floats(min_value=0, max_value=1e6, allow_nan=False).map(lambda value: f"{value:.3f}"),
        st.integers(min_value=0, max_value=6).map(lambda power: f"1e{power}"),
    ),
    unit=st.sampled_from(_UNITS),
    space=st.sampled_from(["", " "]),
)
def test_sizes_in_words_are_read_as_dask_reads_them(number: str, unit: str, space: str) -> None:
    text = f"{number}{space}{unit}"
    assert _parse.size_in_bytes(text) == parse_bytes(text)


@pytest.mark.parametrize("text", ["", "MiB-", "5 XB", "1.2.3MB", "-5MB", "five MB", "5 MiBs"])
def test_a_size_that_names_no_bytes_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="number of bytes"):
        _parse.size_in_bytes(text)
    with pytest.raises(ds.DaskShuffleValueError, match="to be a size such as '256MiB'"):
        _parse.parse_nbytes(text, "prefetch")


def test_sizes_are_shown_in_the_binary_units_they_are_read_in() -> None:
    sizes = (0, 999, 1024, 1_250_000, 999_999_999_999, 5 * 2**50, 2**70)
    shown = [_parse.format_size(n) for n in sizes]
    assert shown == ["0 B", "999 B", "1 KiB", "1.19 MiB", "931 GiB", "5 PiB", "1,024 EiB"]
    assert [_parse.parse_nbytes(shown[i], "size") for i in (2, 5)] == [1024, 5 * 2**50]
