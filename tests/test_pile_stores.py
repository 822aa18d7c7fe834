"""What every kind of pile store guarantees its reader, checked the same way for each.

Each kind (a Zarr store from ``shuffle_zarr``, an xarray store from
``shuffle_xarray``, a Parquet store from ``shuffle_parquet``) is shuffled from
the same 1,000 rows: ``id``, ``x`` (4 floats, ``x[:, 0] == id``) and ``y``
(``id % 7``), into 7 piles stored in several files. A kind knows only how to
list its data files with the store rows each holds, and the ids in stored
order; the tests never look at the kind otherwise. Loader mechanics that do not
depend on the kind (threads, state checks, arguments) are tested in
``test_loader.py``.
"""

from __future__ import annotations

import functools
import gc
import json
import re
import shutil
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xarray as xr
import zarr
from conftest import consume
from simulate import unit_groups, unit_stream

import daskshuffle as ds
from daskshuffle import CorruptPileStoreError, PileLoader, pilestore
from daskshuffle.epochs import unit_bounds
from daskshuffle.epochs._epoch_plan import epoch_pile_order, rank_range
from daskshuffle.orders import Piles
from daskshuffle.plan import fingerprint
from daskshuffle.readers import open_pile_reader
from daskshuffle.storage import Location

N_ROWS = 1_000
N_PILES = 7
SEED = 3
BATCH = 64


def source_arrays() -> dict[str, np.ndarray]:
    ids = np.arange(N_ROWS, dtype=np.int64)
    x = np.random.default_rng(0).standard_normal((N_ROWS, 4)).astype(np.float32)
    x[:, 0] = ids
    return {"id": ids, "x": x, "y": (ids % 7).astype(np.int16)}


def make_zarr(root: Path) -> str:
    group = zarr.open_group(root / "raw.zarr", mode="w")
    for name, values in source_arrays().items():
        group.create_array(name, data=values, chunks=(100, *values.shape[1:]))
    return ds.shuffle_zarr(root / "raw.zarr", root / "piles.zarr", n_piles=N_PILES, seed=SEED, chunk_rows=16).path


def make_xarray(root: Path) -> str:
    arrays = source_arrays()
    dataset = xr.Dataset(
        {"x": (("sample", "feature"), arrays["x"]), "y": ("sample", arrays["y"])},
        coords={"id": ("sample", arrays["id"])},
    ).chunk({"sample": 100})
    return ds.shuffle_xarray(dataset, root / "piles.zarr", "sample", n_piles=N_PILES, seed=SEED, chunk_rows=16).path


def make_parquet(root: Path) -> str:
    arrays = source_arrays()
    x = pa.FixedSizeListArray.from_arrays(pa.array(arrays["x"].ravel()), 4)
    (root / "raw").mkdir()
    pq.write_table(
        pa.table({"id": arrays["id"], "x": x, "y": arrays["y"]}), root / "raw" / "a.parquet", row_group_size=100
    )
    # Small merge groups: a part file per pile, so that piles can be damaged one at a time.
    # Row groups of 16 rows, as the Zarr stores' chunks: several units a pile for the loader's units.
    return ds.shuffle_parquet(
        root / "raw", root / "piles", n_piles=N_PILES, seed=SEED, block_memory="4KiB", row_group_size=16
    ).path


def zarr_files(store: str) -> list[tuple[Path, int, int]]:
    files = []
    for name, array in zarr.open_group(store, mode="r").arrays():
        rows = int(array.chunks[0])
        for path in (Path(store) / name / "c").rglob("*"):
            if path.is_file():
                chunk = int(path.relative_to(Path(store) / name / "c").parts[0])
                files.append((path, chunk * rows, min((chunk + 1) * rows, N_ROWS)))
    return sorted(files)


def parquet_files(store: str) -> list[tuple[Path, int, int]]:
    files = []
    for path in sorted(Path(store).glob("part-*.parquet")):
        first = int(path.stem.split("-")[1])
        files.append((path, first, first + pq.read_metadata(path).num_rows))
    return files


@dataclass
class Kind:
    make: Callable[[Path], str]
    files: Callable[[str], list[tuple[Path, int, int]]]  # every data file, with the store rows [first, last) it holds
    ids: Callable[[str], np.ndarray]  # the ids in stored order, read without daskshuffle


KINDS = {
    "zarr": Kind(make_zarr, zarr_files, lambda store: zarr.open_group(store, mode="r")["id"][:]),
    "xarray": Kind(make_xarray, zarr_files, lambda store: xr.open_zarr(store)["id"].values),
    "parquet": Kind(make_parquet, parquet_files, lambda store: pq.read_table(store, columns=["id"])["id"].to_numpy()),
}


@dataclass
class Store:
    kind: Kind
    path: str

    @property
    def offsets(self) -> np.ndarray:
        return open_pile_reader(self.path).pile_offsets

    @functools.cached_property
    def stored_ids(self) -> np.ndarray:
        """The ids in stored order, read once: a store is damaged only as a copy, a ``Store`` of its own."""
        return self.kind.ids(self.path)

    def expected(
        self,
        epoch: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        order: Piles | None = None,
        variables: list[str] | None = None,
    ) -> np.ndarray:
        """The ids a loader of ``order`` (by default the default) should yield, in order, from the pure plan.

        A loader reads units of whole chunks, dealt into groups and mixed (``simulate.unit_stream``).
        """
        positions = rank_range(N_ROWS, world_size, rank, BATCH, drop_last)
        ids = self.stored_ids
        with PileLoader(self.path, BATCH, variables=variables, order=order or Piles()) as loader:
            settings = loader.settings
        assert settings.unit_rows is not None and settings.group_rows is not None
        stream = unit_stream(N_ROWS, settings.unit_rows, settings.group_rows, SEED, epoch)
        return ids[stream[positions[0] : positions[1]]]

    def pile_rows(self, piles: Iterable[int]) -> list[tuple[int, int]]:
        offsets = self.offsets
        return [(int(offsets[pile]), int(offsets[pile + 1])) for pile in piles]

    def groups(self, epoch: int, order: Piles) -> tuple[np.ndarray, list[list[tuple[int, int]]]]:
        """The offsets of ``epoch``'s groups of a loader of ``order``, and the runs of store rows of each: the plan."""
        with PileLoader(self.path, BATCH, order=order) as loader:
            unit_rows, group_rows = loader.settings.unit_rows, loader.settings.group_rows
        assert unit_rows is not None and group_rows is not None
        bounds = unit_bounds(N_ROWS, unit_rows)
        offsets, dealt = unit_groups(bounds, group_rows, SEED, epoch)
        return offsets, [[(int(bounds[u]), int(bounds[u + 1])) for u in group.tolist()] for group in dealt]

    def files_within(self, rows: list[tuple[int, int]]) -> list[Path]:
        return [path for path, a, b in self.kind.files(self.path) if any(s <= a and b <= t for s, t in rows)]

    def files_outside(self, rows: list[tuple[int, int]]) -> list[Path]:
        return [path for path, a, b in self.kind.files(self.path) if not any(a < t and s < b for s, t in rows)]


@pytest.fixture(scope="module", params=list(KINDS))
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Store:
    kind = KINDS[request.param]
    return Store(kind, kind.make(tmp_path_factory.mktemp(request.param)))


def copy_of(store: Store, tmp_path: Path) -> Store:
    """A copy of the store that a test may damage."""
    return Store(store.kind, str(shutil.copytree(store.path, tmp_path / "copy")))


def ids_of(batches: Iterable[dict]) -> np.ndarray:
    return np.concatenate([np.asarray(batch["id"]) for batch in batches])


def loader_threads() -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith("daskshuffle-loader")]


# -- one epoch -------------------------------------------------------------------


@pytest.mark.parametrize("prefetch", ["0B", "auto", "64MiB"])
def test_an_epoch_yields_every_row_once_in_the_planned_batches(store: Store, prefetch: str) -> None:
    with PileLoader(store.path, batch_size=BATCH, prefetch=prefetch) as loader:
        for epoch in range(2):
            batches = list(loader)
            assert len(batches) == len(loader) == -(-N_ROWS // BATCH)
            assert [len(batch["id"]) for batch in batches] == [BATCH] * (len(batches) - 1) + [N_ROWS % BATCH]
            ids = ids_of(batches)
            np.testing.assert_array_equal(np.sort(ids), np.arange(N_ROWS))
            # The same batches as the pure plan gives for this seed and epoch.
            np.testing.assert_array_equal(ids, store.expected(epoch))
            for batch in batches:
                assert set(batch) == {"id", "x", "y"}
                # Every variable went through the same permutation: rows stay aligned.
                x = batch["x"]  # a Parquet fixed-size list is an array of one more dimension, as in Zarr
                assert x.dtype == np.float32 and x.shape == (len(batch["id"]), 4)
                np.testing.assert_array_equal(x[:, 0], batch["id"].astype(np.float32))
                np.testing.assert_array_equal(batch["y"], batch["id"] % 7)


def test_a_range_of_batches_is_the_same_as_iterating(store: Store) -> None:
    with PileLoader(store.path, batch_size=BATCH) as loader:
        loader.set_epoch(2)
        whole = [batch["id"] for batch in loader]
        for start, stop in [(0, 1), (3, 9), (14, None)]:
            part = [batch["id"] for batch in loader.iter_batches(2, start, stop)]
            assert len(part) == len(whole[start:stop])
            for got, want in zip(part, whole[start:stop], strict=True):
                np.testing.assert_array_equal(got, want)


# -- ranks -------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_are_disjoint_balanced_and_follow_the_plan(store: Store, world_size: int, drop_last: bool) -> None:
    for epoch in range(2):
        per_rank = []
        for rank in range(world_size):
            with PileLoader(store.path, BATCH, rank=rank, world_size=world_size, drop_last=drop_last) as loader:
                loader.set_epoch(epoch)
                batches = list(loader)
                assert len(batches) == len(loader)
                if drop_last:
                    assert {len(batch["id"]) for batch in batches} == {BATCH}
                ids = ids_of(batches)
                expected = store.expected(epoch, rank=rank, world_size=world_size, drop_last=drop_last)
                np.testing.assert_array_equal(ids, expected)
                per_rank.append(ids)
        assert len({len(ids) for ids in per_rank}) == 1, "ranks yield different numbers of rows"
        taken = np.concatenate(per_rank)
        assert len(np.unique(taken)) == len(taken), "ranks overlap"
        assert N_ROWS - len(taken) < (world_size * BATCH if drop_last else world_size)


def test_a_rank_reads_only_its_own_groups(store: Store, tmp_path: Path) -> None:
    copy = copy_of(store, tmp_path)
    small = Piles(budget="16KiB")
    _, dealt = store.groups(0, small)
    with PileLoader(copy.path, BATCH, rank=1, world_size=3, order=small) as loader:
        groups = sorted({segment.pile for segment in loader.plan(0).segments})
        assert 1 <= len(groups) < len(dealt)
        # Damage every file outside this rank's groups: it still reads all its rows.
        damaged = copy.files_outside([run for group in groups for run in dealt[group]])
        assert damaged or store.kind is KINDS["parquet"], "a Parquet part file holds rows of many groups"
        for path in damaged:
            path.write_bytes(b"not a chunk")
        ids = ids_of(loader)
    np.testing.assert_array_equal(ids, store.expected(0, rank=1, world_size=3, order=small))
    if not damaged:
        return
    # The damage is real: rank 0 now fails.
    with (
        PileLoader(copy.path, BATCH, rank=0, world_size=3, order=Piles(budget="16KiB")) as other,
        pytest.raises((OSError, RuntimeError)),
    ):
        list(other)


# -- resume ------------------------------------------------------------------------


@pytest.mark.parametrize(("world_size", "drop_last"), [(1, False), (3, True)])
def test_resume_continues_exactly_as_an_uninterrupted_run(store: Store, world_size: int, drop_last: bool) -> None:
    settings = {"batch_size": BATCH, "rank": world_size - 1, "world_size": world_size, "drop_last": drop_last}
    with PileLoader(store.path, **settings) as loader:
        per_epoch = len(loader)
        reference = consume(loader, 2 * per_epoch)
    # Resume after k batches: at both ends of each epoch and where piles end in the first.
    start, _ = rank_range(N_ROWS, world_size, world_size - 1, BATCH, drop_last)
    boundaries = {
        max(0, (int(position) - start) // BATCH + shift)
        for position in np.cumsum(np.diff(store.offsets)[epoch_pile_order(SEED, 0, N_PILES)])
        for shift in (0, 1)
    }
    ends = {0, 1, per_epoch - 1, per_epoch, per_epoch + 1, 2 * per_epoch}
    for k in sorted(ends | {k for k in boundaries if k <= per_epoch}):
        with PileLoader(store.path, **settings, prefetch=("0B", "auto", "64MiB")[k % 3]) as first:
            np.testing.assert_array_equal(
                np.concatenate(consume(first, k) or [[]]), np.concatenate(reference[:k] or [[]])
            )
            state = json.loads(json.dumps(first.state_dict()))
        assert (state["epoch"], state["batches"]) == divmod(k, per_epoch)
        with PileLoader(store.path, **settings) as second:
            second.load_state_dict(state)
            # The rest of the epoch and, from any k of the first epoch, into the next one.
            rest = consume(second, min(2 * per_epoch - k, per_epoch + 1))
        for got, want in zip(rest, reference[k : k + len(rest)], strict=True):
            np.testing.assert_array_equal(got, want)


# -- damage --------------------------------------------------------------------------


def _delete(path: Path) -> None:
    path.unlink()


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {"missing": _delete, "truncated": _truncate, "corrupted": _corrupt}


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize(
    "kind",
    ["zarr", "xarray", "parquet"],
)
def test_a_damaged_file_raises_in_the_consumer_at_its_group_and_the_loader_stops_cleanly(
    kind: str, damage: str, tmp_path: Path
) -> None:
    store = Store(KINDS[kind], KINDS[kind].make(tmp_path))
    small = Piles(budget="16KiB")
    offsets, dealt = store.groups(0, small)
    # The file of "x" that the latest group is the first to need (a Parquet part file holds rows of many groups).
    files = [(path, a, b) for path, a, b in store.kind.files(store.path) if "id" not in path.parts]
    first_group = [min(g for g, runs in enumerate(dealt) if any(a < t and s < b for s, t in runs)) for _, a, b in files]
    chosen = int(np.argmax(first_group))
    path, broken = files[chosen][0], first_group[chosen]
    assert broken >= 2 or kind == "parquet"
    DAMAGE[damage](path)
    before = int(offsets[broken])  # stream rows ahead of the broken group
    received = []
    with PileLoader(store.path, BATCH, prefetch="64MiB", order=small) as loader:
        with pytest.raises(CorruptPileStoreError, match=rf"group {broken} of") as caught:
            for batch in loader:
                received.append(batch["id"])
        assert path.name in str(caught.value)
        assert len(received) == before // BATCH
        assert loader_threads() == []
        # The loader stays usable: the next iteration retries the same epoch from where it stopped.
        assert loader.state_dict()["batches"] == len(received)
    assert loader_threads() == []


@pytest.mark.parametrize("order", ["piles", Piles(budget="16KiB")], ids=["units", "small groups"])
def test_every_store_is_read_ahead_in_a_thread_even_for_a_fast_consumer(store: Store, order: object) -> None:
    with PileLoader(store.path, BATCH, prefetch="auto", order=order) as loader:
        assert loader.settings.unit_rows is not None, "every store is read in units"
        batches = iter(loader)
        first = [next(batches), next(batches)]
        assert loader_threads()
        ids = ids_of(first + list(batches))
    assert loader_threads() == []
    expected = store.expected(0) if order == "piles" else np.sort(store.expected(0))
    np.testing.assert_array_equal(ids if order == "piles" else np.sort(ids), expected)


@pytest.mark.parametrize("order", ["piles", Piles(budget="16KiB")], ids=["units", "small groups"])
def test_a_loader_dropped_without_close_stops_its_threads_at_once(store: Store, order: object) -> None:
    """Nothing keeps a loader alive once its last reference goes: its threads stop without the cycle collector."""
    gc.collect()
    gc.disable()
    try:
        ids = ids_of(PileLoader(store.path, BATCH, prefetch="auto", order=order))
        assert loader_threads() == []
    finally:
        gc.enable()
    assert len(ids) == len(store.expected(0))


@pytest.mark.parametrize("what", ["no store", "no group", "unreadable zarr.json"])
def test_a_store_zarr_cannot_open_leaves_nothing_holding_the_frames_that_asked(tmp_path: Path, what: str) -> None:
    """zarr's ``sync`` keeps its error in a frame the error's traceback holds: caught and dropped, it holds nothing.

    Before, such an error kept every frame up the stack (and a loader being opened, with its threads) alive
    until the cycle collector ran.
    """
    path = tmp_path / "store"
    if what != "no store":
        path.mkdir()
    if what == "unreadable zarr.json":
        (path / "zarr.json").write_text("{not json")

    class Marker:
        pass

    def ask() -> weakref.ref[Marker]:
        marker = Marker()  # a local of the frame that asks, as a loader being opened is
        assert pilestore.group_metadata(Location.of(str(path))) is None
        return weakref.ref(marker)

    gc.collect()
    gc.disable()
    try:
        asked = ask()
        assert asked() is None
    finally:
        gc.enable()


# -- metadata that disagrees with itself or the data ----------------------------------------


def _edit_json(path: Path, edit: Callable[[dict], None], *keys: str) -> None:
    """Edit the JSON object at ``keys`` of the file at ``path``, leaving valid JSON, as a person or a script might."""
    document = json.loads(path.read_text())
    inner = document
    for key in keys:
        inner = inner[key]
    edit(inner)
    path.write_text(json.dumps(document))


def _lower_the_end(metadata: dict) -> None:
    fewer = metadata["n_rows"] // 200  # 1,000 of 200,000 rows
    metadata["n_rows"] -= fewer
    metadata["pile_offsets"][-1] -= fewer


def _swap_offsets(metadata: dict) -> None:
    offsets = metadata["pile_offsets"]
    offsets[3], offsets[4] = offsets[4], offsets[3]


def _change_seed(metadata: dict) -> None:
    metadata["seed"] += 1  # consistent with everything else: only the fingerprint tells


@pytest.fixture(scope="module")
def large_zarr(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Zarr pile store of 200,000 rows in 16 piles."""
    root = tmp_path_factory.mktemp("large")
    group = zarr.open_group(root / "raw.zarr", mode="w")
    group.create_array("id", data=np.arange(200_000, dtype=np.int64), chunks=(10_000,))
    return ds.shuffle_zarr(root / "raw.zarr", root / "piles.zarr", n_piles=16, seed=SEED).path


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (_lower_the_end, r"array 'id' to hold the n_rows .* Got n_rows = 199,000 and 200,000 in array 'id' instead"),
        (_swap_offsets, r"pile_offsets that never fall. Got pile_offsets\[4\] = [\d,]+ after pile_offsets\[3\]"),
        (_change_seed, r"the fingerprint it records, '[0-9a-f]{16}'. Got metadata whose fingerprint is '[0-9a-f]{16}'"),
    ],
    ids=["n_rows and the last offset lowered", "two offsets swapped", "the seed changed"],
)
def test_a_zarr_store_whose_metadata_was_edited_is_refused_on_open(
    large_zarr: str, tmp_path: Path, edit: Callable[[dict], None], match: str
) -> None:
    np.testing.assert_array_equal(np.sort(ids_of(PileLoader(large_zarr, 4096))), np.arange(200_000))
    copy = shutil.copytree(large_zarr, tmp_path / "copy.zarr")
    _edit_json(copy / "zarr.json", edit, "attributes", "daskshuffle")
    with pytest.raises(CorruptPileStoreError, match=match) as caught:
        PileLoader(copy, 4096)
    assert "shuffle the source again with overwrite=True" in str(caught.value)
    assert "daskshuffle verify" in str(caught.value) and str(copy) in str(caught.value)


def test_a_zarr_array_shorter_than_the_recorded_rows_is_refused_on_open(large_zarr: str, tmp_path: Path) -> None:
    copy = shutil.copytree(large_zarr, tmp_path / "copy.zarr")

    def shorten(metadata: dict) -> None:
        metadata["shape"][0] -= 1_000

    # The array's own metadata, not the copy consolidated into the root's, which the reader does not use.
    _edit_json(copy / "id" / "zarr.json", shorten)
    with pytest.raises(CorruptPileStoreError, match=r"Got n_rows = 200,000 and 199,000 in array 'id' instead"):
        PileLoader(copy, 4096)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (_lower_the_end, r"Got n_rows = 995 and 1,000 in the part files instead"),
        (_swap_offsets, r"pile_offsets that never fall"),
        (_change_seed, r"the fingerprint it records"),
    ],
    ids=["n_rows and the last offset lowered", "two offsets swapped", "the seed changed"],
)
def test_a_parquet_store_whose_sidecar_was_edited_is_refused_on_open(
    tmp_path: Path, edit: Callable[[dict], None], match: str
) -> None:
    store = Path(make_parquet(tmp_path))
    _edit_json(store / "_daskshuffle.json", edit)
    with pytest.raises(CorruptPileStoreError, match=match) as caught:
        PileLoader(store, BATCH)
    assert "overwrite=True" in str(caught.value)


def test_a_parquet_part_file_that_runs_past_the_recorded_rows_is_refused_on_open(tmp_path: Path) -> None:
    store = Path(make_parquet(tmp_path))
    parts = sorted(store.glob("part-*.parquet"))
    parts[0].unlink()  # a gap: reported when its rows are read, not on open
    last = pq.read_table(parts[-1])
    pq.write_table(pa.concat_tables([last, last.slice(0, 3)]), parts[-1])  # three rows past n_rows
    with pytest.raises(
        CorruptPileStoreError, match=rf"Got n_rows = 1,000 and '.*{parts[-1].name}' ending at row 1,003"
    ):
        PileLoader(store, BATCH)


# -- one format version ------------------------------------------------------------------


def _metadata_file(store: str) -> Path:
    parquet = Path(store) / "_daskshuffle.json"
    return parquet if parquet.exists() else Path(store) / "zarr.json"


def _rewrite_metadata(store: str, edit: Callable[[dict], None]) -> None:
    """Edit a store's metadata where its kind keeps it (a sidecar, a mapping or the JSON text of an xarray store)."""
    path = _metadata_file(store)
    document = json.loads(path.read_text())
    if path.name == "_daskshuffle.json":
        edit(document)
    else:
        attributes = document["attributes"]
        text = isinstance(attributes["daskshuffle"], str)
        metadata = json.loads(attributes["daskshuffle"]) if text else attributes["daskshuffle"]
        edit(metadata)
        attributes["daskshuffle"] = json.dumps(metadata) if text else metadata
    path.write_text(json.dumps(document))


def _as_version(version: object) -> Callable[[dict], None]:
    """Metadata made to look written by another release: its version set, its bindings removed, refingerprinted.

    As an adversary with the public ``fingerprint`` would: the fingerprint
    agrees, and no seal or run is left to check a chunk's place against.
    """

    def edit(metadata: dict) -> None:
        for key in ("seal", "run", "arrays", "layout", "row_group_rows", "parts"):
            metadata.pop(key, None)
        metadata["format_version"] = version
        recorded = {key: value for key, value in metadata.items() if key not in ("fingerprint", "dim", "complete")}
        metadata["fingerprint"] = fingerprint({**recorded, "complete": False})

    return edit


@pytest.mark.parametrize("version", [0, 1, 2, 4, "3", None])
def test_a_store_of_another_format_version_is_refused_naming_it(store: Store, tmp_path: Path, version: object) -> None:
    damaged = copy_of(store, tmp_path)
    _rewrite_metadata(damaged.path, _as_version(version))
    expected = rf"format version 3. Got version {re.escape(repr(version))} in .*shuffle the source again"
    with pytest.raises(ds.IncompletePileStoreError, match=expected):
        PileLoader(damaged.path, BATCH)
    with pytest.raises(ds.IncompletePileStoreError, match=expected):
        open_pile_reader(damaged.path)
    with pytest.raises(ds.IncompletePileStoreError, match=expected):
        ds.verify(damaged.path)


def test_a_lowered_version_does_not_read_a_swapped_chunk_without_its_binding(store: Store, tmp_path: Path) -> None:
    """Issue 42 item 3: version lowered, seal, run and arrays removed, fingerprint recomputed, two data files swapped."""
    damaged = copy_of(store, tmp_path)
    (first, *_), (last, *_) = damaged.kind.files(damaged.path)[0], damaged.kind.files(damaged.path)[-1]
    first_bytes, last_bytes = first.read_bytes(), last.read_bytes()
    first.write_bytes(last_bytes)
    last.write_bytes(first_bytes)
    _rewrite_metadata(damaged.path, _as_version(2))
    with pytest.raises(ds.IncompletePileStoreError, match=r"format version 3. Got version 2"):
        ids_of(PileLoader(damaged.path, BATCH))


# -- torch -------------------------------------------------------------------------------


def test_torch_workers_yield_each_row_once(store: Store) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from daskshuffle.torch import PileDataset

    dataset = PileDataset(store.path, BATCH, rank=1, world_size=2, variables=["id", "y"])
    dataset.set_epoch(4)
    batches = list(DataLoader(dataset, batch_size=None, num_workers=2))
    assert all(isinstance(batch["id"], torch.Tensor) for batch in batches)
    got = [batch["id"].numpy() for batch in batches]
    want = store.expected(4, rank=1, world_size=2, variables=["id", "y"])
    assert len(got) == len(dataset) == -(-len(want) // BATCH)
    # Whole batches of this rank, each exactly once, split between the workers.
    assert sorted(map(tuple, got)) == sorted(tuple(want[i : i + BATCH]) for i in range(0, len(want), BATCH))
    for batch in batches:
        np.testing.assert_array_equal(batch["y"].numpy(), batch["id"].numpy() % 7)
