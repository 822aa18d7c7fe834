"""PileLoader over several real Zarr and Parquet pile stores: upsampling, downsampling and mixing with Stream."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
from conftest import consume

import daskshuffle as ds
from daskshuffle import DaskShuffleTypeError, DaskShuffleValueError, PileLoader, Stream
from daskshuffle.epochs._streams import epoch_counts
from daskshuffle.epochs._unit_plan import epoch_runs, unit_bounds
from daskshuffle.loader._epoch_reads import Read

SEED = 5
BATCH = 40
#: Rows and first id of each store: ids tell the stores apart.
SIZES = {"a": (600, 0), "b": (250, 10_000)}


def source(n_rows: int, first_id: int, y_dtype: type = np.int16) -> dict[str, np.ndarray]:
    ids = np.arange(first_id, first_id + n_rows, dtype=np.int64)
    x = np.random.default_rng(first_id).standard_normal((n_rows, 4)).astype(np.float32)
    x[:, 0] = ids
    return {"id": ids, "x": x, "y": (ids % 7).astype(y_dtype)}


def make_store(root: Path, kind: str, name: str, n_rows: int, first_id: int, y_dtype: type = np.int16) -> str:
    arrays = source(n_rows, first_id, y_dtype)
    if kind == "zarr":
        group = zarr.open_group(root / f"{name}-raw.zarr", mode="w")
        for variable, values in arrays.items():
            group.create_array(variable, data=values, chunks=(64, *values.shape[1:]))
        return ds.shuffle_zarr(group.store.root, root / f"{name}.zarr", n_piles=5, seed=SEED, chunk_rows=16).path
    x = pa.FixedSizeListArray.from_arrays(pa.array(arrays["x"].ravel()), 4)
    (root / f"{name}-raw").mkdir()
    table = pa.table({"id": arrays["id"], "x": x, "y": arrays["y"]})
    pq.write_table(table, root / f"{name}-raw" / "part.parquet", row_group_size=64)
    return ds.shuffle_parquet(root / f"{name}-raw", root / f"{name}.parquet", n_piles=5, seed=SEED).path


def stored_ids(path: str) -> np.ndarray:
    if path.endswith(".zarr"):
        return zarr.open_group(path, mode="r")["id"][:]
    return pq.read_table(path, columns=["id"])["id"].to_numpy()


@pytest.fixture(scope="module", params=["zarr", "parquet"])
def stores(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp(request.param)
    made = {name: make_store(root, request.param, name, *SIZES[name]) for name in SIZES}
    made["kind"] = request.param
    made["root"] = str(root)
    return made


def streams(stores: dict[str, str], a: dict[str, float], b: dict[str, float]) -> list[Stream]:
    return [Stream(stores["a"], **a), Stream(stores["b"], **b)]  # type: ignore[arg-type]


def epoch_ids(mixture: list[Stream], epoch: int, **more: object) -> np.ndarray:
    with PileLoader(mixture, BATCH, seed=SEED, **more) as loader:  # type: ignore[arg-type]
        loader.set_epoch(epoch)
        return np.concatenate([batch["id"] for batch in loader])


def planned(mixture: list[Stream], epoch: int) -> np.ndarray:
    """The ids the pure plan gives for ``epoch``, from the stores' ids in stored order, with the loader's units."""
    paths = [str(stream.store) for stream in mixture]
    with PileLoader(mixture, BATCH, seed=SEED) as loader:
        reads = loader._piles.epoch_reads
        n_groups = len(reads.layout(epoch)) - 1
        runs = [run for group in range(n_groups) for run in reads.spans(Read(epoch, group, 0, 0))]
        orders = [reads.plan_read(Read(epoch, group, 0, 10**9)).order for group in range(n_groups)]
    ids = np.concatenate([stored_ids(path) for path in paths])
    out, first = [], 0
    for group in range(n_groups):
        group_runs = reads.spans(Read(epoch, group, 0, 0))
        rows = np.concatenate([np.arange(a, b) for a, b in group_runs])
        out.append(ids[rows[orders[group]]])
        first += len(rows)
    assert first == sum(b - a for a, b in runs)
    return np.concatenate(out)


WEIGHTS = [
    ({"repeat": 2.5}, {"repeat": 0.3}),
    ({"choose": 1000}, {"choose": 100}),
    ({}, {"repeat": 3}),
    ({"proportion": 0.2}, {"proportion": 0.8}),
]


@pytest.mark.parametrize(("a", "b"), WEIGHTS)
def test_each_stream_contributes_its_rows_each_row_floor_or_ceil_times(
    stores: dict[str, str], a: dict[str, float], b: dict[str, float]
) -> None:
    mixture = streams(stores, a, b)
    counts = epoch_counts(mixture, [SIZES["a"][0], SIZES["b"][0]])
    for epoch in (0, 1):
        ids = epoch_ids(mixture, epoch)
        np.testing.assert_array_equal(ids, planned(mixture, epoch))
        for (name, (n_rows, first)), count in zip(SIZES.items(), counts, strict=True):
            mine = ids[(ids >= first) & (ids < first + n_rows)] - first
            assert len(mine) == count, name
            times = np.bincount(mine, minlength=n_rows)
            assert set(np.unique(times).tolist()) <= {count // n_rows, math.ceil(count / n_rows)}, name
    if "proportion" in a:  # the epoch is the stores' rows, shared out 1:4
        assert counts == [170, 680]


def test_copies_are_never_neighbours_and_epochs_differ(stores: dict[str, str]) -> None:
    mixture = streams(stores, {"repeat": 2.5}, {"repeat": 4})
    epochs = [epoch_ids(mixture, epoch) for epoch in (0, 1, 2)]
    for ids in epochs:
        assert (np.diff(ids) != 0).all(), "two copies of a row next to each other"
    extra = [set(np.flatnonzero(np.bincount(ids[ids < 600], minlength=600) == 3).tolist()) for ids in epochs]
    assert all(len(chosen) == 300 for chosen in extra)
    assert extra[0] != extra[1] and extra[1] != extra[2], "the fractional repeat chooses afresh each epoch"
    assert not np.array_equal(epochs[0], epochs[1])


def test_same_seed_same_batches_and_plain_paths_are_repeat_one(stores: dict[str, str]) -> None:
    mixture = streams(stores, {"repeat": 0.3}, {"choose": 400})
    np.testing.assert_array_equal(epoch_ids(mixture, 3), epoch_ids(mixture, 3))
    ids = epoch_ids([Stream(stores["a"]), Stream(stores["b"])], 0)
    with PileLoader([stores["a"], stores["b"]], BATCH, seed=SEED) as loader:
        np.testing.assert_array_equal(np.concatenate([batch["id"] for batch in loader]), ids)
    np.testing.assert_array_equal(np.sort(ids), np.sort(np.concatenate([stored_ids(stores[n]) for n in "ab"])))


def test_resume_mid_epoch_gives_the_rest_and_the_state_records_the_streams(stores: dict[str, str]) -> None:
    mixture = streams(stores, {"repeat": 1.5}, {"repeat": 0.5})

    def opened(**more: object) -> PileLoader:
        return PileLoader(mixture, BATCH, seed=SEED, **more)  # type: ignore[arg-type]

    with opened(prefetch="64MiB") as whole:
        expected = consume(whole, 45)  # 1,025 rows: 26 batches an epoch, into the second
    for at in (9, 30):
        with opened(prefetch="0B") as first:
            taken = consume(first, at)
            state = first.state_dict()
        assert [stream["store"] for stream in state["streams"]] == [stores["a"], stores["b"]]
        assert state["streams"][1]["repeat"] == 0.5 and state["streams"][1]["rows_per_epoch"] == 125
        with opened() as resumed:
            resumed.load_state_dict(state)
            rest = consume(resumed, 45 - at)
        for got, want in zip(taken + rest, expected, strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_state_of_other_streams_or_weights_is_refused(stores: dict[str, str]) -> None:
    with PileLoader(streams(stores, {"repeat": 1.5}, {}), BATCH, seed=SEED) as loader:
        next(iter(loader))
        state = loader.state_dict()
    other = streams(stores, {"repeat": 2}, {})
    with (
        PileLoader(other, BATCH, seed=SEED) as loader,
        pytest.raises(DaskShuffleValueError, match=r"streams differ \(stream 0: saved .*'repeat': 1.5"),
    ):
        loader.load_state_dict(state)
    with (
        PileLoader(stores["a"], BATCH, seed=SEED) as loader,
        pytest.raises(DaskShuffleValueError, match="Expected a state saved by a loader of one store"),
    ):
        loader.load_state_dict(state)
    with PileLoader(stores["a"], BATCH, seed=SEED) as loader:
        single = loader.state_dict()
    with (
        PileLoader(other, BATCH, seed=SEED) as loader,
        pytest.raises(DaskShuffleValueError, match="Expected a state saved by a loader of several streams"),
    ):
        loader.load_state_dict(single)


@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_are_disjoint_balanced_and_cover_the_epoch(stores: dict[str, str], drop_last: bool) -> None:
    mixture = streams(stores, {"repeat": 2.5}, {"repeat": 0.3})
    world_size = 3
    ranks = []
    for rank in range(world_size):
        with PileLoader(mixture, BATCH, seed=SEED, rank=rank, world_size=world_size, drop_last=drop_last) as loader:
            ranks.append([batch["id"] for batch in loader.iter_batches(epoch=1)])
    assert len({len(batches) for batches in ranks}) == 1, "every rank the same number of batches"
    together = np.concatenate([np.concatenate(batches) for batches in ranks])
    # Disjoint positions of one epoch: the ranks' rows end to end are the planned epoch, cut in three.
    np.testing.assert_array_equal(together, planned(mixture, 1)[: len(together)])
    left_out = world_size * BATCH if drop_last else world_size
    assert 1575 - left_out < len(together) <= 1575


def test_lanes_give_the_same_global_steps_for_every_world_size(stores: dict[str, str]) -> None:
    mixture = streams(stores, {"repeat": 0.5}, {"repeat": 2})
    steps = {}
    for world_size in (1, 2):
        per_rank = []
        for rank in range(world_size):
            lanes = ds.orders.Piles(n_lanes=4)
            with PileLoader(mixture, 80 // world_size, seed=SEED, order=lanes, rank=rank, world_size=world_size) as it:
                per_rank.append([batch["id"] for batch in it])
        steps[world_size] = [np.concatenate(step) for step in zip(*per_rank, strict=True)]
    assert len(steps[1]) == len(steps[2]) > 1
    for one, two in zip(steps[1], steps[2], strict=True):
        np.testing.assert_array_equal(one, two)


def test_reads_are_units_of_one_store_in_groups_under_the_budget(stores: dict[str, str]) -> None:
    """Each unit holds rows of one store; a group holds at most the budget's half."""
    order = ds.orders.Piles(budget=f"{400 * 26}B")
    with PileLoader(streams(stores, {"repeat": 2.5}, {"repeat": 0.3}), BATCH, seed=SEED, order=order) as loader:
        reads = loader._piles.epoch_reads
        assert loader.settings.group_rows == max(200, loader.settings.unit_rows or 0)
        first_b = SIZES["a"][0]
        for group in range(len(reads.layout(0)) - 1):
            runs = reads.spans(Read(0, group, 0, 0))
            assert sum(b - a for a, b in runs) <= loader.settings.group_rows or len(runs) == 1
            assert all((a < first_b) == (b <= first_b) for a, b in runs), "a unit of one store"


def test_stores_with_other_variables_or_kinds_are_refused_before_reading(stores: dict[str, str]) -> None:
    root = Path(stores["root"])
    (root / "int32").mkdir(exist_ok=True)
    other = make_store(root / "int32", stores["kind"], "c", 100, 20_000, y_dtype=np.int32)
    if stores["kind"] == "zarr":
        # No row of the mismatched store may be read: its chunk files are gone, so a read would fail otherwise.
        # (A Parquet store's dtypes are in its part files' footers, which the check reads; their rows it does not.)
        chunks = [
            path for path in Path(other).rglob("*") if path.is_file() and path.relative_to(other).parts[1:2] == ("c",)
        ]
        assert chunks
        for path in chunks:
            path.unlink()
    with pytest.raises(
        DaskShuffleValueError, match=r"Expected every store to have the same variables.*y: int16 in .*int32 in"
    ):
        PileLoader([stores["a"], other], BATCH)
    with PileLoader([stores["a"], other], BATCH, variables=["id", "x"]) as loader:
        assert loader.n_rows == 700
    kind = "parquet" if stores["kind"] == "zarr" else "zarr"
    (root / kind).mkdir(exist_ok=True)
    elsewhere = make_store(root / kind, kind, "d", 100, 30_000)
    with pytest.raises(DaskShuffleValueError, match=f"Expected every store to be a {stores['kind']} pile store"):
        PileLoader([stores["a"], elsewhere], BATCH)


def test_bad_streams_are_refused(stores: dict[str, str]) -> None:
    with pytest.raises(DaskShuffleValueError, match=r"Expected repeat to be a positive number\. Got 0 instead"):
        Stream(stores["a"], repeat=0)
    with pytest.raises(DaskShuffleTypeError, match=r"Expected choose to be a positive integer\. Got 2\.5 instead"):
        Stream(stores["a"], choose=2.5)  # type: ignore[arg-type]
    with pytest.raises(DaskShuffleValueError, match="Expected at most one of repeat, choose and proportion"):
        Stream(stores["a"], repeat=1, choose=3)
    with pytest.raises(DaskShuffleValueError, match="Expected a proportion for every stream or for none"):
        PileLoader([Stream(stores["a"], proportion=0.5), stores["b"]], BATCH)
    with pytest.raises(DaskShuffleTypeError, match="Expected store to be a path or URL, a Stream, or a list"):
        PileLoader([stores["a"], 3], BATCH)  # type: ignore[list-item]
    with pytest.raises(DaskShuffleValueError, match=r"Expected at least one store\. Got an empty list"):
        PileLoader([], BATCH)
    with pytest.raises(ValueError, match="Expected at most one"):
        Stream(stores["a"], repeat=1, proportion=1)


def test_a_single_stream_downsamples_one_store(stores: dict[str, str]) -> None:
    with PileLoader(Stream(stores["a"], repeat=0.25), BATCH, seed=SEED) as loader:
        ids = np.concatenate([batch["id"] for batch in loader])
    assert len(ids) == 150 and len(np.unique(ids)) == 150


def test_the_fractional_part_is_uniform_over_rows() -> None:
    """Over 4,000 epochs of repeat=1.37 on 120 rows in units of 8 rows, every row gets its second copy
    equally often: a chi-square test at p = 1e-7, so that a correct plan fails it less than once in a million seeds.
    """
    from scipy import stats

    n_rows, n_epochs, count = 120, 4_000, round(1.37 * 120)
    bounds = unit_bounds(n_rows, 8)  # 15 units of 8 rows
    extra = np.zeros(n_rows)
    members = np.array([0, n_rows])
    for epoch in range(n_epochs):
        runs = epoch_runs(bounds, 11, epoch, members, [count])
        rows = np.concatenate([np.arange(a, b) for a, b in runs.tolist()])
        extra += np.bincount(rows, minlength=n_rows) - 1
    assert extra.sum() == (count - n_rows) * n_epochs
    expected = (count - n_rows) * n_epochs / n_rows
    statistic = float(((extra - expected) ** 2 / expected).sum())
    # Sampling without replacement makes the statistic smaller than chi-square's: the test only gets stricter for
    # a wrong plan and more lenient for a right one.
    assert statistic < stats.chi2.ppf(1 - 1e-7, df=n_rows - 1)
    # And not a fixed subset: every row was chosen in some epoch and left out in another.
    assert (extra > 0).all() and (extra < n_epochs).all()


def test_torch_workers_split_a_mixture_like_the_loader(stores: dict[str, str]) -> None:
    torch = pytest.importorskip("torch")
    from daskshuffle.torch import PileDataset

    mixture = streams(stores, {"repeat": 1.5}, {"choose": 100})
    dataset = PileDataset(mixture, BATCH, seed=SEED, rank=0, world_size=1, variables=["id", "y"])
    batches = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    ids = np.sort(np.concatenate([batch["id"].numpy() for batch in batches]))
    np.testing.assert_array_equal(ids, np.sort(epoch_ids(mixture, 0)))
