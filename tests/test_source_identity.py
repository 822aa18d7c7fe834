"""A pile store records what its sources were; a rerun against changed sources is refused, not given old rows."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xarray as xr
import zarr
from conftest import Points, make_zarr_source, raise_at, tree_digest

import daskshuffle
from daskshuffle import SourceChangedError
from daskshuffle.pilestore import read_metadata

OPTIONS = {"n_piles": 4, "block_memory": "4KiB", "chunk_rows": 16}


@pytest.mark.parametrize("seed", [3, None])
def test_a_rerun_after_the_source_changed_is_refused_naming_the_change(tmp_path: Path, seed: int | None) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 500, chunk_rows=50)
    store = tmp_path / "piles.zarr"
    first = daskshuffle.shuffle_zarr(source, store, seed=seed, **OPTIONS)
    again = daskshuffle.shuffle_zarr(source, store, seed=seed, **OPTIONS)
    assert again.n_tasks == 0 and again.seed == first.seed, "unchanged sources: the store as it is"
    group = zarr.open_group(source, mode="r+")
    group["y"][:] = group["y"][:] + 1  # same shape, new values
    digest = tree_digest(store)
    with pytest.raises(SourceChangedError, match=r"raw.zarr/y \(.*changed since\). Pass overwrite=True") as raised:
        daskshuffle.shuffle_zarr(source, store, seed=seed, **OPTIONS)
    assert isinstance(raised.value, ValueError) and raised.value.parameter == "overwrite"
    assert "raw.zarr/x" not in str(raised.value), "only what changed is named"
    assert tree_digest(store) == digest
    redone = daskshuffle.shuffle_zarr(source, store, seed=first.seed, overwrite=True, **OPTIONS)
    assert redone.n_tasks > 0
    ids = np.concatenate([batch["id"] for batch in daskshuffle.PileLoader(store, 100)])
    ys = np.concatenate([batch["y"] for batch in daskshuffle.PileLoader(store, 100, seed=0)])
    assert len(ids) == 500 and ys.sum() == ((np.arange(500) % 7) + 1).sum(), "the new values"
    assert daskshuffle.shuffle_zarr(source, store, seed=first.seed, **OPTIONS).n_tasks == 0


def test_an_interrupted_shuffle_of_changed_sources_is_not_continued(tmp_path: Path, points: Points) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 500, chunk_rows=50)
    store = tmp_path / "piles.zarr"
    points.arm("merge", raise_at())
    with dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
        daskshuffle.shuffle_zarr(source, store, seed=3, **OPTIONS)
    points.disarm("merge")
    group = zarr.open_group(source, mode="r+")
    group["x"][:10] = -1.0
    with pytest.raises(SourceChangedError, match=r"continue its interrupted shuffle.*raw.zarr/x"):
        daskshuffle.shuffle_zarr(source, store, seed=3, **OPTIONS)
    assert daskshuffle.shuffle_zarr(source, store, seed=3, overwrite=True, **OPTIONS).n_rows == 500


def test_a_parquet_file_rewritten_is_a_change(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": np.arange(400)}), tmp_path / "raw.parquet")
    store = tmp_path / "piles"
    daskshuffle.shuffle_parquet(tmp_path / "raw.parquet", store, n_piles=4, seed=1)
    assert daskshuffle.shuffle_parquet(tmp_path / "raw.parquet", store, n_piles=4, seed=1).n_tasks == 0
    pq.write_table(pa.table({"id": np.arange(400) + 1}), tmp_path / "raw.parquet")
    with pytest.raises(SourceChangedError, match=r"raw.parquet \(1 file\(s\) of [\d,]+ bytes.*overwrite=True"):
        daskshuffle.shuffle_parquet(tmp_path / "raw.parquet", store, n_piles=4, seed=1)


def test_an_xarray_store_changed_in_a_chunk_is_a_change(tmp_path: Path) -> None:
    data = xr.Dataset({"v": (("time", "k"), np.arange(600.0).reshape(300, 2))})
    data.to_zarr(tmp_path / "raw.zarr", encoding={"v": {"chunks": (50, 2)}}, consolidated=False)
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_xarray(tmp_path / "raw.zarr", store, "time", n_piles=4, seed=1)
    assert daskshuffle.shuffle_xarray(tmp_path / "raw.zarr", store, "time", n_piles=4, seed=1).n_tasks == 0
    zarr.open_group(tmp_path / "raw.zarr", mode="r+")["v"][:50] = 0.0  # one chunk rewritten
    with pytest.raises(SourceChangedError, match=r"raw.zarr/v"):
        daskshuffle.shuffle_xarray(tmp_path / "raw.zarr", store, "time", n_piles=4, seed=1)


def test_collections_record_a_dask_token(tmp_path: Path) -> None:
    frame = pd.DataFrame({"id": np.arange(200)})
    daskshuffle.shuffle_dataframe(frame, tmp_path / "frame", n_piles=2, seed=0)
    daskshuffle.shuffle_dataframe(frame.assign(id=frame["id"] + 1), tmp_path / "other", n_piles=2, seed=0)
    tokens = [read_metadata(tmp_path / name)["source_identity"] for name in ("frame", "other")]
    assert [entry["name"] for entry in tokens[0]] == ["DataFrame"] and tokens[0] != tokens[1]
    arrays = [xr.Dataset({"v": ("row", np.arange(100.0) + shift)}) for shift in (0, 1, 0)]
    for index, dataset in enumerate(arrays):
        daskshuffle.shuffle_xarray(dataset, tmp_path / f"x{index}.zarr", "row", n_piles=2, seed=0)
    recorded = [read_metadata(tmp_path / f"x{index}.zarr")["source_identity"] for index in range(3)]
    assert recorded[0] == recorded[2] != recorded[1], "equal values, equal tokens"


def _parquet_directory(directory: Path, n_files: int) -> None:
    directory.mkdir(exist_ok=True)
    for index in range(n_files):
        pq.write_table(pa.table({"id": np.arange(100) + 100 * index}), directory / f"part{index}.parquet")


@pytest.mark.parametrize("given", ["directory", "glob"])
@pytest.mark.parametrize("change", ["added", "removed", "renamed"])
def test_a_file_added_removed_or_renamed_in_a_parquet_source_is_a_change(
    tmp_path: Path, given: str, change: str
) -> None:
    _parquet_directory(tmp_path / "raw", 3)
    src = str(tmp_path / "raw") if given == "directory" else str(tmp_path / "raw" / "*.parquet")
    store = tmp_path / "piles"
    daskshuffle.shuffle_parquet(src, store, n_piles=4, seed=1)
    digest = tree_digest(store)
    if change == "added":
        pq.write_table(pa.table({"id": np.arange(50) + 300}), tmp_path / "raw" / "part3.parquet")
        named = [r"part3.parquet \(not read before\)"]
    elif change == "removed":
        (tmp_path / "raw" / "part2.parquet").unlink()
        named = [r"part2.parquet \(not read now\)"]
    else:
        (tmp_path / "raw" / "part2.parquet").rename(tmp_path / "raw" / "part9.parquet")
        named = [r"part9.parquet \(not read before\)", r"part2.parquet \(not read now\)"]
    for pattern in named:
        with pytest.raises(SourceChangedError, match=pattern + r".*Pass overwrite=True"):
            daskshuffle.shuffle_parquet(src, store, n_piles=4, seed=1)
    assert tree_digest(store) == digest, "the store is left as it was"
    assert daskshuffle.shuffle_parquet(src, store, n_piles=4, seed=1, overwrite=True).n_tasks > 0


def test_a_zarr_chunk_rewritten_unreadable_is_named_a_change_before_it_is_read(tmp_path: Path) -> None:
    source = tmp_path / "raw.zarr"
    zarr.save_group(
        source,
        x=np.random.default_rng(0).integers(0, 9, (400, 8)).astype("u1"),
        # zarr.save_group writes zstd chunks (zarr's default compressor) of 100 rows
    )
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_zarr(source, store, n_piles=4, seed=1)
    chunk = next(path for path in (source / "x" / "c").rglob("*") if path.is_file())
    chunk.write_bytes(b"\0" * chunk.stat().st_size)  # no longer zstd
    with pytest.raises(SourceChangedError, match=r"raw.zarr/x \(.*changed since"):
        daskshuffle.shuffle_zarr(source, store, n_piles=4, seed=1)


def test_a_file_added_to_an_xarray_glob_is_a_change(tmp_path: Path) -> None:
    for index in range(3):
        data = xr.Dataset({"v": (("time", "k"), np.arange(200.0).reshape(100, 2) + 1_000 * index)})
        data.to_zarr(tmp_path / f"part-{index}.zarr", consolidated=False)
    pattern = str(tmp_path / "part-*.zarr")
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_xarray(pattern, store, "time", n_piles=4, seed=1)
    assert daskshuffle.shuffle_xarray(pattern, store, "time", n_piles=4, seed=1).n_tasks == 0
    xr.Dataset({"v": (("time", "k"), np.zeros((100, 2)))}).to_zarr(tmp_path / "part-3.zarr", consolidated=False)
    with pytest.raises(SourceChangedError, match=r"part-3.zarr\S* \(not read before\)"):
        daskshuffle.shuffle_xarray(pattern, store, "time", n_piles=4, seed=1)


@pytest.mark.parametrize("earlier", ["interrupted", "complete"])
def test_a_parquet_source_is_compared_before_any_footer_is_read(tmp_path: Path, points: Points, earlier: str) -> None:
    _parquet_directory(tmp_path / "raw", 3)
    store = tmp_path / "piles"
    if earlier == "interrupted":
        points.arm("merge", raise_at())
        with dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
            daskshuffle.shuffle_parquet(tmp_path / "raw", store, n_piles=4, seed=1)
        points.disarm("merge")
    else:
        daskshuffle.shuffle_parquet(tmp_path / "raw", store, n_piles=4, seed=1)
    (tmp_path / "raw" / "part1.parquet").write_bytes(b"not parquet")  # a change, unreadable
    # Unreadable too, but its size and mtime kept: its identity is unchanged, and only reading its footer would fail.
    unchanged = tmp_path / "raw" / "part0.parquet"
    before = unchanged.stat()
    unchanged.write_bytes(b"\0" * before.st_size)
    os.utime(unchanged, ns=(before.st_atime_ns, before.st_mtime_ns))
    what = "continue its interrupted shuffle" if earlier == "interrupted" else "return it as it is"
    with pytest.raises(SourceChangedError, match=rf"{what}.*part1.parquet \(1 file\(s\) of \d+ bytes then") as raised:
        daskshuffle.shuffle_parquet(tmp_path / "raw", store, n_piles=4, seed=1)
    assert "part0" not in str(raised.value), "no footer was read before the comparison"


def test_a_store_that_records_no_source_identity_is_refused_by_a_rerun_and_verify(tmp_path: Path) -> None:
    from daskshuffle import CorruptPileStoreError
    from daskshuffle.pilestore._metadata import ADDED_AFTER_FINGERPRINT, seal_of
    from daskshuffle.plan import fingerprint

    source = make_zarr_source(tmp_path / "raw.zarr", 200, chunk_rows=50)
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_zarr(source, store, seed=3, **OPTIONS)
    group = zarr.open_group(store, mode="r+")
    metadata = dict(group.attrs["daskshuffle"])
    metadata.pop("source_identity")
    shuffled = {key: value for key, value in metadata.items() if key not in ("fingerprint", *ADDED_AFTER_FINGERPRINT)}
    metadata["fingerprint"] = fingerprint({**shuffled, "complete": False})
    metadata.pop("seal")
    group.attrs["daskshuffle"] = {**metadata, "seal": seal_of(metadata)}
    assert len(np.concatenate([batch["id"] for batch in daskshuffle.PileLoader(store, 100, seed=0)])) == 200
    refused = "source_identity, a list. Got None instead; .* shuffle the source again with overwrite=True"
    digest = tree_digest(store)
    with pytest.raises(CorruptPileStoreError, match=refused):
        daskshuffle.shuffle_zarr(source, store, seed=3, **OPTIONS)
    with pytest.raises(CorruptPileStoreError, match=refused):
        daskshuffle.verify(store, source)
    assert tree_digest(store) == digest
    assert daskshuffle.shuffle_zarr(source, store, seed=3, overwrite=True, **OPTIONS).n_tasks > 0


def _zarr_shrunk(source: Path) -> None:
    for _, array in zarr.open_group(source, mode="r+").arrays():
        array.resize((250, *array.shape[1:]))


def _zarr_values(source: Path) -> None:
    group = zarr.open_group(source, mode="r+")
    group["x"][:] = -group["x"][:]


def _parquet_rewritten(source: Path) -> None:
    pq.write_table(pa.table({"id": np.arange(400) + 1000}), source / "b.parquet")


@pytest.mark.parametrize("change", [_zarr_shrunk, _zarr_values, _parquet_rewritten])
def test_sources_changed_while_the_shuffle_reads_them_leave_no_store(
    tmp_path: Path, points: Points, change: Callable[[Path], None]
) -> None:
    """A store of rows from two states of its sources (or of rows a shrunk array no longer has) is never written."""
    if change is _parquet_rewritten:
        (tmp_path / "raw").mkdir()
        for name, start in (("a", 0), ("b", 400)):
            pq.write_table(pa.table({"id": np.arange(start, start + 400)}), tmp_path / "raw" / f"{name}.parquet")
        source = tmp_path / "raw"

        def shuffle() -> object:
            return daskshuffle.shuffle_parquet(source, store, n_piles=4, seed=1, block_memory="1KiB")
    else:
        source = Path(make_zarr_source(tmp_path / "raw.zarr", 500, chunk_rows=50))

        def shuffle() -> object:
            return daskshuffle.shuffle_zarr(source, store, seed=1, **OPTIONS)

    store = tmp_path / "piles"
    points.arm("scatter", lambda count: change(source) if count == 2 else None)
    with (
        dask.config.set(scheduler="sync"),
        pytest.raises(SourceChangedError, match="stay unchanged while the shuffle read them") as raised,
    ):
        shuffle()
    assert "The store is removed" in str(raised.value)
    assert sorted(path.name for path in tmp_path.iterdir()) == [source.name], "no store, no pieces, no lock"
    points.disarm("scatter")
    assert shuffle().n_tasks > 0, "unchanged from now on: shuffled"
