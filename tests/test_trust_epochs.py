"""EpochShuffler removes only the stores its own shuffles wrote, never a user's directory named like one."""

from __future__ import annotations

from pathlib import Path

import pytest

from daskshuffle import DaskShuffleValueError, EpochShuffler, PileStoreExistsError

OPTIONS = {"n_piles": 4, "progress": False}


def tree(path: Path) -> list[str]:
    return sorted(str(found.relative_to(path)) for found in path.rglob("*"))


def test_names_of_epochs_never_reached_are_left(source: str, tmp_path: Path) -> None:
    workdir = tmp_path / "epochs"
    for name in ("epoch-00003.zarr", "epoch-00004.read"):
        (workdir / name).mkdir(parents=True)
        (workdir / name / "mine.txt").write_text("the user's")
    with EpochShuffler(source, workdir, n_epochs=5, batch_size=500, seed=1, shuffle_options=OPTIONS) as epochs:
        for loader in epochs:
            list(loader)
            break
    assert tree(workdir) == [
        "epoch-00003.zarr",
        "epoch-00003.zarr/mine.txt",
        "epoch-00004.read",
        "epoch-00004.read/mine.txt",
    ]


def test_a_refused_shuffle_leaves_the_directory_it_refused(source: str, tmp_path: Path) -> None:
    workdir = tmp_path / "epochs"
    (workdir / "epoch-00000.zarr").mkdir(parents=True)
    (workdir / "epoch-00000.zarr" / "mine.txt").write_text("the user's")
    with (
        pytest.raises(PileStoreExistsError, match="holds something else"),
        EpochShuffler(source, workdir, n_epochs=2, batch_size=500, seed=1, shuffle_options=OPTIONS) as epochs,
    ):
        next(iter(epochs))
    assert (workdir / "epoch-00000.zarr" / "mine.txt").read_text() == "the user's"


def test_a_second_shuffler_of_one_workdir_is_refused(source: str, tmp_path: Path) -> None:
    """Rank 0 holds the workdir: a second shuffler would reuse the first's stores as its own, and remove them."""
    workdir = tmp_path / "epochs"
    with EpochShuffler(source, workdir, n_epochs=2, batch_size=500, seed=1, shuffle_options=OPTIONS) as first:
        epochs = iter(first)
        rows = sum(len(batch["id"]) for batch in next(epochs))
        with pytest.raises(DaskShuffleValueError, match=r"Expected no other shuffle writing .*epochs'"):
            EpochShuffler(source, workdir, n_epochs=2, batch_size=500, seed=1, shuffle_options=OPTIONS)
        assert (workdir / "epoch-00000.zarr" / "zarr.json").exists(), "the first's store is left as it was"
        rows += sum(len(batch["id"]) for loader in epochs for batch in loader)
    assert not workdir.exists()
    with EpochShuffler(source, workdir, n_epochs=1, batch_size=500, seed=1, shuffle_options=OPTIONS) as again:
        assert sum(len(batch["id"]) for loader in again for batch in loader) * 2 == rows, "closed: free again"
