"""The dask layer: pass 1 and the merge as one task graph, O(blocks + piles) tasks.

A private pure function returns a plain dict graph with deterministic keys, as
dask's own shuffles do. Every task's output is determined by the plan, so a task
that runs twice (a retry, a lost worker) writes the same bytes, and no two tasks
write the same chunk or object.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import getitem
from typing import Any, NamedTuple

import numpy as np
from dask.base import tokenize
from numpy.typing import NDArray

from ..formats import CollectionSource, Format
from ..plan import (
    GroupedLevel,
    LevelPlan,
    Plan,
    block_counts,
    block_order,
    block_table,
    group_order,
    piece_offsets,
    span_reads,
)
from ..storage import Location, Manifest, crash_point, run_marked, run_once

__all__ = ["level_tmp", "shuffle_graph"]


@dataclass(frozen=True)
class MergeGroup:
    """The piles of one merge task (a run of whole piles as the destination cuts them), from ``pile_start``, which
    are output rows ``[row_start, row_stop)``."""

    pile_start: int
    row_start: int
    row_stop: int


def aligned(start: int, stop: int, n_rows: int, alignment: int) -> tuple[int, int]:
    """The widest ``[a, b)`` inside ``[start, stop)`` made of whole output chunks."""
    a = min(-(-start // alignment) * alignment, stop)
    b = max(stop if stop == n_rows else stop // alignment * alignment, a)
    return a, b


def compact(values: NDArray[np.int64]) -> NDArray[Any]:
    """``values`` (counts or offsets, never negative) in the smallest unsigned type that holds them."""
    largest = int(values.max(initial=0))
    dtype = next(t for t in (np.uint8, np.uint16, np.uint32, np.uint64) if largest <= np.iinfo(t).max)
    return values.astype(dtype)


def _scatter(
    fmt: Format[Any],
    tmp: Location,
    block: int,
    counts: NDArray[np.int64] | tuple[int, int],
    seed: int,
    *data: Any,
) -> Any:
    """Pass 1 for one block. ``counts``: the block's row of the plan, or ``(length, n_piles)`` to draw it here
    (which keeps the graph O(blocks + piles): only the merges carry the plan)."""
    crash_point("scatter")
    rows = fmt.rows_of_block(block, data[0]) if isinstance(fmt, CollectionSource) else fmt.read_block(block)
    if isinstance(counts, tuple):
        counts = block_counts(*counts, seed, block)
    piece_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    with tmp.reaching():  # throttled, refused, no answer: named as such, with the URL
        return fmt.scatter_block(tmp, block, rows, block_order(counts, seed, block), piece_offsets)


def _combine(fmt: Format[Any], infos: Sequence[Any]) -> Any:
    return fmt.combine_piece_info(infos)


def _merge(
    fmt: Format[Any],
    tmp: Location,
    dst: Location,
    group: MergeGroup,
    first_block: int,
    counts: NDArray[np.int64],
    read_starts: NDArray[np.int64],
    seed: int,
    n_rows: int,
    piece_info: Any,
) -> dict[int, tuple[int, Any]]:
    """Assemble one group of piles, write its whole chunks, return the rest by chunk."""
    crash_point("merge")
    counts, read_starts = counts.astype(np.int64), read_starts.astype(np.int64)  # compact in the graph
    read_stops = read_starts + counts.sum(axis=1)
    reads = [
        (block, int(first), int(last))
        for block, (first, last) in enumerate(zip(read_starts, read_stops, strict=True), start=first_block)
        if last > first
    ]
    with tmp.reaching():
        rows = fmt.gather_pieces(tmp, reads, group_order(counts, seed, group.pile_start))
    alignment = fmt.write_alignment()
    start, stop = group.row_start, group.row_stop
    a, b = aligned(start, stop, n_rows, alignment)
    if b > a:
        with dst.reaching():
            fmt.write_rows(dst, a, fmt.slice(rows, a - start, b - start), piece_info)
    # Copies wait for the seam task: a view would keep the whole group alive (and dask would count only the view).
    fragments: dict[int, tuple[int, Any]] = {}
    if a > start:
        fragments[start // alignment] = (start, fmt.take(rows, np.arange(0, a - start)))
    if stop > b:
        fragments[b // alignment] = (b, fmt.take(rows, np.arange(b - start, stop - start)))
    return fragments


def _seam(fmt: Format[Any], dst: Location, chunk: int, piece_info: Any, *merged: dict[int, tuple[int, Any]]) -> None:
    """Write an output chunk whose rows come from several merge groups."""
    fragments = sorted((result[chunk] for result in merged if chunk in result), key=lambda item: item[0])
    with dst.reaching():
        fmt.write_rows(dst, fragments[0][0], fmt.concat([rows for _, rows in fragments]), piece_info)


def _done(*_: Any) -> None:
    return None


def _scatter_spans(
    _barrier: Any,
    fmt: Format[Any],
    tmp_in: Location,
    tmp: Location,
    span: int,
    table: NDArray[np.int64],
    first_block: int,
    child: int,
    counts: NDArray[np.int64],
    lo: int,
    n_piles: int,
    seed: int,
) -> Any:
    """A level after the first, once the level before is written (``_barrier``: its pieces): the pieces of a group
    of blocks (``table``: theirs) for its ``child``-th super-pile.

    ``counts`` are the span's rows for each of the ``n_piles`` piles (or the
    next level's super-piles) from ``lo`` on.
    """
    crash_point("scatter spans")
    reads = span_reads(table, first_block, child)
    n_rows = sum(stop - start for _, start, stop in reads)
    with tmp_in.reaching():
        rows = fmt.gather_pieces(tmp_in, reads, np.arange(n_rows, dtype=np.intp))
    counts = counts.astype(np.int64)
    with tmp.reaching():
        return fmt.scatter_block(tmp, span, rows, block_order(counts, seed, span), piece_offsets(counts, lo, n_piles))


@dataclass(frozen=True)
class _Stages:
    """What every stage of one shuffle's graph shares: the graph it adds to, the tasks' name, the format's key, the
    plan, where the pieces go, each level's group tables, and the ``manifest`` the tasks mark themselves done in
    (those in ``done`` are not run again)."""

    graph: dict[Any, Any]
    name: str
    fmt_key: str
    plan: Plan | LevelPlan
    tmp: Location
    tables: list[_Tables]
    manifest: Manifest | None
    done: frozenset[str]

    def task(self, marker: str, *work: Any, once: bool = False) -> Any:
        """The task ``work``, marked ``marker`` in the manifest if there is one (``once``: not run again if marked)."""
        if self.manifest is None:
            return work
        return (run_once if once else run_marked, self.manifest, marker, *work)


def level_tmp(tmp: Location, level: int) -> Location:
    """Where the pieces of level ``level`` of a shuffle of several levels go, below ``tmp``."""
    return tmp.join(f"level-{level}")


def shuffle_graph(
    fmt: Format[Any],
    plan: Plan | LevelPlan,
    *,
    tmp: Location,
    dst: Location,
    merge_nbytes: int,
    manifest: Manifest | None = None,
    done: frozenset[str] = frozenset(),
) -> tuple[dict[Any, Any], str]:
    """The task graph of pass 1 and the merge, and the key that completes it.

    With ``L`` levels, pass 1 scatters blocks to super-piles and each later level
    scatters each super-pile's pieces further, the last to the piles the merge reads.
    With a ``manifest``, tasks mark themselves done there and those in ``done`` are
    not run again (a merge only if its seams are done too: it held their fragments).
    """

    name = "daskshuffle-" + tokenize(
        fmt.kind,
        fmt.source_names,
        plan.block_lengths,
        plan.n_piles,
        plan.seed,
        tmp.url,
        dst.url,
        merge_nbytes,
        plan.fanouts if isinstance(plan, LevelPlan) else None,
    )
    levels = plan if isinstance(plan, LevelPlan) else None
    # The format goes into the graph once, as data every task depends on: a worker receives it once, not per task.
    fmt_key = f"{name}-format"
    graph: dict[Any, Any] = {fmt_key: fmt}
    input_keys: Sequence[Any] | None = None
    if isinstance(fmt, CollectionSource):
        input_graph, input_keys = fmt.block_inputs()
        graph.update(input_graph)
        name += "-" + tokenize(list(input_keys))
    tables = (
        []
        if levels is None
        else [_group_tables(graph, name, index, level) for index, level in enumerate(levels.levels, 1)]
    )
    stages = _Stages(graph, name, fmt_key, plan, tmp, tables, manifest, done)
    pieces_key = _scatter_stage(stages, input_keys)
    merge_tmp = tmp
    if levels is not None:
        for index in range(2, levels.n_levels + 1):
            pieces_key = _level_stage(stages, levels, index, pieces_key)
        merge_tmp = level_tmp(tmp, levels.n_levels)
    return _merge_stage(stages, fmt, merge_tmp, dst, merge_nbytes, pieces_key)


class _Tables(NamedTuple):
    """A level's group tables in the graph: each group's task, and for each block the task taking its row."""

    groups: list[Any]
    rows: list[Any]


def _group_tables(graph: dict[Any, Any], name: str, index: int, level: GroupedLevel) -> _Tables:
    """A task per group of ``level`` that draws its block table once, on a worker."""
    keys = [(f"{name}-group-{index}", g) for g in range(level.n_groups)]
    graph.update({key: (block_table, *level.group_draw(g)) for g, key in enumerate(keys)})
    groups, rows = level.block_groups
    return _Tables(keys, [(getitem, keys[group], row) for group, row in zip(groups, rows, strict=True)])


def _scatter_stage(stages: _Stages, input_keys: Sequence[Any] | None) -> str:
    """Pass 1: a scatter task per block of the source (``input_keys``: its value's, for a collection); its barrier."""
    graph, name, fmt_key, done, plan = stages.graph, stages.name, stages.fmt_key, stages.done, stages.plan
    levels = plan if isinstance(plan, LevelPlan) else None
    marker = "scatter" if levels is None else "scatter-1"
    first_tmp = stages.tmp if levels is None else level_tmp(stages.tmp, 1)
    seed = plan.seed if levels is None else levels.levels[0].seed
    scatter_keys = []
    for block in range(plan.n_blocks):
        key = (f"{name}-{marker}", block)
        scatter_keys.append(key)
        if f"{marker}-{block}" in done:
            graph[key] = None  # its pieces are on storage; a pile store's pieces carry no information
            continue
        # One level: the scatter draws its own counts. More: its row of its group's table.
        counts = (int(plan.block_lengths[block]), plan.n_piles) if levels is None else stages.tables[0].rows[block]
        value = (input_keys[block],) if input_keys is not None else ()
        # Once: a scatter run again because the worker holding its result was lost finds its pieces written.
        graph[key] = stages.task(
            f"{marker}-{block}", _scatter, fmt_key, first_tmp, block, counts, seed, *value, once=True
        )
    pieces_key = f"{name}-pieces"
    graph[pieces_key] = (_combine, fmt_key, scatter_keys)
    return pieces_key


def _level_stage(stages: _Stages, plan: LevelPlan, index: int, pieces_key: str) -> str:
    """Level ``index`` (2 or more) of ``plan`` (the stages' own): each of its blocks, a span of the level before,
    read and scattered; its barrier."""
    graph, name, fmt_key, done, tables = stages.graph, stages.name, stages.fmt_key, stages.done, stages.tables
    before = plan.levels[index - 2]
    span_groups, span_children = (part.tolist() for part in before.spans)
    tmp_in, tmp_out = level_tmp(stages.tmp, index - 1), level_tmp(stages.tmp, index)
    keys = []
    for span, (group, child) in enumerate(zip(span_groups, span_children, strict=True)):
        if not before.span_lengths[span]:
            continue  # no rows of this group went to this super-pile
        key = (f"{name}-scatter-{index}", span)
        keys.append(key)
        if f"scatter-{index}-{span}" in done:
            graph[key] = None
            continue
        reads = (
            fmt_key,
            tmp_in,
            tmp_out,
            span,
            tables[index - 2].groups[group],
            int(before.group_bounds[group]),
            child,
        )
        if index < plan.n_levels:  # its row of its own group's table, to the sub-super-piles
            level = plan.levels[index - 1]
            scatter = (tables[index - 1].rows[span], 0, level.fanout, level.seed)
        else:  # the last level: its counts per pile of its super-pile, from the plan
            counts, lo = plan.last_counts(span)
            scatter = (compact(counts), lo, plan.n_piles, plan.last_seed)
        graph[key] = stages.task(f"scatter-{index}-{span}", _scatter_spans, pieces_key, *reads, *scatter, once=True)
    barrier = f"{name}-pieces-{index}"
    graph[barrier] = (_combine, fmt_key, keys)
    return barrier


def _merge_stage(
    stages: _Stages, fmt: Format[Any], tmp: Location, dst: Location, merge_nbytes: int, pieces_key: str
) -> tuple[dict[Any, Any], str]:
    """The merge tasks (one per group of whole piles, reading the pieces in ``tmp``), their seams, and the key that
    completes them."""
    graph, name, fmt_key, done, plan = stages.graph, stages.name, stages.fmt_key, stages.done, stages.plan
    alignment = fmt.write_alignment()
    merge_keys = []
    seams: dict[int, list[Any]] = {}
    offsets = plan.pile_offsets
    for index, (start, stop) in enumerate(fmt.merge_runs(plan.pile_sizes, fmt.row_nbytes, merge_nbytes)):
        group = MergeGroup(start, int(offsets[start]), int(offsets[stop]))
        if group.row_stop == group.row_start:
            continue
        key = (f"{name}-merge", index)
        # The columns of the plan that the task carries, each in the smallest type that holds it.
        first_block, counts, read_starts = plan.merge_columns(start, stop)
        graph[key] = stages.task(
            f"merge-{index}",
            _merge,
            fmt_key,
            tmp,
            dst,
            group,
            first_block,
            compact(counts),
            compact(read_starts),
            plan.seed,
            plan.n_rows,
            pieces_key,
        )
        merge_keys.append(key)
        a, b = aligned(group.row_start, group.row_stop, plan.n_rows, alignment)
        if a > group.row_start:
            seams.setdefault(group.row_start // alignment, []).append(key)
        if group.row_stop > b:
            seams.setdefault(b // alignment, []).append(key)
    seam_keys = []
    for chunk, sources in sorted(seams.items()):
        key = (f"{name}-seam", chunk)
        graph[key] = (
            None
            if f"seam-{chunk}" in done
            else stages.task(f"seam-{chunk}", _seam, fmt_key, dst, chunk, pieces_key, *sources)
        )
        seam_keys.append(key)
    own_seams: dict[Any, list[int]] = {}
    for chunk, sources in seams.items():
        for source in sources:
            own_seams.setdefault(source, []).append(chunk)
    for key in merge_keys:
        if f"merge-{key[1]}" in done and all(f"seam-{chunk}" in done for chunk in own_seams.get(key, ())):
            graph[key] = {}  # written, and so are the chunks it shares with its neighbours
    # The last task waits for a merge through its seams, if any: its fragments are freed once they are written.
    seamed = own_seams.keys()
    done_key = f"{name}-done"
    graph[done_key] = (_done, *(key for key in merge_keys if key not in seamed), *seam_keys)
    return graph, done_key
