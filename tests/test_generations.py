"""Pile stores that grow: append, evict and compact on real Zarr stores, read by real loaders."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from conftest import Points, make_zarr_source, raise_at, tree_digest

import daskshuffle
from daskshuffle import DaskShuffleValueError, IncompletePileStoreError, PileLoader
from daskshuffle._cli._common import cli
from daskshuffle.pilestore import AppendedStoreError, read_metadata
from daskshuffle.readers import open_pile_reader
from daskshuffle.readers._zarr_reader import ZarrPileReader

N_PILES = 4


def ids_of(store: Path | str, **options: Any) -> np.ndarray:
    with PileLoader(store, 100, **options) as loader:
        return np.concatenate([batch["id"] for batch in loader])


def epoch_batches(store: Path | str) -> list[np.ndarray]:
    with PileLoader(store, 100, seed=11) as loader:
        return [batch["id"] for batch in loader]


@pytest.fixture
def grown(tmp_path: Path) -> Path:
    """A store of ids 0..999 (generation 0), then 1000..1499 and 1500..1799 appended."""
    make_zarr_source(tmp_path / "a.zarr", 1_000, chunk_rows=64)
    make_zarr_source(tmp_path / "b.zarr", 500, chunk_rows=64, first_id=1_000)
    make_zarr_source(tmp_path / "c.zarr", 300, chunk_rows=50, first_id=1_500)
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0, chunk_rows=16)
    daskshuffle.append(store, tmp_path / "b.zarr", seed=1, chunk_rows=16)
    daskshuffle.append(store, tmp_path / "c.zarr", seed=2, chunk_rows=16)
    return store


def test_append_then_load_covers_old_and_new_rows_once(grown: Path) -> None:
    ids = ids_of(grown)
    np.testing.assert_array_equal(np.sort(ids), np.arange(1_800))
    assert [(g.generation, g.n_rows, g.seed) for g in daskshuffle.generations(grown)] == [
        (0, 1_000, 0),
        (1, 500, 1),
        (2, 300, 2),
    ]
    # x[:, 0] == id and y == id % 7 row by row: the variables stay aligned across generations.
    with PileLoader(grown, 128) as loader:
        for batch in loader:
            np.testing.assert_array_equal(batch["x"][:, 0], batch["id"])
            np.testing.assert_array_equal(batch["y"], batch["id"] % 7)


def test_a_pile_is_its_generations_piles_oldest_first(grown: Path) -> None:
    reader = open_pile_reader(grown)
    generation_readers = [ZarrPileReader(grown / "generations" / f"{n:05d}") for n in (1, 2)]
    first = zarr.open_group(grown, mode="r")
    offsets0 = reader.metadata["generations"][0]["pile_offsets"]
    for pile in range(N_PILES):
        expected = np.concatenate(
            [
                first["id"][offsets0[pile] : offsets0[pile + 1]],
                *(r.read_pile(pile)["id"] for r in generation_readers),
            ]
        )
        np.testing.assert_array_equal(reader.read_pile(pile)["id"], expected)
        # Every generation reaches every pile: P(a pile gets none of 300 rows) = 0.75**300 ~ 1e-38.
        assert all(np.any(expected >= low) for low in (1_000, 1_500))
    # read_rows across pile and generation boundaries agrees with the piles one after the other.
    whole = np.concatenate([reader.read_pile(pile)["id"] for pile in range(N_PILES)])
    for start, stop in [(0, 1_800), (5, 6), (440, 1_300), (1_799, 1_800), (0, 0)]:
        np.testing.assert_array_equal(reader.read_rows(start, stop)["id"], whole[start:stop])
    # Opened directly as one generation, it is refused, naming the open that reads every generation.
    with pytest.raises(AppendedStoreError, match=r"rows were appended to.*daskshuffle\.readers\.open_pile_reader"):
        ZarrPileReader(grown)
    assert issubclass(AppendedStoreError, IncompletePileStoreError)
    # Pickled (into DataLoader workers), it reads the same piles.
    import pickle

    again = pickle.loads(pickle.dumps(reader))
    np.testing.assert_array_equal(again.read_pile(2)["x"], reader.read_pile(2)["x"])


def test_piles_read_into_recycled_arrays_stay_right(grown: Path) -> None:
    # Several epochs with prefetch: arrays of used-up piles take later piles, across generations.
    with PileLoader(grown, 64, prefetch="64MiB") as loader:
        for _ in range(3):
            batches = list(loader)
            ids = np.concatenate([batch["id"] for batch in batches])
            np.testing.assert_array_equal(np.sort(ids), np.arange(1_800))
            for batch in batches:
                np.testing.assert_array_equal(batch["x"][:, 0], batch["id"])


def test_a_loader_opened_before_an_append_keeps_its_rows(tmp_path: Path) -> None:
    make_zarr_source(tmp_path / "a.zarr", 1_000, chunk_rows=64)
    make_zarr_source(tmp_path / "b.zarr", 400, chunk_rows=64, first_id=1_000)
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0)
    with PileLoader(store, 100) as before:
        daskshuffle.append(store, tmp_path / "b.zarr", seed=1)
        old = np.concatenate([batch["id"] for batch in before])
        state = before.state_dict()
    np.testing.assert_array_equal(np.sort(old), np.arange(1_000))
    np.testing.assert_array_equal(np.sort(ids_of(store)), np.arange(1_400))
    with PileLoader(store, 100) as after, pytest.raises(DaskShuffleValueError, match="store"):
        after.load_state_dict(state)  # another store now: the order of its batches changed


def test_readers_during_an_append_see_the_old_or_the_new_store(tmp_path: Path) -> None:
    make_zarr_source(tmp_path / "a.zarr", 1_000, chunk_rows=64)
    make_zarr_source(tmp_path / "b.zarr", 20_000, chunk_rows=500, first_id=1_000)
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0)
    seen: list[int] = []
    done = threading.Event()

    def read_while_appending() -> None:
        while not done.is_set():
            ids = ids_of(store)
            assert len(np.unique(ids)) == len(ids)
            np.testing.assert_array_equal(np.sort(ids), np.arange(len(ids)))
            seen.append(len(ids))

    reader = threading.Thread(target=read_while_appending)
    reader.start()
    try:
        daskshuffle.append(store, tmp_path / "b.zarr", seed=1, block_memory="16KiB")
    finally:
        done.set()
        reader.join()
    seen.append(len(ids_of(store)))
    assert set(seen) <= {1_000, 21_000}
    assert seen[0] == 1_000 and seen[-1] == 21_000


def test_evict_removes_exactly_the_oldest(grown: Path) -> None:
    live = daskshuffle.evict(grown, keep_last=2)
    assert [g.generation for g in live] == [1, 2]
    np.testing.assert_array_equal(np.sort(ids_of(grown)), np.arange(1_000, 1_800))
    assert not any((grown / name).exists() for name in ("x", "y", "id"))  # generation 0's arrays are gone
    assert sorted(p.name for p in (grown / "generations").iterdir()) == ["00001", "00002", "zarr.json"]
    assert "id" not in zarr.open_group(grown, mode="r")  # nor listed in the consolidated metadata
    live = daskshuffle.evict(grown, keep_last=1)
    assert [g.generation for g in live] == [2]
    np.testing.assert_array_equal(np.sort(ids_of(grown)), np.arange(1_500, 1_800))
    before = tree_digest(grown)
    assert [g.generation for g in daskshuffle.evict(grown, keep_last=3)] == [2]  # nothing older to remove
    assert tree_digest(grown) == before


def test_a_moving_window(tmp_path: Path) -> None:
    store = tmp_path / "window.zarr"
    for day in range(4):
        make_zarr_source(tmp_path / f"day{day}.zarr", 300, chunk_rows=64, first_id=300 * day)
        if day == 0:
            daskshuffle.shuffle_zarr(tmp_path / "day0.zarr", store, n_piles=N_PILES, seed=0)
        else:
            daskshuffle.append(store, tmp_path / f"day{day}.zarr", seed=day)
            daskshuffle.evict(store, keep_last=2)
        low = 300 * max(0, day - 1)
        np.testing.assert_array_equal(np.sort(ids_of(store)), np.arange(low, 300 * (day + 1)))


@pytest.mark.parametrize("change", ["evict", "compact"])
def test_a_loader_opened_before_evict_or_compact_names_the_change(grown: Path, change: str) -> None:
    small = daskshuffle.orders.Piles(budget="16KiB")  # groups of about 300 rows: reads after the first batch
    with PileLoader(grown, 100, seed=0, prefetch="0B", order=small) as loader:
        batches = iter(loader)
        next(batches)
        if change == "evict":
            daskshuffle.evict(grown, keep_last=1)
        else:
            daskshuffle.compact(grown)
        with pytest.raises(daskshuffle.StoreChangedError, match=r"generations changed since.*open a new PileLoader"):
            for _ in batches:
                pass
    assert len(ids_of(grown)) == (300 if change == "evict" else 1_800), "a new loader reads the store as it is now"


def test_a_file_removed_by_hand_is_still_damage(grown: Path) -> None:
    with PileLoader(grown, 100, seed=0, prefetch="0B") as loader:
        for path in (grown / "generations").rglob("c"):
            for chunk in path.rglob("*"):
                if chunk.is_file():
                    chunk.unlink()
        with pytest.raises(daskshuffle.CorruptPileStoreError) as raised:
            list(loader)
    assert not isinstance(raised.value, daskshuffle.StoreChangedError)


def test_compact_keeps_the_batches_and_makes_one_generation(grown: Path) -> None:
    before = epoch_batches(grown)
    live = daskshuffle.compact(grown)
    assert [(g.generation, g.n_rows) for g in live] == [(3, 1_800)]
    after = epoch_batches(grown)
    assert len(before) == len(after)
    # The same rows; their order follows the units of the one generation's chunks now.
    np.testing.assert_array_equal(np.sort(np.concatenate(before)), np.sort(np.concatenate(after)))
    assert sorted(p.name for p in grown.iterdir()) == ["generations", "zarr.json"]
    assert sorted(p.name for p in (grown / "generations").iterdir()) == ["00003", "zarr.json"]
    digest = tree_digest(grown)
    assert daskshuffle.compact(grown) == live  # one generation: nothing to do
    assert tree_digest(grown) == digest
    assert daskshuffle.verify(grown).n_rows == 1_800  # its sources are every generation's


def test_compact_writes_every_chunk_of_a_variable_all_of_fill_value(tmp_path: Path) -> None:
    """A chunk whose values are all the fill value is written and bound to the run, as a shuffle writes it."""
    for name, first in (("a.zarr", 0), ("b.zarr", 500)):
        group = zarr.open_group(tmp_path / name, mode="w")
        group.create_array("id", data=np.arange(first, first + 500), chunks=(100,))
        group.create_array("zero", data=np.zeros(500, dtype="f4"), chunks=(100,))
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0, chunk_rows=16)
    daskshuffle.append(store, tmp_path / "b.zarr", seed=1, chunk_rows=16)
    assert [(g.generation, g.n_rows) for g in daskshuffle.compact(store)] == [(2, 1_000)]
    with PileLoader(store, 100) as loader:
        batches = list(loader)
    np.testing.assert_array_equal(np.sort(np.concatenate([b["id"] for b in batches])), np.arange(1_000))
    assert not np.concatenate([b["zero"] for b in batches]).any()


def test_compact_on_a_cluster_writes_the_same_bytes(grown: Path, tmp_path: Path, cluster_client: Any) -> None:
    import shutil

    copy = tmp_path / "copy.zarr"
    shutil.copytree(grown, copy)
    daskshuffle.compact(grown, copy_memory="8KiB")  # many tasks
    with cluster_client.as_current():
        daskshuffle.compact(copy, copy_memory="8KiB")
    for name in ("x", "y", "id"):
        np.testing.assert_array_equal(
            zarr.open_group(grown / "generations" / "00003")[name][:],
            zarr.open_group(copy / "generations" / "00003")[name][:],
        )


def test_an_interrupted_append_is_finished_by_the_same_call(tmp_path: Path, points: Points) -> None:
    make_zarr_source(tmp_path / "a.zarr", 1_000, chunk_rows=64)
    make_zarr_source(tmp_path / "b.zarr", 500, chunk_rows=64, first_id=1_000)
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0)
    points.arm("merge", raise_at(error=OSError))  # the disk went away
    with pytest.raises(OSError, match="a fault at the point"):
        daskshuffle.append(store, tmp_path / "b.zarr", seed=1)
    points.disarm("merge")
    # The root still lists one generation; the loader reads it whole.
    assert [g.generation for g in daskshuffle.generations(store)] == [0]
    np.testing.assert_array_equal(np.sort(ids_of(store)), np.arange(1_000))
    daskshuffle.append(store, tmp_path / "b.zarr", seed=1)
    np.testing.assert_array_equal(np.sort(ids_of(store)), np.arange(1_500))


def test_evict_removes_what_an_interrupted_append_left(tmp_path: Path) -> None:
    make_zarr_source(tmp_path / "a.zarr", 1_000, chunk_rows=64)
    make_zarr_source(tmp_path / "b.zarr", 500, chunk_rows=64, first_id=1_000)
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0)
    # An append killed after its shuffle, before the root listed it: a generation nothing reads.
    daskshuffle.shuffle_zarr(tmp_path / "b.zarr", store / "generations" / "00001", n_piles=N_PILES, seed=1)
    np.testing.assert_array_equal(np.sort(ids_of(store)), np.arange(1_000))
    daskshuffle.evict(store, keep_last=1)
    assert not (store / "generations" / "00001").exists()
    np.testing.assert_array_equal(np.sort(ids_of(store)), np.arange(1_000))


def test_bad_appends_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    make_zarr_source(tmp_path / "a.zarr", 1_000, chunk_rows=64)
    store = tmp_path / "piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0)
    wide = make_zarr_source(tmp_path / "wide.zarr", 100, width=5)
    other = zarr.open_group(tmp_path / "other.zarr", mode="w")
    for name, dtype in (("x", "f8"), ("y", "i2"), ("id", "i8")):
        other.create_array(name, shape=(10, 4) if name == "x" else (10,), dtype=dtype)
    materialized = tmp_path / "copy.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", materialized, n_piles=N_PILES, seed=0, materialize=True)
    digest = tree_digest(store)
    cases: list[tuple[Any, dict[str, Any], type[BaseException], str]] = [
        (store, {"src": wide}, DaskShuffleValueError, r"x: store float32 rows of \(4,\), source \('float32', \(5,\)\)"),
        (store, {"src": tmp_path / "other.zarr"}, DaskShuffleValueError, "float64"),
        (store, {"src": tmp_path / "missing.zarr"}, FileNotFoundError, "missing.zarr"),
        (store, {"src": tmp_path / "a.zarr", "n_piles": 8}, TypeError, "n_piles"),
        (store, {"src": tmp_path / "a.zarr", "overwrite": True}, TypeError, "overwrite"),
        (materialized, {"src": tmp_path / "a.zarr"}, DaskShuffleValueError, "materialized"),
        (tmp_path / "a.zarr", {"src": tmp_path / "a.zarr"}, IncompletePileStoreError, "finished shuffle_zarr"),
    ]
    for target, kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            daskshuffle.append(target, **kwargs)
    assert tree_digest(store) == digest
    assert not (store / "generations").exists()
    with pytest.raises(DaskShuffleValueError, match="keep_last"):
        daskshuffle.evict(store, keep_last=0)
    assert tree_digest(store) == digest


def test_a_parquet_store_is_refused(tmp_path: Path) -> None:
    import pandas as pd

    pd.DataFrame({"id": np.arange(100)}).to_parquet(tmp_path / "raw.parquet")
    daskshuffle.shuffle_parquet(tmp_path / "raw.parquet", tmp_path / "piles.parquet", n_piles=2, seed=0)
    with pytest.raises(DaskShuffleValueError, match="Zarr pile stores only"):
        daskshuffle.append(tmp_path / "piles.parquet", tmp_path / "raw.parquet")


def test_the_command_line(grown: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    make_zarr_source(tmp_path / "d.zarr", 200, chunk_rows=64, first_id=1_800)
    result = runner.invoke(cli, ["append", str(grown), str(tmp_path / "d.zarr"), "--seed", "4", "--scheduler", "sync"])
    assert result.exit_code == 0, result.output
    assert "2,000 rows in 4 generations (0: 1,000, 1: 500, 2: 300, 3: 200)" in result.output
    result = runner.invoke(cli, ["info", str(grown), "--json"])
    assert [g["n_rows"] for g in json.loads(result.output)["generations"]] == [1_000, 500, 300, 200]
    assert "generations: 4, oldest first" in runner.invoke(cli, ["info", str(grown)]).output
    result = runner.invoke(cli, ["evict", str(grown), "--keep-last", "2"])
    assert result.exit_code == 0 and "500 rows in 2 generations (2: 300, 3: 200)" in result.output
    result = runner.invoke(cli, ["compact", str(grown), "--scheduler", "sync"])
    assert result.exit_code == 0 and "500 rows in 1 generation (4: 500)" in result.output
    np.testing.assert_array_equal(np.sort(ids_of(grown)), np.arange(1_500, 2_000))
    result = runner.invoke(cli, ["append", str(grown), str(tmp_path / "missing.zarr"), "--scheduler", "sync"])
    assert result.exit_code == 1 and "missing.zarr" in result.output and "Traceback" not in result.output


def test_a_root_whose_offsets_disagree_with_its_generations_is_refused(grown: Path) -> None:
    from daskshuffle.plan._plan import fingerprint

    path = grown / "zarr.json"
    document = json.loads(path.read_text())
    metadata = document["attributes"]["daskshuffle"]
    metadata["pile_offsets"][2] -= 1  # a row of pile 2 moved into pile 1: rising still, the same n_rows
    path.write_text(json.dumps(document))
    with pytest.raises(daskshuffle.CorruptPileStoreError, match=r"the fingerprint it records"):
        PileLoader(grown, 100)
    # Written so by a writer that fingerprinted what it wrote: the generations' own offsets tell.
    metadata["fingerprint"] = fingerprint({key: value for key, value in metadata.items() if key != "fingerprint"})
    path.write_text(json.dumps(document))
    with pytest.raises(
        daskshuffle.CorruptPileStoreError,
        match=r"pile_offsets that add up its generations' piles. Got pile_offsets\[2\] = [\d,]+ and [\d,]+ from",
    ):
        PileLoader(grown, 100)


@pytest.mark.parametrize("appended", [False, True], ids=["one generation", "appended"])
def test_a_root_of_another_format_version_is_refused_by_every_generation_step(
    grown: Path, tmp_path: Path, appended: bool
) -> None:
    store = grown
    if not appended:
        make_zarr_source(tmp_path / "a1.zarr", 100, chunk_rows=64)
        store = tmp_path / "one.zarr"
        daskshuffle.shuffle_zarr(tmp_path / "a1.zarr", store, n_piles=N_PILES, seed=0)
    path = store / "zarr.json"
    document = json.loads(path.read_text())
    document["attributes"]["daskshuffle"]["format_version"] = 2
    path.write_text(json.dumps(document))
    expected = r"format version 3. Got version 2 .* shuffle the source again"
    for step in (daskshuffle.generations, lambda where: daskshuffle.evict(where, keep_last=1), ids_of):
        with pytest.raises(IncompletePileStoreError, match=expected):
            step(store)


def test_compact_takes_copy_memory_as_a_size(grown: Path, tmp_path: Path) -> None:
    import shutil

    other = tmp_path / "other.zarr"
    shutil.copytree(grown, other)
    daskshuffle.compact(grown, copy_memory="64MiB")
    daskshuffle.compact(other, copy_memory=64 * 2**20)
    assert [(g.generation, g.n_rows) for g in daskshuffle.generations(grown)] == [(3, 1_800)]
    for a, b in zip(epoch_batches(grown), epoch_batches(other), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(DaskShuffleValueError, match="copy_memory"):
        daskshuffle.compact(grown, copy_memory="lots")


def test_append_takes_the_shuffle_options_it_forwards_as_keywords(tmp_path: Path) -> None:
    make_zarr_source(tmp_path / "a.zarr", 300, chunk_rows=50)
    make_zarr_source(tmp_path / "b.zarr", 300, chunk_rows=50, first_id=300)
    store = tmp_path / "store.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0)
    digest = tree_digest(store)
    with pytest.raises(TypeError, match="'block_memry'"):
        daskshuffle.append(store, tmp_path / "b.zarr", block_memry="16KiB")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'n_piles'"):
        daskshuffle.append(store, tmp_path / "b.zarr", n_piles=8)  # type: ignore[call-arg]
    assert tree_digest(store) == digest
    daskshuffle.append(store, tmp_path / "b.zarr", seed=1, block_memory="16KiB")
    metadata = read_metadata(store / "generations" / "00001")
    assert metadata is not None and metadata["blocks"]["block_memory"] == 16 * 2**10, "the option reached it"


def test_files_zarr_was_writing_when_a_step_was_killed_are_named_and_removed(grown: Path, tmp_path: Path) -> None:
    """Issue 42 item 9: a step killed inside zarr's write of a key leaves ``<key>.<uuid4 hex>.partial``."""
    import uuid

    partials = [
        grown / f"zarr.{uuid.uuid4().hex}.partial",  # the root's zarr.json (write_root, consolidate)
        grown / "generations" / f"zarr.{uuid.uuid4().hex}.partial",
        grown / "generations" / "00001" / "id" / "c" / f"0.{uuid.uuid4().hex}.partial",  # a chunk
    ]
    for path in partials:
        path.write_bytes((grown / "zarr.json").read_bytes()[:100])
    # Not zarr's, or not a file: never named, never removed.
    others = [grown / f"notes.{uuid.uuid4().hex}.partial", grown / f"zarr.{uuid.uuid4().hex[:31]}.partial"]
    for path in others:
        path.write_text("mine")
    (tmp_path / "outside.txt").write_text("outside")
    link = grown / f"zarr.{uuid.uuid4().hex}.partial"
    link.symlink_to(tmp_path / "outside.txt")
    runner = CliRunner()
    shown = runner.invoke(cli, ["info", str(grown)])
    assert shown.exit_code == 0, shown.output
    assert "a file zarr was writing when a step was killed" in shown.output
    assert all(str(path) in shown.output for path in partials)
    assert not any(str(path) in shown.output for path in [*others, link])
    cleaned = runner.invoke(cli, ["info", str(grown), "--clean"])
    assert cleaned.exit_code == 0, cleaned.output
    assert "removed 3 leftover(s)" in cleaned.output
    assert not any(path.exists() for path in partials)
    assert all(path.exists() for path in others) and link.is_symlink()
    assert (tmp_path / "outside.txt").read_text() == "outside"
    assert "left beside it" not in runner.invoke(cli, ["info", str(grown)]).output
    # The next compact removes one too.
    partial = grown / f"zarr.{uuid.uuid4().hex}.partial"
    partial.write_text("{")
    daskshuffle.compact(grown)
    assert not partial.exists()
    assert sorted(ids_of(grown).tolist()) == list(range(1_800))


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    """A 4 MiB tmpfs (as root); skipped where none can be mounted."""
    import subprocess

    directory = tmp_path / "disk"
    directory.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4M", "tmpfs", str(directory)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"no tmpfs can be mounted here (needs root): {mounted.stderr.decode().strip()}")
    yield directory
    subprocess.run(["umount", str(directory)], check=True)


def _fill(directory: Path, leave: int) -> Path:
    """Fill the disk of ``directory`` until about ``leave`` bytes are free."""
    import shutil as _shutil

    filler = directory / "filler"
    with filler.open("wb") as file:
        while (free := _shutil.disk_usage(directory).free) > leave:
            file.write(b"\0" * min(free - leave, 1 << 20))
            file.flush()
            os.fsync(file.fileno())
    return filler


def test_compact_with_the_disk_full_is_named_and_leaves_the_store_as_it_was(small_disk: Path, tmp_path: Path) -> None:
    """Issue 42 item 7: a real ENOSPC (tmpfs) while compacting, not a raw OSError and a partial ``generations/00003``."""
    import errno

    make_zarr_source(tmp_path / "a.zarr", 1_000, chunk_rows=64)
    make_zarr_source(tmp_path / "b.zarr", 500, chunk_rows=64, first_id=1_000)
    store = small_disk / "piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0, chunk_rows=16)
    daskshuffle.append(store, tmp_path / "b.zarr", seed=1)
    before, batches = tree_digest(store), epoch_batches(store)
    filler = _fill(small_disk, leave=64 * 1024)  # room for a few of the compacted generation's chunks
    with pytest.raises(daskshuffle.StorageFullError, match=r"Expected room in .*piles.zarr.* compact again") as raised:
        daskshuffle.compact(store)
    assert isinstance(raised.value, OSError) and raised.value.__cause__.errno == errno.ENOSPC  # type: ignore[union-attr]
    assert sorted(os.listdir(store / "generations")) == ["00001", "zarr.json"], "no partial generation"
    assert tree_digest(store) == before and sorted(os.listdir(small_disk)) == ["filler", "piles.zarr"]
    assert [b.tolist() for b in epoch_batches(store)] == [b.tolist() for b in batches]
    filler.unlink()
    assert [g.generation for g in daskshuffle.compact(store)] == [2]
    assert sorted(np.concatenate(epoch_batches(store)).tolist()) == sorted(np.concatenate(batches).tolist())


def test_generation_steps_in_a_directory_that_may_not_be_written_are_named(small_disk: Path, tmp_path: Path) -> None:
    import subprocess

    make_zarr_source(tmp_path / "a.zarr", 300, chunk_rows=64)
    make_zarr_source(tmp_path / "b.zarr", 200, chunk_rows=64, first_id=300)
    store = small_disk / "piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0)
    daskshuffle.append(store, tmp_path / "b.zarr", seed=1)
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    before = tree_digest(store)
    steps = [
        lambda: daskshuffle.compact(store),
        lambda: daskshuffle.evict(store, keep_last=1),
        lambda: daskshuffle.append(store, tmp_path / "a.zarr", seed=2),
    ]
    for step in steps:
        with pytest.raises(daskshuffle.StorageAccessError, match=r"may write beside .*piles.zarr.* writable") as raised:
            step()
        assert isinstance(raised.value, PermissionError) and str(small_disk) in str(raised.value)
    assert tree_digest(store) == before
    assert sorted(ids_of(store).tolist()) == list(range(500))


@pytest.mark.filterwarnings("ignore:.*no conditional write:UserWarning")  # a lock on a memory filesystem of its own
def test_compact_on_storage_that_fills_up_is_named_and_leaves_nothing(tmp_path: Path) -> None:
    """The same full disk through the fault-injecting filesystem of ``test_faults.py``, on any machine."""
    import fsspec
    from test_faults import FullDisk

    fsspec.register_implementation("fulldisk", FullDisk, clobber=True)
    FullDisk.store.clear()
    FullDisk.budget, FullDisk.used = 2**40, 0
    make_zarr_source(tmp_path / "a.zarr", 1_000, chunk_rows=64)
    make_zarr_source(tmp_path / "b.zarr", 500, chunk_rows=64, first_id=1_000)
    store = "fulldisk://piles.zarr"
    daskshuffle.shuffle_zarr(tmp_path / "a.zarr", store, n_piles=N_PILES, seed=0, chunk_rows=16)
    daskshuffle.append(store, tmp_path / "b.zarr", seed=1)
    before, batches = dict(FullDisk.store), epoch_batches(store)
    FullDisk.budget = FullDisk.used + 5_000  # a few of the compacted generation's files fit, not all
    with pytest.raises(daskshuffle.StorageFullError, match=r"Expected room in 'fulldisk://piles.zarr'.* compact again"):
        daskshuffle.compact(store)
    assert sorted(FullDisk.store) == sorted(before), "nothing of generation 2 is left"
    assert [b.tolist() for b in epoch_batches(store)] == [b.tolist() for b in batches]


def test_a_generation_that_records_no_source_identity_is_refused_by_append_and_compact(
    grown: Path, tmp_path: Path
) -> None:
    from daskshuffle import CorruptPileStoreError
    from daskshuffle.plan import fingerprint

    group = zarr.open_group(grown, mode="r+")
    root = dict(group.attrs["daskshuffle"])
    root["generations"][1].pop("source_identity")  # the root is fingerprinted whole, and sealed by no run
    root["fingerprint"] = fingerprint({key: value for key, value in root.items() if key != "fingerprint"})
    group.attrs["daskshuffle"] = root
    make_zarr_source(tmp_path / "d.zarr", 200, chunk_rows=50, first_id=1_800)
    digest = tree_digest(grown)
    refused = r"source_identity \(of each generation\), a list. Got source_identity = None instead; .* overwrite=True"
    with pytest.raises(CorruptPileStoreError, match=refused):
        daskshuffle.append(grown, tmp_path / "d.zarr", seed=3)
    with pytest.raises(CorruptPileStoreError, match=refused):
        daskshuffle.compact(grown)
    assert tree_digest(grown) == digest
