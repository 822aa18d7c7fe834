"""daskshuffle.torch: the loader as a PyTorch IterableDataset, with DataLoader workers and torch.distributed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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
