"""A symbolic link placed at any path the library writes is refused, and what it points to is left as it was.

Every case plants a link at one of the library's own paths (beside a
destination, below a scratch directory, in a cache) to a file or directory
outside, with known bytes; runs the call that writes there; and checks that
the call raises :class:`~daskshuffle.UnsafePathError` naming the link, that
the link and everything it points to are unchanged, and, where the link is
found before a run writes, that nothing was written.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dask
import dask.dataframe as dd
import pandas as pd
import pytest
from conftest import make_zarr_source, raise_at

import daskshuffle as ds
from daskshuffle.pilestore import read_metadata
from daskshuffle.storage import _leftovers
from daskshuffle.storage._cache import MARKER
from daskshuffle.storage._crash import armed
from daskshuffle.storage._location import Location

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import _s3_model  # noqa: F401  (registers the s3model:// filesystem)


def tree(path: Path) -> dict[str, str]:
    """Every name below ``path`` (or ``path`` itself, a file) with a digest of its bytes."""
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {
        str(file.relative_to(path)): hashlib.sha256(file.read_bytes()).hexdigest() if file.is_file() else "dir"
        for file in sorted(path.rglob("*"))
    }


def outside(tmp_path: Path, kind: str) -> Path:
    """A file, or a directory holding a file, outside everything the library writes."""
    home = tmp_path / "elsewhere"
    home.mkdir(exist_ok=True)
    if kind == "file":
        target = home / "notes.txt"
        target.write_bytes(b"a user's notes\n" * 100)
    else:
        target = home / "project"
        (target / "sub").mkdir(parents=True, exist_ok=True)
        (target / "notes.txt").write_bytes(b"a user's notes\n" * 100)
        (target / "sub" / "data.bin").write_bytes(bytes(range(256)) * 16)
    return target


# -- what writes: each call runs in tmp_path ------------------------------------------------------------------
def zarr_into(tmp_path: Path, **options: object) -> object:
    src = str(tmp_path / "raw.zarr")
    if not (tmp_path / "raw.zarr").exists():  # written again, it would be another source to a rerun
        make_zarr_source(src, 600, chunk_rows=50)
    return ds.shuffle_zarr(src, str(tmp_path / "piles.zarr"), n_piles=4, **{"seed": 0, **options})


def zarr_over(tmp_path: Path) -> object:
    return zarr_into(tmp_path, overwrite=True)


def zarr_with_tmp(tmp_path: Path) -> object:
    return zarr_into(tmp_path, tmp=str(tmp_path / "scratch"))


def lines_source(tmp_path: Path, name: str = "in.txt") -> Path:
    path = tmp_path / name
    text = b"".join(b"line %d\n" % index for index in range(2_000))
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    return path


def lines_into(tmp_path: Path) -> object:
    return ds.shuffle_lines(str(lines_source(tmp_path)), str(tmp_path / "out.txt"), seed=0)


def lines_into_files(tmp_path: Path) -> object:
    return ds.shuffle_lines(str(lines_source(tmp_path)), str(tmp_path / "out-{}.txt"), seed=0, n_output_files=2)


def lines_of_gzip(tmp_path: Path) -> object:
    return ds.shuffle_lines(str(lines_source(tmp_path, "in.txt.gz")), str(tmp_path / "out.txt"), seed=0)


def dataframe_into(tmp_path: Path) -> object:
    frame = dd.from_pandas(pd.DataFrame({"id": range(1_000), "x": [0.5] * 1_000}), npartitions=4)
    return ds.shuffle_dataframe(frame, str(tmp_path / "piles.parquet"), n_piles=4, seed=0)


def parquet_into(tmp_path: Path) -> object:
    frame = pd.DataFrame({"id": range(1_000), "x": [0.5] * 1_000})
    (tmp_path / "raw.parquet").mkdir(exist_ok=True)
    frame.to_parquet(tmp_path / "raw.parquet" / "part-0.parquet")
    return ds.shuffle_parquet(str(tmp_path / "raw.parquet"), str(tmp_path / "piles.parquet"), n_piles=4, seed=0)


def existing_store(tmp_path: Path) -> None:
    zarr_into(tmp_path, seed=1)


def scratch_directory(tmp_path: Path) -> None:
    (tmp_path / "scratch").mkdir()


def interrupted_at_the_merges(tmp_path: Path) -> None:
    """A resumable run stopped once every scatter was marked, before any merge was."""
    with armed("merge", raise_at()), dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
        zarr_into(tmp_path)
    assert (tmp_path / "piles.zarr.daskshuffle-tmp" / "_done" / "created").is_file()
    assert not (tmp_path / "piles.zarr.daskshuffle-tmp" / "_done" / "merge-0").exists()


def remove_manifest(tmp_path: Path) -> None:
    interrupted_at_the_merges(tmp_path)
    done = tmp_path / "piles.zarr.daskshuffle-tmp" / "_done"
    for mark in done.iterdir():
        mark.unlink()
    done.rmdir()


@dataclass(frozen=True)
class Case:
    #: Where the link is placed, relative to the test's directory.
    planted: str
    #: The call that writes there.
    run: Callable[[Path], object]
    #: What the link points to: "file" or "directory".
    points_to: str
    #: What is made before the link is placed (an existing store, an interrupted run).
    before: Callable[[Path], None] | None = None
    #: A path that the call must not have written, because the link is found before anything is written.
    unwritten: str | None = "piles.zarr"


CASES = {
    "lock": Case("piles.zarr.daskshuffle-lock", zarr_into, "file"),
    "lock to a directory": Case("piles.zarr.daskshuffle-lock", zarr_into, "directory"),
    "pieces": Case("piles.zarr.daskshuffle-tmp", zarr_into, "directory"),
    "pieces in tmp=": Case("scratch/{pieces_in_scratch}", zarr_with_tmp, "directory", scratch_directory),
    "store being built": Case("piles.zarr.daskshuffle-new", zarr_over, "directory", existing_store, None),
    "store set aside": Case("piles.zarr.daskshuffle-old", zarr_over, "directory", existing_store, None),
    "text output": Case("out.txt.daskshuffle-partial", lines_into, "file", unwritten="out.txt"),
    "text output file of several": Case(
        "out-1.txt.daskshuffle-partial", lines_into_files, "file", unwritten="out-0.txt"
    ),
    "text lock": Case("out.txt.daskshuffle-lock", lines_into, "file", unwritten="out.txt"),
    "spool of compressed text": Case("out.txt.daskshuffle-spool", lines_of_gzip, "directory", unwritten="out.txt"),
    "parquet lock": Case("piles.parquet.daskshuffle-lock", parquet_into, "file", unwritten="piles.parquet"),
    "parquet pieces": Case("piles.parquet.daskshuffle-tmp", parquet_into, "directory", unwritten="piles.parquet"),
    "spool of a dask dataframe": Case(
        "piles.parquet.daskshuffle-spool", dataframe_into, "directory", unwritten="piles.parquet"
    ),
    "manifest mark": Case(
        "piles.zarr.daskshuffle-tmp/_done/merge-0", zarr_into, "file", interrupted_at_the_merges, None
    ),
    "manifest": Case("piles.zarr.daskshuffle-tmp/_done", zarr_into, "directory", remove_manifest, None),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_link_where_a_shuffle_writes_is_refused_and_left(case: Case, tmp_path: Path) -> None:
    if case.before is not None:
        case.before(tmp_path)
    target = outside(tmp_path, case.points_to)
    before = tree(target)
    pieces = Location.of(tmp_path / "piles.zarr").scratch(_leftovers.TMP_SUFFIX, Location.of(tmp_path / "scratch"))
    link = tmp_path / case.planted.format(pieces_in_scratch=pieces.name)
    link.symlink_to(target, target_is_directory=case.points_to == "directory")
    with pytest.raises(ds.UnsafePathError, match="symbolic link") as raised:
        case.run(tmp_path)
    assert str(link) in str(raised.value), "the error names the link"
    assert isinstance(raised.value, FileExistsError)
    assert link.is_symlink() and os.readlink(link) == str(target), "the link is left as it was"
    assert tree(target) == before, "what it points to is unchanged"
    if case.unwritten is not None:
        assert not (tmp_path / case.unwritten).exists(), "refused before anything was written"
    assert not (tmp_path / "piles.zarr.daskshuffle-lock").exists() or case.planted.endswith("-lock")


def test_the_cases_cover_every_path_a_run_writes_beside_its_destination() -> None:
    """Each suffix the library writes beside a destination has a case here (a new one needs one)."""
    planted = {case.planted.rsplit(".daskshuffle", 1)[-1] for case in CASES.values() if "/" not in case.planted}
    suffixes = {path.url.rsplit(".daskshuffle", 1)[-1] for path in _leftovers.own_paths(Location.of("/a/b.zarr"))}
    assert suffixes <= planted, sorted(suffixes - planted)


@pytest.mark.slow
def test_a_leftover_that_is_a_link_is_named_not_removed(tmp_path: Path) -> None:
    """``daskshuffle info --clean`` (``_leftovers.remove``) removes what runs left, never a link placed among it."""
    zarr_into(tmp_path)
    target = outside(tmp_path, "directory")
    before = tree(target)
    link = tmp_path / "piles.zarr.daskshuffle-tmp"
    link.symlink_to(target, target_is_directory=True)
    with pytest.raises(ds.UnsafePathError, match="symbolic link"):
        _leftovers.remove(Location.of(str(tmp_path / "piles.zarr")))
    assert link.is_symlink() and tree(target) == before


def test_a_lock_that_is_a_link_is_refused_by_the_lock_itself(tmp_path: Path) -> None:
    """Below the checks a shuffle makes first: the lock is opened without following a link."""
    from daskshuffle.storage._lock import exclusive

    target = outside(tmp_path, "file")
    before = tree(target)
    (tmp_path / "piles.zarr.daskshuffle-lock").symlink_to(target)
    with pytest.raises(ds.UnsafePathError, match="lock file"), exclusive(Location.of(str(tmp_path / "piles.zarr"))):
        pass
    assert tree(target) == before


def test_a_fifo_at_the_lock_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "piles.zarr.daskshuffle-lock")
    with pytest.raises(ds.UnsafePathError, match="FIFO"):
        zarr_into(tmp_path)


def test_the_command_lines_output_is_not_written_through_a_link(tmp_path: Path) -> None:
    """``daskshuffle lines -i LO-HI -o OUT`` (in memory) writes ``OUT.daskshuffle-partial`` first."""
    target = outside(tmp_path, "file")
    before = tree(target)
    (tmp_path / "out.txt.daskshuffle-partial").symlink_to(target)
    run = subprocess.run(
        [sys.executable, "-m", "daskshuffle", "lines", "-i", "1-100", "-o", str(tmp_path / "out.txt")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert run.returncode == 1, run.stderr
    assert "symbolic link" in run.stderr and "out.txt.daskshuffle-partial" in run.stderr
    assert tree(target) == before and not (tmp_path / "out.txt").exists()


# -- the cache: links placed in a cache's directory ------------------------------------------------------------
@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, object], str]:
    """A pile store on local disk and the same in a bucket of the S3 model (no latency)."""
    work = tmp_path_factory.mktemp("remote")
    src = make_zarr_source(work / "raw.zarr", 20_000, chunk_rows=1_000)
    ds.shuffle_zarr(src, str(work / "piles.zarr"), n_piles=8, seed=5)
    shutil.copytree(work / "piles.zarr", work / "objects" / "cache" / "piles.zarr")
    return (
        "s3model://cache/piles.zarr",
        {"root": str(work / "objects"), "latency": 0.0, "bandwidth": 1e12},
        str(work / "piles.zarr"),
    )


def ids_of_an_epoch(store: str, options: dict[str, object] | None, **kwargs: object) -> list[list[int]]:
    with ds.PileLoader(store, batch_size=500, seed=2, storage_options=options, **kwargs) as loader:
        return [batch["id"].tolist() for batch in loader]


def store_directory(local: str) -> str:
    """The name of the directory of ``local``'s files in a cache."""
    metadata = read_metadata(local)
    assert metadata is not None
    key = f"{metadata['fingerprint']}-{metadata['run']}" if metadata.get("run") else str(metadata["fingerprint"])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


#: Where a link is placed in a cache that holds an epoch (``{store}``: the store's directory, ``{file}``: one of its
#: files), what it points to, and whether opening the cache is refused (else the link is passed over).
CACHE_CASES = {
    "the cache's mark": (MARKER, "file", True),
    "the store's directory": ("{store}", "directory", True),
    "another store's directory": ("0" * 32, "directory", False),
    "a cached file": ("{store}/{file}", "file", False),
    "a name the cache would trim": ("{store}/" + "f" * 64, "file", False),
    "a file being written": ("{store}/.partial-" + "e" * 32, "file", False),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CACHE_CASES.values(), ids=CACHE_CASES.keys())
def test_a_link_placed_in_a_cache_is_never_followed(
    case: tuple[str, str, bool], remote: tuple[str, dict[str, object], str], tmp_path: Path
) -> None:
    """The cache neither reads, sizes, writes through nor removes a link in its directory, trimming hard."""
    planted, points_to, refused = case
    url, options, local = remote
    expected = ids_of_an_epoch(local, None)
    cache = tmp_path / "cache"
    ids_of_an_epoch(url, options, cache=cache)
    store = store_directory(local)
    held = sorted((cache / store).iterdir())
    for path in held[1::2]:  # fetched and written again by the next epoch, which trims as it writes
        path.unlink()
    first = held[0].name
    link = cache / planted.format(store=store, file=first)
    if link.exists():
        shutil.rmtree(link) if link.is_dir() else link.unlink()
    target = outside(tmp_path, points_to)
    if points_to == "directory":  # files of the cache's names, read long ago: the first a trim would remove
        for index in range(3):
            (target / f"{index:064x}").write_bytes(b"\0" * 5_000)
    for path in [target, *target.rglob("*")]:
        os.utime(path, (0, 0))
    before = tree(target)
    link.symlink_to(target, target_is_directory=points_to == "directory")
    os.utime(link, (0, 0), follow_symlinks=False)
    limit = sum(path.stat().st_size for path in Path(local).rglob("*") if path.is_file()) // 4
    if refused:
        with pytest.raises(ds.UnsafePathError, match="symbolic link") as raised:
            ids_of_an_epoch(url, options, cache=ds.Cache(cache, max_size=limit))
        assert str(link) in str(raised.value)
    else:
        assert ids_of_an_epoch(url, options, cache=ds.Cache(cache, max_size=limit)) == expected
    assert link.is_symlink() and os.readlink(link) == str(target), "the link is left as it was"
    assert tree(target) == before, "what it points to is unchanged"


def test_links_placed_beside_a_destination_are_not_counted_as_what_runs_left(tmp_path: Path) -> None:
    """``daskshuffle info`` lists what runs left: a link is not that, and what it points to is not read."""
    target = outside(tmp_path, "directory")
    lock_target = outside(tmp_path, "file")
    lock_target.write_text('{"run": "x", "host": "elsewhere", "pid": 1, "since": 0}')
    (tmp_path / "piles.zarr.daskshuffle-tmp").symlink_to(target, target_is_directory=True)
    (tmp_path / "piles.zarr.daskshuffle-lock").symlink_to(lock_target)
    assert _leftovers.find(Location.of(str(tmp_path / "piles.zarr"))) == []


def test_a_generation_linked_to_another_store_and_named_in_the_root_is_refused(tmp_path: Path) -> None:
    """Issue 42 item 2: ``generations/00002`` made a link to another store's, the root edited to name it."""
    from daskshuffle.plan import fingerprint

    for name, first in (("piles", 0), ("other", 10_000)):
        make_zarr_source(tmp_path / f"{name}-a.zarr", 400, chunk_rows=50, first_id=first)
        make_zarr_source(tmp_path / f"{name}-b.zarr", 200, chunk_rows=50, first_id=first + 400)
        make_zarr_source(tmp_path / f"{name}-c.zarr", 100, chunk_rows=50, first_id=first + 600)
        ds.shuffle_zarr(tmp_path / f"{name}-a.zarr", tmp_path / f"{name}.zarr", n_piles=4, seed=0)
        ds.append(tmp_path / f"{name}.zarr", tmp_path / f"{name}-b.zarr", seed=1)
        ds.append(tmp_path / f"{name}.zarr", tmp_path / f"{name}-c.zarr", seed=2)
    store, other = tmp_path / "piles.zarr", tmp_path / "other.zarr"
    generation = store / "generations" / "00002"
    shutil.rmtree(generation)
    generation.symlink_to(other / "generations" / "00002", target_is_directory=True)
    document = json.loads((store / "zarr.json").read_text())
    root, others = document["attributes"]["daskshuffle"], read_metadata(other)
    assert others is not None
    root["generations"][-1] = others["generations"][-1]  # named in the root, as the other store's root names it
    root.pop("seal", None)
    root["fingerprint"] = fingerprint({k: v for k, v in root.items() if k not in ("fingerprint", "run", "arrays")})
    (store / "zarr.json").write_text(json.dumps(document))
    before = tree(other)
    for read in (lambda: ds.PileLoader(store, 50), lambda: ds.verify(store)):
        with pytest.raises(ds.UnsafePathError, match="symbolic link") as raised:
            read()
        assert str(generation) in str(raised.value)
    assert generation.is_symlink() and tree(other) == before, "the link and what it points to are left as they were"


@pytest.mark.parametrize("inner", ["id", "id/c", "id/daskshuffle-crc32c"])
def test_an_array_of_the_store_linked_to_another_stores_is_refused(tmp_path: Path, inner: str) -> None:
    """An array's directory, its chunks' directory or its crc32c table, a link to another store's: never read."""
    make_zarr_source(tmp_path / "raw.zarr", 400, chunk_rows=50)
    for name in ("piles", "other"):
        ds.shuffle_zarr(tmp_path / "raw.zarr", tmp_path / f"{name}.zarr", n_piles=4, seed=0)
    store, other = tmp_path / "piles.zarr", tmp_path / "other.zarr"
    moved = store / inner
    if moved.is_dir():
        shutil.rmtree(moved)
    else:
        moved.unlink()
    moved.symlink_to(other / inner, target_is_directory=(other / inner).is_dir())
    before = tree(other)
    with pytest.raises(ds.UnsafePathError, match="symbolic link") as raised:
        ds.PileLoader(store, 50)
    assert str(moved) in str(raised.value)
    assert moved.is_symlink() and tree(other) == before
