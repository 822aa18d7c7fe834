"""``overwrite=True`` replaces a store only once the new one is complete.

The new store is built beside the old one (``<dst>.daskshuffle-new``) and
swapped in at the end; until then the old store is whole and readable, and a
run that fails leaves it exactly as it was.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import zarr
from click.testing import CliRunner
from conftest import Points, make_zarr_source, tree_digest

import daskshuffle as ds
from daskshuffle._cli._common import cli
from daskshuffle.readers import open_pile_reader
from daskshuffle.storage import _paths
from daskshuffle.storage._location import Location


def _ids(store: str, storage_options: dict[str, Any] | None = None) -> np.ndarray:
    reader = open_pile_reader(store, storage_options=storage_options)
    try:
        return np.asarray(reader.read_rows(0, reader.n_rows)["id"])
    finally:
        reader.close()


def _fail_in_block(points: Points, failing: int, check: Any = None) -> None:
    """Make pass 1 fail on its ``failing``-th block, after running ``check`` (while the shuffle is under way)."""

    def read_block(count: int) -> None:
        if count == failing:
            if check is not None:
                check()
            raise RuntimeError(f"block {count} cannot be read")

    points.arm("scatter", read_block)


def test_a_failed_overwrite_leaves_the_old_store_whole(tmp_path: Path, points: Points) -> None:
    src = make_zarr_source(tmp_path / "raw.zarr", 1_000, chunk_rows=50)
    dst = str(tmp_path / "piles.zarr")
    ds.shuffle_zarr(src, dst, 4, seed=0)
    before, old_ids = tree_digest(dst), _ids(dst)
    seen_during_the_run: list[np.ndarray] = []
    _fail_in_block(points, 5, lambda: seen_during_the_run.append(_ids(dst)))
    with pytest.raises(RuntimeError, match="block 5 cannot be read"):
        ds.shuffle_zarr(src, dst, 4, seed=1, overwrite=True, block_memory=1_500)
    assert len(seen_during_the_run) == 1 and np.array_equal(seen_during_the_run[0], old_ids), "readable mid-run"
    assert tree_digest(dst) == before, "the old store is unchanged"
    assert [path.name for path in sorted(tmp_path.iterdir())] == ["piles.zarr", "raw.zarr"]


def test_overwrite_swaps_in_the_new_store(tmp_path: Path) -> None:
    src = make_zarr_source(tmp_path / "raw.zarr", 600, chunk_rows=50)
    dst = str(tmp_path / "piles.zarr")
    ds.shuffle_zarr(src, dst, 3, seed=0)
    ds.shuffle_zarr(src, str(tmp_path / "expected.zarr"), 5, seed=7)
    # What a crashed run left beside dst is not mistaken for anything: it is removed.
    stale = tmp_path / "piles.zarr.daskshuffle-new"
    stale.mkdir()
    (stale / "junk").write_bytes(b"x")
    result = ds.shuffle_zarr(src, dst, 5, seed=7, overwrite=True)
    assert result.path == dst and result.n_piles == 5
    assert np.array_equal(_ids(dst), _ids(str(tmp_path / "expected.zarr")))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["expected.zarr", "piles.zarr", "raw.zarr"]


def test_overwrite_of_a_text_file(tmp_path: Path) -> None:
    src = tmp_path / "corpus.jsonl"
    src.write_text("".join(f'{{"id": {i}}}\n' for i in range(300)))
    dst = tmp_path / "out.jsonl"
    ds.shuffle_lines(str(src), str(dst), 3, seed=0)
    first = dst.read_bytes()
    ds.shuffle_lines(str(src), str(dst), 3, seed=1, overwrite=True)
    second = dst.read_bytes()
    assert first != second and sorted(first.splitlines()) == sorted(second.splitlines())
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.jsonl", "out.jsonl"]


def test_replace_without_an_atomic_exchange(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Where renameat2 is missing (not Linux, an old C library): renamed aside, then into place.
    monkeypatch.setattr(_paths, "_exchange", lambda a, b: False)
    old, new = tmp_path / "dst", tmp_path / "dst.new"
    old.mkdir()
    (old / "a").write_text("old")
    new.mkdir()
    (new / "a").write_text("new")
    _paths.replace(Location.of(new), Location.of(old))
    assert (old / "a").read_text() == "new"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["dst"]


def test_replace_exchanges_in_one_step(tmp_path: Path) -> None:
    old, new = tmp_path / "dst", tmp_path / "dst.new"
    old.mkdir()
    (old / "a").write_text("old")
    new.write_text("a file takes a directory's place")
    _paths.replace(Location.of(new), Location.of(old))
    assert old.read_text() == "a file takes a directory's place"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["dst"]


@pytest.mark.s3
def test_overwrite_on_s3(tmp_path: Path, s3: Any, points: Points) -> None:
    src = make_zarr_source(tmp_path / "raw.zarr", 800, chunk_rows=50)
    dst = s3.url("piles.zarr")
    ds.shuffle_zarr(src, dst, 3, seed=0, storage_options=s3.storage_options)
    old_ids = _ids(dst, s3.storage_options)
    old_files = {path: s3.fs.cat_file(path) for path in s3.fs.find(f"{s3.bucket}/piles.zarr")}
    _fail_in_block(points, 2)
    with pytest.raises(RuntimeError, match="block 2 cannot be read"):
        ds.shuffle_zarr(src, dst, 4, seed=1, overwrite=True, block_memory=1_500, storage_options=s3.storage_options)
    points.disarm("scatter")
    assert {path: s3.fs.cat_file(path) for path in s3.fs.find(f"{s3.bucket}/piles.zarr")} == old_files
    assert s3.fs.ls(s3.bucket, refresh=True) == [f"{s3.bucket}/piles.zarr"]
    ds.shuffle_zarr(src, dst, 4, seed=1, overwrite=True, storage_options=s3.storage_options)
    new_ids = _ids(dst, s3.storage_options)
    assert not np.array_equal(new_ids, old_ids) and np.array_equal(np.sort(new_ids), np.arange(800))
    assert s3.fs.ls(s3.bucket, refresh=True) == [f"{s3.bucket}/piles.zarr"]
    assert open_pile_reader(dst, storage_options=s3.storage_options).metadata["n_piles"] == 4


@pytest.mark.s3
def test_a_failed_overwrite_of_text_files_on_s3_leaves_the_old_files_as_they_were(
    tmp_path: Path, s3: Any, points: Points
) -> None:
    """The new files are uploaded beside the old ones, and moved into place only once every one is whole."""
    (tmp_path / "raw.jsonl").write_text("".join(f'{{"id": {i}}}\n' for i in range(2_000)))
    dst, options = s3.url("out-{}.jsonl"), {"n_output_files": 2, "storage_options": s3.storage_options}
    ds.shuffle_lines(str(tmp_path / "raw.jsonl"), dst, 4, seed=0, **options)
    old = {path: s3.fs.cat_file(path) for path in s3.fs.find(s3.bucket)}
    assert len(old) == 2

    def second_file(count: int) -> None:
        if count == 2:
            raise RuntimeError("the second file cannot be written")

    points.arm("text file written", second_file)
    with pytest.raises(RuntimeError, match="second file"):
        ds.shuffle_lines(str(tmp_path / "raw.jsonl"), dst, 4, seed=1, overwrite=True, **options)
    points.disarm("text file written")
    assert {path: s3.fs.cat_file(path) for path in s3.fs.find(s3.bucket, refresh=True)} == old
    ds.shuffle_lines(str(tmp_path / "raw.jsonl"), dst, 4, seed=1, overwrite=True, **options)
    new = {path: s3.fs.cat_file(path) for path in s3.fs.find(s3.bucket, refresh=True)}
    assert new.keys() == old.keys() and new != old


def _interrupt_at(count: int) -> Callable[[int], None]:
    def interrupt(reached: int) -> None:
        if reached == count:
            raise KeyboardInterrupt

    return interrupt


def test_text_files_interrupted_while_moved_into_place_are_all_removed(tmp_path: Path, points: Points) -> None:
    """A new output of several files is all there or not at all: the same call then runs again."""
    (tmp_path / "raw.jsonl").write_text("".join(f'{{"id": {i}}}\n' for i in range(2_000)))
    args = (str(tmp_path / "raw.jsonl"), str(tmp_path / "out-{}.jsonl"), 4)
    points.arm("text file moved", _interrupt_at(2))
    with pytest.raises(ds.ShuffleInterrupted, match="what it wrote is removed"):
        ds.shuffle_lines(*args, seed=0, n_output_files=3)
    points.disarm("text file moved")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["raw.jsonl"]
    ds.shuffle_lines(*args, seed=0, n_output_files=3)
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "out-0.jsonl",
        "out-1.jsonl",
        "out-2.jsonl",
        "raw.jsonl",
    ]


@pytest.mark.s3
def test_new_text_files_on_s3_interrupted_while_uploaded_are_all_removed(
    tmp_path: Path, s3: Any, points: Points
) -> None:
    (tmp_path / "raw.jsonl").write_text("".join(f'{{"id": {i}}}\n' for i in range(2_000)))
    args = (str(tmp_path / "raw.jsonl"), s3.url("out-{}.jsonl"), 4)
    options = {"seed": 0, "n_output_files": 2, "storage_options": s3.storage_options}
    points.arm("text file written", _interrupt_at(2))
    with pytest.raises(ds.ShuffleInterrupted):
        ds.shuffle_lines(*args, **options)
    points.disarm("text file written")
    assert s3.fs.find(s3.bucket, refresh=True) == []
    ds.shuffle_lines(*args, **options)
    assert len(s3.fs.find(s3.bucket, refresh=True)) == 2


def test_a_store_records_the_blocks_its_order_depends_on(tmp_path: Path) -> None:
    import zarr

    src = make_zarr_source(tmp_path / "raw.zarr", 1_000, chunk_rows=50)
    small = ds.shuffle_zarr(src, str(tmp_path / "small.zarr"), 4, seed=0, block_memory=1_500)
    large = ds.shuffle_zarr(src, str(tmp_path / "large.zarr"), 4, seed=0, block_memory="1MiB")
    recorded = [dict(zarr.open_group(result.path, mode="r").attrs["daskshuffle"]) for result in (small, large)]
    assert recorded[0]["settings"] == recorded[1]["settings"]
    assert not np.array_equal(_ids(small.path), _ids(large.path)), "the same settings, another order"
    assert recorded[0]["blocks"] == {"block_memory": 1_500, "lengths": [[50, 20]]}
    assert recorded[1]["blocks"] == {"block_memory": 2**20, "lengths": [[1_000, 1]]}
    assert recorded[0]["fingerprint"] != recorded[1]["fingerprint"]


@pytest.mark.slow
def test_a_killed_overwrite_leaves_the_old_store_whole(tmp_path: Path) -> None:
    """The client killed while the new store is being built: the old one is still complete, unchanged."""
    import signal
    import subprocess
    import sys
    import time

    src = make_zarr_source(tmp_path / "raw.zarr", 20_000, chunk_rows=200, width=16)
    dst = tmp_path / "piles.zarr"
    ds.shuffle_zarr(src, str(dst), 4, seed=0)
    before, old_ids = tree_digest(dst), _ids(str(dst))
    process = subprocess.Popen(
        [sys.executable, "-m", "daskshuffle", "zarr", src, str(dst), "--n-piles", "50", "--seed", "1",
         "--overwrite", "--block-memory", "8KiB", "--scheduler", "sync"],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    staging = tmp_path / "piles.zarr.daskshuffle-new"
    while not (staging / "zarr.json").exists():  # the new store is being built: kill the client now
        assert process.poll() is None, "the run ended before it could be killed"
        time.sleep(0.002)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert tree_digest(dst) == before and np.array_equal(_ids(str(dst)), old_ids)
    # The next run clears what the killed one left and replaces the store.
    ds.shuffle_zarr(src, str(dst), 50, seed=1, overwrite=True)
    assert open_pile_reader(str(dst)).metadata["seed"] == 1
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith("piles")) == ["piles.zarr"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_destination_that_is_a_file_is_refused(tmp_path: Path, overwrite: bool) -> None:
    """A pile store is a directory: a file at dst, or above it, is named in an error and left as it was."""
    source = make_zarr_source(tmp_path / "raw.zarr", 500)
    (tmp_path / "taken").write_text("a file of the user's")
    frame = __import__("pandas").DataFrame({"id": np.arange(50)})
    for dst, shuffle in [
        ("taken", lambda dst: ds.shuffle_zarr(source, dst, n_piles=2, seed=0, overwrite=overwrite)),
        ("taken", lambda dst: ds.shuffle_dataframe(frame, dst, n_piles=2, seed=0, overwrite=overwrite)),
        ("taken/piles.zarr", lambda dst: ds.shuffle_zarr(source, dst, n_piles=2, seed=0, overwrite=overwrite)),
        ("taken/lines.txt", lambda dst: ds.shuffle_lines(tmp_path / "lines", dst, seed=0, overwrite=overwrite)),
    ]:
        (tmp_path / "lines").write_text("a\nb\nc\n")
        with pytest.raises(ds.DaskShuffleValueError, match=r"Got .*taken.*, which is a file, instead") as error:
            shuffle(str(tmp_path / dst))
        assert error.value.parameter == "dst"
        assert (tmp_path / "taken").read_text() == "a file of the user's"
        assert sorted(path.name for path in tmp_path.iterdir()) == ["lines", "raw.zarr", "taken"]
    # A text shuffle writes a file: one that is there is replaced, as overwrite=True says.
    ds.shuffle_lines(tmp_path / "lines", tmp_path / "taken", seed=0, overwrite=True)
    assert sorted((tmp_path / "taken").read_text().split()) == ["a", "b", "c"]


def test_what_no_shuffle_wrote_is_never_replaced(tmp_path: Path) -> None:
    """``overwrite=True`` replaces a pile store, never a directory of other files, nor one a link leads to."""
    source = make_zarr_source(tmp_path / "raw.zarr", 500)
    frame = pd.DataFrame({"id": np.arange(50)})
    frame.to_parquet(tmp_path / "raw.parquet")
    users = tmp_path / "users"
    (users / "plain").mkdir(parents=True)
    (users / "plain" / "notes.txt").write_text("the user's")
    zarr.create_array(str(users / "own.zarr"), shape=(10,), dtype="i4")[:] = np.arange(10)
    (tmp_path / "link.zarr").symlink_to(users / "plain")
    shuffles = {
        "zarr": lambda dst, overwrite: ds.shuffle_zarr(source, dst, n_piles=2, seed=0, overwrite=overwrite),
        "parquet": lambda dst, overwrite: ds.shuffle_parquet(
            str(tmp_path / "raw.parquet"), dst, n_piles=2, seed=0, overwrite=overwrite
        ),
        "dataframe": lambda dst, overwrite: ds.shuffle_dataframe(frame, dst, n_piles=2, seed=0, overwrite=overwrite),
    }
    before = tree_digest(users)
    for dst in (users / "plain", users / "own.zarr", tmp_path / "link.zarr"):
        for (kind, shuffle), overwrite in itertools.product(shuffles.items(), (False, True)):
            with pytest.raises(
                ds.PileStoreExistsError, match="Expected dst to be a pile store or not to exist"
            ) as error:
                shuffle(str(dst), overwrite)
            assert "which holds something else" in str(error.value), (kind, dst)
            assert error.value.parameter == "dst"
            assert tree_digest(users) == before, (kind, dst, overwrite)
            assert sorted(path.name for path in tmp_path.iterdir()) == ["link.zarr", "raw.parquet", "raw.zarr", "users"]
    refused = CliRunner().invoke(cli, ["zarr", source, str(users / "plain"), "--overwrite", "--quiet"])
    assert refused.exit_code != 0 and "even with --overwrite" in refused.output, refused.output
    assert tree_digest(users) == before
    # An empty directory holds nothing to lose; a pile store is replaced.
    (tmp_path / "empty").mkdir()
    ds.shuffle_zarr(source, str(tmp_path / "empty"), n_piles=2, seed=0, overwrite=True)
    ds.shuffle_zarr(source, str(tmp_path / "empty"), n_piles=2, seed=1, overwrite=True)
    assert open_pile_reader(str(tmp_path / "empty")).metadata["seed"] == 1
