"""shuffle_xarray end to end: real Zarr and netCDF files, lazy dask-backed datasets, real dask graphs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from conftest import tree_digest
from simulate import simulate

import daskshuffle
from daskshuffle import DaskShuffleTypeError, DaskShuffleValueError, SourceNotFoundError, shuffle_xarray
from daskshuffle.sources._xarray import _block_lengths


def make_dataset(n: int = 240, first: int = 0) -> xr.Dataset:
    """``sample`` rows; ``id`` and every variable along ``sample`` are functions of the row number."""
    ids = np.arange(first, first + n)
    temperature = (ids[None, :] + np.arange(3)[:, None] / 10).astype("f4")  # ``sample`` is not the first axis
    counts = (ids % 7).astype("f8")
    counts[ids % 11 == 0] = np.nan  # masked on disk with _FillValue
    ds = xr.Dataset(
        {
            "temperature": (("level", "sample"), temperature, {"units": "K", "long_name": "air temperature"}),
            "count": ("sample", counts),
            "pressure": ("sample", (ids % 1000) * 0.25),
            "static": (("level",), np.array([1000.0, 850.0, 500.0]), {"note": "no sample dimension"}),
        },
        coords={
            "id": ("sample", ids),
            "time": ("sample", pd.date_range("2001-01-01", periods=n, freq="h") + pd.Timedelta(hours=first)),
            "level": ("level", [1, 2, 3]),
        },
        attrs={"title": "example", "source": "tests"},
    )
    ds["count"].encoding = {"dtype": "i2", "_FillValue": -1}
    ds["pressure"].encoding = {"dtype": "i4", "scale_factor": 0.25, "_FillValue": -9999}
    return ds


def sorted_by_id(ds: xr.Dataset) -> xr.Dataset:
    return ds.isel(sample=np.argsort(ds["id"].values))


def assert_same_dataset(out: xr.Dataset, expected: xr.Dataset) -> None:
    """Equal up to the order along ``sample`` (and ``sample`` coming first in every variable)."""
    out = sorted_by_id(out)
    for name, variable in expected.variables.items():
        xr.testing.assert_identical(out[name].variable.transpose(*variable.dims), variable)
    assert {k: v for k, v in out.attrs.items() if k != "daskshuffle"} == expected.attrs


@pytest.mark.slow
def test_round_trip_with_coordinates_encodings_and_other_variables(tmp_path: Path) -> None:
    expected = make_dataset()
    expected.to_zarr(tmp_path / "raw.zarr", zarr_format=3, consolidated=False)
    before = tree_digest(tmp_path / "raw.zarr")
    source = xr.open_zarr(tmp_path / "raw.zarr", consolidated=False).chunk({"sample": (50, 7, 100, 83)})
    result = shuffle_xarray(
        source, tmp_path / "piles.zarr", "sample", n_piles=5, seed=2, block_memory=2_000, chunk_rows=16
    )
    out = xr.open_zarr(tmp_path / "piles.zarr")
    assert_same_dataset(out, xr.open_zarr(tmp_path / "raw.zarr", consolidated=False).load())
    assert out["temperature"].dims == ("sample", "level"), "rows are contiguous: sample first"
    assert out["count"].encoding["_FillValue"] == -1 and out["count"].encoding["dtype"] == np.dtype("i2")
    assert out["pressure"].encoding["scale_factor"] == 0.25
    assert out["time"].encoding["units"] == source["time"].encoding["units"]
    assert out["temperature"].encoding["chunks"] == (16, 3)

    ids = out["id"].values
    row_nbytes = sum(v.dtype.itemsize * v.size // 240 for v in source.variables.values() if "sample" in v.dims)
    lengths = _block_lengths((50, 7, 100, 83), row_nbytes, 2_000)
    assert len(lengths) > 1 and sum(lengths) == result.n_rows == 240
    assert np.array_equal(ids, simulate(lengths, 5, 2)[1]), "the planned order"
    meta = json.loads(out.attrs["daskshuffle"])
    assert meta["complete"] is True and meta["dim"] == "sample" and meta["n_rows"] == 240
    assert sorted(meta["variables"]) == ["count", "id", "pressure", "temperature", "time"]
    assert tree_digest(tmp_path / "raw.zarr") == before, "the source is never modified"
    assert not (tmp_path / "piles.zarr.daskshuffle-tmp").exists()


@pytest.mark.slow
def test_path_and_many_netcdf_files(tmp_path: Path) -> None:
    paths = []
    for index, (first, n) in enumerate([(0, 100), (100, 37), (137, 63)]):
        path = tmp_path / f"part-{index}.nc"
        make_dataset(n, first).drop_vars("time").to_netcdf(path, engine="scipy")
        paths.append(path)
    many = xr.open_mfdataset(
        paths,
        engine="scipy",
        combine="nested",
        concat_dim="sample",
        data_vars="minimal",
        coords="minimal",
        compat="override",
    )
    shuffle_xarray(many, tmp_path / "piles.zarr", "sample", n_piles=4, seed=0, materialize=True)
    out = xr.open_zarr(tmp_path / "piles.zarr")
    assert sorted(out["id"].values.tolist()) == list(range(200))
    assert_same_dataset(out, many.load())
    make_dataset(50).to_zarr(tmp_path / "raw.zarr", zarr_format=3, consolidated=False)
    shuffle_xarray(tmp_path / "raw.zarr", tmp_path / "from-path.zarr", "sample", n_piles=3, seed=0)
    assert_same_dataset(
        xr.open_zarr(tmp_path / "from-path.zarr"), xr.open_zarr(tmp_path / "raw.zarr", consolidated=False).load()
    )


@pytest.mark.slow
def test_seeds_and_an_in_memory_dataset(tmp_path: Path) -> None:
    ds = make_dataset(120)
    copy = ds.copy(deep=True)
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        shuffle_xarray(ds, tmp_path / f"{name}.zarr", "sample", n_piles=4, seed=seed)
    a, b, c = (xr.open_zarr(tmp_path / f"{name}.zarr")["id"].values for name in "abc")
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    xr.testing.assert_identical(ds, copy)
    assert ds["count"].encoding == copy["count"].encoding, "the input is not modified"


@pytest.mark.slow
def test_the_store_is_a_dataset_that_writes_to_netcdf(tmp_path: Path) -> None:
    """``xr.open_zarr(dst)`` writes to netCDF as the source does: the shuffle's metadata is a text attribute."""
    source = make_dataset(120).drop_vars("time")  # netCDF 3 (scipy) has no int64 for its nanoseconds
    shuffle_xarray(source, tmp_path / "piles.zarr", "sample", n_piles=3, seed=0)
    opened = xr.open_zarr(tmp_path / "piles.zarr")
    opened.to_netcdf(tmp_path / "piles.nc", engine="scipy")
    with xr.open_dataset(tmp_path / "piles.nc", engine="scipy") as back:
        assert_same_dataset(back.load(), source)
        assert json.loads(back.attrs["daskshuffle"]) == daskshuffle.pilestore.read_metadata(tmp_path / "piles.zarr")
    assert opened["temperature"].dims == ("sample", "level")  # as the README says: ``dim`` first


def test_metadata_in_the_other_encoding_is_refused(tmp_path: Path) -> None:
    """One encoding each: JSON text in an xarray store (which netCDF takes), a mapping in a plain Zarr store."""
    shuffle_xarray(make_dataset(150), tmp_path / "piles.zarr", "sample", n_piles=3, seed=0)
    group = zarr.open_group(tmp_path / "piles.zarr", mode="r+")
    recorded = group.attrs["daskshuffle"]
    assert isinstance(recorded, str)
    group.attrs["daskshuffle"] = json.loads(recorded)
    expected = r"JSON text in an xarray pile store, a mapping in any other. Got a mapping .* shuffle the source again"
    with pytest.raises(daskshuffle.IncompletePileStoreError, match=expected):
        daskshuffle.pilestore.read_metadata(tmp_path / "piles.zarr")
    with pytest.raises(daskshuffle.IncompletePileStoreError, match=expected):
        daskshuffle.PileLoader(tmp_path / "piles.zarr", batch_size=32, seed=0)
    source = zarr.open_group(tmp_path / "raw.zarr", mode="w")
    source.create_array("id", data=np.arange(100), chunks=(10,))
    daskshuffle.shuffle_zarr(tmp_path / "raw.zarr", tmp_path / "plain.zarr", n_piles=2, seed=0)
    plain = zarr.open_group(tmp_path / "plain.zarr", mode="r+")
    assert isinstance(plain.attrs["daskshuffle"], dict)
    plain.attrs["daskshuffle"] = json.dumps(plain.attrs["daskshuffle"])
    with pytest.raises(daskshuffle.IncompletePileStoreError, match=r"Got JSON text for a store without a dim"):
        daskshuffle.PileLoader(tmp_path / "plain.zarr", batch_size=32, seed=0)


def test_loader_reads_the_store(tmp_path: Path) -> None:
    shuffle_xarray(make_dataset(150), tmp_path / "piles.zarr", "sample", n_piles=3, seed=0)
    batches = list(daskshuffle.PileLoader(tmp_path / "piles.zarr", batch_size=32, seed=0))
    ids = np.concatenate([batch["id"] for batch in batches])
    assert sorted(ids.tolist()) == list(range(150))
    first = batches[0]
    assert first["temperature"].shape == (32, 3)
    assert np.allclose(first["temperature"][:, 0], first["id"]), "rows stay aligned"


def test_xarray_batches_are_the_sampled_rows_of_the_dataset(tmp_path: Path) -> None:
    """batch_format="xarray": each batch is the source at the sampled rows, decoded, with every coordinate."""
    source = make_dataset(150)
    shuffle_xarray(source, tmp_path / "piles.zarr", "sample", n_piles=3, seed=0)
    expected = xr.open_zarr(tmp_path / "piles.zarr").load()  # the store as xarray decodes it
    seen = []
    with daskshuffle.PileLoader(tmp_path / "piles.zarr", batch_size=32, seed=0, batch_format="xarray") as loader:
        numpy_ids = [batch["id"] for batch in daskshuffle.PileLoader(tmp_path / "piles.zarr", batch_size=32, seed=0)]
        for batch, ids in zip(loader, numpy_ids, strict=True):
            assert isinstance(batch, xr.Dataset)
            assert np.array_equal(batch["id"].values, ids), "the same rows as numpy batches, in the same order"
            rows = expected.isel(sample=np.argsort(expected["id"].values)[ids])
            xr.testing.assert_identical(batch.drop_attrs(deep=False), rows.drop_attrs(deep=False))
            assert batch.attrs == {"title": "example", "source": "tests"}, "the dataset's attributes, not ours"
            assert batch["time"].dtype.kind == "M" and np.isnan(batch["count"].values[ids % 11 == 0]).all()
            assert "static" in batch and "level" in batch.coords, "variables without the row dimension come along"
            seen.append(ids)
    assert sorted(np.concatenate(seen).tolist()) == list(range(150))
    with pytest.raises(DaskShuffleValueError, match=r"batch_format='numpy'.*or 'xarray'"):
        daskshuffle.PileLoader(tmp_path / "piles.zarr", batch_size=32, batch_format="pandas")


def test_chunks_follow_the_piles_as_in_a_zarr_pile_store(tmp_path: Path) -> None:
    n = 400_000
    data = xr.Dataset(
        {"x": (("sample", "feature"), np.ones((n, 16), dtype="f4")), "id": ("sample", np.arange(n))}
    ).chunk({"sample": 100_000})
    chunk_rows = {}
    for n_piles in (4, 64):
        dst = tmp_path / f"piles-{n_piles}.zarr"
        shuffle_xarray(data, dst, "sample", n_piles=n_piles, seed=0)
        group = zarr.open_group(str(dst), mode="r")
        layout = json.loads(group.attrs["daskshuffle"])["layout"]["variables"]
        for name in ("x", "id"):
            assert group[name].chunks[0] == layout[name]["chunk_rows"]
        chunk_rows[n_piles] = group["x"].chunks[0]
        assert sorted(xr.open_zarr(dst)["id"].values.tolist()) == list(range(n))
    # Piles of 100,000 rows get chunks of about a sixteenth of a pile; piles of 6,250 rows the 256 KiB floor.
    assert chunk_rows[4] > chunk_rows[64] == 256 * 2**10 // (16 * 4)


@pytest.mark.slow
def test_a_glob_of_files_is_one_dataset_along_dim(tmp_path: Path) -> None:
    """``daskshuffle xarray 'part-*.nc'``, as ``open_mfdataset`` users write it: the files, in order, along ``dim``."""
    from click.testing import CliRunner

    from daskshuffle._cli._common import cli

    for index, (first, n) in enumerate([(0, 100), (100, 37), (137, 63)]):
        make_dataset(n, first).drop_vars("time").to_netcdf(tmp_path / f"part-{index}.nc", engine="scipy")
    shuffle_xarray(str(tmp_path / "part-*.nc"), tmp_path / "piles.zarr", "sample", n_piles=4, seed=0)
    assert sorted(xr.open_zarr(tmp_path / "piles.zarr")["id"].values.tolist()) == list(range(200))
    result = CliRunner().invoke(
        cli,
        [
            "xarray",
            str(tmp_path / "part-*.nc"),
            str(tmp_path / "cli.zarr"),
            "--dim",
            "sample",
            "--scheduler",
            "threads",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    assert sorted(xr.open_zarr(tmp_path / "cli.zarr")["id"].values.tolist()) == list(range(200))
    with pytest.raises(
        SourceNotFoundError, match=r"Expected ds to name a dataset: .* Got '.*era-\*\.nc', which matches no file"
    ):
        shuffle_xarray(str(tmp_path / "era-*.nc"), tmp_path / "none.zarr", "sample", n_piles=2)


def test_bad_input(tmp_path: Path) -> None:
    ds = make_dataset(20)
    dst = tmp_path / "out.zarr"
    with pytest.raises(
        DaskShuffleValueError, match=r"dimension of the dataset. Got 'row' instead; it has \['level', 'sample'\]"
    ):
        shuffle_xarray(ds, dst, "row", n_piles=2)
    with pytest.raises(DaskShuffleTypeError, match="dim"):
        shuffle_xarray(ds, dst, 0, n_piles=2)
    with pytest.raises(DaskShuffleTypeError, match=r"xarray\.Dataset or a path"):
        shuffle_xarray({"x": 1}, dst, "sample", n_piles=2)
    with pytest.raises(SourceNotFoundError, match="does not exist"):
        shuffle_xarray(tmp_path / "missing.zarr", dst, "sample", n_piles=2)
    labelled = ds.assign(name=("sample", np.array([f"n{i}" for i in range(20)], dtype=object)))
    with pytest.raises(DaskShuffleTypeError, match=r"'name' of dtype object.*drop_vars"):
        shuffle_xarray(labelled, dst, "sample", n_piles=2)
    with pytest.raises(DaskShuffleValueError, match="n_piles"):
        shuffle_xarray(ds, dst, "sample", n_piles=0)
    assert not dst.exists()


def test_irregular_chunk_lengths_become_blocks() -> None:
    assert _block_lengths((50, 7, 100, 83), 10, 600) == [57, 100, 83]
    assert _block_lengths((5, 5, 5), 10, 10_000) == [15]
    assert _block_lengths((5, 5, 5), 10, 1) == [5, 5, 5]


@pytest.mark.cluster
def test_same_output_on_a_local_cluster(tmp_path: Path, cluster_client) -> None:
    make_dataset(300).to_zarr(tmp_path / "raw.zarr", zarr_format=3, consolidated=False)
    kwargs = {"n_piles": 6, "seed": 3, "block_memory": 1_500, "chunk_rows": 20}
    shuffle_xarray(tmp_path / "raw.zarr", tmp_path / "threads.zarr", "sample", **kwargs)
    with cluster_client.as_current():
        shuffle_xarray(tmp_path / "raw.zarr", tmp_path / "cluster.zarr", "sample", **kwargs)
    threads, cluster = (zarr.open_group(tmp_path / name, mode="r") for name in ("threads.zarr", "cluster.zarr"))
    for name in ("id", "temperature", "count", "time"):
        assert np.array_equal(threads[name][...], cluster[name][...])
