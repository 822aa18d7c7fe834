"""Two destinations of one name sharing a ``tmp=``: each run keeps its pieces apart, and reads only its own."""

from __future__ import annotations

from pathlib import Path

import dask
import numpy as np
import pytest
import zarr
from conftest import make_zarr_source, raise_at

import daskshuffle
from daskshuffle.storage._crash import armed

OPTIONS = {"n_piles": 4, "progress": False, "seed": 1}


def test_a_resumed_run_reads_its_own_pieces_not_those_of_another_destination_of_its_name(tmp_path: Path) -> None:
    mine = make_zarr_source(tmp_path / "mine.zarr", 1_000)
    other = make_zarr_source(tmp_path / "other.zarr", 1_000, first_id=10_000)  # the same shape, other rows
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # Both runs stopped once their pieces were written, before any merge: each resumable.
    for src, dst in ((mine, tmp_path / "a" / "piles.zarr"), (other, tmp_path / "b" / "piles.zarr")):
        dst.parent.mkdir()
        with (
            armed("merge", raise_at()),
            dask.config.set(scheduler="sync"),
            pytest.raises(daskshuffle.ShuffleInterrupted),
        ):
            daskshuffle.shuffle_zarr(src, dst, tmp=scratch, **OPTIONS)
    assert len(list(scratch.iterdir())) == 2, "each destination's pieces in a directory of their own"
    daskshuffle.shuffle_zarr(mine, tmp_path / "a" / "piles.zarr", tmp=scratch, **OPTIONS)
    ids = zarr.open_group(str(tmp_path / "a" / "piles.zarr"), mode="r")["id"][:]
    np.testing.assert_array_equal(np.sort(ids), np.arange(1_000))
