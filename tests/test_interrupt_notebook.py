"""Interrupting a shuffle in a real Jupyter kernel with a ``Client()``, then running the cell again.

The kernel's interrupt (``KernelManager.interrupt_kernel``) signals the kernel's
whole process group, the worker processes of the ``LocalCluster`` that
``Client()`` started included. The interrupted cell says whether the workers went
with it; the cell run again completes, or says at once that the workers are gone
and how to start new ones: never a progress bar that waits without end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

SETUP = """
import numpy as np
import zarr
from distributed import Client

import daskshuffle as ds

group = zarr.open_group("raw.zarr", mode="w")
group.create_array("x", data=np.random.default_rng(0).standard_normal((60_000, 16), dtype=np.float32), chunks=(2_000, 16))
group.create_array("id", data=np.arange(60_000), chunks=(2_000,))
"""

CLIENT = """
client = Client(n_workers=2, threads_per_worker=1, dashboard_address=":0")
"""

# The workers started while this process ignores SIGINT inherit that, and ignore the kernel's interrupt.
CLIENT_KEEPING_WORKERS = """
import signal

previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    client = Client(n_workers=2, threads_per_worker=1, dashboard_address=":0")
finally:
    signal.signal(signal.SIGINT, previous)
"""

# 60,000 rows in 2,000-row chunks into 16 piles: about fifty tasks, a second or more of them on two workers.
SHUFFLE = """
result = ds.shuffle_zarr("raw.zarr", "piles.zarr", n_piles=16, seed=0, block_memory="64KiB", progress=True)
print("shuffled", result.n_rows)
"""

SHUFFLED = "shuffled 60000"

#: How long the cell run again may take, to complete or to raise: never a silent wait.
RERUN_SECONDS = 30.0


def _part_of_the_way(value: object) -> bool:
    """Whether a widget's new value is a bar's, between its start and its end (a label's value is text)."""
    return isinstance(value, float) and 0 < value < 1


class Kernel:
    """A Jupyter kernel, its client, and what each cell sent back (text, the error's name and value, a bar moving)."""

    def __init__(self, path: Path) -> None:
        from jupyter_client.manager import start_new_kernel

        self.manager, self.client = start_new_kernel(kernel_name="python3", cwd=str(path))

    def start(self, source: str) -> str:
        return str(self.client.execute(source))

    def outputs(self, msg_id: str, timeout: float, *, until_moving: bool = False) -> dict[str, Any]:
        """The cell's outputs until it is done; ``done``, whether it was.

        ``until_moving``: until then or until a bar it shows is part of the way (``moving``): tasks are under way.
        """
        got: dict[str, Any] = {"text": "", "error": None, "moving": False, "done": False}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:  # the queue's Empty: the time is up
                break
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                got["text"] += content["text"]
            elif kind == "error":
                got["error"] = (content["ename"], content["evalue"])
            elif kind == "comm_msg" and _part_of_the_way(content["data"].get("state", {}).get("value")):
                got["moving"] = True
                if until_moving:
                    return got
            elif kind == "status" and content["execution_state"] == "idle":
                got["done"] = True
                return got
        return got

    def run(self, source: str, timeout: float = 300) -> dict[str, Any]:
        got = self.outputs(self.start(source), timeout)
        assert got["done"], f"the cell did not end within {timeout} s: {got}"
        assert got["error"] is None, got["error"]
        return got

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    running = Kernel(tmp_path)
    try:
        yield running
    finally:
        running.close()


def _interrupt_mid_shuffle(kernel: Kernel) -> tuple[str, str]:
    """Start the shuffle, interrupt it once its bar is part of the way (tasks under way), and return the cell's error."""
    cell = kernel.start(SHUFFLE)
    moving = kernel.outputs(cell, 120, until_moving=True)
    assert moving["moving"] and not moving["done"], f"the shuffle ended before it could be interrupted: {moving}"
    kernel.manager.interrupt_kernel()
    interrupted = kernel.outputs(cell, 120)
    assert interrupted["done"] and interrupted["error"] is not None, interrupted
    return interrupted["error"]  # type: ignore[no-any-return]


def _run_again(kernel: Kernel) -> dict[str, Any]:
    began = time.monotonic()
    again = kernel.outputs(kernel.start(SHUFFLE), RERUN_SECONDS)
    assert again["done"], f"the cell run again neither ended nor raised within {RERUN_SECONDS} s: {again}"
    assert time.monotonic() - began < RERUN_SECONDS
    return again


def test_a_rerun_after_the_interrupt_took_the_workers_raises_at_once(kernel: Kernel) -> None:
    kernel.run(SETUP + CLIENT)
    name, message = _interrupt_mid_shuffle(kernel)
    assert name == "ShuffleInterrupted", (name, message)
    assert "run it again the same way to continue it" in message
    again = _run_again(kernel)
    if "The cluster's workers are still running." in message:  # a distributed whose workers outlive the interrupt
        assert again["error"] is None and SHUFFLED in again["text"], again
        return
    assert "The interrupt also stopped all 2 of the cluster's workers" in message, message
    assert "client.close(); client = Client()" in message
    assert again["error"] is not None and again["error"][0] == "NoWorkersError", again
    assert "Got none instead: they are gone" in again["error"][1]
    assert "client.close(); client = Client()" in again["error"][1]
    # What the message says to do: new workers, and the same call continues the interrupted shuffle.
    done = kernel.run(
        "client.close(); client = Client(n_workers=2, threads_per_worker=1, dashboard_address=':0')\n" + SHUFFLE
    )
    assert SHUFFLED in done["text"], done


def test_workers_started_ignoring_sigint_outlive_the_interrupt(kernel: Kernel) -> None:
    kernel.run(SETUP + CLIENT_KEEPING_WORKERS)
    name, message = _interrupt_mid_shuffle(kernel)
    assert name == "ShuffleInterrupted", (name, message)
    assert "The cluster's workers are still running." in message, message
    again = _run_again(kernel)
    assert again["error"] is None and SHUFFLED in again["text"], again
    assert kernel.run("print(len(client.nthreads()))")["text"].strip() == "2"
