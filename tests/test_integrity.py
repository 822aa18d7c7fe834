"""Every read proves its bytes are this run's, for this variable, at this place (pilestore/_binding.py).

A chunk's own crc32c proves it intact; these tests move intact chunks, replace
stores under readers, edit what each array's zarr.json says, and serve a cache
of an earlier run: each must raise, never yield rows.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

import daskshuffle as ds
from daskshuffle import CorruptPileStoreError, IncompletePileStoreError, StoreChangedError
from daskshuffle.pilestore import read_metadata
from daskshuffle.pilestore._metadata import BOUND_KEYS, seal_of
from daskshuffle.plan import fingerprint
from daskshuffle.readers import GenerationsReader, open_pile_reader
from daskshuffle.readers._zarr_reader import ZarrPileReader
from daskshuffle.storage import Location

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _s3_model import S3ModelFileSystem

N_ROWS = 20_000


def make_source(path: Path, values: int = 0) -> str:
    """Random floats drawn with seed ``values`` (stored raw: every chunk file of ``x`` the same size) and ids."""
    group = zarr.open_group(path, mode="w", zarr_format=3)
    rng = np.random.default_rng(values)
    group.create_array("x", data=rng.standard_normal((N_ROWS, 4)).astype("f4"), chunks=(2_000, 4))
    group.create_array("id", data=np.arange(N_ROWS), chunks=(2_000,))
    return str(path)


def shuffled(
    tmp_path: Path, name: str = "piles.zarr", values: int = 0, source: str | None = None, **options: Any
) -> str:
    """A pile store of a source of values drawn with seed ``values`` (at ``source``, default a path of its own)."""
    source = make_source(tmp_path / (source or f"raw-{values}.zarr"), values)
    ds.shuffle_zarr(source, tmp_path / name, **{"n_piles": 8, "seed": 0, "chunk_rows": 512, **options})
    return str(tmp_path / name)


def unseen(store: str, identity: Any) -> None:
    """Record ``identity`` as the sources of ``store``, its fingerprint and seal made again, as a writer would have."""
    group = zarr.open_group(store, mode="r+")
    metadata = dict(group.attrs["daskshuffle"])
    metadata["source_identity"] = identity
    shuffled_keys = {
        key: value for key, value in metadata.items() if key not in ("fingerprint", *BOUND_KEYS, "layout", "dim")
    }
    metadata["fingerprint"] = fingerprint({**shuffled_keys, "complete": False})
    metadata.pop("seal")
    group.attrs["daskshuffle"] = {**metadata, "seal": seal_of(metadata)}


def resealed(store: str, edit: Any) -> None:
    """``edit`` the root metadata of ``store`` and seal it again: what the store records, not its seal, is checked."""
    group = zarr.open_group(store, mode="r+")
    metadata = dict(group.attrs["daskshuffle"])
    edit(metadata)
    metadata.pop("seal")
    group.attrs["daskshuffle"] = {**metadata, "seal": seal_of(metadata)}


def all_ids(store: str, **options: Any) -> np.ndarray:
    with ds.PileLoader(store, batch_size=1_000, seed=0, **options) as loader:
        return np.concatenate([batch["id"] for batch in loader])


def all_rows(store: str, **options: Any) -> np.ndarray:
    """Every row as the loader yields it, ``x`` beside ``id``."""
    with ds.PileLoader(store, batch_size=1_000, seed=0, **options) as loader:
        return np.concatenate([np.column_stack([batch["x"], batch["id"]]) for batch in loader])


def read_everything(store: str) -> None:
    with open_pile_reader(store) as reader:
        reader.read_rows(0, reader.n_rows)


def chunk(store: str, variable: str, index: int) -> Path:
    """A chunk file: of ``x``, rows of 4 values (one chunk across), or of ``id``, 1-D."""
    path = Path(store) / variable / "c" / str(index)
    return path / "0" if variable == "x" else path


def test_two_chunk_files_of_one_variable_swapped_raise(tmp_path: Path) -> None:
    store = shuffled(tmp_path)
    a, b = chunk(store, "x", 1), chunk(store, "x", 6)
    assert a.stat().st_size == b.stat().st_size
    first, second = a.read_bytes(), b.read_bytes()
    a.write_bytes(second)
    b.write_bytes(first)
    with pytest.raises(CorruptPileStoreError, match=r"x/c/[16]/0.*where the run recorded.*another place") as error:
        all_ids(store)
    assert not isinstance(error.value, StoreChangedError)  # the store is the one opened: damage
    with pytest.raises(CorruptPileStoreError, match="another place, variable, run or store"):
        read_everything(store)


def test_a_chunk_copied_from_another_store_of_the_same_shape_raises(tmp_path: Path) -> None:
    store = shuffled(tmp_path)
    other = shuffled(tmp_path, "other.zarr", values=1)
    shutil.copyfile(chunk(other, "x", 3), chunk(store, "x", 3))
    with pytest.raises(CorruptPileStoreError, match=r"x/c/3/0"):
        read_everything(store)


def test_a_store_replaced_with_overwrite_under_an_open_loader_raises_store_changed(tmp_path: Path) -> None:
    store = shuffled(tmp_path)
    ids = []
    # One pile at a time, nothing read ahead: the rest of the epoch is read after the store is replaced.
    with ds.PileLoader(store, batch_size=500, seed=0, prefetch="0B", order=ds.orders.Piles(budget="64KiB")) as loader:
        batches = iter(loader)
        ids.append(next(batches)["id"])
        # The same seed and shapes, other values: the same fingerprint, the same offsets, other chunk files.
        ds.shuffle_zarr(make_source(tmp_path / "new.zarr", 5), store, n_piles=8, seed=0, chunk_rows=512, overwrite=True)
        with pytest.raises(StoreChangedError, match="shuffled again since"):
            for batch in batches:
                ids.append(batch["id"])
    assert len(np.concatenate(ids)) < N_ROWS


def test_a_cache_of_an_earlier_run_with_the_same_fingerprint_is_not_served(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    url, options = "s3model://bucket/piles.zarr", {"root": str(objects), "latency": 0.0, "bandwidth": 1e12}
    S3ModelFileSystem(**options)  # registers the protocol
    # The same source path, seed and shapes, other values: the same fingerprint where the sources' identity
    # does not see the change (a source past `LISTED_CHUNKS`, recorded by its metadata alone), made so here.
    first = shuffled(tmp_path, "first.zarr", source="raw.zarr")
    second = shuffled(tmp_path, "second.zarr", values=1, source="raw.zarr")
    unseen(second, read_metadata(first)["source_identity"])  # type: ignore[index]
    assert read_metadata(first)["fingerprint"] == read_metadata(second)["fingerprint"]  # type: ignore[index]
    codecs = [read_metadata(store)["layout"]["variables"]["x"]["codec"] for store in (first, second)]  # type: ignore[index]
    assert codecs == ["none", "none"]  # chunk files alike: every one passes the checks of the other's
    cache = tmp_path / "cache"

    def x_sum() -> float:
        with ds.PileLoader(url, batch_size=1_000, seed=0, storage_options=options, cache=cache) as loader:
            return float(sum(batch["x"].astype(np.float64).sum() for batch in loader))

    shutil.copytree(first, objects / "bucket" / "piles.zarr")
    before = x_sum()
    shutil.rmtree(objects / "bucket" / "piles.zarr")
    shutil.copytree(second, objects / "bucket" / "piles.zarr")
    after = x_sum()
    expected = float(zarr.open_group(second)["x"][...].astype(np.float64).sum())
    assert after == pytest.approx(expected) and after != pytest.approx(before)


def test_swapped_files_in_the_cache_are_fetched_again(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    url, options = "s3model://bucket/piles.zarr", {"root": str(objects), "latency": 0.0, "bandwidth": 1e12}
    S3ModelFileSystem(**options)
    shutil.copytree(shuffled(tmp_path), objects / "bucket" / "piles.zarr")
    expected = all_rows(str(objects / "bucket" / "piles.zarr"))
    cache = tmp_path / "cache"
    all_rows(url, storage_options=options, cache=cache)
    files = sorted(path for path in cache.rglob("*") if path.is_file() and path.stat().st_size > 1_000)
    by_size: dict[int, list[Path]] = {}
    for path in files:
        by_size.setdefault(path.stat().st_size, []).append(path)
    a, b = next(paths for paths in by_size.values() if len(paths) >= 2)[:2]
    first = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(first)
    np.testing.assert_array_equal(all_rows(url, storage_options=options, cache=cache), expected)


def test_a_wrong_object_served_by_storage_raises(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    url, options = "s3model://bucket/piles.zarr", {"root": str(objects), "latency": 0.0, "bandwidth": 1e12}
    S3ModelFileSystem(**options)
    shutil.copytree(shuffled(tmp_path), objects / "bucket" / "piles.zarr")
    served = objects / "bucket" / "piles.zarr" / "x" / "c"
    shutil.copyfile(served / "0" / "0", served / "5" / "0")
    with pytest.raises(CorruptPileStoreError, match=r"x/c/5/0"):
        all_ids(url, storage_options=options)


def edit_json(path: Path, edit: Any) -> None:
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def big_endian(document: dict[str, Any]) -> None:
    document["codecs"][0]["configuration"]["endian"] = "big"


def other_dtype(document: dict[str, Any]) -> None:
    document["data_type"] = "int32"


def other_chunks(document: dict[str, Any]) -> None:
    document["chunk_grid"]["configuration"]["chunk_shape"][0] = 256


@pytest.mark.parametrize("edit", [big_endian, other_dtype, other_chunks], ids=["endian", "dtype", "chunks"])
def test_an_edited_array_zarr_json_is_refused_on_open(tmp_path: Path, edit: Any) -> None:
    store = shuffled(tmp_path)
    edit_json(Path(store) / "x" / "zarr.json", edit)
    with pytest.raises(CorruptPileStoreError, match=r"array 'x' as the shuffle recorded it .* in its zarr.json"):
        ZarrPileReader(store)
    with pytest.raises(CorruptPileStoreError):
        all_ids(store)


def lowered(keep_seal: bool) -> Any:
    def edit(document: dict[str, Any]) -> None:
        metadata = document["attributes"]["daskshuffle"]
        metadata["format_version"] = 1
        if not keep_seal:
            for key in ("seal", "run", "arrays", "layout"):
                metadata.pop(key)

    return edit


@pytest.mark.parametrize("keep_seal", [True, False], ids=["sealed", "records-removed"])
def test_a_lowered_format_version_with_a_deleted_chunk_raises_not_fill_values(tmp_path: Path, keep_seal: bool) -> None:
    store = shuffled(tmp_path)
    chunk(store, "id", 0).unlink()
    edit_json(Path(store) / "zarr.json", lowered(keep_seal))
    with pytest.raises(IncompletePileStoreError, match=r"format version 3. Got version 1 .* shuffle the source again"):
        all_ids(store)


def test_an_edited_layout_record_is_refused(tmp_path: Path) -> None:
    store = shuffled(tmp_path)
    chunk(store, "id", 0).unlink()
    edit_json(Path(store) / "zarr.json", lambda document: document["attributes"]["daskshuffle"].pop("layout"))
    with pytest.raises(CorruptPileStoreError, match="seal"):
        all_ids(store)


@pytest.mark.parametrize(
    "edit",
    [
        lambda metadata: metadata["layout"]["variables"]["x"].pop("row_shape"),
        lambda metadata: metadata["layout"]["variables"]["x"].pop("chunk_rows"),
        lambda metadata: metadata["layout"]["variables"].pop("x"),
    ],
    ids=["row_shape", "chunk_rows", "variable"],
)
def test_a_store_that_records_no_layout_of_an_array_is_refused(tmp_path: Path, edit: Any) -> None:
    store = shuffled(tmp_path)
    resealed(store, edit)
    with pytest.raises(CorruptPileStoreError, match=r"the layout of array 'x' \(its rows per chunk and row shape\)"):
        all_ids(store)


@pytest.mark.parametrize(
    "edit",
    [lambda metadata: metadata["arrays"]["id"].pop("chunk_crc32c"), lambda metadata: metadata.pop("arrays")],
    ids=["table", "arrays"],
)
def test_a_store_that_records_no_crc32c_table_is_refused_by_the_loader_and_verify(tmp_path: Path, edit: Any) -> None:
    store = shuffled(tmp_path)
    resealed(store, edit)
    refused = r"variable 'id' \(arrays → chunk_crc32c\)|array 'id' under 'arrays'"
    with pytest.raises(CorruptPileStoreError, match=refused):
        all_ids(store)
    with pytest.raises(CorruptPileStoreError, match=refused):
        ds.verify(store)


def test_a_crc32c_codec_the_user_names_first_is_moved_last_and_the_table_recorded(tmp_path: Path) -> None:
    from zarr.codecs import Crc32cCodec, ZstdCodec

    store = shuffled(tmp_path, compressors=[Crc32cCodec(), ZstdCodec()])
    metadata = read_metadata(store)
    assert metadata is not None and metadata["arrays"]["x"]["chunk_crc32c"]["n_chunks"] == 40
    assert sorted(all_ids(store)) == list(range(N_ROWS))


def test_a_missing_or_edited_crc32c_table_is_refused_on_open(tmp_path: Path) -> None:
    from daskshuffle.pilestore._binding import TABLE

    store = shuffled(tmp_path)
    table = Path(store) / "id" / TABLE
    data = bytearray(table.read_bytes())
    data[0] ^= 1
    table.write_bytes(bytes(data))
    with pytest.raises(CorruptPileStoreError, match="crc32c of every chunk of variable 'id'"):
        ZarrPileReader(store)
    table.unlink()
    with pytest.raises(CorruptPileStoreError, match="no such file"):
        ZarrPileReader(store)


def test_a_loader_opened_during_compact_is_told_the_store_changed(tmp_path: Path) -> None:
    store = shuffled(tmp_path)
    ds.append(store, make_source(tmp_path / "more.zarr", 1), seed=1)
    stale = read_metadata(store)  # what an open read just before compact replaced the generations
    assert stale is not None and len(stale["generations"]) == 2
    ds.compact(store)
    with pytest.raises(StoreChangedError, match="generations changed since"):
        GenerationsReader(Location.of(store), metadata=stale)
    assert len(all_ids(store)) == 2 * N_ROWS  # opened again: the store as it is now


def test_every_store_kind_records_its_run_and_a_new_run_draws_another(tmp_path: Path) -> None:
    store = shuffled(tmp_path)
    first = read_metadata(store)
    ds.shuffle_zarr(tmp_path / "raw-0.zarr", store, n_piles=8, seed=0, chunk_rows=512, overwrite=True)
    second = read_metadata(store)
    assert first is not None and second is not None
    assert first["fingerprint"] == second["fingerprint"] and first["run"] != second["run"]
    assert sorted(first["arrays"]) == ["id", "x"] and first["arrays"]["x"]["chunk_crc32c"]["n_chunks"] == 40
    assert not list(Path(store).rglob("daskshuffle-writes"))  # the records of each write are gathered and gone


def parquet_store(tmp_path: Path, name: str, offset: float) -> Path:
    table = pa.table({"id": np.arange(N_ROWS), "x": np.random.default_rng(0).standard_normal(N_ROWS) + offset})
    pq.write_table(table, tmp_path / f"{name}-raw.parquet")
    ds.shuffle_parquet(tmp_path / f"{name}-raw.parquet", tmp_path / name, n_piles=4, seed=0, n_output_files=4)
    return tmp_path / name


def test_parquet_part_files_swapped_or_from_another_store_raise(tmp_path: Path) -> None:
    store = parquet_store(tmp_path, "piles", 0.0)
    other = parquet_store(tmp_path, "other", 1.0)
    parts = sorted(store.glob("part-*.parquet"))
    shutil.copyfile(sorted(other.glob("part-*.parquet"))[1], parts[1])
    with pytest.raises(CorruptPileStoreError, match=r"a part file of .* where the store's run wrote"):
        all_ids(str(store))
    shutil.copyfile(parts[2], parts[1])
    with pytest.raises(CorruptPileStoreError, match="where the store's run wrote"):
        all_ids(str(store))


def test_info_says_a_store_is_bound_to_its_run_and_refuses_one_lowered(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from daskshuffle._cli._common import cli

    store = shuffled(tmp_path)
    run = read_metadata(store)["run"]  # type: ignore[index]
    shown = CliRunner().invoke(cli, ["info", store])
    assert shown.exit_code == 0, shown.output
    assert f"bound to its run: yes (run {run})" in shown.output
    old = tmp_path / "old.zarr"
    shutil.copytree(store, old)
    edit_json(old / "zarr.json", lowered(keep_seal=False))
    shown = CliRunner().invoke(cli, ["info", str(old)])  # not shown as an old store: refused
    assert shown.exit_code == 1 and "format version 3. Got version 1" in shown.output
