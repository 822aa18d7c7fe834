"""shuffle_zarr end to end: real Zarr stores on disk, real dask graphs."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from conftest import make_zarr_source, tree_digest
from scipy import stats
from simulate import simulate

import daskshuffle
from daskshuffle import (
    DaskShuffleError,
    DaskShuffleTypeError,
    DaskShuffleValueError,
    IncompletePileStoreError,
    PileStoreExistsError,
    SourceNotFoundError,
    shuffle_zarr,
)
from daskshuffle.readers._zarr_reader import ZarrPileReader
from daskshuffle.sources import open_zarr_sources

SMALL_BLOCKS = 4_000  # bytes: blocks of two 64-row chunks of the 26-byte rows below


def read(path: Path | str) -> dict[str, np.ndarray]:
    group = zarr.open_group(str(path), mode="r")
    return {name: array[...] for name, array in group.arrays()}


def metadata(path: Path | str) -> dict:
    return zarr.open_group(str(path), mode="r").attrs["daskshuffle"]


def assert_aligned_permutation(data: dict[str, np.ndarray], n_rows: int) -> None:
    ids = data["id"]
    assert np.array_equal(np.sort(ids), np.arange(n_rows)), "every id exactly once"
    assert np.array_equal(data["x"][:, 0], ids.astype(np.float32)), "x stays aligned with id"
    assert np.array_equal(data["y"], (ids % 7).astype(np.int16)), "y stays aligned with id"


def expected_order(
    src: str | list[str], n_piles: int, seed: int, *, materialize: bool, block_nbytes: int
) -> np.ndarray:
    lengths = list(open_zarr_sources(src, block_nbytes=block_nbytes).block_lengths)
    return simulate(lengths, n_piles, seed)[1]


def test_pile_store_is_the_planned_permutation(source: str, tmp_path: Path) -> None:
    before = tree_digest(source)
    result = shuffle_zarr(source, tmp_path / "piles.zarr", n_piles=16, seed=3, block_memory=SMALL_BLOCKS, chunk_rows=50)
    data = read(tmp_path / "piles.zarr")
    assert_aligned_permutation(data, 1_000)
    assert np.array_equal(data["id"], expected_order(source, 16, 3, materialize=False, block_nbytes=SMALL_BLOCKS))
    meta = metadata(tmp_path / "piles.zarr")
    offsets = meta["pile_offsets"]
    ascending = [float(np.mean(np.diff(data["id"][offsets[p] : offsets[p + 1]]) > 0)) for p in range(16)]
    assert 0.3 < float(np.mean(ascending)) < 0.7, "each pile is stored in an order drawn from the seed"
    assert meta["complete"] is True and meta["kind"] == "zarr" and meta["materialized"] is False
    assert (meta["n_rows"], meta["n_piles"], meta["seed"]) == (1_000, 16, 3)
    assert sorted(meta["variables"]) == ["id", "x", "y"]
    assert result.n_rows == 1_000 and result.seed == 3 and result.pile_sizes.sum() == 1_000
    assert np.array_equal(np.diff(offsets), result.pile_sizes)
    assert tree_digest(source) == before, "the source is never modified"
    assert not (tmp_path / "piles.zarr.daskshuffle-tmp").exists(), "pieces are removed at the end"


def test_output_keeps_dtypes_fill_values_and_attributes(source: str, tmp_path: Path) -> None:
    shuffle_zarr(source, tmp_path / "piles.zarr", n_piles=4, seed=0)
    src, out = zarr.open_group(source, mode="r"), zarr.open_group(str(tmp_path / "piles.zarr"), mode="r")
    assert out.metadata.zarr_format == 3
    assert out.attrs["title"] == "example"
    for name, array in src.arrays():
        assert out[name].dtype == array.dtype
        assert out[name].shape == array.shape
        assert out[name].fill_value == array.fill_value
        assert out[name].metadata.dimension_names == array.metadata.dimension_names
    assert out["y"].attrs["units"] == "label"
    ds = xr.open_zarr(str(tmp_path / "piles.zarr"))
    assert ds["x"].dims == ("row", "feature") and ds.sizes["row"] == 1_000


@pytest.mark.slow
@pytest.mark.parametrize("chunk_rows", [1, 7, 64, 300, 5_000])
@pytest.mark.parametrize("materialize", [False, True])
def test_output_chunks_do_not_change_the_order(tmp_path: Path, chunk_rows: int, materialize: bool) -> None:
    """Chunks of a row, of fewer rows than a pile, of a block's chunk, of the whole store, and larger than it.

    300 rows in three blocks (two of two 64-row chunks, one of 44 rows) into 8 piles of about 37 rows.
    """
    source = make_zarr_source(tmp_path / "raw.zarr", 300, chunk_rows=64)
    dst = tmp_path / "out.zarr"
    shuffle_zarr(
        source, dst, n_piles=8, seed=11, block_memory=SMALL_BLOCKS, chunk_rows=chunk_rows, materialize=materialize
    )
    data = read(dst)
    assert zarr.open_group(str(dst), mode="r")["x"].chunks[0] == chunk_rows
    assert_aligned_permutation(data, 300)
    assert np.array_equal(data["id"], expected_order(source, 8, 11, materialize=materialize, block_nbytes=SMALL_BLOCKS))


def test_materialize_writes_a_shuffled_copy(source: str, tmp_path: Path) -> None:
    result = shuffle_zarr(
        source, tmp_path / "copy.zarr", n_piles=8, seed=5, materialize=True, block_memory=SMALL_BLOCKS
    )
    data = read(tmp_path / "copy.zarr")
    assert_aligned_permutation(data, 1_000)
    assert result.materialized and metadata(tmp_path / "copy.zarr")["materialized"] is True
    offsets = metadata(tmp_path / "copy.zarr")["pile_offsets"]
    inside_sorted = [bool((np.diff(data["id"][a:b]) > 0).all()) for a, b in itertools.pairwise(offsets)]
    assert not any(inside_sorted), "each pile is shuffled in RAM"


def test_seeds(source: str, tmp_path: Path) -> None:
    a = shuffle_zarr(source, tmp_path / "a.zarr", n_piles=8, seed=1)
    b = shuffle_zarr(source, tmp_path / "b.zarr", n_piles=8, seed=1)
    shuffle_zarr(source, tmp_path / "c.zarr", n_piles=8, seed=2)
    assert a.seed == b.seed == 1
    assert np.array_equal(read(tmp_path / "a.zarr")["id"], read(tmp_path / "b.zarr")["id"])
    assert not np.array_equal(read(tmp_path / "a.zarr")["id"], read(tmp_path / "c.zarr")["id"])
    drawn = shuffle_zarr(source, tmp_path / "d.zarr", n_piles=8)
    assert 0 <= drawn.seed < 2**63 and metadata(tmp_path / "d.zarr")["seed"] == drawn.seed
    shuffle_zarr(source, tmp_path / "e.zarr", n_piles=8, seed=drawn.seed)
    assert np.array_equal(read(tmp_path / "d.zarr")["id"], read(tmp_path / "e.zarr")["id"])


@pytest.mark.cluster
def test_same_output_on_a_local_cluster_as_on_threads(tmp_path: Path, cluster_client) -> None:
    src = make_zarr_source(tmp_path / "raw.zarr", 5_000, chunk_rows=250)
    kwargs = {"n_piles": 32, "seed": 9, "block_memory": 20_000, "chunk_rows": 300}
    shuffle_zarr(src, tmp_path / "threads.zarr", **kwargs)
    with cluster_client.as_current():
        result = shuffle_zarr(src, tmp_path / "cluster.zarr", **kwargs)
        shuffle_zarr(src, tmp_path / "cluster-copy.zarr", materialize=True, **kwargs)
    shuffle_zarr(src, tmp_path / "threads-copy.zarr", materialize=True, **kwargs)
    threads, cluster = read(tmp_path / "threads.zarr"), read(tmp_path / "cluster.zarr")
    assert_aligned_permutation(cluster, 5_000)
    for name in threads:
        assert np.array_equal(threads[name], cluster[name])
        assert np.array_equal(read(tmp_path / "threads-copy.zarr")[name], read(tmp_path / "cluster-copy.zarr")[name])
    # the graph is O(blocks + piles), not O(blocks x piles)
    n_blocks = len(open_zarr_sources(src, block_nbytes=20_000).block_lengths)
    assert result.n_tasks <= 2 * (n_blocks + 32) + 2


@pytest.mark.slow
def test_many_sources_of_both_zarr_formats(tmp_path: Path) -> None:
    sources = [
        make_zarr_source(tmp_path / "a.zarr", 300, chunk_rows=50, first_id=0),
        make_zarr_source(tmp_path / "b.zarr", 0, chunk_rows=50, first_id=300),
        make_zarr_source(tmp_path / "c.zarr", 457, chunk_rows=33, first_id=300, zarr_format=2),
        make_zarr_source(tmp_path / "d.zarr", 1, chunk_rows=1, first_id=757),
    ]
    shuffle_zarr(sources, tmp_path / "out.zarr", n_piles=5, seed=4, block_memory=2_000, chunk_rows=40)
    data = read(tmp_path / "out.zarr")
    assert_aligned_permutation(data, 758)
    assert np.array_equal(data["id"], expected_order(sources, 5, 4, materialize=False, block_nbytes=2_000))
    # dimension names of a Zarr format 2 source (xarray's _ARRAY_DIMENSIONS) become v3 dimension names
    shuffle_zarr(sources[2], tmp_path / "v2out.zarr", n_piles=3, seed=0, overwrite=True)
    out = zarr.open_group(str(tmp_path / "v2out.zarr"), mode="r")
    assert out["x"].metadata.dimension_names == ("row", "feature")
    assert "_ARRAY_DIMENSIONS" not in out["x"].attrs


def test_a_source_without_dimension_names_opens_in_xarray(tmp_path: Path) -> None:
    # As dask.array.to_zarr writes it: arrays with no dimension names; one named only in part.
    group = zarr.open_group(str(tmp_path / "raw.zarr"), mode="w", zarr_format=3)
    group.create_array("x", data=np.ones((200, 4), dtype="f4"), chunks=(50, 4))
    group.create_array("id", data=np.arange(200), chunks=(50,))
    group.create_array(
        "image", data=np.zeros((200, 2, 3), dtype="u1"), chunks=(50, 2, 3), dimension_names=("sample", None, "c")
    )
    shuffle_zarr(str(tmp_path / "raw.zarr"), tmp_path / "piles.zarr", n_piles=4, seed=0)
    ds = xr.open_zarr(str(tmp_path / "piles.zarr"))
    # Names that exist are kept; the row dimension is shared, the others are named after their variable.
    assert ds["image"].dims == ("sample", "image_dim_1", "c")
    assert ds["x"].dims == ("sample", "x_dim_1") and ds["id"].dims == ("sample",)
    assert sorted(ds["id"].values.tolist()) == list(range(200))


@pytest.mark.parametrize("n_rows", [0, 1, 5])
def test_tiny_inputs_and_more_piles_than_rows(tmp_path: Path, n_rows: int) -> None:
    src = make_zarr_source(tmp_path / "raw.zarr", n_rows, chunk_rows=3)
    for materialize in (False, True):
        dst = tmp_path / f"out-{materialize}.zarr"
        with pytest.warns(daskshuffle.IneffectiveSettingWarning, match="n_piles=16"):
            result = shuffle_zarr(src, dst, n_piles=16, seed=0, materialize=materialize)
        data = read(dst)
        assert_aligned_permutation(data, n_rows)
        assert data["x"].shape == (n_rows, 4)
        assert result.n_rows == n_rows and len(result.pile_sizes) == 16
        assert metadata(dst)["complete"] is True


def test_open_groups_arrays_and_variables(tmp_path: Path) -> None:
    src = make_zarr_source(tmp_path / "raw.zarr", 200, chunk_rows=30)
    group = zarr.open_group(src, mode="r")
    group_copy = zarr.open_group(src, mode="a")
    group_copy.create_array("meta", shape=(3,), dtype="i4")  # a different first dimension
    with pytest.raises(DaskShuffleValueError, match=r"same number of rows.*'meta': 3.*variables="):
        shuffle_zarr(src, tmp_path / "bad.zarr", n_piles=4, seed=0)
    assert not (tmp_path / "bad.zarr").exists()
    shuffle_zarr(group, tmp_path / "sel.zarr", n_piles=4, seed=0, variables=["id", "x"])
    assert sorted(read(tmp_path / "sel.zarr")) == ["id", "x"]
    shuffle_zarr(group["id"], tmp_path / "one.zarr", n_piles=4, seed=0)
    one = read(tmp_path / "one.zarr")
    assert list(one) == ["id"] and np.array_equal(np.sort(one["id"]), np.arange(200))


def test_fixed_length_strings_and_datetimes_survive(tmp_path: Path) -> None:
    group = zarr.open_group(str(tmp_path / "raw.zarr"), mode="w")
    n = 120
    group.create_array("id", shape=(n,), chunks=(25,), dtype="i8")[...] = np.arange(n)
    group.create_array("when", shape=(n,), chunks=(25,), dtype="datetime64[s]")[...] = np.arange(n).astype(
        "datetime64[s]"
    )
    group.create_array("flag", shape=(n, 2), chunks=(25, 2), dtype=bool)[...] = (np.arange(2 * n) % 3 == 0).reshape(
        n, 2
    )
    shuffle_zarr(str(tmp_path / "raw.zarr"), tmp_path / "out.zarr", n_piles=4, seed=0, materialize=True)
    out = read(tmp_path / "out.zarr")
    assert np.array_equal(out["when"], out["id"].astype("datetime64[s]"))
    assert np.array_equal(out["flag"], (np.stack([2 * out["id"], 2 * out["id"] + 1], axis=1) % 3 == 0))


def test_pile_memory_is_checked_before_writing(source: str, tmp_path: Path) -> None:
    # 1000 rows of 26 bytes in 2 piles is ~13 kB per pile
    with pytest.raises(DaskShuffleValueError, match=r"pile_memory \(10,000 bytes\).*use n_piles=\d+ or more"):
        shuffle_zarr(source, tmp_path / "out.zarr", n_piles=2, seed=0, pile_memory=10_000)
    assert not (tmp_path / "out.zarr").exists()
    result = shuffle_zarr(source, tmp_path / "auto.zarr", n_piles="auto", seed=0, pile_memory=2_000)
    assert int(result.pile_sizes.max()) * 26 <= 2_000
    assert result.n_piles == metadata(tmp_path / "auto.zarr")["n_piles"] >= 13


def test_existing_destination_is_kept_unless_overwrite(source: str, tmp_path: Path) -> None:
    dst = tmp_path / "out.zarr"
    shuffle_zarr(source, dst, n_piles=4, seed=0)
    before = tree_digest(dst)
    with pytest.raises(PileStoreExistsError, match="overwrite=True"):
        shuffle_zarr(source, dst, n_piles=4, seed=1)
    assert tree_digest(dst) == before
    shuffle_zarr(source, dst, n_piles=4, seed=1, overwrite=True)
    assert metadata(dst)["seed"] == 1


def test_destination_inside_or_equal_to_the_source_is_refused(source: str, tmp_path: Path) -> None:
    before = tree_digest(source)
    for dst in (source, os.path.join(source, "piles.zarr"), tmp_path):
        with pytest.raises(DaskShuffleValueError, match="outside the source"):
            shuffle_zarr(source, dst, n_piles=4, seed=0, overwrite=True)
    assert tree_digest(source) == before


def test_an_interrupted_shuffle_never_looks_complete(tmp_path: Path) -> None:
    src = make_zarr_source(tmp_path / "raw.zarr", 500, chunk_rows=50)
    chunk = tmp_path / "raw.zarr" / "x" / "c" / "7" / "0"
    # A damaged source chunk fails a pass-1 task mid-run (not the first chunk, which planning samples).
    chunk.write_bytes(b"not zstd")
    with pytest.raises(Exception, match=r"(?i)zstd|decompress|frame|error"):
        shuffle_zarr(src, tmp_path / "out.zarr", n_piles=4, seed=0, block_memory=1_500)
    # The store is built beside dst and renamed into place once complete: a failed run leaves neither.
    assert not (tmp_path / "out.zarr").exists() and not (tmp_path / "out.zarr.daskshuffle-new").exists()
    with pytest.raises(SourceNotFoundError):
        ZarrPileReader(tmp_path / "out.zarr")
    assert not (tmp_path / "out.zarr.daskshuffle-tmp").exists(), "pieces are removed after a failure too"


def test_pile_reader_refuses_what_is_not_a_pile_store(source: str, tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError):
        ZarrPileReader(tmp_path / "missing.zarr")
    with pytest.raises(IncompletePileStoreError, match="no daskshuffle metadata"):
        ZarrPileReader(source)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_piles": 0}, DaskShuffleValueError, r"Expected n_piles to be a positive integer. Got 0 instead"),
        ({"n_piles": -3}, DaskShuffleValueError, "n_piles"),
        ({"n_piles": 2.5}, DaskShuffleTypeError, "n_piles"),
        ({"n_piles": True}, DaskShuffleTypeError, "n_piles"),
        ({"n_piles": "many"}, DaskShuffleTypeError, "n_piles"),
        ({"seed": -1}, DaskShuffleValueError, "seed"),
        ({"seed": "0"}, DaskShuffleTypeError, "seed"),
        ({"pile_memory": "lots"}, DaskShuffleValueError, "pile_memory"),
        ({"pile_memory": 0}, DaskShuffleValueError, "pile_memory"),
        ({"variables": "x"}, DaskShuffleTypeError, "variables"),
        ({"variables": []}, DaskShuffleValueError, "variables"),
        ({"variables": ["x", "nope"]}, DaskShuffleValueError, r"unknown \['nope'\]"),
        ({"overwrite": "yes"}, DaskShuffleTypeError, "overwrite"),
        ({"chunk_rows": 0}, DaskShuffleValueError, r"Expected chunk_rows to be a positive integer. Got 0 instead"),
        ({"chunk_rows": -3}, DaskShuffleValueError, "chunk_rows"),
        ({"chunk_rows": 2.5}, DaskShuffleTypeError, "chunk_rows"),
        ({"chunk_rows": "x"}, DaskShuffleTypeError, "chunk_rows"),
    ],
)
def test_bad_arguments(source: str, tmp_path: Path, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        shuffle_zarr(source, tmp_path / "out.zarr", **{"n_piles": 4, **kwargs})
    assert not (tmp_path / "out.zarr").exists()


def test_a_group_the_user_opened_is_left_as_it_was_and_refused_once_removed(tmp_path: Path) -> None:
    src = make_zarr_source(tmp_path / "raw.zarr", 200, chunk_rows=30)
    group = zarr.open_group(src, mode="r+")
    store = group.store
    shuffle_zarr(group, tmp_path / "piles.zarr", n_piles=4, seed=0, verify=True)
    assert group.store is store and not store.read_only and type(store) is zarr.storage.LocalStore
    in_memory = zarr.open_group(zarr.storage.MemoryStore(), mode="w")  # no storage to wait for: read as it is
    in_memory.create_array("id", data=np.arange(50), chunks=(10,))
    shuffle_zarr(in_memory, tmp_path / "memory.zarr", n_piles=2, seed=0)
    assert np.array_equal(np.sort(read(tmp_path / "memory.zarr")["id"]), np.arange(50))
    array = group["x"]
    metadata = Path(src) / "x" / "zarr.json"
    kept = metadata.read_bytes()
    metadata.write_text("{not json")  # there, but no longer metadata: not called removed
    with pytest.raises(DaskShuffleValueError, match=r"Got Array '.*raw.zarr.*', which zarr cannot open again \(JSON"):
        shuffle_zarr(array, tmp_path / "damaged.zarr", n_piles=2)
    assert not (tmp_path / "damaged.zarr").exists() and metadata.read_text() == "{not json"
    metadata.write_bytes(kept)
    shutil.rmtree(src)  # zarr would read every chunk of it as the fill value
    for removed in (array, group):
        with pytest.raises(SourceNotFoundError, match=r"Got (Group|Array) '.*raw.zarr.*', whose metadata is no longer"):
            shuffle_zarr(removed, tmp_path / "removed.zarr", n_piles=2)
    assert not (tmp_path / "removed.zarr").exists()


def test_bad_sources(tmp_path: Path) -> None:
    dst = tmp_path / "out.zarr"
    with pytest.raises(SourceNotFoundError, match="does not exist"):
        shuffle_zarr(tmp_path / "missing.zarr", dst, n_piles=2)
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "file.txt").write_text("hello")
    with pytest.raises(DaskShuffleValueError, match="Zarr group or array"):
        shuffle_zarr(tmp_path / "plain", dst, n_piles=2)
    with pytest.raises(DaskShuffleTypeError, match="path or URL"):
        shuffle_zarr(42, dst, n_piles=2)
    with pytest.raises(DaskShuffleValueError, match="empty list"):
        shuffle_zarr([], dst, n_piles=2)
    empty = zarr.open_group(str(tmp_path / "empty.zarr"), mode="w")
    del empty
    with pytest.raises(DaskShuffleValueError, match="without arrays"):
        shuffle_zarr(tmp_path / "empty.zarr", dst, n_piles=2)

    scalar = zarr.open_group(str(tmp_path / "scalar.zarr"), mode="w")
    scalar.create_array("x", shape=(), dtype="f4")
    with pytest.raises(DaskShuffleValueError, match=r"0-d arrays \['x'\]"):
        shuffle_zarr(tmp_path / "scalar.zarr", dst, n_piles=2)

    strings = zarr.open_group(str(tmp_path / "strings.zarr"), mode="w")
    strings.create_array("s", shape=(4,), dtype=str)
    with pytest.raises(DaskShuffleTypeError, match=r"'s'.*fixed-size.*shuffle_parquet"):
        shuffle_zarr(tmp_path / "strings.zarr", dst, n_piles=2)
    assert not dst.exists()


def test_sources_that_do_not_match(tmp_path: Path) -> None:
    a = make_zarr_source(tmp_path / "a.zarr", 50)
    b = zarr.open_group(str(tmp_path / "b.zarr"), mode="w")
    b.create_array("x", shape=(10, 5), dtype="f4")  # wider rows
    b.create_array("y", shape=(10,), dtype="i2")
    b.create_array("id", shape=(10,), dtype="i8")
    with pytest.raises(DaskShuffleValueError, match=r"'x'.*rows of shape \(4,\).*\(5,\) in source 1"):
        shuffle_zarr([a, str(tmp_path / "b.zarr")], tmp_path / "out.zarr", n_piles=2)
    c = zarr.open_group(str(tmp_path / "c.zarr"), mode="w")
    c.create_array("x", shape=(10, 4), dtype="f8")  # another dtype
    c.create_array("y", shape=(10,), dtype="i2")
    c.create_array("id", shape=(10,), dtype="i8")
    with pytest.raises(DaskShuffleValueError, match=r"'x'.*dtype float32.*dtype float64"):
        shuffle_zarr([a, str(tmp_path / "c.zarr")], tmp_path / "out.zarr", n_piles=2)
    d = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    d.create_array("x", shape=(10, 4), dtype="f4")
    with pytest.raises(DaskShuffleValueError, match="same arrays"):
        shuffle_zarr([a, str(tmp_path / "d.zarr")], tmp_path / "out.zarr", n_piles=2)
    assert not (tmp_path / "out.zarr").exists()


def test_errors_share_a_base_and_a_builtin() -> None:
    assert issubclass(PileStoreExistsError, FileExistsError)
    assert issubclass(SourceNotFoundError, FileNotFoundError)
    for error in (DaskShuffleValueError, DaskShuffleTypeError, IncompletePileStoreError):
        assert issubclass(error, DaskShuffleError)


def test_materialize_is_uniform_over_source_blocks_and_positions(tmp_path: Path) -> None:
    """Seeded; a correct shuffle fails this less than once in 10^7 runs.

    Rows of each of 10 source blocks must spread evenly over the output deciles,
    and over the relative positions inside their piles (a shuffle that merged
    piles without mixing them would put early blocks first in every pile).
    """
    n_rows, n_blocks = 20_000, 10
    src = make_zarr_source(tmp_path / "raw.zarr", n_rows, chunk_rows=n_rows // n_blocks, width=1)
    shuffle_zarr(
        src, tmp_path / "out.zarr", n_piles=20, seed=2024, materialize=True, block_memory=n_rows // n_blocks * 14
    )
    ids = read(tmp_path / "out.zarr")["id"]
    block = ids // (n_rows // n_blocks)
    decile = np.arange(n_rows) * 10 // n_rows
    table = np.zeros((n_blocks, 10))
    np.add.at(table, (block, decile), 1)
    assert stats.chi2_contingency(table).pvalue > 1e-7, table
    offsets = np.asarray(metadata(tmp_path / "out.zarr")["pile_offsets"])
    pile = np.searchsorted(offsets, np.arange(n_rows), side="right") - 1
    relative = (np.arange(n_rows) - offsets[pile]) * 10 // np.diff(offsets)[pile]
    table = np.zeros((n_blocks, 10))
    np.add.at(table, (block, relative), 1)
    assert stats.chi2_contingency(table).pvalue > 1e-7, table


def test_public_api_is_small_and_documented() -> None:
    for name in daskshuffle.__all__:
        obj = getattr(daskshuffle, name)
        assert obj.__doc__, f"{name} has no docstring"
    assert "Examples" in shuffle_zarr.__doc__


def test_fsspec_urls(tmp_path: Path) -> None:
    """Paths and URLs go through fsspec: an in-memory filesystem works like a local one."""
    import dask
    import fsspec

    group = zarr.open_group("memory://raw-url.zarr", mode="w")
    group.create_array("id", shape=(500,), chunks=(50,), dtype="i8")[...] = np.arange(500)
    try:
        with dask.config.set(scheduler="threads"):  # the memory filesystem lives in this process
            result = shuffle_zarr(
                "memory://raw-url.zarr", "memory://piles-url.zarr", n_piles=4, seed=0, block_memory=800
            )
        out = zarr.open_group("memory://piles-url.zarr", mode="r")
        assert np.array_equal(np.sort(out["id"][...]), np.arange(500))
        assert out.attrs["daskshuffle"]["complete"] is True and result.n_rows == 500
        assert not fsspec.filesystem("memory").exists("/piles-url.zarr.daskshuffle-tmp")
        with pytest.raises(DaskShuffleValueError, match="outside the source"):
            shuffle_zarr("memory://raw-url.zarr", "memory://raw-url.zarr/inner", n_piles=4)
    finally:
        fsspec.filesystem("memory").rm(["/raw-url.zarr", "/piles-url.zarr"], recursive=True)


def test_a_given_tmp_directory_is_kept(source: str, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "keep.txt").write_text("not daskshuffle's")
    shuffle_zarr(source, tmp_path / "out.zarr", n_piles=4, seed=0, tmp=scratch)
    assert sorted(p.name for p in scratch.iterdir()) == ["keep.txt"], "only the pieces' own subdirectory is removed"
    assert_aligned_permutation(read(tmp_path / "out.zarr"), 1_000)


@pytest.mark.slow
def test_default_chunks_are_small_against_piles(tmp_path: Path) -> None:
    """The loader reads a pile at a time: chunks default to a sixteenth of a pile (>= 256 KiB)."""
    src = make_zarr_source(tmp_path / "raw.zarr", 4_000, chunk_rows=500, width=1_024)  # 4 KiB rows
    shuffle_zarr(src, tmp_path / "piles.zarr", n_piles=2, seed=0)  # piles of ~2,000 rows
    shuffle_zarr(src, tmp_path / "many.zarr", n_piles=64, seed=0)  # piles of ~62 rows
    shuffle_zarr(src, tmp_path / "copy.zarr", n_piles=64, seed=0, materialize=True)
    chunks = {
        name: zarr.open_group(str(tmp_path / name), mode="r")["x"].chunks[0]
        for name in ("piles.zarr", "many.zarr", "copy.zarr")
    }
    assert chunks == {"piles.zarr": 2_000 // 16, "many.zarr": 256 * 1024 // 4096, "copy.zarr": 4 * 2**20 // 4096}


def test_a_directory_that_is_not_zarr_is_named_in_the_users_terms(tmp_path: Path) -> None:
    (tmp_path / "events").mkdir()
    with pytest.raises(DaskShuffleValueError, match=r"Got '.*events', where no Zarr group or array metadata") as raised:
        shuffle_zarr(tmp_path / "events", tmp_path / "out.zarr", n_piles=2)
    assert "StorePath" not in str(raised.value)


def test_more_piles_than_rows_warns_what_it_costs_and_what_to_pass(tmp_path: Path) -> None:
    import warnings

    make_zarr_source(tmp_path / "raw.zarr", 500, chunk_rows=100)
    with pytest.warns(daskshuffle.IneffectiveSettingWarning, match=r"n_piles=2000 .* 500 rows.*n_piles='auto'"):
        result = daskshuffle.shuffle_zarr(tmp_path / "raw.zarr", tmp_path / "many.zarr", 2000, seed=0)
    assert result.n_rows == 500, "still shuffled as asked"
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskshuffle.IneffectiveSettingWarning)
        daskshuffle.shuffle_zarr(tmp_path / "raw.zarr", tmp_path / "few.zarr", 8, seed=0)
