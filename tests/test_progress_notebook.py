"""progress=True in a Jupyter kernel: a bar that moves while the shuffle runs, and a line that stays in the saved notebook."""

from __future__ import annotations

from pathlib import Path

import pytest
from notebook_kernel import WIDGET_VIEW, errors, printed, run_cells

FINAL_LINE = "[########################################] | 100% Completed | "

SOURCE = """
import numpy as np
import zarr

import daskshuffle as ds

group = zarr.open_group("raw.zarr", mode="w")
group.create_array("x", data=np.random.default_rng(0).standard_normal(({n_rows}, 16), dtype=np.float32), chunks=(2_000, 16))
group.create_array("id", data=np.arange({n_rows}), chunks=(2_000,))
"""

ON_PROCESSES = """
from distributed import Client, LocalCluster

with (
    LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0") as cluster,
    Client(cluster),
):
    result = ds.shuffle_zarr("raw.zarr", "piles.zarr", n_piles=16, seed=0, block_memory="64KiB", progress=True)
print("shuffled", result.n_rows)
"""


@pytest.mark.slow
@pytest.mark.cluster
def test_the_bar_moves_while_a_local_cluster_of_processes_shuffles(tmp_path: Path) -> None:
    # 300,000 rows into 16 piles: about two seconds of tasks on two workers unloaded, 11-14 draws of a bar here.
    notebook, client = run_cells(tmp_path, SOURCE.format(n_rows=300_000) + ON_PROCESSES)
    assert not errors(notebook), errors(notebook)
    cell = notebook.cells[0]
    assert "shuffled 300000" in printed(cell)
    values = client.bar_values(0)
    # Drawn while the tasks ran, not opened empty and left: many updates, some part of the way.
    assert len(values) >= 5, client.comm_messages[0]
    assert any(0 < value < 1 for value in values), values
    assert values[-1] == 1.0, values
    assert any(WIDGET_VIEW in output.get("data", {}) for output in cell.outputs), cell.outputs
    # The saved notebook holds no live widget: the bar's last state is there as text.
    assert FINAL_LINE in printed(cell), cell.outputs


WITHOUT_CLIENT = """
ds.shuffle_zarr("raw.zarr", "local.zarr", n_piles=4, seed=0, progress=True)
print("no client")
"""

IN_PROCESS = """
from distributed import Client, LocalCluster

with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, Client(cluster):
    result = ds.shuffle_zarr("raw.zarr", "piles.zarr", n_piles=4, seed=0, progress=True)
print("shuffled", result.n_rows)
"""

BY_ADDRESS = """
from distributed import Client, LocalCluster

# A client of a scheduler it did not start, as of a remote cluster: its own event loop, in a thread of its own.
with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster:
    with Client(cluster.scheduler_address):
        result = ds.shuffle_zarr("raw.zarr", "by-address.zarr", n_piles=4, seed=0, progress=True)
print("shuffled", result.n_rows)
"""


@pytest.mark.slow
@pytest.mark.cluster
def test_the_bar_reaches_its_end_in_the_kernel_with_any_client(tmp_path: Path) -> None:
    """Without a client, then with an in-process cluster's, then with one of a scheduler it did not start.

    One kernel runs the three in turn, each into a store of its own, and each cell is
    checked on its own messages: the same checks as a kernel per client, one kernel started.
    """
    notebook, client = run_cells(tmp_path, SOURCE.format(n_rows=20_000), WITHOUT_CLIENT, IN_PROCESS, BY_ADDRESS)
    assert not errors(notebook), errors(notebook)
    local = notebook.cells[1]
    # Without a client: dask's text bar, which a saved notebook keeps.
    assert "no client" in printed(local) and FINAL_LINE in printed(local), local.outputs
    assert not client.bar_values(1)
    for index in (2, 3):  # With one: a widget drawn to its end while the cell ran, and its last state as text.
        distributed = notebook.cells[index]
        assert "shuffled 20000" in printed(distributed)
        values = client.bar_values(index)
        assert values and values[-1] == 1.0, client.comm_messages[index]
        assert FINAL_LINE in printed(distributed), distributed.outputs
