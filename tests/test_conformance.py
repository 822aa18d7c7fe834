"""The Format contract, checked the same way for every kind of data.

Each case writes a small real source (row ``i`` holds id ``i`` and values that
are functions of it), builds the format the public shuffle would build, and
knows how to read ids out of the format's rows and out of a finished
destination. The contract tests never look at the kind of data otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xarray as xr
import zarr
from conftest import make_zarr_source

from daskshuffle import shuffle_dataframe, shuffle_lines, shuffle_parquet, shuffle_xarray, shuffle_zarr
from daskshuffle.formats import CollectionSource, Format
from daskshuffle.pilestore import ParquetWriting
from daskshuffle.plan._plan import make_plan
from daskshuffle.shuffle._collections import array_inputs, describe_partitions
from daskshuffle.sources import open_text_sources, open_zarr_sources
from daskshuffle.sources._dataframe import open_dataframe_source
from daskshuffle.sources._parquet import open_parquet_sources
from daskshuffle.sources._text import TextFormat
from daskshuffle.sources._xarray import open_xarray_source
from daskshuffle.storage._location import Location

N_ROWS = 500


@dataclass
class Case:
    """One kind of data: how to build its format and shuffle, and how to read ids back."""

    make_format: Callable[[], Format[Any]]
    shuffle: Callable[[Path, int], None]  # (dst, seed)
    ids: Callable[[Any], np.ndarray]  # rows -> ids, checking the other values stay aligned
    output_ids: Callable[[Path], np.ndarray]  # a destination -> ids in stored order


def _zarr_ids(rows: dict) -> np.ndarray:
    assert np.array_equal(rows["x"][:, 0], rows["id"].astype(np.float32))
    assert np.array_equal(rows["y"], (rows["id"] % 7).astype(np.int16))
    return rows["id"]


def _zarr_output(dst: Path) -> np.ndarray:
    group = zarr.open_group(str(dst), mode="r")
    return _zarr_ids({name: group[name][...] for name in ("id", "x", "y")})


def _table_ids(rows: pa.Table) -> np.ndarray:
    ids = rows.column("id").to_numpy()
    assert rows.column("name").to_pylist() == [f"row {i}" if i % 9 else None for i in ids]
    assert np.array_equal(rows.column("x").to_numpy(), ids * 0.5)
    return ids


def _frame() -> pd.DataFrame:
    ids = np.arange(N_ROWS)
    names = pd.array([f"row {i}" if i % 9 else None for i in ids], dtype="string")
    return pd.DataFrame({"id": ids, "x": ids * 0.5, "name": names})


def _xarray_ids(rows: dict) -> np.ndarray:
    assert np.allclose(rows["t"][:, 1], rows["id"] + 1)
    return rows["id"]


def _dataset() -> xr.Dataset:
    ids = np.arange(N_ROWS)
    t = np.stack([ids, ids + 1.0])  # (level, sample): ``sample`` is not the first axis
    return xr.Dataset({"t": (("level", "sample"), t)}, coords={"id": ("sample", ids)}).chunk({"sample": 60})


def _line_ids(rows: pa.LargeBinaryArray) -> np.ndarray:
    lines = [line.decode() for line in rows.to_pylist()]
    ids = np.array([int(line.split(",")[0]) for line in lines], dtype=np.int64)
    assert lines == [f"{i},{i * 3}\n" for i in ids]
    return ids


def make_case(kind: str, root: Path) -> Case:
    block = 2_000
    if kind == "zarr":
        src = make_zarr_source(root / "raw.zarr", N_ROWS, chunk_rows=37)
        return Case(
            lambda: open_zarr_sources(src, block_nbytes=block, chunk_rows=23),
            lambda dst, seed: shuffle_zarr(src, dst, n_piles=6, seed=seed, block_memory=block, chunk_rows=23),
            _zarr_ids,
            _zarr_output,
        )
    if kind == "parquet":
        table = pa.Table.from_pandas(_frame(), preserve_index=False)
        paths = [str(root / "a.parquet"), str(root / "b.parquet")]
        pq.write_table(table.slice(0, 180), paths[0], row_group_size=30)
        pq.write_table(table.slice(180), paths[1], row_group_size=45)
        return Case(
            lambda: open_parquet_sources(paths, columns=None, block_nbytes=block, writing=ParquetWriting()),
            lambda dst, seed: shuffle_parquet(paths, dst, n_piles=6, seed=seed, block_memory=block),
            _table_ids,
            lambda dst: _table_ids(pq.read_table(dst)),
        )
    if kind == "dataframe":
        import dask.dataframe as dd
        from dask.dataframe.utils import make_meta

        frame = dd.from_pandas(_frame(), npartitions=7, sort=False)
        spool = root / "spool"
        spool.mkdir()
        return Case(
            lambda: open_dataframe_source(
                frame,
                index=None,
                block_nbytes=block,
                writing=ParquetWriting(),
                spool=Location.of(spool),
                describe_partitions=describe_partitions,
                meta=make_meta(frame),
            ),
            lambda dst, seed: shuffle_dataframe(frame, dst, n_piles=6, seed=seed),
            _table_ids,
            lambda dst: _table_ids(pq.read_table(dst)),
        )
    if kind == "xarray":
        data = _dataset()
        return Case(
            lambda: open_xarray_source(
                data, "sample", block_nbytes=block, chunk_rows=23, storage_options=None, block_inputs=array_inputs
            ),
            lambda dst, seed: shuffle_xarray(data, dst, "sample", n_piles=6, seed=seed, block_memory=block),
            _xarray_ids,
            lambda dst: _xarray_ids(
                {"id": zarr.open_group(str(dst))["id"][...], "t": zarr.open_group(str(dst))["t"][...]}
            ),
        )
    if kind == "text":
        path = root / "lines.csv"
        path.write_text("".join(f"{i},{i * 3}\n" for i in range(N_ROWS)))

        def text_format() -> TextFormat:
            source = open_text_sources([str(path)], header=False, block_nbytes=700)
            return TextFormat(source, [source.count_block(index) for index in range(source.n_blocks)])

        return Case(
            text_format,
            lambda dst, seed: shuffle_lines(str(path), dst, n_piles=6, seed=seed, block_memory=700),
            _line_ids,
            lambda dst: _line_ids(pa.array(dst.read_bytes().splitlines(keepends=True), pa.large_binary())),
        )
    raise AssertionError(kind)


KINDS = ["zarr", "parquet", "dataframe", "xarray", "text"]


def read_blocks(fmt: Format[Any]) -> list[Any]:
    """Every block's rows, as pass 1 gets them (from the source's own tasks if it is a dask collection)."""
    if not isinstance(fmt, CollectionSource):
        return [fmt.read_block(block) for block in range(len(fmt.block_lengths))]
    graph, keys = fmt.block_inputs()
    values = dask.get(dict(graph), list(keys)) if keys else []
    return [fmt.rows_of_block(block, value) for block, value in enumerate(values)]


@pytest.fixture(params=KINDS)
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Case:
    return make_case(request.param, tmp_path)


class TestFormatContract:
    def test_blocks_are_the_source_in_order(self, case: Case) -> None:
        fmt = case.make_format()
        lengths = fmt.block_lengths
        assert len(lengths) > 1, "the case has several blocks"
        blocks = read_blocks(fmt)
        assert [len(case.ids(rows)) for rows in blocks] == list(lengths)
        assert sum(lengths) == N_ROWS and fmt.row_nbytes > 0
        assert np.array_equal(np.concatenate([case.ids(rows) for rows in blocks]), np.arange(N_ROWS))

    def test_take_concat_and_slice(self, case: Case) -> None:
        fmt = case.make_format()
        rows = fmt.concat(read_blocks(fmt))
        ids = case.ids(rows)
        order = np.random.default_rng(0).permutation(len(ids))
        assert np.array_equal(case.ids(fmt.take(rows, order)), ids[order])
        # The graph takes permutations only (of a block, or of a merge group's pieces); the text
        # format relies on it to notice a source that changed since its lines were counted.
        assert np.array_equal(case.ids(fmt.take(fmt.slice(rows, 0, 0), order[:0])), ids[:0])
        assert np.array_equal(case.ids(fmt.slice(rows, 17, 230)), ids[17:230])
        assert len(case.ids(fmt.slice(rows, 5, 5))) == 0
        parts = [fmt.slice(rows, 0, 100), fmt.slice(rows, 100, 101), fmt.slice(rows, 101, N_ROWS)]
        assert np.array_equal(case.ids(fmt.concat(parts)), ids)

    def test_pieces_round_trip(self, case: Case, tmp_path: Path) -> None:
        fmt = case.make_format()
        plan = make_plan(fmt.block_lengths, 5, seed=1)
        tmp = Location.of(tmp_path / "pieces")
        fmt.prepare_pieces(tmp)
        written = {}
        for block, rows in enumerate(read_blocks(fmt)):
            order = np.random.default_rng(block).permutation(fmt.block_lengths[block])
            ordered = fmt.take(rows, order)
            written[block] = case.ids(ordered)
            fmt.write_pieces(tmp, block, ordered, plan.piece_offsets[block])
        reads = []
        for block, ids in written.items():
            offsets = plan.piece_offsets[block]
            for pile in range(plan.n_piles):
                start, stop = int(offsets[pile]), int(offsets[pile + 1])
                assert np.array_equal(case.ids(fmt.read_pieces(tmp, block, start, stop)), ids[start:stop])
            assert np.array_equal(
                case.ids(fmt.read_pieces(tmp, block, int(offsets[1]), int(offsets[4]))), ids[offsets[1] : offsets[4]]
            )
            if offsets[2] > offsets[1]:
                reads.append((block, int(offsets[1]), int(offsets[2])))
        gathered = np.concatenate([written[block][start:stop] for block, start, stop in reads])
        order = np.random.default_rng(9).permutation(len(gathered))
        assert np.array_equal(case.ids(fmt.gather_pieces(tmp, reads, order)), gathered[order])

    def test_shuffle_is_a_seeded_permutation_with_aligned_values(self, case: Case, tmp_path: Path) -> None:
        case.shuffle(tmp_path / "a", 5)
        case.shuffle(tmp_path / "b", 5)
        case.shuffle(tmp_path / "c", 6)
        a, b, c = (case.output_ids(tmp_path / name) for name in "abc")
        assert np.array_equal(np.sort(a), np.arange(N_ROWS)), "every row exactly once"
        assert np.array_equal(a, b), "same seed, same output"
        assert not np.array_equal(a, c), "another seed, another order"
        assert not np.array_equal(a, np.arange(N_ROWS))
