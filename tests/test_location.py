"""The storage location object: made absolute once, declared capabilities, pickled without its filesystem."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from dask.base import tokenize
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from daskshuffle._errors import StorageNotFoundError
from daskshuffle.storage._location import Location
from daskshuffle.storage._paths import overlaps

OPTIONS = {"key": "k", "secret": "s"}


def test_local_path_is_made_absolute_and_drops_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    location = Location.of("link/store.zarr", OPTIONS)
    assert location.url == os.path.realpath(tmp_path / "real" / "store.zarr")
    assert str(location) == location.url and location.path == location.url
    assert location.options is None
    assert isinstance(location.fs, LocalFileSystem)
    assert location.protocol == "file"
    assert location.is_local and location.can_rename
    assert not location.is_object_store and not location.conditional_writes
    assert Location.of(Path("link") / "store.zarr") == location
    assert Location.of(f"file://{tmp_path}/real/store.zarr") == location


def test_memory_url_takes_fsspecs_spelling() -> None:
    location = Location.of("memory://location-test/a/", OPTIONS)
    assert location.url == "memory:///location-test/a"
    assert location.path == "/location-test/a"
    assert isinstance(location.fs, MemoryFileSystem)
    assert location.options == OPTIONS
    assert not location.is_local and not location.can_rename and not location.is_object_store
    assert not location.conditional_writes and location.protocol == "memory"


def test_of_a_location_is_that_location() -> None:
    location = Location.of("memory://location-test/b")
    assert Location.of(location) is location
    assert Location.of(location, OPTIONS) is location


def test_join_and_suffix_keep_the_options(tmp_path: Path) -> None:
    location = Location.of("memory://location-test/c.zarr", OPTIONS)
    assert location.join("x/0").url == "memory:///location-test/c.zarr/x/0"
    assert location.join("/x/").path == "/location-test/c.zarr/x"
    assert location.with_suffix(".lock").url == "memory:///location-test/c.zarr.lock"
    assert location.join("x").options == OPTIONS and location.with_suffix(".lock").options == OPTIONS
    assert location.name == "c.zarr" and location.join("x").name == "x"
    local = Location.of(tmp_path / "d.zarr")
    assert local.join("x").path == str(tmp_path / "d.zarr" / "x")
    assert local.with_suffix("-tmp").url == str(tmp_path / "d.zarr-tmp")
    # Before and after the filesystem is resolved, the same locations.
    fresh = Location.of(tmp_path / "d.zarr")
    assert fresh.join("x") == local.join("x") and fresh.join("x").path == local.join("x").path


def test_scratch_lies_beside_or_inside_the_directory_given(tmp_path: Path) -> None:
    dst = Location.of(tmp_path / "out.zarr")
    assert dst.scratch("-tmp") == Location.of(tmp_path / "out.zarr-tmp")
    inside = dst.scratch("-tmp", Location.of(tmp_path / "scratch"))
    assert inside.path.startswith(str(tmp_path / "scratch" / "out.zarr-")) and inside.name.endswith("-tmp")
    # Named after the whole destination: another out.zarr has its own.
    assert Location.of(tmp_path / "b" / "out.zarr").scratch("-tmp", Location.of(tmp_path / "scratch")) != inside


def test_overlaps(tmp_path: Path) -> None:
    a = tmp_path / "a"
    assert overlaps(a, a / "b") and overlaps(a / "b", a) and overlaps(a, a)
    assert not overlaps(a, tmp_path / "ab")
    assert not overlaps(a, f"memory://{tmp_path}/a")


def test_equality_and_hash() -> None:
    a = Location.of("memory://location-test/e", OPTIONS)
    assert a == Location.of("memory:///location-test/e", dict(OPTIONS))
    assert a != Location.of("memory://location-test/e")
    assert len({a, Location.of("memory://location-test/e", dict(OPTIONS))}) == 1
    assert tokenize(a) == tokenize(Location.of("memory://location-test/e", dict(OPTIONS)))
    assert tokenize(a) != tokenize(Location.of("memory://location-test/e"))


def test_pickles_its_url_and_options_not_its_filesystem(tmp_path: Path) -> None:
    location = Location.of("memory://location-test/f", OPTIONS).join("g")
    assert location.fs is not None  # resolved here
    data = pickle.dumps(location)
    assert b"MemoryFileSystem" not in data
    again = pickle.loads(data)
    assert again == location and "_fs" not in again.__dict__
    assert again.path == "/location-test/f/g"


def test_exists_remove_makedirs_nbytes(tmp_path: Path) -> None:
    location = Location.of(tmp_path / "h")
    assert not location.exists()
    location.join("i").makedirs()
    (tmp_path / "h" / "i" / "file").write_bytes(b"12345")
    assert location.exists() and location.isdir()
    assert location.nbytes() == 5 and location.join("i/file").nbytes() == 5
    location.remove()
    assert not location.exists()
    location.remove()  # nothing there: nothing to do


def test_nothing_there_is_an_answer_even_while_a_failure_is_handled() -> None:
    """A cleanup after a request that timed out lists a directory never made: empty, not a second failure."""
    missing = Location.of("memory://location-test/never-made")
    try:
        raise TimeoutError("no answer to the request of 'piles.parquet/_daskshuffle.json' within 3 s")
    except TimeoutError:
        assert missing.names() == [] and missing.info() is None


def test_a_local_location_needs_no_bucket(tmp_path: Path) -> None:
    Location.of(tmp_path / "j").check("dst")


@pytest.mark.s3
def test_s3(s3: Any) -> None:
    location = Location.of(s3.url("store.zarr/"), s3.storage_options)
    assert location.url == f"s3://{s3.bucket}/store.zarr"
    assert location.path == f"{s3.bucket}/store.zarr"
    assert location.is_object_store and location.conditional_writes and not location.can_rename
    assert location.options == s3.storage_options
    location.check("dst")
    location.join("a").fs.pipe_file(location.join("a").path, b"abc")
    again = pickle.loads(pickle.dumps(location))
    assert again == location and again.join("a").exists() and again.nbytes() == 3
    again.remove()
    assert not location.exists()
    missing = Location.of(f"s3://{s3.bucket}-missing/store.zarr", s3.storage_options)
    with pytest.raises(StorageNotFoundError, match="Expected the bucket of dst to exist"):
        missing.check("dst")
