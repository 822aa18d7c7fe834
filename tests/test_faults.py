"""Faults a real run meets: a full disk, two shuffles into one destination."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import pytest
from conftest import make_zarr_source, tree_digest
from fsspec.implementations.memory import MemoryFileSystem

from daskshuffle import DaskShuffleValueError, StorageFullError, shuffle_zarr
from daskshuffle.pilestore import read_metadata
from daskshuffle.storage._lock import LOCK_SUFFIX


class FullDisk(MemoryFileSystem):
    """An in-memory filesystem that runs out of space after ``budget`` bytes."""

    protocol = "fulldisk"
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    budget = 0
    used = 0

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        opened = super()._open(path, mode, **kwargs)
        if "w" in mode or "x" in mode:
            write = opened.write

            def budgeted(data: bytes) -> int:
                FullDisk.used += len(data)
                if FullDisk.used > FullDisk.budget:
                    raise OSError(errno.ENOSPC, "No space left on device", path)
                return write(data)

            opened.write = budgeted
        return opened

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        FullDisk.used += len(value)
        if FullDisk.used > FullDisk.budget:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        super().pipe_file(path, value, *args, **kwargs)


def test_a_full_disk_is_a_clear_error_that_leaves_nothing(tmp_path: Path) -> None:
    fsspec.register_implementation("fulldisk", FullDisk, clobber=True)
    FullDisk.store.clear()
    FullDisk.budget, FullDisk.used = 20_000, 0  # a few of the pieces fit, not all of them
    source = make_zarr_source(tmp_path / "raw.zarr", 3000, chunk_rows=50)
    before = tree_digest(tmp_path / "raw.zarr")
    with pytest.raises(StorageFullError, match=r"full disk.*Free space, or pass tmp on a larger disk") as raised:
        shuffle_zarr(source, tmp_path / "piles.zarr", n_piles=8, seed=0, block_memory="8KiB", tmp="fulldisk://scratch")
    assert raised.value.__cause__.errno == errno.ENOSPC
    assert tree_digest(tmp_path / "raw.zarr") == before, "the source is untouched"
    assert not (tmp_path / "piles.zarr").exists(), "no store, complete or not"
    assert not [path for path in FullDisk.store if path.endswith(".bin")], "the pieces are removed"
    assert sorted(os.listdir(tmp_path)) == ["raw.zarr"]


@pytest.mark.slow
def test_a_second_shuffle_into_the_same_destination_is_refused(tmp_path: Path) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 1500, chunk_rows=50)
    dst = tmp_path / "piles.zarr"
    code = textwrap.dedent(
        f"""
        import sys
        from daskshuffle import shuffle_zarr
        from daskshuffle.storage._crash import armed
        def held(count):  # the first merge waits, the lock held, until the other run was refused
            if count == 1:
                print("merging", flush=True)
                sys.stdin.readline()
        with armed("merge", held):
            shuffle_zarr({source!r}, {str(dst)!r}, seed=1, n_piles=6, block_memory="4KiB")
        """
    )
    first = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert first.stdout is not None and first.stdout.readline() == "merging\n", "the first run ended before merging"
    lock = Path(str(dst) + LOCK_SUFFIX)
    assert lock.read_text(), "the holder's name is written once it holds the lock"
    with pytest.raises(DaskShuffleValueError, match=rf"no other shuffle writing.*process {first.pid}"):
        shuffle_zarr(source, dst, seed=1, n_piles=6, block_memory="4KiB")
    _, stderr = first.communicate("go on\n", timeout=120)
    assert first.returncode == 0, stderr
    assert read_metadata(str(dst))["complete"] is True and not lock.exists(), "the first finished, and let go"


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 300, chunk_rows=50)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock = Path(str(tmp_path / "piles.zarr") + LOCK_SUFFIX)
    lock.write_text(json.dumps({"run": "x", "host": socket.gethostname(), "pid": int(gone.stdout), "since": 0}))
    result = shuffle_zarr(source, tmp_path / "piles.zarr", seed=0, n_piles=3)
    assert result.n_rows == 300 and not lock.exists()


def _killed_after_completing(dst: Path) -> None:
    """What a run killed between marking its store complete and removing its pieces and lock leaves."""
    pieces = Path(str(dst) + ".daskshuffle-tmp")
    (pieces / "1").mkdir(parents=True)
    (pieces / "1" / "x.bin").write_bytes(b"\0" * 50_000)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock = {"run": "x", "host": socket.gethostname(), "pid": int(gone.stdout), "since": 0}
    Path(str(dst) + LOCK_SUFFIX).write_text(json.dumps(lock))


def test_what_a_run_killed_after_completing_left_is_named_and_removed(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from daskshuffle._cli._common import cli
    from daskshuffle._parse import format_size

    source = make_zarr_source(tmp_path / "raw.zarr", 600, chunk_rows=50)
    dst = tmp_path / "piles.zarr"
    shuffle_zarr(source, dst, seed=0, n_piles=3)
    digest = tree_digest(dst)
    _killed_after_completing(dst)
    shown = CliRunner().invoke(cli, ["info", str(dst)])
    assert shown.exit_code == 0, shown.output
    assert "complete: yes" in shown.output
    # 50,000 bytes of pieces and a lock whose size depends on the host's name and the process id.
    left = 50_000 + Path(str(dst) + LOCK_SUFFIX).stat().st_size
    assert f"left beside it: {format_size(left)} (pieces: " in shown.output, shown.output
    assert format_size(left) in ("48.9 KiB", "48.8 KiB")
    assert "piles.zarr.daskshuffle-tmp" in shown.output
    assert (
        "the lock of process" in shown.output
        and "--clean" in shown.output
        and "run the same step again" in shown.output
    )
    as_json = json.loads(CliRunner().invoke(cli, ["info", str(dst), "--json"]).output)
    assert [Path(left["path"]).name for left in as_json["leftovers"]] == [
        "piles.zarr.daskshuffle-tmp",
        "piles.zarr" + LOCK_SUFFIX,
    ]

    result = shuffle_zarr(source, dst, seed=0, n_piles=3)  # the same shuffle again: returns at once, and cleans up
    assert result.n_tasks == 0 and tree_digest(dst) == digest
    assert sorted(os.listdir(tmp_path)) == ["piles.zarr", "raw.zarr"]
    assert "left beside it" not in CliRunner().invoke(cli, ["info", str(dst)]).output

    _killed_after_completing(dst)
    cleaned = CliRunner().invoke(cli, ["info", str(dst), "--clean"])
    assert (
        cleaned.exit_code == 0 and "removed 2 leftover(s)" in cleaned.output and "left beside it" not in cleaned.output
    )
    assert sorted(os.listdir(tmp_path)) == ["piles.zarr", "raw.zarr"] and tree_digest(dst) == digest
