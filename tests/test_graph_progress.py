"""Progress bars (``progress=True``): live on a terminal, a single final line in a log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr

import daskshuffle

FINAL_LINE = "[########################################] | 100% Completed | "


def shuffled_ids(path: Path) -> list[int]:
    return zarr.open_array(path, path="id", mode="r")[:].tolist()


def test_a_captured_run_prints_one_final_line(source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with dask.config.set(scheduler="threads"):
        daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", n_piles=4, seed=0, progress=True)
    out = capsys.readouterr().out
    assert "\r" not in out
    assert out.count("\n") == 1 and out.startswith(FINAL_LINE), repr(out)
    assert sorted(shuffled_ids(tmp_path / "piles.zarr")) == list(range(1_000))


def test_a_terminal_gets_the_live_bar(
    source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    with dask.config.set(scheduler="threads"):
        daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", n_piles=4, seed=0, progress=True)
    out = capsys.readouterr().out
    assert out.startswith("\r[") and "| 100% Completed |" in out, repr(out)


def test_no_bar_without_progress(source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with dask.config.set(scheduler="threads"):
        daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", n_piles=4, seed=0)
    assert capsys.readouterr().out == ""


@pytest.mark.cluster
def test_a_captured_run_on_a_local_cluster_prints_one_final_line(
    source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], cluster_client
) -> None:
    with cluster_client.as_current():
        daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", n_piles=4, seed=0, progress=True)
    out = capsys.readouterr().out
    assert "\r" not in out
    assert out.count("\n") == 1 and out.startswith(FINAL_LINE), repr(out)


@pytest.mark.cluster
def test_a_terminal_on_a_local_cluster_gets_the_live_bar_then_its_last_state(
    source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cluster_client
) -> None:
    """distributed's text bar erases itself when it ends: the line after it is what stays on the screen."""
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    with cluster_client.as_current():
        daskshuffle.shuffle_zarr(source, tmp_path / "piles.zarr", n_piles=4, seed=0, progress=True)
    out = capsys.readouterr().out
    assert out.startswith("\r[") and "\33[2K\r" in out, repr(out)  # drawn live, then erased
    last = out[out.rindex("\r") + 1 :]
    assert last.startswith(FINAL_LINE) and last.count("\n") == 1 and last.endswith("\n"), repr(out)


@pytest.mark.slow
def test_a_run_piped_into_a_log_writes_a_line_or_two(source: str, tmp_path: Path) -> None:
    """What ``make demo | tee`` and CI see: the output is a pipe."""
    code = (
        "import sys, time, dask, daskshuffle\n"
        "from daskshuffle.shuffle import _graph\n"
        # Slow tasks, so that a bar redrawn every 0.1 s would have drawn many times.
        "read = _graph._scatter\n"
        "def slow(*args):\n"
        "    time.sleep(0.05)\n"
        "    return read(*args)\n"
        "_graph._scatter = slow\n"
        "with dask.config.set(scheduler='threads'):\n"
        "    daskshuffle.shuffle_zarr(sys.argv[1], sys.argv[2], n_piles=4, seed=0, progress=True)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, source, str(tmp_path / "piles.zarr")],
        capture_output=True,
        check=True,
        text=True,
    )
    assert run.stdout.startswith(FINAL_LINE) and run.stdout.count("\n") == 1, repr(run.stdout)
    assert "\r" not in run.stdout
    assert np.array_equal(np.sort(shuffled_ids(tmp_path / "piles.zarr")), np.arange(1_000))


@pytest.mark.cluster
def test_a_failed_run_returns_once_its_running_tasks_have_stopped(cluster_client, tmp_path: Path) -> None:
    """Cancelled tasks still running would write behind the clean-up: the failure waits for them."""
    import operator
    import time

    from daskshuffle.shuffle._compute import _running_tasks, compute

    def slow(path: str) -> None:  # defined here: pickled by value into the workers
        time.sleep(1.5)
        Path(path).write_text("finished")

    name = "daskshuffle-stopping"
    finished = tmp_path / "slow-finished"
    graph = {
        f"{name}-slow": (slow, str(finished)),
        f"{name}-fails": (operator.truediv, 1, 0),
        f"{name}-done": (list, [f"{name}-slow", f"{name}-fails"]),
    }
    with cluster_client.as_current(), pytest.raises(ZeroDivisionError):
        compute(graph, f"{name}-done")
    assert finished.exists(), "it waited for the slow task, which started with the failing one"
    assert not any(cluster_client.run(_running_tasks, name).values()), "nothing of the graph runs any more"
