"""Of runs racing for one destination exactly one writes, also when they race to take over a lock left behind.

The races are replayed by pausing one run at a named point of taking the lock
(``"lock opened"``, ``"lock stale"``: :mod:`daskshuffle.storage._crash`) until the
other has got as far as the test needs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Points, make_zarr_source

import daskshuffle as ds
from daskshuffle.pilestore import read_metadata
from daskshuffle.storage import _lock
from daskshuffle.storage._location import Location
from daskshuffle.storage._lock import LOCK_SUFFIX


def _dead_pid() -> int:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(gone.stdout)


def _leave_lock(dst: str, write: Callable[[str, str], None] | None = None) -> None:
    """The lock a killed process of this host left."""
    text = json.dumps({"run": "killed", "host": socket.gethostname(), "pid": _dead_pid(), "since": 0})
    if write is None:
        Path(dst + LOCK_SUFFIX).write_text(text)
    else:
        write(dst + LOCK_SUFFIX, text)


def _pause(points: Points, point: str, thread: str, until: threading.Event) -> threading.Event:
    """Pause the thread named ``thread`` at ``point`` until ``until`` is set; returns an event set once it paused."""
    paused = threading.Event()

    def checkpoint(count: int) -> None:
        if threading.current_thread().name == thread and not paused.is_set():
            paused.set()
            assert until.wait(60), "the other run never got there"

    points.arm(point, checkpoint)
    return paused


def _race(runs: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run each in a thread of its name; what each returned or raised."""
    outcome: dict[str, Any] = {}

    def run(name: str) -> None:
        try:
            outcome[name] = runs[name]()
        except BaseException as error:
            outcome[name] = error

    threads = [threading.Thread(target=run, args=(name,), name=name) for name in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return outcome


@pytest.mark.parametrize("second_goes_on", ["after the first finished", "while the first writes"])
def test_of_two_runs_taking_over_a_left_lock_one_writes(tmp_path: Path, points: Points, second_goes_on: str) -> None:
    """The second opens the left lock first and is paused there; then the first runs, as far as the case says."""
    after = second_goes_on.startswith("after")
    src = make_zarr_source(tmp_path / "raw.zarr", 1_200, chunk_rows=50)
    dst = str(tmp_path / "piles.zarr")
    _leave_lock(dst)
    first_done, first_writing, second_done = threading.Event(), threading.Event(), threading.Event()
    paused = _pause(points, "lock opened", "second", first_done if after else first_writing)

    def first_writes(count: int) -> None:  # only the first run scatters: the second is refused the lock
        first_writing.set()
        if not after:
            assert second_done.wait(60)

    points.arm("scatter", first_writes)

    def first() -> Any:
        assert paused.wait(60), "the second run did not open the lock file"
        try:
            return ds.shuffle_zarr(src, dst, 4, seed=7, block_memory=2_000)
        finally:
            first_done.set()

    def second() -> Any:
        try:
            return ds.shuffle_zarr(src, dst, 4, seed=8, block_memory=2_000)
        finally:
            second_done.set()

    outcome = _race({"first": first, "second": second})
    assert isinstance(outcome["first"], ds.ShuffleResult), outcome["first"]
    refused = outcome["second"]
    if after:
        assert isinstance(refused, ds.PileStoreExistsError), refused
    else:
        assert isinstance(refused, ds.DaskShuffleValueError), refused
        assert f"process {os.getpid()} on {socket.gethostname()!r}, since" in str(refused)
    assert read_metadata(dst)["seed"] == 7 and read_metadata(dst)["complete"] is True, "the first run's store"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["piles.zarr", "raw.zarr"], "lock and pieces gone"


def test_of_many_runs_into_one_destination_exactly_one_writes(tmp_path: Path) -> None:
    src = make_zarr_source(tmp_path / "raw.zarr", 600, chunk_rows=50)
    dst = str(tmp_path / "piles.zarr")
    _leave_lock(dst)
    outcome = _race({str(seed): (lambda seed=seed: ds.shuffle_zarr(src, dst, 3, seed=seed)) for seed in range(4)})
    written = [name for name, value in outcome.items() if isinstance(value, ds.ShuffleResult)]
    assert len(written) == 1, outcome
    for name, value in outcome.items():
        if name not in written:
            assert isinstance(value, ds.PileStoreExistsError) or (
                isinstance(value, ds.DaskShuffleValueError) and "no other shuffle writing" in str(value)
            ), value
    assert read_metadata(dst)["seed"] == int(written[0]) and read_metadata(dst)["complete"] is True


def test_a_lock_a_live_run_holds_is_not_taken_over_by_a_thread(tmp_path: Path) -> None:
    dst = str(tmp_path / "piles.zarr")
    with _lock.exclusive(Location.of(dst)):
        assert _lock.held(Location.of(dst))
        outcome = _race({"other": lambda: _lock.exclusive(Location.of(dst)).__enter__()})
        assert isinstance(outcome["other"], ds.DaskShuffleValueError)
        assert f"process {os.getpid()} on {socket.gethostname()!r}, since" in str(outcome["other"])
    assert not _lock.held(Location.of(dst)) and not Path(dst + LOCK_SUFFIX).exists()


@pytest.mark.s3
def test_on_s3_two_runs_taking_over_a_left_lock_one_wins(s3: Any, points: Points) -> None:
    """The second reads the left lock and is paused before replacing it; the first replaces it meanwhile."""
    dst = s3.url("piles.zarr")
    _leave_lock(dst, lambda path, text: s3.fs.pipe_file(path, text.encode()))
    first_holds, second_done = threading.Event(), threading.Event()
    paused = _pause(points, "lock stale", "second", first_holds)

    def first() -> str:
        assert paused.wait(60), "the second run did not find the left lock"
        with _lock.exclusive(Location.of(dst, s3.storage_options)):
            first_holds.set()
            assert second_done.wait(60)
        return "wrote"

    def second() -> str:
        try:
            with _lock.exclusive(Location.of(dst, s3.storage_options)):
                return "wrote"
        finally:
            second_done.set()

    outcome = _race({"first": first, "second": second})
    assert outcome["first"] == "wrote", outcome
    assert isinstance(outcome["second"], ds.DaskShuffleValueError), outcome
    assert f"process {os.getpid()} on {socket.gethostname()!r}, since" in str(outcome["second"])
    assert not s3.fs.exists(dst + LOCK_SUFFIX), "released by the run that held it"


@pytest.mark.s3
def test_on_s3_a_lock_is_created_once(s3: Any) -> None:
    dst = s3.url("piles.zarr")
    with (
        _lock.exclusive(Location.of(dst, s3.storage_options)),
        pytest.raises(ds.DaskShuffleValueError, match="no other shuffle"),
        _lock.exclusive(Location.of(dst, s3.storage_options)),
    ):
        pass
    assert not s3.fs.exists(dst + LOCK_SUFFIX)


# -- local errors named ----------------------------------------------------------------


@pytest.fixture
def read_only(tmp_path: Path) -> Any:
    """A directory that may not be written: a tmpfs mounted read-only as root, else one without write permission."""
    directory = tmp_path / "read-only"
    directory.mkdir()
    if os.geteuid() != 0:
        directory.chmod(0o555)
        yield directory
        directory.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1M", "tmpfs", str(directory)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"no read-only tmpfs here: {mounted.stderr.decode().strip()}")
    yield directory
    subprocess.run(["umount", str(directory)], check=True)


def test_a_destination_in_a_directory_that_may_not_be_written_is_named(tmp_path: Path, read_only: Path) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 200, chunk_rows=50)
    dst = read_only / "piles.zarr"
    with pytest.raises(
        ds.StorageAccessError, match=r"Expected a directory that daskshuffle may write beside"
    ) as raised:
        ds.shuffle_zarr(source, dst, n_piles=2, seed=0)
    assert isinstance(raised.value, PermissionError) and raised.value.reason == "refused"
    assert str(dst) in str(raised.value) and f"make {str(read_only)!r} writable" in str(raised.value)
    assert os.listdir(read_only) == []


def test_a_destination_name_too_long_for_the_names_beside_it_is_named_before_anything_is_written(
    tmp_path: Path,
) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 200, chunk_rows=50)
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"{i}\n" for i in range(100)))
    for n_bytes in (250, 236):  # the lock's name too long; the name of a text output's partial file too long
        dst = tmp_path / ("p" * (n_bytes - 5) + ".zarr")
        with pytest.raises(
            ds.DaskShuffleValueError, match=rf"Got a name of {n_bytes} bytes in .* choose a shorter name"
        ):
            ds.shuffle_zarr(source, dst, n_piles=2, seed=0)
        with pytest.raises(ds.DaskShuffleValueError, match=rf"Got a name of {n_bytes} bytes"):
            ds.shuffle_lines(lines, tmp_path / ("p" * (n_bytes - 4) + ".txt"), n_piles=2, seed=0)
    assert sorted(os.listdir(tmp_path)) == ["lines.txt", "raw.zarr"], "nothing written"
