"""What a pile store's metadata names stays inside the store, and damage found on open is a typed error.

The fingerprint is a plain hash anyone can recompute: these cases edit the
metadata *and* fingerprint it again, as a careless or hostile edit would, on
real Zarr and Parquet stores, and check that nothing outside the store is read
or removed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
from conftest import make_zarr_source, tree_digest

import daskshuffle
from daskshuffle import CorruptPileStoreError, PileLoader
from daskshuffle.plan._plan import fingerprint

N_PILES = 4


def edit_metadata(store: Path, edit: Any) -> None:
    """Apply ``edit`` to the root metadata of a Zarr pile store, fingerprinted again as its writer would."""
    path = store / "zarr.json"
    document = json.loads(path.read_text())
    metadata = document["attributes"]["daskshuffle"]
    edit(metadata)
    whole = {key: value for key, value in metadata.items() if key != "fingerprint"}
    if "generations" not in metadata:  # a shuffle fingerprints what it recorded before completing the store
        whole = {key: value for key, value in whole.items() if key not in ("layout", "dim")} | {"complete": False}
    metadata["fingerprint"] = fingerprint(whole)
    path.write_text(json.dumps(document))
    (store / "zarr.json").touch()


@pytest.fixture
def grown(tmp_path: Path) -> Path:
    make_zarr_source(tmp_path / "a.zarr", 600, chunk_rows=64)
    make_zarr_source(tmp_path / "b.zarr", 300, chunk_rows=64, first_id=600)
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0)
    daskshuffle.append(store, tmp_path / "b.zarr", seed=1)
    return store


def outside_store(tmp_path: Path) -> Path:
    """Another complete pile store, beside the one edited: what an escaping path would read or delete."""
    make_zarr_source(tmp_path / "other-src.zarr", 200, chunk_rows=64, first_id=10_000)
    other = tmp_path / "important"
    daskshuffle.shuffle_zarr(tmp_path / "other-src.zarr", other, n_piles=N_PILES, seed=5)
    return other


@pytest.mark.parametrize("spelling", ["../important", "/absolute", "s3://bucket/important", "generations/../.."])
def test_a_generation_path_outside_the_store_is_refused_before_anything_is_read_or_removed(
    grown: Path, tmp_path: Path, spelling: str
) -> None:
    other = outside_store(tmp_path)
    path = str(other) if spelling == "/absolute" else spelling
    edit_metadata(grown, lambda metadata: metadata["generations"][1].update(path=path))
    digests = tree_digest(other), tree_digest(grown)
    calls = [
        lambda: PileLoader(grown, 100),
        lambda: daskshuffle.generations(grown),
        lambda: daskshuffle.evict(grown, keep_last=1),
        lambda: daskshuffle.evict(grown, keep_last=2),
        lambda: daskshuffle.compact(grown),
        lambda: daskshuffle.append(grown, tmp_path / "b.zarr", seed=3),
    ]
    for call in calls:
        with pytest.raises(CorruptPileStoreError, match=r"generation 1 at 'generations/00001'.*Got path"):
            call()
    assert (tree_digest(other), tree_digest(grown)) == digests, "nothing read through it was changed or removed"


def test_a_variable_name_that_leaves_the_store_is_refused(grown: Path, tmp_path: Path) -> None:
    make_zarr_source(tmp_path / "c.zarr", 300, chunk_rows=64)
    single = tmp_path / "single.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "c.zarr", single, n_piles=N_PILES, seed=0)
    for store in (single, grown):
        edit_metadata(store, lambda metadata: metadata.update(variables=["../../etc", "id"]))
        digest = tree_digest(tmp_path)
        with pytest.raises(CorruptPileStoreError, match=r"each variable to name an array.*Got '\.\./\.\./etc'"):
            PileLoader(store, 100)
        with pytest.raises(CorruptPileStoreError, match=r"'\.\./\.\./etc'"):
            daskshuffle.evict(store, keep_last=1)
        assert tree_digest(tmp_path) == digest


@pytest.mark.parametrize(("name", "shape"), [("x", (600, 2, 2)), ("x", (600,)), ("y", (600, 1)), ("x", (600, 8))])
def test_a_reshaped_array_is_refused_on_open(tmp_path: Path, name: str, shape: tuple[int, ...]) -> None:
    make_zarr_source(tmp_path / "a.zarr", 600, chunk_rows=64)
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0)
    path = store / name / "zarr.json"
    metadata = json.loads(path.read_text())  # rewritten as zarr would write an array of that shape
    metadata["shape"] = list(shape)
    rows = metadata["chunk_grid"]["configuration"]["chunk_shape"][0]
    metadata["chunk_grid"]["configuration"]["chunk_shape"] = [rows, *shape[1:]]
    metadata["dimension_names"] = [f"d{axis}" for axis in range(len(shape))]
    path.write_text(json.dumps(metadata))
    assert zarr.open_array(store / name, mode="r").shape == shape
    with pytest.raises(
        CorruptPileStoreError, match=rf"array '{name}' (in chunks of whole rows.*Got shape|as the shuffle recorded it)"
    ):
        list(PileLoader(store, 100))


def test_an_array_whose_metadata_zarr_cannot_read_is_damage(tmp_path: Path) -> None:
    make_zarr_source(tmp_path / "a.zarr", 600, chunk_rows=64)
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0)
    path = store / "x" / "zarr.json"
    metadata = json.loads(path.read_text())
    metadata["shape"] = [600, 2, 2]  # three axes, two dimension names: zarr's ValueError
    path.write_text(json.dumps(metadata))
    with pytest.raises(CorruptPileStoreError, match=r"arrays \['id', 'x', 'y'\].*ValueError"):
        PileLoader(store, 100)


def test_a_parquet_part_with_another_schema_is_refused(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": np.arange(2_000), "v": np.arange(2_000) * 0.5}), tmp_path / "raw.parquet")
    store = tmp_path / "piles"
    daskshuffle.shuffle_parquet(tmp_path / "raw.parquet", store, n_piles=4, seed=0, n_output_files=2)
    parts = sorted(path for path in store.iterdir() if path.name.startswith("part-"))
    assert len(parts) == 2
    with pq.ParquetFile(parts[1]) as file:
        groups = [file.read_row_group(group) for group in range(file.num_row_groups)]
        binding = {
            key: value for key, value in (file.metadata.metadata or {}).items() if key.startswith(b"daskshuffle")
        }
    for columns, message in (
        ({"id": pa.int32(), "v": pa.float64()}, r"columns of other types \(id: int32, v: double\)"),
        ({"id": pa.int64(), "w": pa.float64()}, r"columns \['v'\] missing"),
    ):
        # The part's binding to its run and place kept: only its schema is wrong.
        schema = pa.schema(list(columns.items()), metadata=binding)
        with pq.ParquetWriter(parts[1], schema) as writer:  # the same rows and row groups, another schema
            for group in groups:
                writer.write_table(pa.table([group["id"].cast(schema.field(0).type), group["v"]], schema=schema))
        with pytest.raises(CorruptPileStoreError, match=message + rf".*in file '{parts[1]}'"):
            list(PileLoader(store, 100))


def test_the_part_named_for_another_schema_is_the_damaged_one_whatever_order_footers_are_read_in(
    tmp_path: Path,
) -> None:
    """Footers are read by threads at open; the first part's is read first, so a damaged later part is the one named,
    open after open, and the first part still reads."""
    from daskshuffle.readers._parquet_reader import ParquetPileReader

    pq.write_table(pa.table({"id": np.arange(2_000), "v": np.arange(2_000) * 0.5}), tmp_path / "raw.parquet")
    store = tmp_path / "piles"
    daskshuffle.shuffle_parquet(tmp_path / "raw.parquet", store, n_piles=4, seed=0, n_output_files=2)
    parts = sorted(path for path in store.iterdir() if path.name.startswith("part-"))
    assert len(parts) == 2
    table = pq.read_table(parts[-1])
    schema = pa.schema([("id", pa.int32()), ("v", pa.float64())], metadata=table.schema.metadata)
    with pq.ParquetWriter(parts[-1], schema) as writer:  # the same rows in one row group: another schema
        writer.write_table(table.cast(schema))
    for _ in range(40):
        with ParquetPileReader(store) as reader:
            assert len(reader.read_rows(0, 10)) == 10
            with pytest.raises(CorruptPileStoreError, match=rf"id: int32.*in file '{parts[-1]}'"):
                reader.read_rows(reader.n_rows - 10, reader.n_rows)
