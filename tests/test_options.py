"""One option set for every public shuffle: written out in each ``def``, with the same defaults, its docs written once."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from griffe import Docstring, DocstringSectionParameters

import daskshuffle as ds
from daskshuffle._cli._options import SHUFFLE_DEFAULTS
from daskshuffle.pilestore import ParquetWriting, read_metadata
from daskshuffle.reshuffle._epochs import parse_forwarded_options
from daskshuffle.shuffle._options import parse_shuffle_options
from daskshuffle.shuffle._verify import verify_location
from daskshuffle.sources._dataframe import open_dataframe_source
from daskshuffle.storage._location import Location

#: The options every shuffle shares, in the order its signature and its docs list them.
SHARED = (
    "n_piles",
    "seed",
    "overwrite",
    "materialize",
    "pile_memory",
    "block_memory",
    "tmp",
    "progress",
    "storage_options",
    "verify",
    "levels",
)
#: Every function that takes the shared options; ``shuffle_zarr`` is the reference the others agree with.
SHUFFLES: dict[str, Callable[..., Any]] = {
    "shuffle_zarr": ds.shuffle_zarr,
    "shuffle_xarray": ds.shuffle_xarray,
    "shuffle_parquet": ds.shuffle_parquet,
    "shuffle_dataframe": ds.shuffle_dataframe,
    "shuffle_lines": ds.shuffle_lines,
    "append": ds.append,
}
#: The options a function does not take: text is always fully shuffled; an append takes the store's piles.
NOT_TAKEN = {
    "shuffle_lines": {"materialize"},
    "append": {"n_piles", "overwrite", "materialize"},
}
#: The only defaults (and docs of them) that differ from ``shuffle_zarr``'s: text's own sizes and proof (of
#: lines, not of a pile store), and an append's seed, which is the new generation's.
OWN = {
    ("shuffle_lines", "n_piles"): ("auto", "int | Literal['auto']"),
    ("shuffle_lines", "pile_memory"): ("32MiB", "int | str"),
    ("shuffle_lines", "block_memory"): (None, "int | str | None"),
    ("shuffle_lines", "verify"): (False, "bool"),
    ("append", "seed"): (None, "int | None"),
}


def _documented(function: Callable[..., Any]) -> dict[str, tuple[str, str]]:
    """``{parameter: (type as documented, description)}`` from the numpydoc ``Parameters`` section."""
    parsed = Docstring(inspect.getdoc(function) or "", lineno=1).parse("numpy")
    sections = [section for section in parsed if isinstance(section, DocstringSectionParameters)]
    assert len(sections) == 1, f"{function.__name__} has one Parameters section"
    return {item.name: (str(item.annotation), " ".join(item.description.split())) for item in sections[0].value}


def test_every_shuffle_takes_the_shared_options_with_the_same_defaults_and_docs() -> None:
    reference = inspect.signature(ds.shuffle_zarr).parameters
    reference_docs = _documented(ds.shuffle_zarr)
    for name, function in SHUFFLES.items():
        assert function.__code__.co_name == name, "written out in its own def: nothing wraps it"
        parameters = inspect.signature(function).parameters
        documented = _documented(function)
        assert not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in parameters.values()), name
        assert [p for p in parameters if p not in documented] == [], f"{name} documents every parameter"
        taken = [option for option in SHARED if option not in NOT_TAKEN.get(name, set())]
        assert [p for p in parameters if p in SHARED] == taken, f"{name} takes the shared options, in order"
        for option in taken:
            parameter, expected = parameters[option], reference[option]
            assert parameter.kind == expected.kind or option == "n_piles", (name, option)
            doc_type, doc_text = documented[option]
            if (name, option) in OWN:
                default, annotation = OWN[name, option]
                assert (parameter.default, parameter.annotation) == (default, annotation), (name, option)
                assert doc_text, (name, option)
                continue
            assert type(parameter.default) is type(expected.default), (name, option)
            assert parameter.default == expected.default, (name, option)
            assert parameter.annotation == expected.annotation, (name, option)
            assert doc_type == reference_docs[option][0], (name, option)
            # The same text, to which a shuffle may add what is its own (a sentence after it).
            assert doc_text.startswith(reference_docs[option][1]), (name, option)
        if name != "append":
            assert parameters["n_piles"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
            returns = inspect.getdoc(function) or ""
            assert returns.count("\nReturns\n-------\nShuffleResult\n") == 1, name
    # The command line's defaults are the shuffles', and explain's those of the shuffle it explains.
    assert {key: reference[key].default for key in SHUFFLE_DEFAULTS} == dict(SHUFFLE_DEFAULTS)
    explained = inspect.signature(ds.explain).parameters
    assert [explained[key].default for key in ("pile_memory", "block_memory", "levels")] == [
        reference[key].default for key in ("pile_memory", "block_memory", "levels")
    ]


def test_every_docstring_of_the_public_api_has_its_placeholders_filled() -> None:
    """A line ``{option, ...}`` left in a docstring is one that ``shared_docs`` does not fill: a typo, or no decorator."""
    placeholder = re.compile(r"^\s*\{[\w, ]+\}\s*$", re.MULTILINE)
    public = [getattr(ds, name) for name in ds.__all__]
    left = [getattr(item, "__name__", item) for item in public if placeholder.search(inspect.getdoc(item) or "")]
    assert left == []


@pytest.mark.parametrize("name", sorted(SHUFFLES))
@pytest.mark.parametrize("keyword", ["sed", "n_pile", "materialise"])
def test_a_misspelled_option_is_a_type_error_as_python_words_it(name: str, keyword: str, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument {keyword!r}$"):
        SHUFFLES[name]("src", tmp_path / "out", **{keyword: 8})
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", sorted(SHUFFLES))
def test_forwarded_options_are_checked_against_the_public_signature(name: str) -> None:
    shuffle = SHUFFLES[name]
    with pytest.raises(ds.DaskShuffleTypeError, match=r"Got \['sed'\] instead; it takes \[.*'levels'\]"):
        parse_forwarded_options(shuffle, {"sed": 1})
    assert parse_forwarded_options(shuffle, {"levels": 2, "verify": True}) == {"levels": 2, "verify": True}


def test_n_piles_may_be_given_by_position(tmp_path: Path) -> None:
    import dask.array as da

    result = ds.shuffle_zarr(da.arange(100, chunks=50), tmp_path / "piles.zarr", 4, seed=0)
    assert (result.n_piles, result.n_rows) == (4, 100)


def test_sizes_take_strings_and_integers_alike() -> None:
    shared = {
        "dst": "o",
        "n_piles": 512,
        "seed": 0,
        "overwrite": False,
        "materialize": False,
        "pile_memory": "256MiB",
        "block_memory": "64MiB",
        "tmp": None,
        "progress": False,
        "storage_options": None,
        "verify": False,
        "levels": "auto",
    }
    for name in ("pile_memory", "block_memory"):
        given = parse_shuffle_options({**shared, name: "64MiB"})
        assert given == parse_shuffle_options({**shared, name: 64 * 2**20})


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
        verify_location(Location.of(str(tmp_path / "piles")), fmt, block_nbytes=4_000, progress=False)
    fmt = open_dataframe_source(_frame(), index=None, block_nbytes=4_000, writing=ParquetWriting())
    assert verify_location(Location.of(str(tmp_path / "piles")), fmt, block_nbytes=4_000, progress=False).n_rows == 600


@pytest.mark.cluster
def test_verify_reads_a_collection_and_its_store_in_one_graph_on_a_local_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cluster_client: Any
) -> None:
    """The source's blocks (a collection's tasks) and the store's piles are read at once: one progress line."""
    frame = _frame()
    with cluster_client.as_current():
        ds.shuffle_dataframe(frame, tmp_path / "piles", n_piles=4, seed=0, block_memory=4_000)
        capsys.readouterr()
        fmt = open_dataframe_source(frame, index=None, block_nbytes=4_000, writing=ParquetWriting())
        result = verify_location(Location.of(str(tmp_path / "piles")), fmt, block_nbytes=4_000, progress=True)
    assert result.n_rows == 600
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("[####"), repr(out)


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
    checked = ds.shuffle_lines(tmp_path / "in.txt", tmp_path / "checked.txt", 8, seed=0, levels=2, verify=True)
    assert sorted((tmp_path / "checked.txt").read_bytes().splitlines(keepends=True)) == sorted(lines)
    assert checked.n_rows == 2000


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
