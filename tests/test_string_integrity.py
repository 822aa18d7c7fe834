"""Variables of every pipeline a pile store may hold pass the same checks: strings, and compressors of the user's.

A chunk file swapped with another of its variable, truncated, or copied from
another run of the same source raises :class:`~daskshuffle.CorruptPileStoreError`
naming the store, the variable and the file, whatever the variable holds and
however it is encoded: no wrong row is ever yielded.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import GzipCodec, ZstdCodec

import daskshuffle as ds
from daskshuffle import CorruptPileStoreError, StoreChangedError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _s3_model import S3ModelFileSystem

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")  # fixed-length strings

N_ROWS = 6_000
#: Two compressors before the crc32c: a pipeline the reader does not decode with numcodecs itself.
TWO_COMPRESSORS = [ZstdCodec(level=1), GzipCodec(level=1)]


def make_source(path: Path) -> str:
    """Random ids, as fixed-length unicode and byte strings too (one chunk file per 500 rows of each)."""
    group = zarr.open_group(path, mode="w", zarr_format=3)
    ids = np.random.default_rng(0).permutation(N_ROWS)
    group.create_array("id", data=ids, chunks=(500,))
    group.create_array("name", data=np.array([f"n{i:06d}" for i in ids], dtype="U8"), chunks=(500,))
    group.create_array("tag", data=np.array([f"t{i:06d}" for i in ids], dtype="S8"), chunks=(500,))
    return str(path)


def shuffled(tmp_path: Path, name: str = "piles.zarr", seed: int = 0, **options: Any) -> str:
    source = tmp_path / "raw.zarr"
    if not source.exists():
        make_source(source)
    ds.shuffle_zarr(source, tmp_path / name, **{"n_piles": 4, "seed": seed, "chunk_rows": 256, **options})
    return str(tmp_path / name)


def read_all(store: str, **options: Any) -> dict[str, np.ndarray]:
    with ds.PileLoader(store, batch_size=500, seed=0, **options) as loader:
        batches = list(loader)
    return {name: np.concatenate([batch[name] for batch in batches]) for name in ("id", "name", "tag")}


def chunk_files(store: str, variable: str) -> list[Path]:
    return sorted((Path(store) / variable / "c").iterdir(), key=lambda path: int(path.name))


def swap(a: Path, b: Path) -> None:
    first, second = a.read_bytes(), b.read_bytes()
    a.write_bytes(second)
    b.write_bytes(first)


@pytest.mark.parametrize("compressors", ["auto", TWO_COMPRESSORS], ids=["auto", "two-compressors"])
def test_every_variable_reads_the_rows_it_was_given(tmp_path: Path, compressors: Any) -> None:
    rows = read_all(shuffled(tmp_path, compressors=compressors))
    assert sorted(rows["id"]) == list(range(N_ROWS))
    np.testing.assert_array_equal(rows["name"], np.array([f"n{i:06d}" for i in rows["id"]], dtype="U8"))
    np.testing.assert_array_equal(rows["tag"], np.array([f"t{i:06d}" for i in rows["id"]], dtype="S8"))


@pytest.mark.parametrize("variable", ["name", "tag"])
@pytest.mark.parametrize("compressors", ["auto", TWO_COMPRESSORS], ids=["auto", "two-compressors"])
def test_two_chunk_files_of_a_string_variable_swapped_raise(tmp_path: Path, variable: str, compressors: Any) -> None:
    store = shuffled(tmp_path, compressors=compressors)
    files = chunk_files(store, variable)
    swap(files[1], files[-2])
    with pytest.raises(
        CorruptPileStoreError, match=rf"{variable}/c/\d+.*of variable {variable!r}.*piles.zarr"
    ) as error:
        read_all(store)
    assert not isinstance(error.value, StoreChangedError)
    assert "another place, variable, run or store" in str(error.value)


@pytest.mark.parametrize("compressors", ["auto", TWO_COMPRESSORS], ids=["auto", "two-compressors"])
def test_a_truncated_chunk_of_a_string_variable_raises(tmp_path: Path, compressors: Any) -> None:
    store = shuffled(tmp_path, compressors=compressors)
    path = chunk_files(store, "name")[2]
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(CorruptPileStoreError, match=r"name/c/2'.*of variable 'name'"):
        read_all(store)


@pytest.mark.parametrize("compressors", ["auto", TWO_COMPRESSORS], ids=["auto", "two-compressors"])
def test_a_string_chunk_of_an_earlier_run_raises(tmp_path: Path, compressors: Any) -> None:
    earlier = shuffled(tmp_path, "earlier.zarr", seed=1, compressors=compressors)
    store = shuffled(tmp_path, compressors=compressors)
    shutil.copyfile(chunk_files(earlier, "tag")[3], chunk_files(store, "tag")[3])
    with pytest.raises(CorruptPileStoreError, match=r"tag/c/3'.*of variable 'tag'.*another place"):
        read_all(store)


@pytest.mark.parametrize("compressors", ["auto", TWO_COMPRESSORS], ids=["auto", "two-compressors"])
def test_string_chunks_fetched_from_object_storage_are_checked_too(tmp_path: Path, compressors: Any) -> None:
    objects = tmp_path / "objects"
    url, options = "s3model://bucket/piles.zarr", {"root": str(objects), "latency": 0.0, "bandwidth": 1e12}
    S3ModelFileSystem(**options)  # registers the protocol
    served = objects / "bucket" / "piles.zarr"
    shutil.copytree(shuffled(tmp_path, compressors=compressors), served)
    rows = read_all(url, storage_options=options)
    np.testing.assert_array_equal(rows["name"], np.array([f"n{i:06d}" for i in rows["id"]], dtype="U8"))
    files = chunk_files(str(served), "name")
    swap(files[0], files[-1])
    with pytest.raises(CorruptPileStoreError, match=r"name/c/\d+'.*of variable 'name'.*another place"):
        read_all(url, storage_options=options)
