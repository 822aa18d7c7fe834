"""One option set for every public shuffle: the same names and defaults, docs written once, checked at import."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Unpack

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import daskshuffle as ds
from daskshuffle.pilestore import ParquetWriting, read_metadata
from daskshuffle.plan._declare import common_options
from daskshuffle.plan._options import (
    COMMON_OPTIONS,
    TEXT_DEFAULTS,
    TEXT_FIXED,
    ShuffleKeywords,
    TextKeywords,
    parse_forwarded_options,
    parse_shuffle_options,
)
from daskshuffle.shuffle._verify import verify_source
from daskshuffle.sources._dataframe import open_dataframe_source
from daskshuffle.storage._location import Location

SHUFFLES: dict[str, Callable[..., Any]] = {
    "shuffle_zarr": ds.shuffle_zarr,
    "shuffle_parquet": ds.shuffle_parquet,
    "shuffle_dataframe": ds.shuffle_dataframe,
    "shuffle_xarray": ds.shuffle_xarray,
    "shuffle_lines": ds.shuffle_lines,
}


@pytest.mark.parametrize("name", sorted(SHUFFLES))
def test_every_shuffle_takes_the_common_options_with_the_same_defaults(name: str) -> None:
    shuffle = SHUFFLES[name]
    parameters = inspect.signature(shuffle).parameters
    text = name == "shuffle_lines"
    assert "dst" in parameters
    for option in COMMON_OPTIONS:
        if text and option.name in TEXT_FIXED:
            assert option.name not in parameters, "text output is always fully shuffled"
            continue
        expected = TEXT_DEFAULTS.get(option.name, option.default) if text else option.default
        assert option.name in parameters, option.name
        assert parameters[option.name].default == expected, option.name
        assert type(parameters[option.name].default) is type(expected), option.name
        assert f"\n    {option.name} : " in (shuffle.__doc__ or ""), f"{name} documents {option.name}"
    assert "{options:" not in (shuffle.__doc__ or "")


def test_text_defaults_are_only_the_documented_ones() -> None:
    assert set(TEXT_DEFAULTS) == {"n_piles", "pile_memory", "block_memory"}
    assert dict(TEXT_FIXED) == {"materialize": True}
    doc = ds.shuffle_lines.__doc__ or ""
    assert 'n_piles : int or "auto", default "auto"' in doc and "text's own" in doc


@pytest.mark.parametrize("name", sorted(SHUFFLES))
@pytest.mark.parametrize("keyword", ["sed", "n_pile", "materialise"])
def test_a_misspelled_option_is_a_type_error_as_python_words_it(name: str, keyword: str, tmp_path: Path) -> None:
    def plain(src: str, dst: str, *, seed: int | None = None) -> None:
        pass

    with pytest.raises(TypeError) as python:
        plain("src", "out", **{keyword: 8})
    with pytest.raises(TypeError) as caught:
        SHUFFLES[name]("src", tmp_path / "out", **{keyword: 8})
    assert str(caught.value) == name + str(python.value).removeprefix(plain.__qualname__)
    assert str(caught.value) == f"{name}() got an unexpected keyword argument {keyword!r}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", sorted(SHUFFLES))
def test_the_signature_types_the_options_as_their_keywords_do(name: str) -> None:
    shuffle = SHUFFLES[name]
    keywords = TextKeywords if name == "shuffle_lines" else ShuffleKeywords
    parameters = inspect.signature(shuffle).parameters
    common = [parameter for parameter in parameters.values() if parameter.name in keywords.__annotations__]
    assert [parameter.name for parameter in common] == [
        option.name for option in COMMON_OPTIONS if option.name in keywords.__annotations__
    ]
    assert list(parameters)[-len(common) :] == [parameter.name for parameter in common], "the options come last"
    for parameter in common:
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
        assert parameter.annotation == keywords.__annotations__[parameter.name].__forward_arg__
    assert parameters["n_piles"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert inspect.signature(inspect.unwrap(shuffle)) == inspect.signature(shuffle), "as griffe reads it"
    assert not any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values())
    assert shuffle.__name__ == name and shuffle.__wrapped__.__doc__ == shuffle.__doc__  # type: ignore[attr-defined]
    assert shuffle.__doc__ is not None and shuffle.__doc__.count("\n    Returns\n    -------\n    ShuffleResult\n") == 1


def _admits(hint: object, value: object) -> bool:
    """Whether ``value`` is of the type ``hint`` (the few kinds a keyword option's type is made of)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_admits(arm, value) for arm in typing.get_args(hint))
    if origin is Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    return isinstance(value, typing.cast("type", origin or hint))


@pytest.mark.parametrize(("keywords", "defaults"), [(ShuffleKeywords, {}), (TextKeywords, TEXT_DEFAULTS)])
def test_the_keywords_and_common_options_agree(keywords: type, defaults: Mapping[str, object]) -> None:
    fixed = TEXT_FIXED if keywords is TextKeywords else {}
    assert set(keywords.__annotations__) == {option.name for option in COMMON_OPTIONS} - {"n_piles", *fixed}
    assert keywords.__required_keys__ == frozenset()  # type: ignore[attr-defined]
    hints = typing.get_type_hints(keywords)
    for option in COMMON_OPTIONS:
        if option.name in hints:
            default = defaults.get(option.name, option.default)
            assert _admits(hints[option.name], default), (option.name, default)
    assert not _admits(hints["pile_memory"], 2.5) and not _admits(hints["levels"], "two")


def test_a_declared_shuffle_gets_every_option_filled_in() -> None:
    @common_options()
    def shuffle(src: str, dst: str, n_piles: int | str = 512, **options: Unpack[ShuffleKeywords]) -> dict[str, Any]:
        """Shuffle.

        Parameters
        ----------
        src, dst : str
            From and to.
        {options}

        Examples
        --------
        >>> shuffle("a", "b")
        """
        return {"src": src, "dst": dst, "n_piles": n_piles, **options}

    received = shuffle("a", "b", 8, seed=3)
    expected = {option.name: option.default for option in COMMON_OPTIONS}
    assert received == {"src": "a", "dst": "b", **expected, "n_piles": 8, "seed": 3}
    with pytest.raises(TypeError, match=r"^test_a_declared.*shuffle\(\) missing a required argument: 'dst'$"):
        shuffle("a")
    with pytest.raises(TypeError, match=r"multiple values for argument 'n_piles'"):
        shuffle("a", "b", 8, n_piles=4)
    doc = shuffle.__doc__ or ""
    assert doc.index("    levels : ") < doc.index("    Returns\n") < doc.index("    Examples\n")
    assert parse_shuffle_options({k: v for k, v in received.items() if k != "src"}).n_piles == 8


def test_a_renamed_or_missing_option_fails_at_import() -> None:
    with pytest.raises(TypeError, match=r"to take \*\*options: Unpack\[ShuffleKeywords\]"):

        @common_options()
        def shuffle_without(dst: str, n_piles: int = 512, *, random_seed: int | None = None) -> None:
            pass

    with pytest.raises(TypeError, match=r"to take seed only from \*\*options\. Got a parameter seed"):

        @common_options()
        def shuffle_twice(dst: str, n_piles: int = 512, *, seed: int = 0, **options: Unpack[ShuffleKeywords]) -> None:
            pass

    with pytest.raises(TypeError, match=r"n_piles=512\. Got n_piles=8"):

        @common_options()
        def shuffle_other(dst: str, n_piles: int = 8, **options: Unpack[ShuffleKeywords]) -> None:
            pass

    with pytest.raises(TypeError, match=r"the common option materialize=False\. Got no such parameter"):

        @common_options(defaults=TEXT_DEFAULTS)
        def shuffle_text(dst: str, n_piles: int | str = "auto", **options: Unpack[TextKeywords]) -> None:
            pass

    with pytest.raises(TypeError, match=r"without materialize, which it fixes"):

        @common_options(fixed=TEXT_FIXED)
        def shuffle_fixed(dst: str, n_piles: int = 512, **options: Unpack[ShuffleKeywords]) -> None:
            pass


def _declare(doc: str, notes: Mapping[str, str] | None = None) -> str:
    def shuffle(
        dst: str, n_piles: int | str = 512, *, header: bool = False, **options: Unpack[ShuffleKeywords]
    ) -> None:
        pass

    shuffle.__doc__ = doc
    return common_options(notes=notes)(shuffle).__doc__ or ""


def test_every_parameter_is_documented_once() -> None:
    parameters = "Shuffle.\n\n    Parameters\n    ----------\n    dst : str\n        To.\n"
    with pytest.raises(TypeError, match=r"one line \{options\}"):
        _declare(parameters)
    with pytest.raises(TypeError, match=r"one line \{options\}"):
        _declare(parameters + "    {options}\n    {options}\n")
    with pytest.raises(TypeError, match=r"every parameter\. Got none for \['header'\]"):
        _declare(parameters + "    {options}\n")
    with pytest.raises(TypeError, match=r"no Returns"):
        _declare(parameters + "    header : bool\n        Kept.\n    {options}\n\n    Returns\n    -------\n    None\n")
    documented = _declare(parameters + "    header : bool\n        Kept.\n    {options}\n    ", {"tmp": "A note."})
    assert '    n_piles : int or "auto", default 512\n        Number of piles.' in documented
    assert "    seed : int, optional\n" in documented and "A note." in documented
    assert documented.endswith(
        "\n\n    Returns\n    -------\n    ShuffleResult\n        What was written: its path, rows, piles and their sizes, and the seed\n        (the one drawn, with ``seed=None``).\n\n    "
    )


@pytest.mark.parametrize("name", sorted(SHUFFLES))
def test_forwarded_options_are_checked_against_the_public_signature(name: str) -> None:
    shuffle = SHUFFLES[name]
    with pytest.raises(ds.DaskShuffleTypeError, match=r"Got \['sed'\] instead; it takes \[.*'levels'\]"):
        parse_forwarded_options(shuffle, {"sed": 1}, decided=[], parameter="shuffle_options", why="")
    assert parse_forwarded_options(shuffle, {"seed": 1, "levels": 2}, decided=[], parameter="x", why="") == {
        "seed": 1,
        "levels": 2,
    }


def test_n_piles_may_be_given_by_position(tmp_path: Path) -> None:
    import dask.array as da

    result = ds.shuffle_zarr(da.arange(100, chunks=50), tmp_path / "piles.zarr", 4, seed=0)
    assert (result.n_piles, result.n_rows) == (4, 100)


def test_a_shuffle_that_drops_an_option_fails_when_called() -> None:
    arguments = {option.name: option.default for option in COMMON_OPTIONS if option.name != "levels"}
    with pytest.raises(TypeError, match=r"Got none for \['levels'\]"):
        parse_shuffle_options({**arguments, "dst": "out.zarr"})
    assert parse_shuffle_options({**arguments, "dst": "out.zarr"}, levels=2).levels == 2
    with pytest.raises(TypeError, match=r"unexpected arguments \['variables'\]"):
        parse_shuffle_options({**arguments, "dst": "out.zarr", "levels": 2, "variables": None})


def test_sizes_take_strings_and_integers_alike() -> None:
    for name in ("pile_memory", "block_memory"):
        given = parse_shuffle_options(dst="o", seed=0, **{name: "64MiB"})
        assert given == parse_shuffle_options(dst="o", seed=0, **{name: 64 * 2**20})


def _frame(n: int = 600) -> pd.DataFrame:
    return pd.DataFrame({"id": np.arange(n), "label": [f"row {i}" for i in range(n)]})


@pytest.mark.parametrize("dask_frame", [False, True])
def test_shuffle_dataframe_levels_and_verify(tmp_path: Path, dask_frame: bool) -> None:
    frame = _frame()
    df = dd.from_pandas(frame, npartitions=6) if dask_frame else frame
    result = ds.shuffle_dataframe(df, tmp_path / "two", n_piles=8, seed=0, block_memory=4_000, levels=2, verify=True)
    metadata = read_metadata(tmp_path / "two")
    assert metadata is not None and metadata["levels"]["n_levels"] == 2
    assert result.n_rows == len(frame)
    out = pd.read_parquet(tmp_path / "two").sort_values("id")
    assert out["id"].tolist() == frame["id"].tolist() and out["label"].tolist() == frame["label"].tolist()
    ds.shuffle_dataframe(df, tmp_path / "one", n_piles=8, seed=0, block_memory=4_000, levels=1)
    assert "levels" not in (read_metadata(tmp_path / "one") or {})


def test_verify_source_refuses_a_store_of_other_rows(tmp_path: Path) -> None:
    ds.shuffle_dataframe(_frame(), tmp_path / "piles", n_piles=4, seed=0)
    other = _frame()
    other.loc[5, "label"] = "changed"
    fmt = open_dataframe_source(other, index=None, block_nbytes=4_000, writing=ParquetWriting())
    with pytest.raises(ds.VerificationError, match="'label'"):
        verify_source(Location.of(str(tmp_path / "piles")), fmt, block_nbytes=4_000, progress=False)
    fmt = open_dataframe_source(_frame(), index=None, block_nbytes=4_000, writing=ParquetWriting())
    assert verify_source(Location.of(str(tmp_path / "piles")), fmt, block_nbytes=4_000, progress=False).n_rows == 600


def test_shuffle_xarray_levels_and_verify(tmp_path: Path) -> None:
    data = xr.Dataset({"x": (("sample", "feature"), np.arange(4000.0).reshape(1000, 4))}).chunk({"sample": 100})
    result = ds.shuffle_xarray(
        data, tmp_path / "two.zarr", "sample", n_piles=8, seed=0, block_memory=3_200, levels=2, verify=True
    )
    metadata = read_metadata(tmp_path / "two.zarr")
    assert metadata is not None and metadata["levels"]["n_levels"] == 2 and result.n_rows == 1000
    out = xr.open_zarr(tmp_path / "two.zarr")["x"].values
    assert sorted(out[:, 0].tolist()) == np.arange(0.0, 4000.0, 4).tolist()


def test_shuffle_lines_levels_and_verify(tmp_path: Path) -> None:
    lines = [f"line {i}\n".encode() for i in range(2000)]
    (tmp_path / "in.txt").write_bytes(b"".join(lines))
    one = ds.shuffle_lines(tmp_path / "in.txt", tmp_path / "one.txt", 8, seed=0, block_memory=2_000, levels=1)
    two = ds.shuffle_lines(tmp_path / "in.txt", tmp_path / "two.txt", 8, seed=0, block_memory=2_000, levels=2)
    assert two.n_tasks > one.n_tasks, "a second level of scatter runs"
    for name in ("one.txt", "two.txt"):
        assert sorted((tmp_path / name).read_bytes().splitlines(keepends=True)) == sorted(lines)
    with pytest.raises(ds.DaskShuffleValueError, match="verify=False for text") as caught:
        ds.shuffle_lines(tmp_path / "in.txt", tmp_path / "checked.txt", seed=0, verify=True)
    assert caught.value.parameter == "verify"
    assert not (tmp_path / "checked.txt").exists()


def test_shuffle_zarr_of_dask_arrays_verifies_against_them(tmp_path: Path) -> None:
    import dask.array as da

    arrays = {"x": da.arange(3000.0, chunks=500).reshape(1000, 3), "id": da.arange(1000, chunks=250)}
    result = ds.shuffle_zarr(arrays, tmp_path / "piles.zarr", n_piles=4, seed=0, verify=True)
    assert result.n_rows == 1000


def test_shuffle_xarray_verifies_encoded_variables_and_files(tmp_path: Path) -> None:
    from test_xarray import make_dataset

    data = make_dataset(240)
    ds.shuffle_xarray(data.chunk({"sample": 50}), tmp_path / "memory.zarr", "sample", n_piles=4, seed=0, verify=True)
    path = tmp_path / "data.nc"
    data.drop_vars("time").to_netcdf(path, engine="scipy")
    ds.shuffle_xarray(path, tmp_path / "file.zarr", "sample", n_piles=4, seed=0, verify=True)


@pytest.mark.parametrize("index", [None, True])
def test_shuffle_dataframe_verifies_categoricals_nulls_and_the_index(tmp_path: Path, index: bool | None) -> None:
    frame = pd.DataFrame(
        {
            "id": np.arange(300),
            "cat": pd.Categorical(["a", "b", "c"] * 100),
            "maybe": pd.array([1, None, 3] * 100, dtype="Int64"),
        },
        index=pd.Index(np.arange(300) * 2, name="row"),
    )
    for df, name in ((frame, "pandas"), (dd.from_pandas(frame, npartitions=3), "dask")):
        result = ds.shuffle_dataframe(df, tmp_path / name, n_piles=4, seed=0, index=index, verify=True)
        assert result.n_rows == 300
