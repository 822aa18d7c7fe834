"""The Zarr pile store's layout (chunk rows and codec per variable, crc32c) and its reader, on real stores."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import fsspec
import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import given, settings, strategies as st
from simulate import unit_stream
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec

import daskshuffle as ds
from daskshuffle import CorruptPileStoreError, PileLoader
from daskshuffle.loader._reads import ReadingNote
from daskshuffle.orders import Piles
from daskshuffle.pilestore import FORMAT_VERSION, parse_metadata_attribute
from daskshuffle.pilestore._layout import Layout, choose_chunk_rows, choose_codec
from daskshuffle.plan import fingerprint
from daskshuffle.readers import open_pile_reader
from daskshuffle.readers._zarr_reader import ZarrPileReader

N_ROWS = 20_000
N_PILES = 4


def make_mixed_source(path: Path, n_rows: int = N_ROWS) -> str:
    """``x`` random floats (incompressible), ``tokens`` int32 ids, ``field`` smooth floats, ``id`` int64."""
    rng = np.random.default_rng(0)
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array(
        "x",
        data=rng.standard_normal((n_rows, 64), dtype=np.float32),
        chunks=(4_000, 64),
        dimension_names=("row", "feature"),
    )
    tokens = (rng.zipf(1.3, size=(n_rows, 8)) % 5_000).astype(np.int32)
    group.create_array("tokens", data=tokens, chunks=(4_000, 8), dimension_names=("row", "token"))
    field = np.sin(np.linspace(0, 20, n_rows * 8, dtype=np.float32)).reshape(n_rows, 8).round(2)
    group.create_array("field", data=field, chunks=(4_000, 8), dimension_names=("row", "point"))
    group.create_array("id", data=np.arange(n_rows, dtype=np.int64), chunks=(4_000,), dimension_names=("row",))
    return str(path)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("layout")
    src = make_mixed_source(root / "raw.zarr")
    ds.shuffle_zarr(src, root / "piles.zarr", n_piles=N_PILES, seed=1)
    return str(root / "piles.zarr")


@pytest.fixture
def damaged(mixed: str, tmp_path: Path) -> str:
    return str(shutil.copytree(mixed, tmp_path / "copy.zarr"))


def zarr_rows(store: str, start: int, stop: int, storage_options: dict | None = None) -> dict[str, np.ndarray]:
    group = zarr.open_group(store, mode="r", storage_options=storage_options)
    metadata = parse_metadata_attribute(group.attrs["daskshuffle"])
    assert metadata is not None
    return {name: group[name][start:stop] for name in metadata["variables"]}


def assert_same(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert set(got) == set(expected)
    for name, values in expected.items():
        assert got[name].dtype == values.dtype and got[name].shape == values.shape, name
        np.testing.assert_array_equal(got[name], values, err_msg=name)


# -- the choice ------------------------------------------------------------------
def test_chunk_rows_per_variable_are_power_of_two_multiples_of_the_widest() -> None:
    rows = choose_chunk_rows({"x": 256, "id": 8, "y": 2}, pile_rows=16_384)
    assert rows["x"] == 1_024  # 256 KiB, a sixteenth of a pile
    assert rows["id"] == 8_192 and rows["y"] == 8_192  # at most 8x the widest
    for value in rows.values():
        ratio = value // rows["x"]
        assert value % rows["x"] == 0 and ratio & (ratio - 1) == 0
    layout = Layout.from_dict(
        Layout({}).to_dict() | {"variables": {n: {"chunk_rows": r, "codec": "none"} for n, r in rows.items()}}
    )
    assert all(layout.alignment() % value == 0 for value in rows.values())
    # Large piles: chunks stop growing at 4 MiB; materialized (one sequential read): 4 MiB of the widest.
    assert choose_chunk_rows({"x": 256, "id": 8}, pile_rows=10**9)["x"] == 16_384
    assert choose_chunk_rows({"x": 256, "id": 8}, pile_rows=None) == {"x": 16_384, "id": 16_384}
    assert choose_chunk_rows({"x": 256, "id": 8}, pile_rows=100, chunk_rows=7) == {"x": 7, "id": 7}


def test_chunks_on_object_storage_are_half_a_pile_and_at_least_a_mib() -> None:
    rows = choose_chunk_rows({"x": 256, "id": 8}, pile_rows=16_384, storage="object")
    assert rows == {"x": 8_192, "id": 32_768}  # 2 MiB of x; id up to two piles
    assert choose_chunk_rows({"x": 256, "id": 8}, pile_rows=1_000, storage="object")["x"] == 4_096  # 1 MiB at least
    assert choose_chunk_rows({"x": 256, "id": 8}, pile_rows=10**9, storage="object")["x"] == 16_384  # 4 MiB at most
    assert choose_chunk_rows({"x": 256, "id": 8}, pile_rows=None, storage="object")["x"] == 16_384


def test_a_shuffle_into_object_storage_writes_the_layout_for_it(tmp_path: Path) -> None:
    """The same rows in the same piles, in chunks of half a pile rather than a sixteenth.

    Read by piles, the same batches; read in units of whole chunks (the default), each its planned batches.
    """
    src = make_mixed_source(tmp_path / "raw.zarr", n_rows=40_000)
    local = ds.shuffle_zarr(src, tmp_path / "piles.zarr", n_piles=2, seed=3)
    remote = ds.shuffle_zarr(src, f"memory://object-layout-{tmp_path.name}/piles.zarr", n_piles=2, seed=3)
    pile_rows = 40_000 // 2
    layouts = [Layout.from_dict(open_pile_reader(store.path).metadata["layout"]) for store in (local, remote)]
    assert layouts[0].variables["x"].chunk_rows == 1_250  # a sixteenth of a pile
    assert layouts[1].variables["x"].chunk_rows == pile_rows // 2 >= 2**20 // 256
    assert len(fsspec.filesystem("memory").find(f"object-layout-{tmp_path.name}/piles.zarr/x/c")) == 4
    assert_same(zarr_rows(remote.path, 0, 40_000), zarr_rows(local.path, 0, 40_000))
    ids = zarr_rows(local.path, 0, 40_000)["id"]
    # Read in units of each store's own chunks: the same rows, each once.
    batches = [[b["id"] for b in PileLoader(store.path, batch_size=1_000, seed=5)] for store in (local, remote)]
    assert len(batches[0]) == len(batches[1]) == 40
    assert np.array_equal(np.sort(np.concatenate(batches[0])), np.sort(np.concatenate(batches[1])))
    # By default, units of whole chunks: each store's batches are the planned ones for its own chunks.
    for store, layout in zip((local, remote), layouts, strict=True):
        with PileLoader(store.path, batch_size=1_000, seed=5) as loader:
            unit_rows, group_rows = loader.settings.unit_rows, loader.settings.group_rows
            got = np.concatenate([batch["id"] for batch in loader])
        assert unit_rows is not None and group_rows is not None
        assert unit_rows % layout.variables["x"].chunk_rows == 0, "whole chunks"
        np.testing.assert_array_equal(got, ids[unit_stream(40_000, unit_rows, group_rows, 5, 0)])


def test_codec_follows_the_data() -> None:
    rng = np.random.default_rng(0)
    assert choose_codec(rng.standard_normal(100_000).astype(np.float32))[0] == "none"
    assert choose_codec((rng.zipf(1.3, 100_000) % 5_000).astype(np.int32))[0] == "blosc-lz4-shuffle"
    assert choose_codec(None) == ("none", None)


def test_store_records_and_uses_the_layout(mixed: str) -> None:
    group = zarr.open_group(mixed, mode="r")
    metadata = group.attrs["daskshuffle"]
    assert metadata["format_version"] == FORMAT_VERSION == 3
    layout = Layout.from_dict(metadata["layout"])
    assert metadata["layout"]["every_chunk_written"] is True
    assert {name: v.codec for name, v in layout.variables.items()} == {
        "x": "none",
        "tokens": "blosc-lz4-shuffle",
        "field": "blosc-lz4-shuffle",
        "id": "blosc-lz4-shuffle",
    }
    for name, chosen in layout.variables.items():
        array = group[name]
        assert array.chunks[0] == chosen.chunk_rows
        codecs = array.compressors
        assert isinstance(codecs[-1], Crc32cCodec), name
        assert [type(c) for c in codecs[:-1]] == ([] if chosen.codec == "none" else [BloscCodec]), name
    # Chunks of x are 256 KiB, a narrow id gets more rows per chunk.
    assert group["x"].chunks[0] == 1_024 and group["id"].chunks[0] == 8_192


@pytest.mark.parametrize(
    ("compressors", "expected"), [(ZstdCodec(level=3), [ZstdCodec, Crc32cCodec]), (None, [Crc32cCodec])]
)
def test_a_users_compressors_are_used(tmp_path: Path, compressors, expected) -> None:
    src = make_mixed_source(tmp_path / "raw.zarr", 500)
    ds.shuffle_zarr(src, tmp_path / "piles.zarr", n_piles=2, seed=0, compressors=compressors)
    group = zarr.open_group(tmp_path / "piles.zarr", mode="r")
    for name in ("x", "tokens"):
        assert [type(codec) for codec in group[name].compressors] == expected
    assert group.attrs["daskshuffle"]["layout"]["variables"]["x"]["codec"] == "user"
    assert_same(
        ZarrPileReader(tmp_path / "piles.zarr").read_rows(0, 500), zarr_rows(str(tmp_path / "piles.zarr"), 0, 500)
    )


@pytest.mark.parametrize(
    "compressors", [ZstdCodec(level=1), GzipCodec(level=1), BloscCodec(cname="zstd", clevel=1, shuffle="shuffle")]
)
def test_a_users_compressors_are_read_whole_chunk_by_whole_chunk(tmp_path: Path, compressors) -> None:
    # Chunks of 256 rows in piles of ~2,500: most chunks lie wholly inside a pile, read straight into its rows.
    src = make_mixed_source(tmp_path / "raw.zarr", 10_000)
    store = str(tmp_path / "piles.zarr")
    ds.shuffle_zarr(src, store, n_piles=N_PILES, seed=0, compressors=compressors, chunk_rows=256)
    with ZarrPileReader(store) as reader:
        assert all(chunks.compressor is not None for chunks in reader._chunks.values())
        offsets = reader.pile_offsets
        for pile in range(N_PILES):
            assert_same(reader.read_pile(pile), zarr_rows(store, int(offsets[pile]), int(offsets[pile + 1])))


def test_every_chunk_is_written_even_all_fill_value(tmp_path: Path) -> None:
    group = zarr.open_group(tmp_path / "raw.zarr", mode="w", zarr_format=3)
    group.create_array("x", data=np.zeros((400, 4), dtype=np.float32), chunks=(100, 4))
    ds.shuffle_zarr(tmp_path / "raw.zarr", tmp_path / "piles.zarr", n_piles=2, seed=0, chunk_rows=50)
    assert sorted(p.name for p in (tmp_path / "piles.zarr" / "x" / "c").iterdir()) == sorted(map(str, range(8)))


def test_plain_zarr_and_xarray_read_the_same_rows(mixed: str) -> None:
    dataset = xr.open_zarr(mixed)
    group = zarr.open_group(mixed, mode="r")
    for name in ("x", "tokens", "field", "id"):
        np.testing.assert_array_equal(dataset[name].values, group[name][...])


# -- the reader --------------------------------------------------------------------
def test_reader_reads_every_pile_as_zarr_does(mixed: str) -> None:
    with ZarrPileReader(mixed) as reader:
        offsets = reader.pile_offsets
        for pile in range(N_PILES):
            assert_same(reader.read_pile(pile), zarr_rows(mixed, int(offsets[pile]), int(offsets[pile + 1])))
        assert set(reader._chunks) == {"x", "tokens", "field", "id"}, "every variable is read without zarr"


@settings(max_examples=40)
@given(st.integers(0, N_ROWS), st.integers(0, N_ROWS))
def test_reader_reads_any_rows_as_zarr_does(mixed: str, a: int, b: int) -> None:
    start, stop = min(a, b), max(a, b)
    with ZarrPileReader(mixed, variables=["x", "id"]) as reader:
        got = reader.read_rows(start, stop)
    expected = zarr_rows(mixed, start, stop)
    assert_same(got, {name: expected[name] for name in ("x", "id")})


def test_reader_reads_into_recycled_arrays(mixed: str) -> None:
    with ZarrPileReader(mixed) as reader:
        offsets = reader.pile_offsets
        first = reader.read_pile(0)
        memory = {name: values.base for name, values in first.items()}
        reader.recycle(first)
        second = reader.read_pile(1)
        assert all(second[name].base is memory[name] for name in second), "the arrays are read into again"
        assert_same(second, zarr_rows(mixed, int(offsets[1]), int(offsets[2])))
        third = reader.read_pile(2)  # nothing to recycle: new arrays
        assert not any(third[name].base is memory[name] for name in third)
        assert_same(third, zarr_rows(mixed, int(offsets[2]), int(offsets[3])))


def test_reader_on_memory_filesystem(mixed: str) -> None:
    fs = fsspec.filesystem("memory")
    url = "memory://layout-test/piles.zarr"
    fs.put(mixed, "/layout-test/piles.zarr", recursive=True)
    try:
        reader = open_pile_reader(url)
        assert isinstance(reader, ZarrPileReader) and not reader._files.local
        offsets = reader.pile_offsets
        for pile in range(N_PILES):
            assert_same(reader.read_pile(pile), zarr_rows(mixed, int(offsets[pile]), int(offsets[pile + 1])))
        assert_same(reader.read_rows(17, 2_222), zarr_rows(mixed, 17, 2_222))
        fs.rm("/layout-test/piles.zarr/x/c/1/0")
        with pytest.raises(CorruptPileStoreError, match=r"c/1/0.*variable 'x'.*no such file"):
            reader.read_rows(0, N_ROWS)
        reader.close()
    finally:
        fs.rm("/layout-test", recursive=True)


def test_reader_of_an_xarray_pile_store(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    data = xr.Dataset(
        {"x": (("sample", "f"), rng.standard_normal((900, 6)).astype(np.float32)), "y": ("sample", np.arange(900))},
        coords={"sample": np.arange(900) * 10},
    )
    ds.shuffle_xarray(data, tmp_path / "piles.zarr", "sample", n_piles=4, seed=0)
    with ZarrPileReader(tmp_path / "piles.zarr") as reader:
        assert set(reader._chunks) == set(reader.arrays)
        offsets = reader.pile_offsets
        for pile in range(4):
            assert_same(
                reader.read_pile(pile),
                zarr_rows(str(tmp_path / "piles.zarr"), int(offsets[pile]), int(offsets[pile + 1])),
            )
    stored = xr.open_zarr(tmp_path / "piles.zarr")
    np.testing.assert_array_equal(np.sort(stored["y"].values), np.arange(900))
    np.testing.assert_array_equal(stored["sample"].values, stored["y"].values * 10)


def test_reader_pickles_and_reads_after(mixed: str) -> None:
    reader = ZarrPileReader(mixed)
    reader.read_pile(0)
    copy = pickle.loads(pickle.dumps(reader))
    assert_same(copy.read_pile(1), reader.read_pile(1))
    reader.close()
    copy.close()


def test_reader_is_safe_across_threads(mixed: str) -> None:
    reader = ZarrPileReader(mixed)
    offsets = reader.pile_offsets
    expected = [zarr_rows(mixed, int(offsets[p]), int(offsets[p + 1])) for p in range(N_PILES)]
    errors: list[BaseException] = []

    def read(pile: int) -> None:
        try:
            for _ in range(5):
                assert_same(reader.read_pile(pile), expected[pile])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=read, args=(p,)) for p in range(N_PILES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reader.close()
    assert errors == []


# -- damage ----------------------------------------------------------------------
def chunk_file(store: str, name: str, index: int) -> Path:
    group = zarr.open_group(store, mode="r")
    return (
        Path(store) / name / "c" / str(index) / "0" if group[name].ndim == 2 else Path(store) / name / "c" / str(index)
    )


def pile_of(store: str, row: int) -> int:
    offsets = np.asarray(zarr.open_group(store, mode="r").attrs["daskshuffle"]["pile_offsets"])
    return int(np.searchsorted(offsets, row, side="right") - 1)


def delete(path: Path) -> None:
    path.unlink()


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))


def extend(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\0")


@pytest.mark.parametrize("damage", [delete, truncate, flip, extend])
@pytest.mark.parametrize("name", ["x", "tokens"])
def test_damage_is_an_error_naming_pile_variable_and_file(damaged: str, damage, name: str) -> None:
    group = zarr.open_group(damaged, mode="r")
    chunk_rows = group[name].chunks[0]
    path = chunk_file(damaged, name, 1)
    damage(path)
    pile = pile_of(damaged, chunk_rows)  # the pile of the chunk's first row
    with (
        ZarrPileReader(damaged) as reader,
        pytest.raises(CorruptPileStoreError, match=rf"{path}.*variable '{name}' \(pile {pile}, "),
    ):
        reader.read_pile(pile)
    if damage is flip:  # plain zarr checks the crc32c too
        with pytest.raises(ValueError, match="checksum"):
            zarr.open_group(damaged, mode="r")[name][...]
    # The others are read, piles that do not touch the chunk are fine.
    with ZarrPileReader(damaged) as reader:
        offsets = reader.pile_offsets
        far = [p for p in range(N_PILES) if offsets[p + 1] <= chunk_rows or offsets[p] >= 2 * chunk_rows]
        for other in far:
            reader.read_pile(other)


def test_damage_through_the_loader_is_raised_in_the_consumer(damaged: str) -> None:
    flip(chunk_file(damaged, "x", 0))
    loader = PileLoader(damaged, batch_size=64, seed=0, order=Piles(budget="64KiB"))
    with pytest.raises(CorruptPileStoreError, match=r"variable 'x' \(.*rows 0:") as caught:
        for _ in loader:
            pass
    assert threading.current_thread() is threading.main_thread()
    notes = [note for note in caught.value.__notes__ if isinstance(note, ReadingNote)]
    assert len(notes) == 1 and "daskshuffle was reading group" in notes[0], "one note, however often it was raised"
    loader.close()
    assert not [t.name for t in threading.enumerate() if t.name.startswith("daskshuffle")]


# -- stores of the previous release ------------------------------------------------
def make_version_1_store(src: str, dst: Path) -> str:
    """A pile store as release 1 wrote it: zarr's default zstd, 1 chunk size, no layout, empty chunks skipped."""
    current = dst.with_suffix(".v2.zarr")
    ds.shuffle_zarr(src, current, n_piles=4, seed=2, chunk_rows=64)
    new = zarr.open_group(current, mode="r")
    metadata = dict(new.attrs["daskshuffle"])
    for later in ("layout", "run", "arrays", "seal"):  # what later versions record
        del metadata[later]
    # Release 1 fingerprinted its own metadata, of version 1, marked incomplete.
    metadata["format_version"] = 1
    metadata["fingerprint"] = fingerprint(
        {key: value for key, value in metadata.items() if key != "fingerprint"} | {"complete": False}
    )
    old = zarr.open_group(dst, mode="w", zarr_format=3, attributes={"daskshuffle": {**metadata, "complete": False}})
    for name in metadata["variables"]:
        values = new[name][...]
        array = old.create_array(name, shape=values.shape, chunks=(64, *values.shape[1:]), dtype=values.dtype)
        array[...] = values
    old.attrs["daskshuffle"] = {**metadata, "format_version": 1, "complete": True}
    return str(dst)


def test_a_version_1_store_is_refused(source: str, tmp_path: Path) -> None:
    store = make_version_1_store(source, tmp_path / "v1.zarr")
    with pytest.raises(
        ds.IncompletePileStoreError, match=r"format version 3. Got version 1 .* shuffle the source again"
    ):
        ZarrPileReader(store)
    with pytest.raises(ds.IncompletePileStoreError, match=r"format version 3. Got version 1"):
        PileLoader(store, batch_size=100, seed=0)


@pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")  # fixed-length bytes in v3
def test_reader_reads_every_dtype_as_zarr_does(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 1_500
    group = zarr.open_group(tmp_path / "raw.zarr", mode="w", zarr_format=3)
    group.create_array("flag", data=rng.random(n) > 0.5, chunks=(500,))
    group.create_array("time", data=np.datetime64("2020-01-01") + np.arange(n).astype("m8[s]"), chunks=(500,))
    group.create_array("pixel", data=rng.integers(0, 255, (n, 3)).astype(np.uint8), chunks=(500, 3))
    group.create_array("wave", data=(rng.random(n) + 1j * rng.random(n)).astype(np.complex64), chunks=(500,))
    group.create_array("half", data=rng.random((n, 2, 2)).astype(np.float16), chunks=(500, 2, 2))
    group.create_array("name", data=np.array([f"r{i}" for i in range(n)], dtype="S6"), chunks=(500,))
    ds.shuffle_zarr(tmp_path / "raw.zarr", tmp_path / "piles.zarr", n_piles=3, seed=0, chunk_rows=128)
    store = str(tmp_path / "piles.zarr")
    with ZarrPileReader(store) as reader:
        assert set(reader._chunks) == {"flag", "time", "pixel", "wave", "half", "name"}, "strings read and checked too"
        for start, stop in [(0, n), (5, 1_499), (128, 1_000)]:
            assert_same(reader.read_rows(start, stop), zarr_rows(store, start, stop))


@pytest.mark.slow
def test_without_the_crc32c_package_chunks_are_checked_with_google_crc32c(damaged: str, tmp_path: Path) -> None:
    """The ``fast-checksum`` extra left out: the same rows, and a flipped byte still an error naming the file."""
    path = chunk_file(damaged, "x", 1)
    code = (
        "import sys, numpy as np, zarr\n"
        "sys.modules['crc32c'] = None  # as if the fast-checksum extra were not installed\n"
        "from daskshuffle import CorruptPileStoreError\n"
        "from daskshuffle.formats import _crc32c\n"
        "from daskshuffle.readers._zarr_reader import ZarrPileReader\n"
        "assert _crc32c._released_crc32c is None\n"
        f"store = {damaged!r}\n"
        "group = zarr.open_group(store, mode='r')\n"
        "with ZarrPileReader(store) as reader:\n"
        "    rows = reader.read_rows(0, reader.n_rows)\n"
        "    assert all(np.array_equal(rows[name], group[name][...]) for name in rows)\n"
        f"    data = bytearray(open({str(path)!r}, 'rb').read()); data[len(data) // 2] ^= 0x40\n"
        f"    open({str(path)!r}, 'wb').write(bytes(data))\n"
        "    try:\n"
        "        reader.read_rows(0, reader.n_rows)\n"
        "    except CorruptPileStoreError as error:\n"
        "        print(error)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert str(path) in run.stdout and "crc32c does not match" in run.stdout


def _images(n: int, *, contrast: float, noise: float, spread: float, seed: int = 0) -> np.ndarray:
    """uint8 (n, 32, 32, 3) images: smooth gradients and waves of ``contrast`` around a brightness, plus pixel noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:32, 0:32] / 32
    a = rng.uniform(-1, 1, (n, 4, 1, 1))
    field = a[:, 0] * xx + a[:, 1] * yy + a[:, 2] * np.sin(2 * np.pi * (xx + yy + a[:, 3]))
    base = rng.normal(110, spread, (n, 1, 1, 1)) + contrast * field[..., None]
    return np.clip(base + rng.normal(0, noise, (n, 32, 32, 3)), 0, 255).astype(np.uint8)


def test_images_that_lz4_bitshuffle_shrinks_by_a_quarter_are_stored_compressed(tmp_path: Path) -> None:
    """blosc-lz4 with byte shuffle leaves such images as they are (no repeats); with bit shuffle it saves a third."""
    images = _images(2_000, contrast=12, noise=2, spread=8)
    noisy = _images(2_000, contrast=60, noise=6, spread=30, seed=1)
    group = zarr.open_group(tmp_path / "raw.zarr", mode="w")
    for name, values in (("image", images), ("noisy", noisy)):
        group.create_array(name, data=values, chunks=(500, 32, 32, 3))
    group.create_array("id", data=np.arange(2_000), chunks=(500,))
    store = tmp_path / "piles.zarr"
    ds.shuffle_zarr(tmp_path / "raw.zarr", store, n_piles=2, seed=0)
    stored = zarr.open_group(store, mode="r")
    layout = Layout.from_dict(stored.attrs["daskshuffle"]["layout"]).variables
    assert layout["image"].codec == "blosc-lz4-bitshuffle" and layout["image"].ratio >= 4 / 3
    assert layout["noisy"].codec == "none", "what neither shrinks by a quarter stays raw"
    codec = stored["image"].compressors[0]
    assert isinstance(codec, BloscCodec) and (codec.cname.value, codec.shuffle.value) == ("lz4", "bitshuffle")
    on_disk = sum(path.stat().st_size for path in (store / "image").rglob("*") if path.is_file())
    assert on_disk < 0.75 * images.nbytes
    got = np.concatenate([batch["image"] for batch in PileLoader(str(store), batch_size=500, seed=0)])
    ids = np.concatenate([batch["id"] for batch in PileLoader(str(store), batch_size=500, seed=0)])
    np.testing.assert_array_equal(got, images[ids])


def test_bytes_of_few_values_that_only_zstd_shrinks_by_a_quarter_are_stored_with_zstd(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    half_zeros = np.where(rng.random((4_000, 256)) < 0.5, 0, rng.integers(0, 256, (4_000, 256))).astype(np.uint8)
    codec, ratio = choose_codec(half_zeros[:1_000])
    assert codec == "blosc-zstd-shuffle" and ratio is not None and ratio >= 4 / 3
    zarr.open_group(tmp_path / "raw.zarr", mode="w").create_array("v", data=half_zeros, chunks=(1_000, 256))
    ds.shuffle_zarr(tmp_path / "raw.zarr", tmp_path / "piles.zarr", n_piles=2, seed=0)
    stored = zarr.open_group(tmp_path / "piles.zarr", mode="r")["v"]
    assert stored.compressors[0].cname.value == "zstd"
    rows = np.concatenate([batch["v"] for batch in PileLoader(str(tmp_path / "piles.zarr"), batch_size=1_000)])
    assert sorted(map(bytes, rows)) == sorted(map(bytes, half_zeros))
