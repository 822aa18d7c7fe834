"""EpochShuffler removes only the stores its own shuffles wrote, never a user's directory named like one."""

from __future__ import annotations

from pathlib import Path

import pytest

from daskshuffle import EpochShuffler, PileStoreExistsError

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
