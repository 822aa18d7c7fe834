"""Running notebooks in a real Jupyter kernel, and watching the widget messages it sends while a cell runs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

#: The output a widget leaves in a cell: a reference to a model that lives in the kernel.
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class WatchingClient(NotebookClient):  # type: ignore[misc]
    """An ``nbclient.NotebookClient`` that keeps the widget messages (``comm_open``, ``comm_msg``) of each cell.

    ``process_message`` sees a cell's iopub messages from its ``execute_request``
    until the kernel says it is idle again: what the kernel sent while the cell ran.
    """

    def __init__(self, notebook: nbformat.NotebookNode, path: Path, timeout: int = 300) -> None:
        super().__init__(notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path)}})
        self.comm_messages: defaultdict[int, list[dict[str, Any]]] = defaultdict(list)

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        if msg["msg_type"] in {"comm_open", "comm_msg"}:
            self.comm_messages[cell_index].append(msg)
        return super().process_message(msg, cell, cell_index)

    def bar_values(self, cell_index: int) -> list[float]:
        """The values the kernel sent progress bars (``FloatProgress``) in updates while the cell ran, in order.

        The state a bar is opened with is not an update: a bar the kernel opens and
        never moves gives ``[]``.
        """
        bars: set[str] = set()
        values: list[float] = []
        for msg in self.comm_messages[cell_index]:
            content = msg["content"]
            state = content.get("data", {}).get("state", {})
            if msg["msg_type"] == "comm_open":
                if state.get("_model_name") == "FloatProgressModel":
                    bars.add(content["comm_id"])
            elif content["comm_id"] in bars and content["data"].get("method") == "update" and "value" in state:
                values.append(float(state["value"]))
        return values


def run_cells(path: Path, *sources: str) -> tuple[nbformat.NotebookNode, WatchingClient]:
    """Run a new notebook of ``sources`` in a kernel working in ``path``; the notebook as saved, and its client."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in sources])
    client = WatchingClient(notebook, path)
    client.execute()
    return nbformat.reads(nbformat.writes(notebook), as_version=4), client


def printed(cell: nbformat.NotebookNode) -> str:
    """The text a cell's outputs hold (its streams, and its results' plain text)."""
    return "".join(output.get("text", "") + output.get("data", {}).get("text/plain", "") for output in cell.outputs)


def errors(notebook: nbformat.NotebookNode) -> list[Any]:
    return [output for cell in notebook.cells for output in cell.get("outputs", []) if output.output_type == "error"]
