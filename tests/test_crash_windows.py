"""``append``, ``evict`` and ``compact`` killed for real at every step, then run again: rows exactly once, nothing left.

Each case runs the step in a child process whose environment names a crash
point (``DASKSHUFFLE_CRASH_AT``, :mod:`daskshuffle.storage._crash`): the child
sends itself SIGKILL there, so nothing runs on the way out. Then the same call
in this process (or ``daskshuffle info --clean``) must finish the step with
every row exactly once, and leave nothing the store does not list: no
generation, array or scratch directory, and consolidated metadata that plain
zarr reads as the store is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from conftest import make_zarr_source

import daskshuffle
from daskshuffle import PileLoader
from daskshuffle._cli._common import cli
from daskshuffle.reshuffle import generation_leftovers
from daskshuffle.storage import Location, _leftovers
from daskshuffle.storage._crash import CRASH_AT, POINTS, armed

pytestmark = pytest.mark.slow

N_PILES = 4


def ids_of(store: Path) -> np.ndarray:
    with PileLoader(store, 100, seed=0) as loader:
        return np.sort(np.concatenate([batch["id"] for batch in loader]))


def killed_at(point: str, call: str, cwd: Path) -> None:
    """Run ``call`` (Python, with ``daskshuffle`` imported) in a child killed by SIGKILL at ``point``."""
    code = f"import dask, daskshuffle\nwith dask.config.set(scheduler='sync'):\n    {call}\n"
    env = {**os.environ, CRASH_AT: point}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, f"not killed at {point!r}: {done.returncode}\n{done.stderr[-2000:]}"


def plain_zarr_sees(store: Path) -> set[str]:
    """The generations and first arrays that plain zarr, through the consolidated metadata, finds in ``store``."""
    group = zarr.open_group(store, mode="r")
    members = {name for name, _ in group.members(max_depth=None)}
    return {name for name in members if name.count("/") == 1 and name.startswith("generations/")} | (
        members & {"x", "y", "id"}
    )


def left_in(store: Path, tmp: Path | None = None) -> list[str]:
    found = generation_leftovers(Location.of(store), Location.of(tmp) if tmp is not None else None)
    return [left.location.url for left in found]


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sources the tests only read, made once: ids 0..599 (a.zarr), 600..899 (b.zarr), 900..1099 (c.zarr).

    Beside them, ``piles.zarr``: a shuffled and b appended, which :func:`two` copies for each test.
    """
    root = tmp_path_factory.mktemp("sources")
    make_zarr_source(root / "a.zarr", 600, chunk_rows=64)
    make_zarr_source(root / "b.zarr", 300, chunk_rows=64, first_id=600)
    make_zarr_source(root / "c.zarr", 200, chunk_rows=50, first_id=900)
    daskshuffle.shuffle_zarr(root / "a.zarr", root / "piles.zarr", n_piles=N_PILES, seed=0)
    daskshuffle.append(root / "piles.zarr", root / "b.zarr", seed=1)
    return root


@pytest.fixture
def two(sources: Path, tmp_path: Path) -> Path:
    """A store of ids 0..599 (generation 0) and 600..899 appended (generation 1), a test's own copy."""
    return Path(shutil.copytree(sources / "piles.zarr", tmp_path / "piles.zarr", symlinks=True))


def test_a_finished_append_run_again_adds_nothing(two: Path, sources: Path) -> None:
    before = json.loads((two / "zarr.json").read_text())
    for seed in (1, None, 7):  # the same source: its rows are in the store, whatever seed is asked for
        assert [g.generation for g in daskshuffle.append(two, sources / "b.zarr", seed=seed)] == [0, 1]
    assert json.loads((two / "zarr.json").read_text()) == before
    np.testing.assert_array_equal(ids_of(two), np.arange(900))
    daskshuffle.compact(two)  # a compacted generation holds b's rows too
    assert [g.n_rows for g in daskshuffle.append(two, sources / "b.zarr")] == [900]
    assert [g.n_rows for g in daskshuffle.append(two, sources / "c.zarr", seed=3)] == [900, 200]
    np.testing.assert_array_equal(ids_of(two), np.arange(1_100))


@pytest.mark.parametrize("seed", [3, None])
@pytest.mark.parametrize("point", ["shuffle written", "shuffle complete", "append shuffled", "root listed"])
def test_an_append_killed_at_each_step_completes_exactly_once(
    two: Path, sources: Path, tmp_path: Path, point: str, seed: int | None
) -> None:
    call = f"daskshuffle.append({str(two)!r}, {str(sources / 'c.zarr')!r}, seed={seed!r})"
    killed_at(point, call, tmp_path)
    listed = [g.generation for g in daskshuffle.generations(two)]
    assert listed == ([0, 1, 2] if point == "root listed" else [0, 1]), "the root lists it once its list is written"
    np.testing.assert_array_equal(ids_of(two), np.arange(1_100 if point == "root listed" else 900))
    if point == "root listed":
        assert "generations/00002" not in plain_zarr_sees(two), "killed before the root was consolidated"
        assert left_in(two) == [Location.of(two / "zarr.json").url]
    else:
        assert left_in(two), "what the killed append wrote is named"

    live = daskshuffle.append(two, sources / "c.zarr", seed=seed)  # the same call, as the docs advise
    assert [g.generation for g in live] == [0, 1, 2]
    np.testing.assert_array_equal(ids_of(two), np.arange(1_100))
    if seed is not None:
        assert live[-1].seed == seed
    assert left_in(two) == []
    assert sorted(p.name for p in (two / "generations").iterdir()) == ["00001", "00002", "zarr.json"]
    assert plain_zarr_sees(two) == {"x", "y", "id", "generations/00001", "generations/00002"}
    assert [p.name for p in tmp_path.iterdir()] == ["piles.zarr"]
    assert sorted(p.name for p in sources.iterdir()) == ["a.zarr", "b.zarr", "c.zarr", "piles.zarr"]


def test_an_append_with_tmp_killed_mid_shuffle_is_finished_or_cleaned(two: Path, sources: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    call = f"daskshuffle.append({str(two)!r}, {str(sources / 'c.zarr')!r}, seed=3, tmp={str(scratch)!r})"
    killed_at("shuffle written", call, tmp_path)
    pieces = Location.of(two / "generations" / "00002").scratch(_leftovers.TMP_SUFFIX, Location.of(scratch))
    assert os.listdir(scratch) == [pieces.name], "the pieces are under tmp="
    assert pieces.path in left_in(two, scratch)
    # Another append (of other rows) removes what the killed one left, under tmp= too, and appends its own.
    make_zarr_source(tmp_path / "d.zarr", 100, chunk_rows=50, first_id=900)
    daskshuffle.append(two, tmp_path / "d.zarr", seed=4, tmp=scratch)
    assert os.listdir(scratch) == []
    np.testing.assert_array_equal(ids_of(two), np.arange(1_000))
    assert left_in(two, scratch) == []

    killed_at("shuffle written", call.replace("seed=3", "seed=5"), tmp_path)
    runner = CliRunner()
    shown = runner.invoke(cli, ["info", str(two), "--tmp", str(scratch)])
    assert shown.exit_code == 0 and "generation 3's shuffle" in shown.output and "00003" in shown.output, shown.output
    cleaned = runner.invoke(cli, ["info", str(two), "--clean", "--tmp", str(scratch)])
    assert cleaned.exit_code == 0, cleaned.output
    assert os.listdir(scratch) == [] and left_in(two, scratch) == []
    assert sorted(p.name for p in (two / "generations").iterdir()) == ["00001", "00002", "zarr.json"]
    np.testing.assert_array_equal(ids_of(two), np.arange(1_000))


@pytest.mark.parametrize("rerun", ["evict", "info --clean"])
@pytest.mark.parametrize("point", ["root listed", "evict listed", "evict removed"])
def test_an_evict_killed_after_each_write_leaves_nothing_for_good(
    two: Path, tmp_path: Path, point: str, rerun: str
) -> None:
    killed_at(point, f"daskshuffle.evict({str(two)!r}, keep_last=1)", tmp_path)
    assert [g.generation for g in daskshuffle.generations(two)] == [1], "the root lists the kept generation"
    np.testing.assert_array_equal(ids_of(two), np.arange(600, 900))
    runner = CliRunner()
    shown = runner.invoke(cli, ["info", str(two), "--json"])
    assert shown.exit_code == 0, shown.output
    named = {left["path"]: left["what"] for left in json.loads(shown.output)["leftovers"]}
    assert "the lock of process" in named.pop(Location.of(two).url + ".daskshuffle-lock"), "the killed one's lock"
    if point == "evict removed":
        assert named == {Location.of(two / "zarr.json").url: "consolidated metadata listing other generations"}
        assert "x" in plain_zarr_sees(two), "the removed arrays are still listed"
    else:
        assert {Location.of(two / name).url for name in ("x", "y", "id")} <= set(named), named
        assert (two / "x").exists()
    if rerun == "evict":
        assert [g.generation for g in daskshuffle.evict(two, keep_last=1)] == [1]
    else:
        cleaned = runner.invoke(cli, ["info", str(two), "--clean"])
        assert cleaned.exit_code == 0 and "removed" in cleaned.output, cleaned.output
    assert not any((two / name).exists() for name in ("x", "y", "id"))
    assert plain_zarr_sees(two) == {"generations/00001"}
    assert left_in(two) == []
    assert json.loads(runner.invoke(cli, ["info", str(two), "--json"]).output)["leftovers"] == []
    np.testing.assert_array_equal(ids_of(two), np.arange(600, 900))


def _piles_in_store_order(store: Path) -> list[np.ndarray]:
    """Each pile's ids as the store holds them (every generation's part of the pile, in order)."""
    from daskshuffle.readers import open_pile_reader

    reader = open_pile_reader(store, variables=["id"])
    try:
        return [
            np.asarray(reader.rows.as_arrays(reader.read_pile(pile))["id"])
            for pile in range(len(reader.pile_offsets) - 1)
        ]
    finally:
        reader.close()


@pytest.mark.parametrize("point", ["compact copied", "root listed", "compact listed", "compact removed"])
def test_a_compact_killed_after_each_write_is_finished_by_the_same_call(two: Path, tmp_path: Path, point: str) -> None:
    before = _piles_in_store_order(two)
    killed_at(point, f"daskshuffle.compact({str(two)!r})", tmp_path)
    listed = [g.generation for g in daskshuffle.generations(two)]
    assert listed == ([0, 1] if point == "compact copied" else [2])
    np.testing.assert_array_equal(ids_of(two), np.arange(900))
    assert left_in(two), "what the killed compaction left is named"
    assert [(g.generation, g.n_rows) for g in daskshuffle.compact(two)] == [(2, 900)]
    after = _piles_in_store_order(two)  # the same rows in the same order, pile by pile; only the chunks are new
    assert len(after) == len(before)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
    assert left_in(two) == []
    assert sorted(p.name for p in two.iterdir()) == ["generations", "zarr.json"]
    assert sorted(p.name for p in (two / "generations").iterdir()) == ["00002", "zarr.json"]
    assert plain_zarr_sees(two) == {"generations/00002"}


def test_the_crash_points_are_reached_by_the_steps_they_name() -> None:
    """Every point tests kill at or arm is named in the library, so that a renamed one cannot skip its window."""
    root = Path(daskshuffle.__file__).parent
    text = "".join(path.read_text() for path in root.rglob("*.py") if path.name != "_crash.py")  # not its examples
    reached = set(re.findall(r'crash_point\("([^"]+)"\)', text))
    assert reached == POINTS
    with pytest.raises(daskshuffle.DaskShuffleValueError, match="Expected one of the points"):
        armed("merges").__enter__()
