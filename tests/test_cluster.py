"""A cluster whose scheduler and workers are processes of their own, started in another directory.

A LocalCluster's workers share the client's working directory, which hides
every relative path that travels into a task. Here ``dask scheduler`` and
``dask worker`` run with another ``cwd``, and the tests call the public
functions and the command line from their own directory with relative paths.
A second worker runs in a mount namespace of its own, where a tmpfs hides one
directory: a destination there is one the cluster cannot reach.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pandas as pd
import pytest
import zarr
from conftest import make_zarr_source

import daskshuffle as ds
from daskshuffle import EpochShuffler, PileLoader, StorageNotFoundError

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DASK = Path(sys.executable).with_name("dask")
#: The directory daskshuffle is imported from: the workers and the command line import the same one.
PACKAGE_ROOT = str(Path(ds.__file__).resolve().parents[1])


@dataclass
class Cluster:
    address: str
    client: Any
    #: A directory one worker does not see (a tmpfs over it in its mount namespace), or None.
    hidden: Path | None
    env: dict[str, str]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _hidden_worker(hidden: Path, address: str, cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A worker that sees everything but ``hidden`` (a tmpfs over it, in a mount namespace of its own)."""
    command = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        'mount -t tmpfs tmpfs "$0" && exec "$@"',
        str(hidden),
        str(DASK),
        "worker",
        address,
        "--nthreads",
        "1",
        "--no-dashboard",
        "--host",
        "127.0.0.1",
    ]
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    from distributed import Client

    if not DASK.exists():
        pytest.skip(f"no dask executable next to {sys.executable}")
    home = tmp_path_factory.mktemp("cluster-cwd")  # where the scheduler and the workers run
    hidden = tmp_path_factory.mktemp("hidden")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
    address = f"tcp://127.0.0.1:{_free_port()}"
    processes: list[subprocess.Popen[bytes]] = []

    def start(*arguments: str, log: str) -> None:
        output = (home / log).open("wb")
        processes.append(
            subprocess.Popen([str(DASK), *arguments], cwd=home, env=env, stdout=output, stderr=subprocess.STDOUT)
        )

    start("scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard", log="scheduler")
    start("worker", address, "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1", log="worker")
    # A client shut down leaves dask's scheduler set to it (distributed 2026.7), where one closed puts back what
    # was there: this setting, around the client's, puts that back either way.
    settings = dask.config.set(scheduler="sync")
    try:
        client = Client(address, timeout=30)
        client.wait_for_workers(1, timeout=30)
        hiding = _hidden_worker(hidden, address, home, env, home / "hidden-worker")
        processes.append(hiding)
        deadline = time.monotonic() + 30
        while len(client.scheduler_info(n_workers=-1)["workers"]) < 2 and hiding.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        seen = len(client.scheduler_info(n_workers=-1)["workers"]) == 2
        with client:
            yield Cluster(address, client, hidden if seen else None, env)
            # The scheduler closes its workers and then itself: each process ends at once, none waits on a peer gone.
            client.shutdown()
    finally:
        settings.__exit__(None, None, None)
        for process in reversed(processes):  # workers first, the scheduler last
            process.terminate()
        for process in reversed(processes):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own directory, with two small Zarr sources, a Parquet file and a text file in it."""
    monkeypatch.chdir(tmp_path)
    make_zarr_source(tmp_path / "raw" / "raw-0.zarr", 600, chunk_rows=50)
    make_zarr_source(tmp_path / "raw" / "raw-1.zarr", 400, chunk_rows=50, first_id=600)
    (tmp_path / "table").mkdir()
    pd.DataFrame({"id": np.arange(500), "x": np.arange(500) * 0.5}).to_parquet(tmp_path / "table" / "part.parquet")
    (tmp_path / "data.txt").write_text("".join(f"line {i}\n" for i in range(300)))
    return tmp_path


def _ids(path: str | Path) -> np.ndarray:
    group = zarr.open_group(str(path), mode="r")
    ids = np.asarray(group["id"][:])
    np.testing.assert_array_equal(np.asarray(group["x"][:, 0]), ids.astype(np.float32))  # still aligned
    return ids


def _locally(function: Any, *args: Any, **kwargs: Any) -> Any:
    """The same call on this process's threads, for comparison."""
    import dask

    with dask.config.set(scheduler="threads"):
        return function(*args, **kwargs)


def test_shuffle_zarr_with_relative_paths(cluster: Cluster, here: Path) -> None:
    result = ds.shuffle_zarr(["raw/raw-0.zarr"], "rel-piles.zarr", 4, seed=3, tmp="scratch")
    assert result.path == str(here / "rel-piles.zarr")
    ids = _ids(here / "rel-piles.zarr")
    np.testing.assert_array_equal(np.sort(ids), np.arange(600))
    _locally(ds.shuffle_zarr, here / "raw" / "raw-0.zarr", here / "expected.zarr", 4, seed=3)
    np.testing.assert_array_equal(ids, _ids(here / "expected.zarr"))  # the same order, whatever ran it
    assert sorted(path.name for path in (here / "scratch").iterdir()) == []
    assert ds.verify("rel-piles.zarr", "raw/raw-0.zarr").n_rows == 600


def test_shuffle_parquet_with_relative_paths(cluster: Cluster, here: Path) -> None:
    ds.shuffle_parquet("table/", "rel.parquet", 4, seed=0)
    shuffled = pd.read_parquet(here / "rel.parquet")
    np.testing.assert_array_equal(np.sort(shuffled["id"]), np.arange(500))
    np.testing.assert_array_equal(shuffled["x"], shuffled["id"] * 0.5)


def test_shuffle_lines_with_relative_paths(cluster: Cluster, here: Path) -> None:
    ds.shuffle_lines("data.txt", "rel.txt", seed=0, block_memory=512)
    lines = (here / "rel.txt").read_text().splitlines()
    assert sorted(lines) == sorted(f"line {i}" for i in range(300)) and lines != sorted(lines)


def test_append_with_relative_paths(cluster: Cluster, here: Path) -> None:
    ds.shuffle_zarr("raw/raw-0.zarr", "window.zarr", 4, seed=0)
    generations = ds.append("window.zarr", "raw/raw-1.zarr", seed=1)
    assert [generation.n_rows for generation in generations] == [600, 400]
    with PileLoader("window.zarr", 100, seed=0) as loader:
        ids = np.concatenate([batch["id"] for batch in loader])
    np.testing.assert_array_equal(np.sort(ids), np.arange(1000))
    assert [generation.n_rows for generation in ds.compact("window.zarr")] == [1000]


def test_epoch_shuffler_with_relative_paths(cluster: Cluster, here: Path) -> None:
    with EpochShuffler("raw/raw-0.zarr", "epochs", n_epochs=1, batch_size=100, seed=0) as epochs:
        ids = np.concatenate([batch["id"] for loader in epochs for batch in loader])
    np.testing.assert_array_equal(np.sort(ids), np.arange(600))
    assert not (here / "epochs").exists()


def _cli(cluster: Cluster, cwd: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daskshuffle", *arguments, "--scheduler", cluster.address, "--quiet"],
        cwd=cwd,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_line_with_relative_paths(cluster: Cluster, here: Path) -> None:
    done = _cli(cluster, here, "zarr", "raw/raw-0.zarr", "raw/raw-1.zarr", "cli/p.zarr", "--n-piles", "4")
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.sort(_ids(here / "cli" / "p.zarr")), np.arange(1000))
    done = _cli(cluster, here, "parquet", "table/", "rel.parquet", "--n-piles", "4")
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.sort(pd.read_parquet(here / "rel.parquet")["id"]), np.arange(500))
    done = _cli(cluster, here, "lines", "data.txt", "-o", "rel.txt")
    assert done.returncode == 0, done.stderr
    assert sorted((here / "rel.txt").read_text().splitlines()) == sorted(f"line {i}" for i in range(300))


def test_a_destination_the_workers_cannot_see_is_refused_before_pass_1(cluster: Cluster, here: Path) -> None:
    if cluster.hidden is None:
        pytest.skip("no worker in a mount namespace of its own (needs unshare --mount and tmpfs, as root)")
    dst = cluster.hidden / "piles.zarr"
    with pytest.raises(StorageNotFoundError, match=r"Expected every worker of the cluster to see .*shared filesystem"):
        ds.shuffle_zarr("raw/raw-0.zarr", dst, 4, seed=0)
    assert list(cluster.hidden.iterdir()) == [], "nothing was written: not the store, not the pieces"
    with pytest.raises(StorageNotFoundError, match="directory of tmp"):
        ds.shuffle_zarr("raw/raw-0.zarr", "piles.zarr", 4, seed=0, tmp=cluster.hidden)
    assert not (here / "piles.zarr").exists() and list(cluster.hidden.iterdir()) == []
