"""``daskshuffle.verify``: a store holds exactly the rows of its source, or an error names what differs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
from conftest import Configure, Points, make_zarr_source
from crc32c import crc32c

import daskshuffle as ds
from daskshuffle.pilestore import read_metadata
from daskshuffle.pilestore._binding import TABLE
from daskshuffle.pilestore._metadata import seal_of
from daskshuffle.shuffle import _checksum, sources_changed

N_ROWS = 2_000


@pytest.fixture
def zarr_store(tmp_path: Path) -> tuple[str, str]:
    src = make_zarr_source(tmp_path / "raw.zarr", N_ROWS, chunk_rows=100)
    dst = str(tmp_path / "piles.zarr")
    ds.shuffle_zarr(src, dst, 6, seed=0, block_memory="16KiB")
    return src, dst


def recorded_as_is(dst: str) -> None:
    """Record the store's chunks as they are now, as if its own run had written them so (a bug, not damage).

    Rows rewritten through zarr after the run fail the binding of chunks to
    their run when read; a store written wrong by its own run passes it, and
    only ``verify`` finds what is wrong.
    """
    metadata = read_metadata(dst)
    assert metadata is not None
    group = zarr.open_group(dst, mode="r+")
    for name in metadata["variables"]:
        array = group[name]
        encode = array.metadata.chunk_key_encoding.encode_chunk_key
        n_chunks = -(-array.shape[0] // array.chunks[0])
        keys = [encode((index,) + (0,) * (array.ndim - 1)) for index in range(n_chunks)]
        table = np.array([int.from_bytes((Path(dst, name, key).read_bytes())[-4:], "little") for key in keys], "<u4")
        Path(dst, name, TABLE).write_bytes(table.tobytes())
        metadata["arrays"][name]["chunk_crc32c"]["crc32c"] = crc32c(table.tobytes())
    metadata.pop("seal")
    group.attrs["daskshuffle"] = {**metadata, "seal": seal_of(metadata)}


def _parquet_source(path: Path) -> str:
    rng = np.random.default_rng(1)
    n = N_ROWS
    labels = [None if i % 17 == 0 else f"label-{i % 5}" * (i % 4) for i in range(n)]
    table = pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "x": pa.array(rng.standard_normal(n), mask=np.arange(n) % 11 == 0),
            "label": pa.array(labels, type=pa.string()),
            "kind": pa.array([f"k{i % 3}" for i in range(n)]).dictionary_encode(),
            "when": pa.array(np.arange(n).astype("datetime64[ms]"), type=pa.timestamp("ms", tz="UTC")),
            "tags": pa.array([[i, i + 1] if i % 2 else None for i in range(n)], type=pa.list_(pa.int32())),
            "flag": pa.array([bool(i % 3) for i in range(n)]),
        }
    )
    pq.write_table(table, path, row_group_size=250)
    return str(path)


@pytest.fixture
def parquet_store(tmp_path: Path) -> tuple[str, str]:
    src = _parquet_source(tmp_path / "raw.parquet")
    dst = str(tmp_path / "piles.parquet")
    ds.shuffle_parquet(src, dst, 5, seed=0, block_memory="20KiB")
    return src, dst


def test_a_shuffled_zarr_store_verifies(zarr_store: tuple[str, str]) -> None:
    src, dst = zarr_store
    result = ds.verify(dst, src)
    assert result.n_rows == N_ROWS and sorted(result.checksums) == ["id", "x", "y"]
    assert ds.verify(dst).checksums == result.checksums  # the sources the store recorded
    # The checksum is the source's own, whatever the order of its rows.
    rows = {name: np.asarray(array[...]) for name, array in zarr.open_group(src, mode="r").arrays()}
    order = np.random.default_rng(5).permutation(N_ROWS)
    permuted = _checksum.checksum({name: values[order] for name, values in rows.items()}, ["id", "x", "y"])
    assert {name: f"{value:016x}" for name, value in permuted["sums"].items()} == result.checksums


def test_a_shuffled_parquet_store_verifies(parquet_store: tuple[str, str]) -> None:
    src, dst = parquet_store
    result = ds.verify(dst, src)
    assert result.n_rows == N_ROWS
    assert sorted(result.checksums) == ["flag", "id", "kind", "label", "tags", "when", "x"]


def test_a_changed_value_is_named(zarr_store: tuple[str, str]) -> None:
    src, dst = zarr_store
    y = zarr.open_group(dst, mode="r+")["y"]
    y[123] = y[123] + 1  # written through zarr: the chunk's own checksum is right, the row is wrong
    recorded_as_is(dst)
    with pytest.raises(ds.VerificationError, match=r"variable 'y'.*differ") as caught:
        ds.verify(dst, src)
    assert caught.value.variable == "y"


def test_a_duplicated_row_in_place_of_another_is_found(zarr_store: tuple[str, str]) -> None:
    src, dst = zarr_store
    group = zarr.open_group(dst, mode="r+")
    for name in ("id", "x", "y"):
        group[name][7] = group[name][8]  # one row lost, another twice: the count is unchanged
    recorded_as_is(dst)
    with pytest.raises(ds.VerificationError) as caught:
        ds.verify(dst, src)
    assert caught.value.variable in {"id", "x", "y"}


def test_variables_paired_wrongly_are_found(zarr_store: tuple[str, str]) -> None:
    src, dst = zarr_store
    ids = zarr.open_group(dst, mode="r+")["id"]
    first, second = ids[3], ids[4]
    ids[3], ids[4] = second, first  # every variable holds the same values, the rows do not
    recorded_as_is(dst)
    with pytest.raises(ds.VerificationError, match="paired") as caught:
        ds.verify(dst, src)
    assert caught.value.variable is None


def test_a_missing_row_is_found(zarr_store: tuple[str, str]) -> None:
    src, dst = zarr_store
    group = zarr.open_group(src, mode="r+")
    for name in ("id", "x", "y"):  # the source has one row the store lacks
        array = group[name]
        array.resize((N_ROWS + 1, *array.shape[1:]))
    # The sources no longer hold what the store was made from: they changed, the store is not damaged.
    with pytest.raises(ds.SourceMismatchError, match=f"rows: the store {N_ROWS:,}, the sources {N_ROWS + 1:,}"):
        ds.verify(dst, src)


def test_a_corrupted_chunk_is_found(zarr_store: tuple[str, str]) -> None:
    src, dst = zarr_store
    chunk = next(path for path in sorted((Path(dst) / "x" / "c").rglob("*")) if path.is_file())
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(ds.CorruptPileStoreError, match="x"):
        ds.verify(dst, src)


def test_a_changed_parquet_value_is_named(parquet_store: tuple[str, str]) -> None:
    src, dst = parquet_store
    part = sorted(Path(dst).glob("part-*.parquet"))[0]
    file = pq.ParquetFile(part)
    groups = [file.read_row_group(index) for index in range(file.num_row_groups)]
    first = groups[0]
    labels = first.column("label").to_pylist()
    labels[0] = (labels[0] or "") + "!"
    groups[0] = first.set_column(first.schema.get_field_index("label"), "label", pa.array(labels, type=pa.string()))
    with pq.ParquetWriter(part, file.schema_arrow) as writer:  # the same row groups (piles), one value changed
        for group in groups:
            writer.write_table(group)
    with pytest.raises(ds.VerificationError, match="'label'") as caught:
        ds.verify(dst, src)
    assert caught.value.variable == "label"


def test_variable_size_hashes_do_not_depend_on_how_rows_are_cut(configure: Configure) -> None:
    values = [b"", b"a", b"ab", b"ba", b"", b"abc" * 50, b"\x00", b"\x00\x00", b"a"]
    column = pa.array(values, type=pa.binary())
    whole = _checksum._arrow_hashes(column)
    configure({"verify.hash-nbytes": 2})
    assert np.array_equal(_checksum._arrow_hashes(column), whole)
    assert np.array_equal(_checksum._arrow_hashes(column.slice(2, 5)), whole[2:7])
    assert whole[0] == whole[4] and whole[1] == whole[8]  # equal values hash equal, others not
    assert len(set(whole.tolist())) == 7
    strings = pa.array([value.decode("latin-1") for value in values], type=pa.large_string())
    assert np.array_equal(_checksum._arrow_hashes(strings), whole)


def test_fixed_size_hashes_follow_values_not_byte_order() -> None:
    little = np.arange(10, dtype="<i4").reshape(5, 2)
    assert np.array_equal(_checksum._fixed_hashes(little), _checksum._fixed_hashes(little.astype(">i4")))
    hashes = _checksum._fixed_hashes(np.array([0, 1, 2, 2**40], dtype=np.int64))
    assert len(set(hashes.tolist())) == 4
    assert _checksum._fixed_hashes(np.zeros((0, 3), np.float32)).shape == (0,)


@pytest.mark.slow
def test_the_verify_command(zarr_store: tuple[str, str]) -> None:
    src, dst = zarr_store

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "daskshuffle", "verify", *args, "--scheduler", "threads"],
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = run(dst, src)
    assert done.returncode == 0, done.stderr
    assert f"{N_ROWS:,} rows" in done.stdout and "id" in done.stdout
    y = zarr.open_group(dst, mode="r+")["y"]
    y[0] = y[0] + 1
    failed = run(dst)
    assert failed.returncode == 1 and "variable 'y'" in failed.stderr and "Traceback" not in failed.stderr


@pytest.mark.slow
@pytest.mark.s3
def test_verify_on_s3(tmp_path: Path, s3: Any) -> None:
    src = s3.put(make_zarr_source(tmp_path / "raw.zarr", 500, chunk_rows=50), "raw.zarr")
    dst = s3.url("piles.zarr")
    ds.shuffle_zarr(src, dst, 3, seed=0, storage_options=s3.storage_options)
    assert ds.verify(dst, storage_options=s3.storage_options).n_rows == 500


def test_verify_true_proves_the_store_as_part_of_the_shuffle(tmp_path: Path, points: Points) -> None:
    """A chunk damaged once the store is written, before the shuffle returns: found with verify, and only with it."""
    from click.testing import CliRunner

    from daskshuffle._cli._common import cli

    def damage(count: int) -> None:
        for store in tmp_path.glob("*.zarr*"):  # the store being written, where it is written
            if store.name != "raw.zarr" and (store / "x").is_dir():
                chunk = min(path for path in (store / "x").rglob("*") if path.is_file() and path.name != "zarr.json")
                chunk.write_bytes(bytes(chunk.stat().st_size))

    points.arm("shuffle complete", damage)
    source = make_zarr_source(tmp_path / "raw.zarr", 600, chunk_rows=50)
    ds.shuffle_zarr(source, tmp_path / "unverified.zarr", n_piles=4, seed=0)
    with pytest.raises(ds.CorruptPileStoreError, match=r"piles.zarr/x/c/0/0' of variable 'x'"):
        ds.shuffle_zarr(source, tmp_path / "piles.zarr", n_piles=4, seed=0, verify=True)
    done = CliRunner().invoke(
        cli, ["zarr", source, str(tmp_path / "cli.zarr"), "--n-piles", "4", "--verify", "--scheduler", "threads"]
    )
    assert done.exit_code != 0 and "cli.zarr/x/c/0/0' of variable 'x'" in done.output, done.output


def test_too_few_sources_are_told_from_damage(tmp_path: Path) -> None:
    """Sources that do not add up to the store: name the counts and the sources it records, never "shuffle again"."""
    first = make_zarr_source(tmp_path / "raw-0.zarr", 300, chunk_rows=50)
    second = make_zarr_source(tmp_path / "raw-1.zarr", 200, chunk_rows=50)
    dst = str(tmp_path / "piles.zarr")
    ds.shuffle_zarr([first, second], dst, 4, seed=0)
    with pytest.raises(ds.SourceMismatchError) as caught:
        ds.verify(dst, first)
    message = str(caught.value)
    assert "rows: the store 500, the sources 300" in message, message
    assert "pass the sources the store was made from" in message and "raw-1.zarr" in message, message
    assert "again" not in message, "wrong sources are not damage: nothing to shuffle again"


def test_sources_of_the_same_rows_but_other_blocks_are_named(tmp_path: Path) -> None:
    first = make_zarr_source(tmp_path / "raw-0.zarr", 300, chunk_rows=50)
    second = make_zarr_source(tmp_path / "raw-1.zarr", 200, chunk_rows=50)
    other = make_zarr_source(tmp_path / "other.zarr", 500, chunk_rows=100)
    dst = str(tmp_path / "piles.zarr")
    ds.shuffle_zarr([first, second], dst, 4, seed=0)
    with pytest.raises(ds.SourceMismatchError, match=r"blocks: the store 2, the sources 1; fingerprint of the blocks"):
        ds.verify(dst, other)


def test_damage_is_not_a_source_mismatch(zarr_store: tuple[str, str]) -> None:
    src, dst = zarr_store
    y = zarr.open_group(dst, mode="r+")["y"]
    y[5] = y[5] + 1
    recorded_as_is(dst)
    with pytest.raises(ds.VerificationError, match="shuffle the source again") as caught:
        ds.verify(dst, src)
    assert not isinstance(caught.value, ds.SourceMismatchError)


def test_the_command_says_to_pass_the_sources_the_store_was_made_from(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from daskshuffle._cli._common import cli

    first = make_zarr_source(tmp_path / "raw-0.zarr", 300, chunk_rows=50)
    make_zarr_source(tmp_path / "raw-1.zarr", 200, chunk_rows=50)
    dst = str(tmp_path / "piles.zarr")
    ds.shuffle_zarr([first, str(tmp_path / "raw-1.zarr")], dst, 4, seed=0)
    result = CliRunner().invoke(cli, ["verify", dst, first, "--scheduler", "sync"])
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and "rows: the store 500, the sources 300" in result.output, result.output
    assert "overwrite" not in result.output and "raw-1.zarr" in result.output, result.output


def test_a_source_edited_since_the_shuffle_is_named_by_verify_and_info(zarr_store: tuple[str, str]) -> None:
    from click.testing import CliRunner

    from daskshuffle._cli._common import cli

    src, dst = zarr_store
    done = CliRunner().invoke(cli, ["info", dst])
    assert "sources since the shuffle: unchanged" in done.output, done.output
    y = zarr.open_group(src, mode="r+")["y"]
    y[10] = y[10] + 1  # the source, not the store
    with pytest.raises(ds.SourceMismatchError, match=r"changed since the shuffle instead: \S*raw.zarr/y \(") as caught:
        ds.verify(dst)
    assert "raw.zarr/x" not in str(caught.value) and "overwrite=True" in str(caught.value)
    done = CliRunner().invoke(cli, ["info", dst])
    assert done.exit_code == 0 and "complete: yes" in done.output, done.output
    assert "sources since the shuffle: CHANGED (" in done.output and "raw.zarr/y" in done.output, done.output
    done = CliRunner().invoke(cli, ["info", dst, "--json"])
    assert "raw.zarr/y" in " ".join(json.loads(done.output)["sources_changed"])


def test_a_parquet_file_added_since_the_shuffle_is_named_by_info(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from daskshuffle._cli._common import cli

    (tmp_path / "raw").mkdir()
    _parquet_source(tmp_path / "raw" / "a.parquet")
    ds.shuffle_parquet(tmp_path / "raw", tmp_path / "piles", 4, seed=0)
    assert ds.verify(tmp_path / "piles").n_rows == N_ROWS
    _parquet_source(tmp_path / "raw" / "b.parquet")
    done = CliRunner().invoke(cli, ["info", str(tmp_path / "piles")])
    assert "CHANGED (" in done.output and "b.parquet (not read before)" in done.output, done.output
    with pytest.raises(ds.SourceMismatchError, match=r"b.parquet \(not read before\)"):
        ds.verify(tmp_path / "piles")


def test_the_store_changed_with_its_sources_as_they_were_is_said(zarr_store: tuple[str, str]) -> None:
    src, dst = zarr_store
    y = zarr.open_group(dst, mode="r+")["y"]
    y[123] = y[123] + 1
    recorded_as_is(dst)
    with pytest.raises(ds.VerificationError, match=r"sizes and versions the store records; so a row of the store was"):
        ds.verify(dst, src)


def test_info_says_when_the_sources_cannot_be_compared(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from daskshuffle._cli._common import cli

    source = make_zarr_source(tmp_path / "raw.zarr", 300, chunk_rows=50)
    ds.shuffle_zarr(source, tmp_path / "piles.zarr", 4, seed=0)
    shutil.rmtree(source)
    done = CliRunner().invoke(cli, ["info", str(tmp_path / "piles.zarr")])
    assert done.exit_code == 0 and "sources since the shuffle: not compared: " in done.output, done.output


def test_info_says_when_the_store_cannot_tell_whether_its_sources_changed(tmp_path: Path) -> None:
    import pandas as pd
    from click.testing import CliRunner

    from daskshuffle._cli._common import cli

    ds.shuffle_dataframe(pd.DataFrame({"id": np.arange(300)}), tmp_path / "frame", n_piles=2, seed=0)
    done = CliRunner().invoke(cli, ["info", str(tmp_path / "frame")])
    assert done.exit_code == 0 and "sources since the shuffle: not known (" in done.output, done.output


def test_sources_touched_but_holding_the_same_rows_still_verify(zarr_store: tuple[str, str]) -> None:
    """verify proves rows: a source whose identity changed (a new mtime) but whose rows did not is proven."""
    src, dst = zarr_store
    chunk = next(path for path in Path(src, "y").rglob("*") if path.is_file() and path.name != "zarr.json")
    os.utime(chunk, ns=(chunk.stat().st_atime_ns, chunk.stat().st_mtime_ns + 10**9))
    assert sources_changed(read_metadata(dst)), "the identity says it changed"
    assert ds.verify(dst).n_rows == N_ROWS
