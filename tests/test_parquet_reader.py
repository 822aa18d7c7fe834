"""ParquetPileReader on real Parquet pile stores: files opened lazily, thread safety, checks, batches."""

from __future__ import annotations

import contextlib
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import Configure

import daskshuffle as ds
from daskshuffle import CorruptPileStoreError, PileLoader
from daskshuffle.readers import GenerationsReader, PileReader
from daskshuffle.readers._parquet_reader import ParquetPileReader
from daskshuffle.readers._zarr_reader import ZarrPileReader

N_ROWS = 600


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """600 rows in 6 piles, a part file each."""
    root = tmp_path_factory.mktemp("parquet-reader")
    ids = np.arange(N_ROWS)
    (root / "raw").mkdir()
    table = pa.table({"id": ids, "value": ids * 10, "text": [f"row {i}" for i in ids]})
    pq.write_table(table, root / "raw" / "a.parquet", row_group_size=50)
    return ds.shuffle_parquet(root / "raw", root / "piles", n_piles=6, seed=1, block_memory="4KiB").path


def open_descriptors(under: str) -> int:
    """This process's descriptors of files under ``under`` (not those a thread of an earlier test opens meanwhile)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since it was listed
            found += os.readlink(f"/proc/self/fd/{fd}").startswith(os.path.realpath(under))
    return found


def test_part_files_are_opened_only_while_read_and_few_footers_are_kept(store: str, configure: Configure) -> None:
    configure({"parquet-reader.footers-kept": 2})
    reader = ParquetPileReader(store)
    assert len(reader.part_paths) == 6
    assert open_descriptors(store) == 0, "no file is opened up front"
    piles = [reader.read_pile(pile) for pile in range(6)]
    assert open_descriptors(store) == 0, "no file stays open after a read"
    assert len(reader._parts) <= 2
    whole = pq.read_table(store)
    assert reader.rows.concat(piles).equals(whole)
    reader.close()


def test_reads_from_many_threads_at_once_give_the_same_rows(store: str) -> None:
    reader = ParquetPileReader(store)
    serial = [reader.read_pile(pile) for pile in range(6)]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            reader.close()  # forget the footers: the threads load them concurrently too
            concurrent = list(pool.map(reader.read_pile, [*range(6), *range(6)]))
            for got, want in zip(concurrent, serial + serial, strict=True):
                assert got.equals(want)


def test_a_group_of_runs_is_decoded_by_several_threads_in_run_order(store: str) -> None:
    import threading

    reader = ParquetPileReader(store)
    decoded_in: list[str] = []
    read = reader._read

    def watched(*args: Any) -> pa.Table:
        decoded_in.append(threading.current_thread().name)
        return read(*args)

    reader._read = watched  # type: ignore[method-assign]
    offsets = reader.pile_offsets
    runs = [(int(offsets[pile]), int(offsets[pile + 1])) for pile in [4, 0, 5, 2, 1, 3]]
    group = reader.read_runs(runs)
    assert len(decoded_in) == 6 and all(name.startswith("daskshuffle-parquet-decode") for name in decoded_in)
    assert group.equals(reader.rows.concat([reader.read_rows(a, b) for a, b in runs]).combine_chunks())
    single = reader.read_runs(runs[:1])
    assert decoded_in[-1] == threading.current_thread().name, "a single run in the caller's thread"
    assert single.equals(reader.read_rows(*runs[0]))
    reader.close()
    assert not [t.name for t in threading.enumerate() if t.name.startswith(reader._decoders.prefix)]
    assert reader.read_runs(runs[:2]).equals(
        reader.rows.concat([reader.read_rows(*runs[0]), reader.read_rows(*runs[1])])
    )
    reader.close()


def test_a_corrupted_column_is_named_with_its_pile_and_file(store: str, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    reader = ParquetPileReader(store)
    pile = 3
    first = int(reader.pile_offsets[pile])
    path = Path(store) / next(
        name for name in sorted(os.listdir(store)) if name.startswith("part-") and int(name[5:20]) == first
    )
    shutil.copytree(store, copy)
    target = copy / path.name
    footer = pq.read_metadata(target)
    names = [footer.schema.column(i).name for i in range(footer.num_columns)]
    column = footer.row_group(0).column(names.index("value"))
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    data = bytearray(target.read_bytes())
    data[start + column.total_compressed_size - 4] ^= 0xFF  # inside the column chunk's last page

    target.write_bytes(bytes(data))
    damaged = ParquetPileReader(copy)
    with pytest.raises(CorruptPileStoreError, match=r"in file .*part-.*\(pile 3, columns \['value'\]\)") as caught:
        damaged.read_pile(pile)
    assert target.name in str(caught.value) and str(copy) in str(caught.value)
    # Other piles, and other columns of this one, still read.
    assert damaged.read_pile(pile - 1).num_rows > 0
    assert ParquetPileReader(copy, variables=["id", "text"]).read_pile(pile).num_rows > 0


def test_a_missing_first_part_is_named(store: str, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(store, tmp_path / "copy"))
    first = sorted(copy.glob("part-*.parquet"))[0]
    first.unlink()
    reader = ParquetPileReader(copy)
    with pytest.raises(CorruptPileStoreError, match=rf"{first.name}' \(pile 0, columns"):
        reader.read_pile(0)
    assert reader.read_pile(1).num_rows > 0


def test_batches_keep_one_dtype_per_column_across_piles(tmp_path: Path) -> None:
    ids = np.arange(300)
    values = pa.array([None if i < 40 else int(i) for i in ids], type=pa.int64())
    (tmp_path / "raw").mkdir()
    pq.write_table(pa.table({"id": ids, "value": values}), tmp_path / "raw" / "a.parquet", row_group_size=20)
    result = ds.shuffle_parquet(tmp_path / "raw", tmp_path / "piles", n_piles=3, seed=0, block_memory="2KiB")
    with PileLoader(result.path, batch_size=32, seed=0) as loader:
        batches = list(loader)
    ids_out = np.concatenate([batch["id"] for batch in batches])
    got = np.concatenate([batch["value"] for batch in batches])
    np.testing.assert_array_equal(np.sort(ids_out), ids)
    # Nulls as NaN wherever they are; the other values exact.
    np.testing.assert_array_equal(np.isnan(got), ids_out < 40)
    np.testing.assert_array_equal(got[ids_out >= 40], ids_out[ids_out >= 40])


def test_embeddings_are_arrays_of_one_more_dimension_and_nulls_fall_back_to_objects(tmp_path: Path) -> None:
    n = 400
    ids = np.arange(n)
    flat = np.repeat(ids, 8).astype(np.float32) + np.tile(np.arange(8, dtype=np.float32) / 10, n)
    grid = np.repeat(ids, 6).astype(np.int16)
    table = pa.table(
        {
            "id": ids,
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(flat), 8),
            "grid": pa.FixedSizeListArray.from_arrays(pa.FixedSizeListArray.from_arrays(pa.array(grid), 2), 3),
        }
    )
    (tmp_path / "raw").mkdir()
    pq.write_table(table, tmp_path / "raw" / "a.parquet", row_group_size=50)
    store = ds.shuffle_parquet(tmp_path / "raw", tmp_path / "piles", n_piles=4, seed=0).path
    with PileLoader(store, batch_size=64) as loader:
        assert loader.dtypes["emb"] == np.float32 and loader.dtypes["grid"] == np.int16
        seen = []
        for batch in loader:
            assert batch["emb"].shape == (len(batch["id"]), 8) and batch["grid"].shape == (len(batch["id"]), 3, 2)
            np.testing.assert_allclose(batch["emb"], flat.reshape(n, 8)[batch["id"]])
            np.testing.assert_array_equal(batch["grid"][:, :, 0], np.repeat(batch["id"], 3).reshape(-1, 3))
            seen.append(batch["id"])
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), ids)

    # A null anywhere in a fixed-size list: object arrays of arrays, as for any other nested value.
    values = pa.array([None if i == 5 else float(i) for i in range(n * 2)], pa.float32())
    (tmp_path / "nulls").mkdir()
    pq.write_table(
        pa.table({"id": ids, "emb": pa.FixedSizeListArray.from_arrays(values, 2)}), tmp_path / "nulls" / "a.parquet"
    )
    store = ds.shuffle_parquet(tmp_path / "nulls", tmp_path / "nulls-piles", n_piles=1, seed=0).path
    with PileLoader(store, batch_size=n) as loader:
        (batch,) = list(loader)
    assert batch["emb"].dtype == object
    row = int(np.flatnonzero(batch["id"] == 2)[0])
    assert np.isnan(batch["emb"][row][1]) and batch["emb"][row][0] == 4.0


@pytest.mark.parametrize(
    ("reader", "batch_format", "match"),
    [
        (ParquetPileReader, "xarray", r"'numpy' \(.*\), 'arrow' \(.*\) or 'pandas' \(.*\) for a Parquet pile store\. "),
        (ParquetPileReader, "torch", r"for a Parquet pile store\. Got 'torch' instead\.$"),
        (ZarrPileReader, "arrow", r"for a Zarr pile store\. Got 'arrow' instead; 'arrow' batches come from Parquet"),
        (GenerationsReader, "pandas", r"'numpy' .* or 'xarray' .* for a Zarr pile store\. Got 'pandas' instead; 'pan"),
    ],
)
def test_every_reader_checks_the_batch_format_it_declares_before_it_looks_for_the_store(
    tmp_path: Path, reader: type[PileReader[object]], batch_format: str, match: str
) -> None:
    """One check for every kind of store (PileReader.__init__), against the batch formats the kind hands out."""
    with pytest.raises(ds.DaskShuffleValueError, match=match) as error:
        reader(tmp_path / "missing", batch_format=batch_format)
    assert error.value.parameter == "batch_format"
    if batch_format == "xarray":
        assert str(error.value).endswith("'xarray' batches come from Zarr pile stores.")


@pytest.mark.parametrize("recorded", [None, 0, "4096"])
def test_a_store_that_records_no_row_group_rows_is_refused(store: str, tmp_path: Path, recorded: object) -> None:
    import json

    from daskshuffle.pilestore._metadata import seal_of

    copy = tmp_path / "piles"
    shutil.copytree(store, copy)
    sidecar = copy / "_daskshuffle.json"
    metadata = {key: value for key, value in json.loads(sidecar.read_text()).items() if key != "seal"}
    metadata.pop("row_group_rows")
    if recorded is not None:
        metadata["row_group_rows"] = recorded
    sidecar.write_text(json.dumps({**metadata, "seal": seal_of(metadata)}))
    with pytest.raises(CorruptPileStoreError, match=f"the rows of its row groups, row_group_rows. Got {recorded!r}"):
        ParquetPileReader(str(copy))
    with pytest.raises(CorruptPileStoreError, match="row_group_rows"):
        PileLoader(str(copy), batch_size=100, seed=0)


@pytest.mark.parametrize("recorded", [None, "", 7])
def test_a_store_that_records_no_run_is_refused(store: str, tmp_path: Path, recorded: object) -> None:
    import json

    from daskshuffle.pilestore._metadata import seal_of

    copy = tmp_path / "piles"
    shutil.copytree(store, copy)
    sidecar = copy / "_daskshuffle.json"
    metadata = {key: value for key, value in json.loads(sidecar.read_text()).items() if key not in ("seal", "run")}
    if recorded is not None:
        metadata["run"] = recorded
    sidecar.write_text(json.dumps({**metadata, "seal": seal_of(metadata)}))
    with pytest.raises(CorruptPileStoreError, match=f"the run that wrote it, run. Got {recorded!r} instead"):
        ParquetPileReader(str(copy))
    with pytest.raises(CorruptPileStoreError, match="the run that wrote it"):
        PileLoader(str(copy), batch_size=100, seed=0)


def test_a_parquet_store_shuffled_again_under_an_open_loader_raises_store_changed(tmp_path: Path) -> None:
    """Part files of another run found by an open loader: the store changed, no damage (as for a Zarr store)."""
    (tmp_path / "raw").mkdir()
    ids = np.arange(20_000)
    options: dict[str, Any] = {"n_piles": 20, "seed": 1, "block_memory": "4KiB", "row_group_size": 100}
    pq.write_table(pa.table({"id": ids}), tmp_path / "raw" / "a.parquet")
    piles = ds.shuffle_parquet(tmp_path / "raw", tmp_path / "piles", **options).path
    small = ds.orders.Piles(budget="8KiB")  # groups of a few hundred rows: reads after the first batch
    with PileLoader(piles, batch_size=50, seed=0, prefetch="0B", order=small) as loader:
        batches = iter(loader)
        next(batches)
        # The same seed and shapes, other values: the same fingerprint, the same part files' names, another run.
        pq.write_table(pa.table({"id": ids + 1}), tmp_path / "raw" / "a.parquet")
        ds.shuffle_parquet(tmp_path / "raw", piles, **options, overwrite=True)
        with pytest.raises(ds.StoreChangedError, match=r"shuffled again since.*open a new PileLoader"):
            for _ in batches:
                pass
