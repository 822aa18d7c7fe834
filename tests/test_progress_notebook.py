"""progress=True in a Jupyter kernel: the shuffle's progress bar shows in the cell's output."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

CELL = """
import daskshuffle as ds
from daskshuffle.demo import make_example
from distributed import Client, LocalCluster

paths = make_example("raw", n_stores=1, rows_per_store=2000, width=4)
with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster, Client(cluster):
    result = ds.shuffle_zarr(paths[0], "piles.zarr", n_piles=4, seed=0, progress=True)
print("shuffled", result.n_rows)
"""


@pytest.mark.slow
def test_shuffle_progress_shows_in_a_kernel(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = notebook.cells[0].outputs
    assert not [output for output in outputs if output.get("output_type") == "error"], outputs
    text = "".join(output.get("text", "") for output in outputs)
    assert "shuffled 2000" in text
    shown = [output for output in outputs if WIDGET_VIEW in output.get("data", {})]
    if importlib.util.find_spec("ipywidgets") is not None:
        assert shown, outputs  # distributed's progress widget
    else:
        assert "100% Completed" in text, outputs  # its text bar
