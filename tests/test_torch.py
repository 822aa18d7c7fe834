"""daskshuffle.torch: the loader as a PyTorch IterableDataset, with DataLoader workers and torch.distributed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import make_zarr_source

import daskshuffle as ds
from daskshuffle import DaskShuffleValueError, PileLoader

try:
    import torch

    from daskshuffle.torch import PileDataset
except ImportError:  # the install hint is still tested, in a subprocess
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch: pip install 'daskshuffle[torch]'")

N_ROWS = 1_000
BATCH = 48


def test_importing_without_torch_says_how_to_install_it() -> None:
    code = "import sys; sys.modules['torch'] = None; import daskshuffle.torch"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "ImportError: daskshuffle.torch needs PyTorch" in run.stderr
    assert "pip install 'daskshuffle[torch]'" in run.stderr


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("torch")
    source = make_zarr_source(root / "raw.zarr", N_ROWS, chunk_rows=64)
    return ds.shuffle_zarr(source, root / "piles.zarr", n_piles=5, seed=11, chunk_rows=32).path


def batches_of_loader(store: str, epoch: int, **kwargs: object) -> list[np.ndarray]:
    with PileLoader(store, BATCH, **kwargs) as loader:
        loader.set_epoch(epoch)
        return [batch["id"] for batch in loader]


@needs_torch
def test_yields_the_loaders_batches_as_tensors(store: str) -> None:
    dataset = PileDataset(store, BATCH)
    batches = list(dataset)
    assert len(batches) == len(dataset) == -(-N_ROWS // BATCH)
    assert {name: tensor.dtype for name, tensor in batches[0].items()} == {
        "id": torch.int64,
        "x": torch.float32,
        "y": torch.int16,
    }
    for got, want in zip(batches, batches_of_loader(store, 0), strict=True):
        np.testing.assert_array_equal(got["id"].numpy(), want)
    # Each iteration is the next epoch, unless set_epoch says otherwise.
    assert dataset.epoch == 1
    second = torch.cat([batch["id"] for batch in dataset]).numpy()
    np.testing.assert_array_equal(second, np.concatenate(batches_of_loader(store, 1)))
    dataset.set_epoch(0)
    np.testing.assert_array_equal(next(iter(dataset))["id"].numpy(), batches[0]["id"].numpy())


@pytest.mark.slow
@needs_torch
def test_features_and_label(store: str) -> None:
    dataset = PileDataset(store, BATCH, features=["x", "y"], label="id")
    features, label = next(iter(dataset))
    assert features.shape == (BATCH, 5) and features.dtype == torch.float32
    np.testing.assert_array_equal(features[:, 0].numpy(), label.numpy().astype(np.float32))
    np.testing.assert_array_equal(features[:, 4].numpy(), (label % 7).numpy().astype(np.float32))
    x = next(iter(PileDataset(store, BATCH, features="x")))
    assert isinstance(x, torch.Tensor) and x.shape == (BATCH, 4)


@needs_torch
def test_bad_arguments(store: str) -> None:
    with pytest.raises(DaskShuffleValueError, match="Expected features to be given with label"):
        PileDataset(store, BATCH, label="y")
    with pytest.raises(DaskShuffleValueError, match="Expected either variables or features and label"):
        PileDataset(store, BATCH, features="x", variables=["x"])
    with pytest.raises(DaskShuffleValueError, match=r"Got unknown \['z'\]"):
        PileDataset(store, BATCH, features="z")
    with pytest.raises(DaskShuffleValueError, match="Expected batch_size to be a positive integer"):
        PileDataset(store, 0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_lanes'"):
        PileDataset(store, BATCH, n_lanes=4)  # type: ignore[call-arg]


@needs_torch
def test_lanes_go_inside_the_order_as_for_the_loader(store: str) -> None:
    """Rank 1 of 2 with an order of 4 lanes: the second half of each global step that one rank alone yields."""
    order = ds.orders.Piles(n_lanes=4)
    dataset = PileDataset(store, BATCH // 2, rank=1, world_size=2, order=order)
    assert dataset.settings.n_lanes == 4
    halves = [batch["id"].numpy() for batch in dataset]
    for half, step in zip(halves, batches_of_loader(store, 0, order=order), strict=True):
        np.testing.assert_array_equal(half, step[len(step) // 2 :])


@pytest.mark.slow
@needs_torch
def test_rank_and_world_size_come_from_torch_distributed(store: str, tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        import torch
        import torch.distributed as dist
        from daskshuffle.torch import PileDataset
        rank = int(sys.argv[1])
        dist.init_process_group("gloo", init_method="file://{tmp_path / "rendezvous"}", rank=rank, world_size=2)
        dataset = PileDataset({store!r}, {BATCH})
        assert (dataset.settings.rank, dataset.settings.world_size) == (rank, 2), dataset.settings
        np.save(f"{tmp_path}/rank{{rank}}.npy", torch.cat([batch["id"] for batch in dataset]).numpy())
        dist.destroy_process_group()
        """
    )
    runs = [subprocess.Popen([sys.executable, "-c", code, str(rank)], stderr=subprocess.PIPE) for rank in (0, 1)]
    for run in runs:
        assert run.wait(timeout=120) == 0, run.stderr.read().decode() if run.stderr else ""
    for rank in (0, 1):
        want = np.concatenate(batches_of_loader(store, 0, rank=rank, world_size=2))
        np.testing.assert_array_equal(np.load(tmp_path / f"rank{rank}.npy"), want)


def ids_of(batches: object) -> list[np.ndarray]:
    return [batch["id"].numpy() for batch in batches]  # type: ignore[attr-defined]


def same_batches(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    return len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def as_set(batches: list[np.ndarray]) -> list[bytes]:
    return sorted(batch.tobytes() for batch in batches)


@needs_torch
@pytest.mark.parametrize(
    "loader_options", [{"num_workers": 0}, {"num_workers": 2}, {"num_workers": 2, "persistent_workers": True}]
)
def test_epochs_move_on_without_set_epoch_with_and_without_workers(
    store: str, loader_options: dict[str, object]
) -> None:
    from torch.utils.data import DataLoader

    dataset = PileDataset(store, BATCH)
    loader = DataLoader(dataset, batch_size=None, **loader_options)  # type: ignore[arg-type]
    epochs = [ids_of(loader) for _ in range(3)]
    for epoch, got in enumerate(epochs):
        assert as_set(got) == as_set(batches_of_loader(store, epoch))
    assert dataset.epoch == 3
    dataset.set_epoch(1)
    assert as_set(ids_of(loader)) == as_set(epochs[1])
    assert dataset.epoch == 2


@needs_torch
@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_datasets_dataloader_hands_out_its_batches_whole(store: str, num_workers: int) -> None:
    dataset = PileDataset(store, BATCH)
    loader = dataset.dataloader(num_workers=num_workers, pin_memory=False)
    assert loader.batch_size is None and loader.num_workers == num_workers
    got = ids_of(loader)
    assert all(len(ids) == BATCH for ids in got[:-1])
    assert as_set(got) == as_set(batches_of_loader(store, 0))
    # A collate_fn gets one whole batch at a time.
    sizes = list(dataset.dataloader(collate_fn=lambda batch: len(batch["id"])))
    assert sizes == [len(ids) for ids in batches_of_loader(store, 1)]


@needs_torch
def test_the_dataloader_refuses_what_would_put_batches_together_again(store: str) -> None:
    from torch.utils.data import default_collate

    dataset = PileDataset(store, BATCH)
    with pytest.raises(
        DaskShuffleValueError, match=r"Expected no batch_size for the DataLoader\. Got batch_size=32"
    ) as caught:
        dataset.dataloader(batch_size=32, num_workers=2)
    assert caught.value.parameter == "batch_size"
    with pytest.raises(DaskShuffleValueError, match="Got default_collate instead"):
        dataset.dataloader(collate_fn=default_collate)
    with pytest.raises(DaskShuffleValueError, match=r"pass PileDataset\(\.\.\., drop_last=True\)"):
        dataset.dataloader(drop_last=True)
    assert dataset.epoch == 0  # nothing was read
    assert dataset.dataloader(batch_size=None).batch_size is None  # what it sets anyway


@needs_torch
def test_state_dict_resumes_exactly_in_the_main_process(store: str) -> None:
    from torch.utils.data import DataLoader

    whole = ids_of(DataLoader(PileDataset(store, BATCH), batch_size=None))
    dataset = PileDataset(store, BATCH)
    batches = iter(DataLoader(dataset, batch_size=None))
    taken = [next(batches)["id"].numpy() for _ in range(5)]
    state = dataset.state_dict()
    assert (state["loader"]["epoch"], state["loader"]["batches"]) == (0, 5)
    import json

    state = json.loads(json.dumps(state))
    resumed = PileDataset(store, BATCH)
    resumed.load_state_dict(state)
    rest = ids_of(DataLoader(resumed, batch_size=None))
    assert same_batches(taken + rest, whole)
    assert resumed.epoch == 1
    # The next pass is the next epoch, whole.
    assert same_batches(ids_of(DataLoader(resumed, batch_size=None)), batches_of_loader(store, 1))


@needs_torch
def test_a_state_of_the_main_process_loads_into_worker_processes(store: str) -> None:
    from torch.utils.data import DataLoader

    dataset = PileDataset(store, BATCH)
    batches = iter(dataset)
    taken = [next(batches)["id"].numpy() for _ in range(7)]
    resumed = PileDataset(store, BATCH)
    resumed.load_state_dict(dataset.state_dict())
    rest = ids_of(DataLoader(resumed, batch_size=None, num_workers=2))
    assert as_set(taken + rest) == as_set(batches_of_loader(store, 0))
    assert len(rest) == len(resumed) - 7
    assert as_set(ids_of(DataLoader(resumed, batch_size=None, num_workers=2))) == as_set(batches_of_loader(store, 1))


@needs_torch
@pytest.mark.parametrize("made_by", ["dataloader", "DataLoader"])
def test_a_state_taken_mid_pass_of_worker_processes_is_refused_not_skipped(store: str, made_by: str) -> None:
    # The workers read ahead of the loop: a state taken in the main process cannot say which batches it has had.
    from torch.utils.data import DataLoader

    dataset = PileDataset(store, BATCH)
    made = (
        dataset.dataloader(num_workers=2)
        if made_by == "dataloader"
        else DataLoader(dataset, batch_size=None, num_workers=2)
    )
    batches = iter(made)
    taken = [next(batches)["id"].numpy() for _ in range(3)]
    with pytest.raises(DaskShuffleValueError, match=r"dataloader\(stateful=True\)"):
        dataset.state_dict()
    rest = [batch["id"].numpy() for batch in batches]
    assert as_set(taken + rest) == as_set(batches_of_loader(store, 0))
    # A pass handed out to its end: the state says the next epoch, from its first batch.
    assert dataset.state_dict()["loader"] | {"epoch": 1, "batches": 0} == dataset.state_dict()["loader"]
    # A pass broken off is refused too, until set_epoch says where to go on.
    broken = iter(made)
    next(broken)
    del broken
    with pytest.raises(DaskShuffleValueError, match="broken off"):
        dataset.state_dict()
    dataset.set_epoch(1)
    assert (dataset.state_dict()["loader"]["epoch"], dataset.state_dict()["loader"]["batches"]) == (1, 0)


@needs_torch
def test_a_state_of_other_settings_is_refused(store: str) -> None:
    state = PileDataset(store, BATCH).state_dict()
    with pytest.raises(DaskShuffleValueError, match="Got a state whose settings differ"):
        PileDataset(store, BATCH + 1).load_state_dict(state)
    with pytest.raises(DaskShuffleValueError, match=r"Expected a dict returned by PileDataset.state_dict\(\)"):
        PileDataset(store, BATCH).load_state_dict({"epoch": 1})


@pytest.mark.slow
@needs_torch
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata 0.11 on torch 2.13
@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_resumes_exactly(store: str, num_workers: int) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def loader(dataset: PileDataset) -> object:
        made = dataset.dataloader(stateful=True, num_workers=num_workers)
        assert isinstance(made, stateful.StatefulDataLoader)
        return made

    whole_loader = loader(PileDataset(store, BATCH))
    whole = [ids_of(whole_loader) for _ in range(2)]
    first = loader(PileDataset(store, BATCH))
    batches = iter(first)  # type: ignore[call-overload]
    taken = [next(batches)["id"].numpy() for _ in range(9)]
    state = first.state_dict()  # type: ignore[attr-defined]
    del batches
    second = loader(PileDataset(store, BATCH))
    second.load_state_dict(state)  # type: ignore[attr-defined]
    rest = ids_of(second)
    assert same_batches(taken + rest, whole[0])
    assert same_batches(ids_of(second), whole[1])  # and the epoch after it


#: Two epochs of a DataLoader with two worker processes over a pile store on S3, as a script: its stderr is what a
#: user sees (under pytest a worker's log records go to pytest's handlers, copied into the worker, and are lost).
S3_EPOCHS_SCRIPT = """
import sys
import numpy as np
import s3fs
from torch.utils.data import DataLoader
from daskshuffle.torch import PileDataset

url, endpoint, cache, out, batch_size = sys.argv[1:]
options = {"client_kwargs": {"endpoint_url": endpoint}}
if __name__ == "__main__":
    loader = DataLoader(PileDataset(url, int(batch_size), storage_options=options, cache=cache), batch_size=None, num_workers=2)
    first = [batch["id"].numpy() for batch in loader]
    fs = s3fs.S3FileSystem(**options)
    chunks = [path for path in fs.find(url) if "/c/" in path]
    fs.rm(chunks)  # the store's rows are now only in the cache
    second = [batch["id"].numpy() for batch in loader]
    np.savez(out, chunks=len(chunks), first=np.concatenate(first), second=np.concatenate(second))
"""


@pytest.mark.slow
@pytest.mark.s3
@needs_torch
def test_dataloader_workers_over_s3_fill_the_cache_and_print_nothing(store: str, s3: Any, tmp_path: Path) -> None:
    """Two epochs with two worker processes: the second reads the cache alone, and stderr stays empty.

    The workers are forked after the main process has opened the store, so each
    inherits its open S3 sessions: collected in the worker, they used to print
    ``Unclosed client session``.
    """
    url = s3.put(store, "piles.zarr")
    (tmp_path / "epochs.py").write_text(S3_EPOCHS_SCRIPT)
    args = [url, s3.endpoint, str(tmp_path / "cache"), str(tmp_path / "ids.npz"), str(BATCH)]
    run = subprocess.run(
        [sys.executable, str(tmp_path / "epochs.py"), *args], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    ids = np.load(tmp_path / "ids.npz")
    # Every chunk file is cached; the cache's mark on its directory is no chunk.
    cached = [path for path in (tmp_path / "cache").rglob("*") if path.is_file() and not path.name.startswith(".")]
    assert ids["chunks"] > 0 and len(cached) == ids["chunks"]
    np.testing.assert_array_equal(np.sort(ids["first"]), np.arange(N_ROWS))
    np.testing.assert_array_equal(np.sort(ids["second"]), np.arange(N_ROWS))
    assert not np.array_equal(ids["first"], ids["second"])  # the next epoch, in another order
