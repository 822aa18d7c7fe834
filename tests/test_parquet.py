"""shuffle_parquet and shuffle_dataframe end to end: real Parquet files on disk, real dask graphs."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from conftest import Configure, tree_digest
from simulate import simulate

import daskshuffle
from daskshuffle import (
    DaskShuffleTypeError,
    DaskShuffleValueError,
    PileLoader,
    PileStoreExistsError,
    SourceChangedError,
    SourceNotFoundError,
    shuffle_dataframe,
    shuffle_parquet,
)
from daskshuffle.pilestore import FORMAT_VERSION, ParquetWriting
from daskshuffle.readers import open_pile_reader
from daskshuffle.readers._parquet_reader import ParquetPileReader
from daskshuffle.sources._parquet import open_parquet_sources

# dask's Parquet reader calls reset_index(inplace=True), which pandas 3.1 deprecates; not ours to fix.
DASK_READER_WARNING = "ignore:The inplace keyword in DataFrame.reset_index:pandas.errors.Pandas4Warning"
SMALL_BLOCKS = 3_000  # bytes: a few row groups per block


def typed_table(first: int, n: int) -> pa.Table:
    """Every kind of Arrow column, nulls in each but ``id``; every value a function of ``id``."""
    ids = np.arange(first, first + n, dtype=np.int64)
    null = ids % 5 == 0

    def masked(values: list) -> list:
        return [None if gone else value for value, gone in zip(values, null, strict=True)]

    return pa.table(
        {
            "id": pa.array(ids),
            "i8": pa.array(masked((ids % 100 - 50).tolist()), pa.int8()),
            "u32": pa.array(masked((ids * 3).tolist()), pa.uint32()),
            "f32": pa.array(masked((ids / 4).tolist()), pa.float32()),
            "f64": pa.array(masked((ids * 0.5).tolist()), pa.float64()),
            "flag": pa.array(masked((ids % 2 == 0).tolist()), pa.bool_()),
            "text": pa.array(masked([f"row {i} é" for i in ids]), pa.string()),
            "blob": pa.array(masked([bytes([i % 256]) * (i % 7) for i in ids]), pa.binary()),
            "when": pa.array(masked((ids * 1_000_000).tolist()), pa.timestamp("us", tz="Europe/Paris")),
            "day": pa.array(masked([dt.date(2020, 1, 1) + dt.timedelta(days=int(i)) for i in ids]), pa.date32()),
            "price": pa.array(masked([decimal.Decimal(int(i)) / 100 for i in ids]), pa.decimal128(12, 2)),
            "label": pa.array(masked([["cat", "dog", "eel"][i % 3] for i in ids]), pa.string()).dictionary_encode(),
            "tags": pa.array(masked([list(range(i % 4)) for i in ids]), pa.list_(pa.int32())),
            "point": pa.array(
                masked([{"x": int(i), "name": str(i)} for i in ids]),
                pa.struct([("x", pa.int64()), ("name", pa.string())]),
            ),
            "nothing": pa.nulls(n),
        }
    )


def write_files(directory: Path, sizes: list[int], *, row_group_size: int = 50) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    paths, first = [], 0
    for index, size in enumerate(sizes):
        path = directory / f"part-{index}.parquet"
        pq.write_table(typed_table(first, size), path, row_group_size=row_group_size)
        paths.append(str(path))
        first += size
    return paths


def read_sidecar(dst: Path) -> dict:
    return json.loads((dst / "_daskshuffle.json").read_text())


def expected_ids(src, n_piles: int, seed: int, *, materialize: bool = False, block_nbytes: int) -> np.ndarray:
    lengths = list(
        open_parquet_sources(src, columns=None, block_nbytes=block_nbytes, writing=ParquetWriting()).block_lengths
    )
    return simulate(lengths, n_piles, seed)[1]


def test_every_column_type_survives_in_the_planned_order(tmp_path: Path) -> None:
    src = tmp_path / "raw"
    write_files(src, [230, 0, 170, 400])
    before = tree_digest(src)
    dst = tmp_path / "piles"
    result = shuffle_parquet(src, dst, n_piles=7, seed=3, block_memory=SMALL_BLOCKS)

    source = pads.dataset(src).to_table()
    out = pq.read_table(dst)
    assert out.schema.equals(source.schema, check_metadata=False), "every type unchanged"
    ids = out.column("id").to_numpy()
    assert np.array_equal(ids, expected_ids(str(src), 7, 3, block_nbytes=SMALL_BLOCKS))
    assert out.sort_by("id").equals(source.sort_by("id")), "every value stays with its id, nulls included"

    meta = read_sidecar(dst)
    assert meta["complete"] is True and meta["kind"] == "parquet" and meta["format_version"] == FORMAT_VERSION
    assert (meta["n_rows"], meta["n_piles"], meta["seed"]) == (800, 7, 3)
    assert meta["variables"] == source.column_names and isinstance(meta["fingerprint"], str)
    assert np.array_equal(np.diff(meta["pile_offsets"]), result.pile_sizes)
    offsets = meta["pile_offsets"]
    ascending = [float(np.mean(np.diff(ids[offsets[p] : offsets[p + 1]]) > 0)) for p in range(7)]
    assert 0.3 < float(np.mean(ascending)) < 0.7, "piles stored shuffled"
    assert tree_digest(src) == before, "the source is never modified"
    assert not (tmp_path / "piles.daskshuffle-tmp").exists(), "pieces are removed at the end"


@pytest.mark.filterwarnings(DASK_READER_WARNING)
def test_output_is_a_dataset_every_reader_opens_with_a_row_group_per_pile(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "raw", [300, 500])
    dst = tmp_path / "piles"
    shuffle_parquet(paths, dst, n_piles=6, seed=0, block_memory=SMALL_BLOCKS, pile_memory="64KiB")
    offsets = read_sidecar(dst)["pile_offsets"]
    expected = pq.read_table(dst).column("id").to_numpy()
    assert np.array_equal(pd.read_parquet(dst)["id"].to_numpy(), expected)
    assert np.array_equal(pads.dataset(dst).to_table().column("id").to_numpy(), expected)
    assert np.array_equal(dd.read_parquet(str(dst))["id"].compute().to_numpy(), expected)
    boundaries = set()
    for part in sorted(dst.glob("part-*.parquet")):
        start = int(part.stem.split("-")[1])
        metadata = pq.ParquetFile(part).metadata
        for index in range(metadata.num_row_groups):
            boundaries.add(start)
            start += metadata.row_group(index).num_rows
        boundaries.add(start)
    assert boundaries == set(offsets), "row groups are exactly the piles"


def test_on_object_storage_a_merge_group_goes_to_several_part_files_at_once(
    tmp_path: Path, configure: Configure
) -> None:
    """The same piles as a local shuffle, in part files of whole piles of about shuffle.remote-part-nbytes each."""
    import fsspec

    configure({"shuffle.remote-part-nbytes": 4_000})
    paths = write_files(tmp_path / "raw", [300, 500])
    shuffle_parquet(paths, tmp_path / "piles", n_piles=8, seed=2, block_memory="4MiB")
    url = f"memory://parquet-parts-{tmp_path.name}/piles"
    shuffle_parquet(paths, url, n_piles=8, seed=2, block_memory="4MiB")
    memory = fsspec.filesystem("memory")
    remote = sorted(path for path in memory.ls(url.removeprefix("memory://"), detail=False) if "part-" in path)
    assert len(list((tmp_path / "piles").glob("part-*.parquet"))) == 1 < len(remote) <= 8  # one merge group
    offsets = read_sidecar(tmp_path / "piles")["pile_offsets"]
    starts = []
    for path in remote:
        with memory.open(path, "rb") as file:
            metadata = pq.ParquetFile(file).metadata
        start = int(path.rsplit("-", 1)[1].split(".")[0])
        starts.append(start)
        ends = np.cumsum([metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]) + start
        assert start in offsets and set(ends.tolist()) <= set(offsets)  # whole piles, a row group each
    assert starts[0] == 0
    expected = [batch["id"] for batch in daskshuffle.PileLoader(str(tmp_path / "piles"), batch_size=64, seed=1)]
    got = [batch["id"] for batch in daskshuffle.PileLoader(url, batch_size=64, seed=1)]
    assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
    exact = f"memory://parquet-parts-{tmp_path.name}/exact"
    shuffle_parquet(paths, exact, n_piles=8, seed=2, block_memory="1MiB", n_output_files=2)
    assert len([path for path in memory.ls(exact.removeprefix("memory://"), detail=False) if "part-" in path]) == 2


def test_materialize_seeds_and_compression(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "raw", [500])
    kwargs = {"n_piles": 5, "block_memory": SMALL_BLOCKS}
    shuffle_parquet(paths, tmp_path / "a", seed=1, materialize=True, compression="zstd", **kwargs)
    shuffle_parquet(paths, tmp_path / "b", seed=1, materialize=True, compression="none", **kwargs)
    shuffle_parquet(paths, tmp_path / "c", seed=2, materialize=True, **kwargs)
    a, b, c = (pq.read_table(tmp_path / name).column("id").to_numpy() for name in "abc")
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.array_equal(a, expected_ids(paths, 5, 1, materialize=True, block_nbytes=SMALL_BLOCKS))
    assert pq.ParquetFile(next((tmp_path / "a").glob("part-*"))).metadata.row_group(0).column(0).compression == "ZSTD"
    assert read_sidecar(tmp_path / "a")["materialized"] is True


def _column_chunks(store: Path) -> dict[str, list[pq.ColumnChunkMetaData]]:
    """Every column chunk of every part file of ``store``, by column path."""
    chunks: dict[str, list[pq.ColumnChunkMetaData]] = {}
    for path in sorted(store.glob("part-*")):
        metadata = pq.ParquetFile(path).metadata
        for group in range(metadata.num_row_groups):
            for index in range(metadata.num_columns):
                column = metadata.row_group(group).column(index)
                chunks.setdefault(column.path_in_schema, []).append(column)
    return chunks


@pytest.mark.parametrize("compression", ["auto", "zstd"])
def test_each_column_is_encoded_for_its_data(tmp_path: Path, compression: str) -> None:
    rng = np.random.default_rng(0)
    n = 4_000
    table = pa.table(
        {
            "x": rng.standard_normal(n, dtype=np.float32),  # all distinct, incompressible
            "label": pa.array(rng.integers(0, 4, n)),  # four values
            "word": pa.array(rng.choice(["cat", "dog", "owl"], n)),
            "tokens": pa.array([[int(v)] * 3 for v in rng.integers(0, 9, n)], pa.list_(pa.int32())),
            # Nested columns are chosen for leaf by leaf: an embedding's floats as x, a struct's label as label.
            "emb": pa.FixedSizeListArray.from_arrays(rng.standard_normal(4 * n, dtype=np.float32), 4),
            "meta": pa.StructArray.from_arrays(
                [pa.array(rng.integers(0, 4, n)), rng.standard_normal(n)], names=["label", "score"]
            ),
        }
    )
    (tmp_path / "raw").mkdir()
    pq.write_table(table, tmp_path / "raw" / "part.parquet")
    shuffle_parquet(tmp_path / "raw", tmp_path / "piles", n_piles=4, seed=0, compression=compression)
    chunks = _column_chunks(tmp_path / "piles")
    dictionary = {path: {column.has_dictionary_page for column in found} for path, found in chunks.items()}
    assert dictionary == {
        "x": {False},
        "label": {True},
        "word": {True},
        "tokens.list.element": {True},
        "emb.list.element": {False},
        "meta.label": {True},
        "meta.score": {False},
    }
    codecs = {path: {column.compression for column in found} for path, found in chunks.items()}
    if compression == "auto":
        assert codecs == {
            "x": {"UNCOMPRESSED"},
            "label": {"SNAPPY"},
            "word": {"SNAPPY"},
            "tokens.list.element": {"SNAPPY"},
            "emb.list.element": {"UNCOMPRESSED"},
            "meta.label": {"SNAPPY"},
            "meta.score": {"UNCOMPRESSED"},
        }
    else:
        assert set().union(*codecs.values()) == {"ZSTD"}
    # The same rows either way, read as any Parquet dataset is.
    got = pq.read_table(tmp_path / "piles").sort_by("x")
    assert got.equals(table.sort_by("x"))
    plain = sum(column.total_compressed_size for column in chunks["x"])
    assert plain < 1.01 * n * 4 + 200 * len(chunks["x"]), "random floats stored plain take their own size, no more"


def test_schemas_are_unified_across_files_hive_partitions_and_globs(tmp_path: Path) -> None:
    root = tmp_path / "raw"
    for year, first in ((2020, 0), (2021, 100)):
        (root / f"year={year}").mkdir(parents=True)
        table = pa.table({"id": pa.array(np.arange(first, first + 100), pa.int64()), "v": np.arange(100.0)})
        if year == 2021:  # a narrower id type and a missing column: both unify
            table = pa.table({"id": pa.array(np.arange(first, first + 100), pa.int32())})
        pq.write_table(table, root / f"year={year}" / "data.parquet", row_group_size=30)
    (root / "_SUCCESS").write_text("")  # ignored, as by every Parquet reader
    shuffle_parquet(root, tmp_path / "piles", n_piles=4, seed=0)
    out = pd.read_parquet(tmp_path / "piles").sort_values("id").reset_index(drop=True)
    assert out["id"].tolist() == list(range(200)) and out["id"].dtype == np.int64
    assert out["year"].astype(int).tolist() == [2020] * 100 + [2021] * 100
    assert out["v"].iloc[:100].tolist() == list(np.arange(100.0)) and out["v"].iloc[100:].isna().all()

    shuffle_parquet(str(root / "year=*" / "*.parquet"), tmp_path / "glob", n_piles=4, seed=0)
    assert sorted(pd.read_parquet(tmp_path / "glob")["id"]) == list(range(200))
    # A glob in a directory's name alone is a glob too, as for text and xarray sources (storage.glob_matches)
    shuffle_parquet(str(root / "year=*" / "data.parquet"), tmp_path / "glob-dirs", n_piles=4, seed=0)
    assert sorted(pd.read_parquet(tmp_path / "glob-dirs")["id"]) == list(range(200))


@pytest.mark.parametrize("columns", [None, ["text", "year", "id"]], ids=["every column", "some columns"])
def test_a_remote_source_is_read_as_the_same_files_on_a_local_disk(tmp_path: Path, columns: list[str] | None) -> None:
    """Hive partitions, a column missing from a file, every Arrow type: a block's byte ranges fetched at once."""
    import fsspec

    root = tmp_path / "raw"
    for year, first in ((2020, 0), (2021, 300)):
        table = typed_table(first, 300)
        if year == 2021:
            table = table.drop_columns(["f64"])  # unified: nulls
        (root / f"year={year}").mkdir(parents=True)
        pq.write_table(table, root / f"year={year}" / "data.parquet", row_group_size=40)
    url = f"memory://remote-parquet-source-{tmp_path.name}-{len(columns or [])}/raw"
    fsspec.filesystem("memory").put(str(root), url.removeprefix("memory://"), recursive=True)
    options = {"n_piles": 4, "seed": 3, "block_memory": SMALL_BLOCKS, "columns": columns}
    shuffle_parquet(root, tmp_path / "local", **options)
    shuffle_parquet(url, tmp_path / "remote", **options)
    local, remote = pq.read_table(tmp_path / "local"), pq.read_table(tmp_path / "remote")
    assert remote.column_names == local.column_names and remote.num_rows == 600
    assert remote.equals(local)


def test_a_remote_block_is_fetched_at_once_in_requests_of_at_most_the_range_size(tmp_path: Path) -> None:
    """The block's column chunks of the columns read, and the footer, in one batch; a large range cut into several."""
    import fsspec

    rng = np.random.default_rng(0)
    table = pa.table({"id": np.arange(60_000), "x": rng.standard_normal(60_000)})
    pq.write_table(table, tmp_path / "data.parquet", row_group_size=20_000, compression="none")
    url = f"memory://remote-parquet-ranges-{tmp_path.name}/data.parquet"
    fsspec.filesystem("memory").put(str(tmp_path / "data.parquet"), url.removeprefix("memory://"))
    fmt = open_parquet_sources(url, columns=["x"], block_nbytes=2**30, writing=ParquetWriting())
    spans = fmt.spans[0]  # x of each row group (160 KB), apart: the id chunks between them are not fetched
    assert len(spans) == 3 and spans[-1][1] == fsspec.filesystem("memory").size(url.removeprefix("memory://"))
    batches: list[list[int]] = []
    memory = fmt.filesystem.handler.fs
    original = memory.cat_ranges

    def counted(paths: list[str], starts: list[int], ends: list[int], **kwargs: object) -> list[bytes]:
        batches.append([end - start for start, end in zip(starts, ends, strict=True)])
        return original(paths, starts, ends, **kwargs)

    memory.cat_ranges = counted
    try:
        with daskshuffle.config.set({"shuffle.parquet-range-nbytes": 100_000}):
            rows = fmt.read_block(0)
    finally:
        del memory.cat_ranges
    assert rows.column_names == ["x"] and rows.column("x").equals(table.column("x"))
    assert len(batches) == 1 and max(batches[0]) <= 100_000
    assert len(batches[0]) == sum(-(-(end - start) // 100_000) for start, end in spans)
    assert sum(batches[0]) == sum(end - start for start, end in spans)


def test_a_remote_sources_footers_are_requested_a_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, configure: Configure
) -> None:
    """The last bytes of many files in one batch of requests; a footer larger than them costs a second request."""
    import fsspec

    root = tmp_path / "raw"
    root.mkdir()
    for index in range(6):
        pq.write_table(pa.table({"id": np.arange(index * 10, index * 10 + 10)}), root / f"part-{index}.parquet")
    # 3,000 row groups of one row: a footer of several hundred KiB, more than the 64 KiB asked for first.
    pq.write_table(pa.table({"id": np.arange(60, 3_060)}), root / "part-6.parquet", row_group_size=1)
    url = f"memory://remote-parquet-footers-{tmp_path.name}/raw"
    memory = fsspec.filesystem("memory")
    memory.put(str(root), url.removeprefix("memory://"), recursive=True)
    started: list[str] = []
    alone: list[str] = []  # a request made while none of its batch was waited for: not in a batch
    all_started = threading.Condition()
    cat_file = memory.cat_file

    def counted_file(path: str, *args: Any, **kwargs: Any) -> Any:
        with all_started:
            started.append(path.rsplit("/", 1)[-1])
            batch = (len(started) - 1) // 3
            # Each request of a batch waits for the others of its batch (3, 3, then 1): they are sent at once.
            if len(started) <= 7 and not all_started.wait_for(lambda: len(started) >= min(3 * batch + 3, 7), 60):
                alone.append(started[-1])
            all_started.notify_all()
        return cat_file(path, *args, **kwargs)

    configure({"shuffle.parquet-footers-at-once": 3})
    monkeypatch.setattr(memory, "cat_file", counted_file)
    fmt = open_parquet_sources(url, columns=None, block_nbytes=2**30, writing=ParquetWriting())
    assert alone == []
    assert [sorted(started[:3]), sorted(started[3:6]), started[6:]] == [
        [f"part-{index}.parquet" for index in range(3)],
        [f"part-{index}.parquet" for index in range(3, 6)],
        ["part-6.parquet", "part-6.parquet"],
    ]
    assert sum(fmt.block_lengths) == 3_060


def test_a_remote_block_whose_bytes_lie_outside_its_ranges_is_read_whole(tmp_path: Path) -> None:
    """A writer that puts a column chunk outside the bytes its footer gives: pyarrow reads the file itself."""
    import fsspec

    pq.write_table(typed_table(0, 500), tmp_path / "data.parquet", row_group_size=100)
    url = f"memory://remote-parquet-outside-{tmp_path.name}/data.parquet"
    fsspec.filesystem("memory").put(str(tmp_path / "data.parquet"), url.removeprefix("memory://"))
    fmt = open_parquet_sources(url, columns=None, block_nbytes=2**30, writing=ParquetWriting())
    fmt.spans[0] = fmt.spans[0][-1:]  # the footer alone, as if the column chunks lay elsewhere
    rows = fmt.read_block(0)
    assert rows.num_rows == 500
    assert rows.equals(pq.read_table(tmp_path / "data.parquet").replace_schema_metadata(rows.schema.metadata))


def test_columns_selects_and_keeps_order(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "raw", [200])
    shuffle_parquet(paths, tmp_path / "piles", n_piles=3, seed=0, columns=["text", "id"])
    out = pq.read_table(tmp_path / "piles")
    assert out.column_names == ["text", "id"]
    assert read_sidecar(tmp_path / "piles")["variables"] == ["text", "id"]


def test_schemas_that_do_not_unify_are_named_before_writing(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": [1, 2], "v": [1.0, 2.0]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"id": [3], "v": ["three"]}), tmp_path / "b.parquet")
    with pytest.raises(
        DaskShuffleValueError, match=r"column 'v': double in \[.*a\.parquet'\]; string in \[.*b\.parquet'\]"
    ):
        shuffle_parquet([tmp_path / "a.parquet", tmp_path / "b.parquet"], tmp_path / "out", n_piles=2)
    assert not (tmp_path / "out").exists()
    shuffle_parquet([tmp_path / "a.parquet", tmp_path / "b.parquet"], tmp_path / "out", n_piles=2, columns=["id"])
    assert sorted(pd.read_parquet(tmp_path / "out")["id"]) == [1, 2, 3]


def test_bad_sources_and_arguments(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "raw", [50])
    dst = tmp_path / "out"
    with pytest.raises(SourceNotFoundError, match="existing Parquet files or directories"):
        shuffle_parquet(tmp_path / "missing.parquet", dst, n_piles=2)
    with pytest.raises(SourceNotFoundError, match="matches no file"):
        shuffle_parquet(str(tmp_path / "nothing-*.parquet"), dst, n_piles=2)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DaskShuffleValueError, match="directory without any"):
        shuffle_parquet(tmp_path / "empty", dst, n_piles=2)
    (tmp_path / "notes.parquet").write_text("not parquet at all")
    with pytest.raises(DaskShuffleValueError, match=r"to be Parquet.*notes\.parquet"):
        shuffle_parquet([paths[0], tmp_path / "notes.parquet"], dst, n_piles=2)
    with pytest.raises(DaskShuffleValueError, match="empty list"):
        shuffle_parquet([], dst, n_piles=2)
    with pytest.raises(DaskShuffleTypeError, match="path, URL or glob"):
        shuffle_parquet(42, dst, n_piles=2)
    with pytest.raises(DaskShuffleValueError, match=r"unknown \['nope'\].*it has \['id'"):
        shuffle_parquet(paths, dst, n_piles=2, columns=["id", "nope"])
    with pytest.raises(DaskShuffleTypeError, match="columns"):
        shuffle_parquet(paths, dst, n_piles=2, columns="id")
    with pytest.raises(DaskShuffleValueError, match="compression"):
        shuffle_parquet(paths, dst, n_piles=2, compression="fast")
    with pytest.raises(DaskShuffleValueError, match="n_piles"):
        shuffle_parquet(paths, dst, n_piles=0)
    with pytest.raises(DaskShuffleValueError, match="outside the source"):
        shuffle_parquet(tmp_path / "raw", tmp_path / "raw" / "piles", n_piles=2)
    assert not dst.exists()


def test_existing_destination_and_failed_runs(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "raw", [300, 300], row_group_size=100)
    dst = tmp_path / "piles"
    shuffle_parquet(paths, dst, n_piles=4, seed=0)
    before = tree_digest(dst)
    with pytest.raises(PileStoreExistsError, match="overwrite=True"):
        shuffle_parquet(paths, dst, n_piles=4, seed=1)
    assert tree_digest(dst) == before
    # A damaged data page (the footer still reads) fails a pass-1 task mid-run.
    damaged = bytearray(Path(paths[1]).read_bytes())
    damaged[4:400] = b"\xff" * 396
    Path(paths[1]).write_bytes(bytes(damaged))
    with pytest.raises(
        DaskShuffleValueError, match=r"row group 0 of .*part-1.parquet.*does not decode \(OSError: .*thrift"
    ):
        shuffle_parquet(paths, dst, n_piles=4, seed=1, overwrite=True, block_memory=SMALL_BLOCKS)
    # The new store was built beside the old one: the old one is still there, whole and readable.
    assert tree_digest(dst) == before
    assert ParquetPileReader(dst).metadata["seed"] == 0
    assert not (tmp_path / "piles.daskshuffle-new").exists(), "no half-written dataset is left for other readers"
    assert not (tmp_path / "piles.daskshuffle-tmp").exists()


@pytest.mark.parametrize("n_rows", [0, 1, 5])
def test_tiny_inputs(tmp_path: Path, n_rows: int) -> None:
    paths = write_files(tmp_path / "raw", [n_rows])
    with warnings.catch_warnings():  # more piles than rows: warned, and still shuffled
        warnings.simplefilter("ignore", daskshuffle.IneffectiveSettingWarning)
        result = shuffle_parquet(paths, tmp_path / "piles", n_piles=8, seed=0)
    out = pd.read_parquet(tmp_path / "piles")
    assert sorted(out["id"]) == list(range(n_rows)) and result.n_rows == n_rows
    assert list(out.columns) == typed_table(0, 1).column_names


def test_dask_dataframe_with_unknown_divisions(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"id": np.arange(600), "x": np.arange(600) * 2.0, "name": [f"n{i}" for i in range(600)]},
        index=pd.Index(np.arange(600) * 10, name="key"),
    )
    ddf = dd.from_pandas(frame, npartitions=5, sort=False)
    ddf = ddf[ddf["id"] % 3 != 0].clear_divisions()  # uneven partitions of unknown length
    assert not ddf.known_divisions
    kept = frame[frame["id"] % 3 != 0]
    result = shuffle_dataframe(ddf, tmp_path / "piles", n_piles=6, seed=2)
    out = pd.read_parquet(tmp_path / "piles")
    assert result.n_rows == len(kept) == len(out)
    pd.testing.assert_frame_equal(out.sort_values("id"), kept, check_dtype=False)
    assert out.index.name == "key", "a named index is kept and restored"
    parts = ddf.map_partitions(len).compute().tolist()  # the order is the plan's over the partitions
    order = simulate(parts, 6, 2)[1]
    assert np.array_equal(out["id"].to_numpy(), kept["id"].to_numpy()[order])


def test_row_group_size_cuts_piles_into_smaller_row_groups(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "src", [500, 300])
    shuffle_parquet(paths, tmp_path / "whole", n_piles=4, seed=1)
    result = shuffle_parquet(paths, tmp_path / "cut", n_piles=4, seed=1, row_group_size=64)
    offsets = np.concatenate([[0], np.cumsum(result.pile_sizes)])
    sizes = []
    for part in sorted((tmp_path / "cut").glob("part-*.parquet")):  # in row order: their names are their first rows
        metadata = pq.ParquetFile(part).metadata
        sizes += [metadata.row_group(index).num_rows for index in range(metadata.num_row_groups)]
    starts = np.cumsum([0, *sizes])[:-1]
    assert max(sizes) <= 64 and sum(sizes) == 800
    assert set(offsets[:-1].tolist()) <= set(starts.tolist()), "every pile starts a row group"
    for rows_start, size in zip(starts, sizes, strict=True):
        pile = np.searchsorted(offsets, rows_start, side="right") - 1
        assert rows_start + size <= offsets[pile + 1], "no row group straddles two piles"
        assert rows_start // 64 == (rows_start + size - 1) // 64, "nor a multiple of 64 store rows"
    whole = pd.read_parquet(tmp_path / "whole")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "cut"), whole)
    loaded = [batch["id"] for batch in PileLoader(tmp_path / "cut", batch_size=50, seed=0)]
    expected = [batch["id"] for batch in PileLoader(tmp_path / "whole", batch_size=50, seed=0)]
    assert np.array_equal(np.sort(np.concatenate(loaded)), np.sort(np.concatenate(expected))), "the same rows"
    with PileLoader(tmp_path / "cut", batch_size=50, seed=0) as units:
        assert units.settings.unit_rows == 64, "the default reads units of the row groups' rows"
        assert sorted(np.concatenate([batch["id"] for batch in units]).tolist()) == sorted(whole["id"].tolist())
    with pytest.raises(DaskShuffleValueError, match="row_group_size"):
        shuffle_parquet(paths, tmp_path / "bad", n_piles=4, row_group_size=0)


def test_n_output_files_writes_exactly_that_many_files_of_near_equal_rows(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "src", [700, 500])
    result = shuffle_parquet(paths, tmp_path / "seven", n_piles=24, seed=5, n_output_files=7, materialize=True)
    parts = sorted((tmp_path / "seven").glob("part-*.parquet"))
    rows = [pq.ParquetFile(part).metadata.num_rows for part in parts]
    assert len(parts) == 7 and sum(rows) == 1200
    assert max(rows) - min(rows) <= 2 * int(result.pile_sizes.max()), "near-equal: within a pile or two"
    default = shuffle_parquet(paths, tmp_path / "default", n_piles=24, seed=5, materialize=True)
    assert default.n_rows == 1200
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "seven"), pd.read_parquet(tmp_path / "default"))
    ids = [batch["id"] for batch in PileLoader(tmp_path / "seven", batch_size=100, seed=0)]
    assert sorted(np.concatenate(ids).tolist()) == list(range(1200))

    shuffle_parquet(paths, tmp_path / "kept", n_piles=4, seed=1)  # a store that overwrite=True would replace
    kept = tree_digest(tmp_path / "kept")
    with pytest.raises(DaskShuffleValueError, match=r"n_output_files to be at most n_piles.*n_piles=30"):
        shuffle_parquet(paths, tmp_path / "kept", n_piles=4, n_output_files=30, overwrite=True)
    with pytest.raises(DaskShuffleValueError, match=r"fit in one merge task.*n_output_files=\d+ or more"):
        shuffle_parquet(paths, tmp_path / "kept", n_piles=24, n_output_files=2, block_memory="4KiB", overwrite=True)
    assert tree_digest(tmp_path / "kept") == kept, "refused before anything is written"


def test_a_dask_dataframe_is_computed_once(tmp_path: Path) -> None:
    """Each partition is made once; categories that differ between partitions and all-null columns survive."""
    calls: list[int] = []
    frame = pd.DataFrame(
        {
            "id": np.arange(400),
            "kind": pd.Categorical([f"k{i // 100}" for i in range(400)]),  # each partition its own category
            "note": [None] * 100 + [f"n{i}" for i in range(100, 400)],  # all null in the first partition
        }
    )

    def made(part: pd.DataFrame) -> pd.DataFrame:
        calls.append(len(part))  # the threaded scheduler shares this list
        part = part.copy()
        part["kind"] = part["kind"].cat.remove_unused_categories()
        return part

    ddf = dd.from_pandas(frame, npartitions=4, sort=False).map_partitions(made, meta=frame.iloc[:0])
    with dask.config.set(scheduler="threads"):
        result = shuffle_dataframe(ddf, tmp_path / "piles", n_piles=5, seed=3, materialize=True)
    assert sorted(calls) == [100, 100, 100, 100], "every partition made once, not once to count and once to shuffle"
    out = pd.read_parquet(tmp_path / "piles").sort_values("id").reset_index(drop=True)
    assert result.n_rows == 400 and out["id"].tolist() == list(range(400))
    assert out["kind"].astype(str).tolist() == frame["kind"].astype(str).tolist()
    assert isinstance(out["kind"].dtype, pd.CategoricalDtype)
    assert out["note"].tolist() == frame["note"].tolist()
    assert sorted(os.listdir(tmp_path)) == ["piles"], "the spool is removed"


def test_pandas_dataframe_and_its_index(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "id": np.arange(300),
            "cat": pd.Categorical(["a", "b", "c"] * 100),
            "maybe": pd.array([1, None, 3] * 100, dtype="Int64"),
        }
    )
    before = frame.copy()
    shuffle_dataframe(frame, tmp_path / "dropped", n_piles=4, seed=0, block_memory=2_000)
    out = pd.read_parquet(tmp_path / "dropped")
    assert list(out.columns) == ["id", "cat", "maybe"] and isinstance(out.index, pd.RangeIndex)
    assert out["cat"].dtype == "category" and out["maybe"].dtype == "Int64"
    pd.testing.assert_frame_equal(out.sort_values("id").reset_index(drop=True), frame)
    shuffle_dataframe(frame, tmp_path / "kept", n_piles=4, seed=0, index=True)
    kept = pd.read_parquet(tmp_path / "kept")
    assert np.array_equal(kept.index.to_numpy(), kept["id"].to_numpy()), "the default index travels with its row"
    pd.testing.assert_frame_equal(frame, before), "the input is not modified"
    with pytest.raises(DaskShuffleTypeError, match="dask or pandas DataFrame"):
        shuffle_dataframe({"id": [1]}, tmp_path / "x", n_piles=2)
    with pytest.raises(DaskShuffleTypeError, match="string column names"):
        shuffle_dataframe(pd.DataFrame({0: [1, 2]}), tmp_path / "x", n_piles=2)
    with pytest.raises(DaskShuffleTypeError, match="index"):
        shuffle_dataframe(frame, tmp_path / "x", n_piles=2, index="yes")
    assert not (tmp_path / "x").exists()


def test_pile_reader_batches(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "raw", [120, 80])
    shuffle_parquet(paths, tmp_path / "piles", n_piles=3, seed=0)
    reader = open_pile_reader(tmp_path / "piles")
    assert isinstance(reader, ParquetPileReader) and reader.n_rows == 200
    whole = pq.read_table(tmp_path / "piles")
    for start, stop in [(0, 200), (0, 0), (5, 17), (60, 199), (199, 200)]:
        assert reader.read_rows(start, stop).equals(whole.slice(start, stop - start))
    rows = reader.read_rows(10, 20)
    batch = reader.rows.to_batch(rows)
    assert batch["id"].dtype == np.int64 and np.array_equal(batch["id"], whole.column("id").to_numpy()[10:20])
    assert batch["f64"].dtype == np.float64 and np.isnan(batch["f64"][batch["id"] % 5 == 0]).all(), "nulls as NaN"
    assert batch["text"].dtype == object and batch["label"].dtype == object
    assert isinstance(ParquetPileReader(tmp_path / "piles", batch_format="arrow").rows.to_batch(rows), pa.RecordBatch)
    frame = ParquetPileReader(tmp_path / "piles", batch_format="pandas", variables=["id", "text"]).rows.to_batch(
        ParquetPileReader(tmp_path / "piles", variables=["id", "text"]).read_rows(0, 5)
    )
    assert list(frame.columns) == ["id", "text"] and len(frame) == 5
    with pytest.raises(DaskShuffleValueError, match="batch_format"):
        ParquetPileReader(tmp_path / "piles", batch_format="torch")
    ids = np.concatenate([b["id"] for b in daskshuffle.PileLoader(tmp_path / "piles", batch_size=32, seed=0)])
    assert sorted(ids.tolist()) == list(range(200))
    # the loader hands out the reader's batch formats, in the same order
    arrow = list(daskshuffle.PileLoader(tmp_path / "piles", batch_size=32, seed=0, batch_format="arrow"))
    assert all(isinstance(b, pa.RecordBatch) for b in arrow) and [b.num_rows for b in arrow] == [32] * 6 + [8]
    assert np.array_equal(np.concatenate([b.column("id").to_numpy() for b in arrow]), ids)
    frames = list(daskshuffle.PileLoader(tmp_path / "piles", batch_size=50, seed=0, batch_format="pandas"))
    assert all(isinstance(f, pd.DataFrame) for f in frames)
    assert np.array_equal(pd.concat(frames)["id"].to_numpy(), ids)


@pytest.mark.cluster
@pytest.mark.filterwarnings(DASK_READER_WARNING)
def test_same_output_on_a_local_cluster(tmp_path: Path, cluster_client) -> None:
    paths = write_files(tmp_path / "raw", [400, 300], row_group_size=40)
    kwargs = {"n_piles": 9, "seed": 4, "block_memory": SMALL_BLOCKS}
    shuffle_parquet(paths, tmp_path / "threads", **kwargs)
    with cluster_client.as_current():
        shuffle_parquet(paths, tmp_path / "cluster", **kwargs)
        ddf = dd.read_parquet(paths)
        shuffle_dataframe(ddf, tmp_path / "frame-cluster", **kwargs)
    shuffle_dataframe(dd.read_parquet(paths), tmp_path / "frame-threads", **kwargs)
    assert pq.read_table(tmp_path / "threads").equals(pq.read_table(tmp_path / "cluster"))
    assert pd.read_parquet(tmp_path / "frame-threads").equals(pd.read_parquet(tmp_path / "frame-cluster"))


def test_torch_dataset_takes_feature_and_label_columns(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from daskshuffle.torch import PileDataset

    ids = np.arange(300)
    frame = pd.DataFrame({"a": ids * 1.0, "b": (ids * 2).astype("f4"), "label": ids % 3, "id": ids})
    shuffle_dataframe(frame, tmp_path / "piles", n_piles=3, seed=0)
    batches = list(PileDataset(tmp_path / "piles", batch_size=64, features=["a", "b"], label="label", seed=0))
    features = torch.cat([features for features, _ in batches])
    labels = torch.cat([label for _, label in batches])
    assert features.shape == (300, 2) and labels.shape == (300,)
    assert torch.equal(features[:, 1], features[:, 0] * 2), "columns of a row stay together"
    assert torch.equal(labels, (features[:, 0] % 3).to(labels.dtype))
    assert sorted(features[:, 0].tolist()) == list(ids * 1.0)


def test_command_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from daskshuffle._cli._common import cli

    paths = write_files(tmp_path / "raw", [150, 90])
    done = CliRunner().invoke(
        cli,
        ["parquet", *paths, str(tmp_path / "piles"), "--n-piles", "3", "--seed", "4", "--columns", "id,text",
         "--compression", "zstd", "--row-group-size", "25", "--n-output-files", "2", "--scheduler", "threads"],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    groups = [pq.ParquetFile(part).metadata for part in (tmp_path / "piles").glob("part-*.parquet")]
    assert len(groups) == 2
    assert max(m.row_group(i).num_rows for m in groups for i in range(m.num_row_groups)) == 25
    out = pq.read_table(tmp_path / "piles")
    assert out.column_names == ["id", "text"] and sorted(out.column("id").to_pylist()) == list(range(240))
    shown = CliRunner().invoke(cli, ["info", str(tmp_path / "piles")])
    assert shown.exit_code == 0 and "kind: parquet" in shown.output and "seed: 4" in shown.output
    helped = CliRunner().invoke(cli, ["parquet", "--help"])
    assert helped.exit_code == 0 and "Examples:" in helped.output
    refused = CliRunner().invoke(cli, ["parquet", *paths, str(tmp_path / "piles"), "--scheduler", "threads"])
    assert refused.exit_code == 1 and "overwrite" in refused.output


def test_sources_that_are_not_parquet_are_named(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError, match="'missing/', which does not exist"):
        shuffle_parquet("missing/", tmp_path / "out")
    make_zarr_like = tmp_path / "events.zarr"
    make_zarr_like.mkdir()
    (make_zarr_like / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    with pytest.raises(DaskShuffleValueError, match="which is a Zarr store, instead; shuffle it with shuffle_zarr"):
        shuffle_parquet(make_zarr_like, tmp_path / "out")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("hi")
    with pytest.raises(DaskShuffleValueError, match=r"notes\.txt', which pyarrow cannot read as Parquet .*a glob"):
        shuffle_parquet(tmp_path / "junk", tmp_path / "out")
    assert sorted(os.listdir(tmp_path)) == ["events.zarr", "junk"]


def test_what_numpy_batches_hold_and_what_pandas_batches_keep(tmp_path: Path) -> None:
    """numpy has no time zones or categories: UTC instants and values; pandas batches keep both."""
    frame = pd.DataFrame(
        {
            "id": np.arange(60),
            "at": pd.date_range("2024-03-01 12:00", periods=60, freq="h", tz="Europe/Paris"),
            "kind": pd.Categorical(["a", "b", "c"] * 20),
        }
    )
    shuffle_dataframe(frame, tmp_path / "piles", n_piles=3, seed=0)
    numpy_batch = next(iter(PileLoader(tmp_path / "piles", batch_size=60, seed=0)))
    order = numpy_batch["id"]
    expected = frame["at"].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()[order]
    assert numpy_batch["at"].dtype.kind == "M" and np.array_equal(numpy_batch["at"], expected), "the UTC instants"
    assert numpy_batch["kind"].tolist() == frame["kind"].astype(str).to_numpy()[order].tolist()
    pandas_batch = next(iter(PileLoader(tmp_path / "piles", batch_size=60, seed=0, batch_format="pandas")))
    assert str(pandas_batch["at"].dt.tz) == "Europe/Paris" and isinstance(
        pandas_batch["kind"].dtype, pd.CategoricalDtype
    )
    assert pandas_batch["id"].tolist() == order.tolist()


def test_a_parquet_store_is_read_in_units_of_its_row_groups(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "src", [500, 300])
    shuffle_parquet(paths, tmp_path / "piles", n_piles=4, seed=1, row_group_size=64)
    with PileLoader(tmp_path / "piles", batch_size=50, seed=0) as loader:
        assert loader.settings.unit_rows == 64
        assert sorted(np.concatenate([batch["id"] for batch in loader]).tolist()) == list(range(800))


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.filterwarnings(DASK_READER_WARNING)
def test_a_dataframe_shuffle_run_again_returns_its_store_and_sends_no_large_graph(
    tmp_path: Path, cluster_client
) -> None:
    """As every shuffle: the same call again returns the finished store (0 tasks); a pandas frame is scattered."""
    frame = pd.DataFrame({"id": np.arange(1_000_000), "x": np.random.default_rng(0).random(1_000_000)})  # 15 MiB
    paths = write_files(tmp_path / "raw", [400, 300], row_group_size=40)
    with cluster_client.as_current(), warnings.catch_warnings():
        warnings.simplefilter("error")  # distributed's "Sending large graph of size ..." among them
        first = shuffle_dataframe(frame, tmp_path / "pandas", n_piles=4, seed=0, block_memory="4MiB")
        again = shuffle_dataframe(frame, tmp_path / "pandas", n_piles=4, seed=0, block_memory="4MiB")
        shuffle_dataframe(dd.read_parquet(paths), tmp_path / "dask", n_piles=4, seed=0)
        dask_again = shuffle_dataframe(dd.read_parquet(paths), tmp_path / "dask", n_piles=4, seed=0)
    assert first.n_tasks > 0 and again.n_tasks == 0 and dask_again.n_tasks == 0
    assert sorted(pd.read_parquet(tmp_path / "pandas")["id"]) == list(range(1_000_000))
    # The frame changed (same shape, new values): named as such; another frame: the destination exists.
    with pytest.raises(SourceChangedError):
        shuffle_dataframe(frame.assign(x=frame["x"] + 1), tmp_path / "pandas", n_piles=4, seed=0, block_memory="4MiB")
    with pytest.raises(PileStoreExistsError):
        shuffle_dataframe(frame.iloc[:1000], tmp_path / "pandas", n_piles=4, seed=0, block_memory="4MiB")
    with pytest.raises(PileStoreExistsError):
        shuffle_dataframe(dd.read_parquet(paths[:1]), tmp_path / "dask", n_piles=4, seed=0)


@pytest.mark.parametrize("name", ["data[1]", "data*", "what?"])
def test_an_existing_path_with_glob_characters_is_read_as_that_path(tmp_path: Path, name: str) -> None:
    write_files(tmp_path / name, [120, 80])
    write_files(tmp_path / "data1", [500])  # what "data[1]" would match as a glob
    result = shuffle_parquet(str(tmp_path / name), tmp_path / "piles", n_piles=4, seed=0)
    assert result.n_rows == 200 and sorted(pd.read_parquet(tmp_path / "piles")["id"]) == list(range(200))
    pq.write_table(typed_table(0, 30), tmp_path / f"{name}.parquet")
    assert shuffle_parquet(str(tmp_path / f"{name}.parquet"), tmp_path / "one", n_piles=2, seed=0).n_rows == 30
