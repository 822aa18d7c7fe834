"""Every pile reader reads what zarr and pyarrow read, over generated dtypes, shapes, chunkings and codecs.

The readers skip zarr and pyarrow's dataset layer for speed (their own chunk and
page paths); these properties pin them to the libraries a user would read the
same store with.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
import zarr
from hypothesis import HealthCheck, given, settings, strategies as st
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

import daskshuffle as ds
from daskshuffle.readers import open_pile_reader

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),  # fixed-length bytes in v3
]

# Each example writes a store: few examples, each a different corner.
EXAMPLES = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

DTYPES = ["bool", "i1", "u2", "<i4", ">i8", "<f2", ">f4", "<f8", "c8", "M8[s]", "m8[ms]"]
ROW_SHAPES = [(), (3,), (2, 2)]
COMPRESSORS: list[Any] = [
    "auto",
    None,
    ZstdCodec(level=1),
    GzipCodec(level=1),
    BloscCodec(cname="lz4", clevel=1, shuffle="shuffle"),
]


def _values(rng: np.random.Generator, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    if dtype.kind == "b":
        return rng.random(shape) > 0.5
    if dtype.kind in "mM":
        return rng.integers(0, 10**9, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.random(shape) + 1j * rng.random(shape)).astype(dtype)
    if dtype.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype.newbyteorder("="), endpoint=True).astype(dtype)


@st.composite
def zarr_stores(draw: st.DrawFn) -> dict[str, Any]:
    n_variables = draw(st.integers(1, 3))
    return {
        "variables": [
            (f"v{index}", np.dtype(draw(st.sampled_from(DTYPES))), draw(st.sampled_from(ROW_SHAPES)))
            for index in range(n_variables)
        ],
        "n_rows": draw(st.integers(1, 3_000)),
        "source_chunk": draw(st.integers(7, 1_000)),
        "n_piles": draw(st.integers(1, 9)),
        "chunk_rows": draw(st.one_of(st.none(), st.integers(1, 700))),
        "compressors": draw(st.sampled_from(range(len(COMPRESSORS)))),
        "seed": draw(st.integers(0, 2**32)),
    }


@EXAMPLES
@given(spec=zarr_stores(), data=st.data())
def test_the_zarr_reader_reads_what_zarr_reads(tmp_path_factory: pytest.TempPathFactory, spec: dict, data: Any) -> None:
    tmp = tmp_path_factory.mktemp("zarr")
    rng = np.random.default_rng(spec["seed"])
    n_rows = spec["n_rows"]
    source = zarr.open_group(tmp / "raw.zarr", mode="w", zarr_format=3)
    for name, dtype, shape in spec["variables"]:
        chunks = (spec["source_chunk"], *shape)
        source.create_array(name, data=_values(rng, dtype, (n_rows, *shape)), chunks=chunks)
    store = str(tmp / "piles.zarr")
    ds.shuffle_zarr(
        tmp / "raw.zarr",
        store,
        n_piles=min(spec["n_piles"], n_rows),
        seed=spec["seed"],
        chunk_rows=spec["chunk_rows"],
        compressors=COMPRESSORS[spec["compressors"]],
    )
    group = zarr.open_group(store, mode="r")
    with open_pile_reader(store) as reader:
        offsets = reader.pile_offsets
        pile = data.draw(st.integers(0, len(offsets) - 2), label="pile")
        start = data.draw(st.integers(0, n_rows - 1), label="start")
        stop = data.draw(st.integers(start, n_rows), label="stop")
        reads = {"pile": (int(offsets[pile]), int(offsets[pile + 1])), "rows": (start, stop), "all": (0, n_rows)}
        for what, (first, last) in reads.items():
            rows = reader.read_pile(pile) if what == "pile" else reader.read_rows(first, last)
            for name, _, _ in spec["variables"]:
                expected = group[name][first:last]
                assert rows[name].dtype.newbyteorder("=") == expected.dtype.newbyteorder("="), name
                np.testing.assert_array_equal(rows[name], expected, err_msg=f"{what} {name} {first}:{last}")


ARROW_TYPES = {
    "int8": (pa.int8(), lambda rng, n: rng.integers(-100, 100, n)),
    "int64": (pa.int64(), lambda rng, n: rng.integers(-(2**62), 2**62, n)),
    "uint32": (pa.uint32(), lambda rng, n: rng.integers(0, 2**32 - 1, n)),
    "float32": (pa.float32(), lambda rng, n: rng.standard_normal(n)),
    "float64": (pa.float64(), lambda rng, n: rng.standard_normal(n)),
    "bool": (pa.bool_(), lambda rng, n: rng.random(n) > 0.5),
    "string": (pa.string(), lambda rng, n: [f"s{value}" * int(value % 4) for value in rng.integers(0, 50, n)]),
    "binary": (
        pa.binary(),
        lambda rng, n: [bytes(rng.integers(0, 255, int(k), dtype=np.uint8)) for k in rng.integers(0, 9, n)],
    ),
    "timestamp": (pa.timestamp("ms", tz="UTC"), lambda rng, n: rng.integers(0, 10**12, n)),
    "embedding": (pa.list_(pa.float32(), 4), lambda rng, n: list(rng.standard_normal((n, 4)).astype(np.float32))),
    "tokens": (pa.list_(pa.int32()), lambda rng, n: [list(rng.integers(0, 9, int(k))) for k in rng.integers(0, 5, n)]),
    "category": (pa.dictionary(pa.int8(), pa.string()), None),
}


def _column(rng: np.random.Generator, name: str, n_rows: int, null_fraction: float) -> pa.Array:
    kind, make = ARROW_TYPES[name]
    if make is None:  # a dictionary of a few labels
        return pa.array([f"label{value}" for value in rng.integers(0, 4, n_rows)]).dictionary_encode()
    mask = rng.random(n_rows) < null_fraction if null_fraction else None
    return pa.array(make(rng, n_rows), type=kind, mask=mask)


@st.composite
def parquet_stores(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "columns": draw(st.lists(st.sampled_from(sorted(ARROW_TYPES)), min_size=1, max_size=4, unique=True)),
        "n_rows": draw(st.integers(1, 4_000)),
        "n_files": draw(st.integers(1, 3)),
        "null_fraction": draw(st.sampled_from([0.0, 0.2])),
        "n_piles": draw(st.integers(1, 9)),
        "compression": draw(st.sampled_from(["auto", "none", "snappy", "zstd", "gzip"])),
        "row_group_size": draw(st.one_of(st.none(), st.integers(50, 2_000))),
        "seed": draw(st.integers(0, 2**32)),
    }


@EXAMPLES
@given(spec=parquet_stores(), data=st.data())
def test_the_parquet_reader_reads_what_pyarrow_reads(
    tmp_path_factory: pytest.TempPathFactory, spec: dict, data: Any
) -> None:
    tmp = tmp_path_factory.mktemp("parquet")
    rng = np.random.default_rng(spec["seed"])
    n_rows = spec["n_rows"]
    table = pa.table({name: _column(rng, name, n_rows, spec["null_fraction"]) for name in spec["columns"]})
    (tmp / "raw").mkdir()
    cuts = np.linspace(0, n_rows, spec["n_files"] + 1).astype(int)
    for index, (first, last) in enumerate(itertools.pairwise(cuts)):
        pq.write_table(table.slice(first, last - first), tmp / "raw" / f"part-{index}.parquet")
    store = str(tmp / "piles.parquet")
    ds.shuffle_parquet(
        tmp / "raw",
        store,
        n_piles=min(spec["n_piles"], n_rows),
        seed=spec["seed"],
        compression=spec["compression"],
        row_group_size=spec["row_group_size"],
    )
    expected = pads.dataset(store, format="parquet").to_table()
    assert expected.num_rows == n_rows
    start = data.draw(st.integers(0, n_rows - 1), label="start")
    stop = data.draw(st.integers(start, n_rows), label="stop")
    with open_pile_reader(store, batch_format="arrow") as reader:
        for first, last in [(start, stop), (0, n_rows)]:
            rows = reader.read_rows(first, last)
            for name in spec["columns"]:
                got, want = rows.column(name).combine_chunks(), expected.column(name).slice(first, last - first)
                assert got.to_pylist() == want.combine_chunks().to_pylist(), f"{name} {first}:{last}"
    # The shuffle keeps the rows: the store holds the source's rows, in some order.
    key = spec["columns"][0]
    assert sorted(map(repr, expected.column(key).to_pylist())) == sorted(map(repr, table.column(key).to_pylist()))
