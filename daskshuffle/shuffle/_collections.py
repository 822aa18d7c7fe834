"""Dask collections as plain graphs of blocks: arrays and DataFrames handed to a shuffle."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from dask._task_spec import DataNode, Task
from dask.core import flatten
from dask.delayed import delayed

from ..sources import decoding, uncomputable
from ._compute import map_tasks

__all__ = ["array_inputs", "describe_partitions", "is_dask_array", "is_dask_dataframe"]


def is_dask_array(value: object) -> bool:
    import dask.array as da

    return isinstance(value, da.Array)


def is_dask_dataframe(value: object) -> bool:
    import dask.dataframe as dd

    return isinstance(value, dd.DataFrame)


def _graph_of(parts: Sequence[Any]) -> dict[Any, Any]:
    """One plain graph for ``parts`` (Delayed objects, usually sharing one graph)."""
    graph: dict[Any, Any] = {}
    seen: set[int] = set()
    for part in parts:
        layer = part.__dask_graph__()
        if id(layer) not in seen:
            seen.add(id(layer))
            graph.update(layer)
    return graph


def describe_partitions(frame: Any, describe: Callable[[int, Any], Any]) -> list[Any]:
    """``describe(index, partition)`` for every partition of a dask DataFrame, in one computation.

    The DataFrame is computed here, once: ``describe`` keeps what pass 1 needs
    of each partition (the DataFrame format spools it to scratch storage).
    """
    parts = frame.to_delayed()
    inputs = (_graph_of(parts), [part.key for part in parts])
    return map_tasks(describe, [(index,) for index in range(len(parts))], token="describe-partitions", inputs=inputs)


def _gather_arrays(names: list[str], *values: Any) -> dict[str, Any]:
    return dict(zip(names, values, strict=True))


def array_inputs(arrays: dict[str, Any], lengths: Sequence[int]) -> tuple[dict[Any, Any], list[Any]]:
    """The graph and keys of blocks of dask arrays that share axis 0, cut at ``lengths``.

    Each block's value is ``{name: numpy array}`` with every axis but the first whole;
    each task of the arrays' graphs runs once, whatever the arrays share.
    """
    names = list(arrays)
    cut = [array.rechunk((tuple(lengths), *((size,) for size in array.shape[1:]))) for array in arrays.values()]
    # Not optimized: dask's blockwise fusion would copy what the arrays share (a source
    # they are all computed from) into each of them, computing every block of it again.
    per_array = [array.to_delayed(optimize_graph=False).reshape(len(lengths), -1)[:, 0] for array in cut]
    blocks = [delayed(_gather_arrays)(names, *[parts[index] for parts in per_array]) for index in range(len(lengths))]
    graph = _graph_of(blocks)
    _name_failures(graph, arrays)
    return graph, [block.key for block in blocks]


def _computed(what: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``func(*args, **kwargs)``, a task of a dask array; an error it raises named by ``what`` (its array, rows)."""
    try:
        return func(*args, **kwargs)
    except Exception as error:
        named = uncomputable(what, error)
        if named is None:
            raise
        raise named from error


def _name_failures(graph: dict[Any, Any], arrays: dict[str, Any]) -> None:
    """Make ``graph`` (of ``arrays``' blocks) name what fails: a Zarr chunk that does not decode by its file
    (the data a dask array reads from, wrapped by :func:`decoding`), any other block of an array by its rows."""
    for key, value in graph.items():
        data = value.value if isinstance(value, DataNode) else value
        if not isinstance(data, Task | DataNode):
            wrapped = decoding(data)
            if wrapped is not data:
                graph[key] = DataNode(key, wrapped) if isinstance(value, DataNode) else wrapped
    for name, array in arrays.items():
        bounds = np.cumsum((0, *array.chunks[0])) if array.ndim else np.zeros(2, dtype=int)
        for key in flatten(array.__dask_keys__()):
            task = graph.get(key)
            if isinstance(task, Task):
                rows = int(bounds[key[1]]), int(bounds[key[1] + 1])
                what = f"a block of the dask array {name!r} (rows {rows[0]:,} to {rows[1]:,})"
                graph[key] = Task(key, _computed, what, task.func, *task.args, **task.kwargs)
