"""The notebooks run, on small data, so they never rot."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from notebook_kernel import WatchingClient

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUICKSTART_ROWS_PER_STORE", "2000")
    monkeypatch.setenv("QUALITY_ROWS", "40000")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    notebook = nbformat.read(path, as_version=4)
    client = WatchingClient(notebook, tmp_path)
    client.execute()
    errors = [
        output for cell in notebook.cells for output in cell.get("outputs", []) if output.get("output_type") == "error"
    ]
    assert not errors
    # Every cell that draws a figure shows it: an image in the executed notebook, not a backend that draws nowhere.
    drawing = [
        cell
        for cell in notebook.cells
        if cell.cell_type == "code" and ("plt.subplots" in cell.source or "plot_orders" in cell.source)
    ]
    assert drawing, "the notebook draws figures"
    for cell in drawing:
        assert any("image/png" in output.get("data", {}) for output in cell.outputs), cell.source[:80]
    printed = "".join(
        output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", []) if "text" in output
    )
    if path.stem == "quickstart":
        assert str(tmp_path) in printed, "the notebook wrote its data where it was told"
    # A shuffle's progress bar is drawn while its cell runs, to its end, and its last state stays as text.
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code" and "progress=True" in cell.source:
            values = client.bar_values(index)
            assert values and values[-1] == 1.0, cell.source[:80]
            assert "| 100% Completed |" in "".join(output.get("text", "") for output in cell.outputs), cell.source[:80]
    assert not [name for name in os.listdir(tmp_path) if name.startswith("daskshuffle-")], "and removed it"
    if path.stem == "quality":  # the comparison it exists to show
        assert "'piles (PileLoader)': '9 of 9 as uniform'" in printed and "'shuffle buffer': '0 of 9" in printed
        assert "piles, epochs 0 and 1" in printed and "two independent uniform shuffles" in printed
