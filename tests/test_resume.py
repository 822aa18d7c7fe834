"""The same call after a crash continues the shuffle: real Zarr and Parquet stores, real dask graphs, real kills."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import dask
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import Points, make_zarr_source, raise_at

import daskshuffle
from daskshuffle import (
    CorruptPileStoreError,
    DaskShuffleValueError,
    PileStoreExistsError,
    UnfinishedShuffleError,
    UnsafePathError,
    shuffle_parquet,
    shuffle_zarr,
)
from daskshuffle.pilestore import PART_BINDING, read_metadata

#: Small blocks and piles: many scatter and merge tasks, and seams between merges.
SMALL = {"n_piles": 12, "block_memory": "4KiB", "chunk_rows": 16}


def content_digest(path: Path) -> str:
    """Every file's name and bytes below ``path`` (not their times), but the run's identity and the seal it enters.

    Every run draws its own identity (a rerun is another run); a run continued
    keeps its own, and writes everything else as an uninterrupted run does.
    """
    metadata = read_metadata(path) or {}
    bound = [str(metadata[key]).encode() for key in ("run", "seal") if key in metadata]
    digest = hashlib.sha256()
    for file in sorted(path.rglob("*")):
        if file.is_file():
            digest.update(str(file.relative_to(path)).encode())
            data = file.read_bytes() if file.suffix != ".parquet" else parquet_content(file)
            for value in bound:
                data = data.replace(value, b"<bound>")
            digest.update(data)
    return digest.hexdigest()


def parquet_content(path: Path) -> bytes:
    """A part file's rows, row groups and schema with its metadata, but the binding to its run (also in the footer's
    serialized Arrow schema)."""
    parquet = pq.ParquetFile(path)
    table = parquet.read()
    metadata = {key: value for key, value in (table.schema.metadata or {}).items() if key != PART_BINDING}
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema.with_metadata(metadata)) as writer:
        writer.write_table(table.replace_schema_metadata(metadata))
    groups = [parquet.metadata.row_group(group).num_rows for group in range(parquet.metadata.num_row_groups)]
    return sink.getvalue().to_pybytes() + repr(groups).encode()


@pytest.fixture
def source(tmp_path: Path) -> str:
    return make_zarr_source(tmp_path / "raw.zarr", 1500, chunk_rows=50)


def test_a_run_interrupted_by_ctrl_c_continues_where_it_stopped(source: str, tmp_path: Path, points: Points) -> None:
    shuffle_zarr(source, tmp_path / "whole.zarr", seed=11, **SMALL)
    points.arm("scatter", raise_at(5))  # Ctrl-C as the fifth block is about to be read
    with dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
        shuffle_zarr(source, tmp_path / "piles.zarr", seed=11, **SMALL)
    assert read_metadata(str(tmp_path / "piles.zarr"))["complete"] is False, "marked incomplete until the end"
    with pytest.raises(UnfinishedShuffleError):
        daskshuffle.PileLoader(tmp_path / "piles.zarr", 100)

    scatters = points.arm("scatter")
    with dask.config.set(scheduler="sync"):
        result = shuffle_zarr(source, tmp_path / "piles.zarr", seed=11, **SMALL)
    n_blocks = sum(repeats for _, repeats in read_metadata(str(tmp_path / "piles.zarr"))["blocks"]["lengths"])
    assert n_blocks > 5 and len(scatters) == n_blocks - 4, "the 4 blocks done are not read again"
    assert content_digest(tmp_path / "piles.zarr") == content_digest(tmp_path / "whole.zarr")
    assert result.n_rows == 1500
    assert sorted(os.listdir(tmp_path)) == ["piles.zarr", "raw.zarr", "whole.zarr"], "no scratch left"


def test_a_resumed_zarr_shuffle_removes_only_the_files_zarr_was_writing(
    source: str, tmp_path: Path, points: Points
) -> None:
    """zarr writes each key through ``<key>.<uuid4 hex>.partial``: a kill leaves it, and the resumed run removes it.

    A file the library did not write stays: a user's ``notes.partial``, and a link (the run is refused).
    """
    points.arm("merge", raise_at(2))
    with dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
        shuffle_zarr(source, tmp_path / "piles.zarr", seed=5, **SMALL)
    points.disarm("merge")
    store = tmp_path / "piles.zarr"
    killed = [store / f"zarr.{uuid.uuid4().hex}.partial", store / "x" / "c" / f"0.{uuid.uuid4().hex}.partial"]
    mine = store / "notes.partial"
    outside = tmp_path / "outside.partial"
    link = store / "x" / "c" / f"1.{uuid.uuid4().hex}.partial"
    (store / "x" / "c").mkdir(exist_ok=True)
    for path in [*killed, mine, outside]:
        path.write_bytes(b"{")
    link.symlink_to(outside)

    with pytest.raises(UnsafePathError, match="symbolic link"):
        shuffle_zarr(source, store, seed=5, **SMALL)
    assert all(path.exists() for path in killed) and link.is_symlink() and outside.read_bytes() == b"{"

    link.unlink()
    shuffle_zarr(source, store, seed=5, **SMALL)
    assert not any(path.exists() for path in killed)
    assert mine.read_bytes() == b"{", "a file the library did not write stays"


def test_a_drawn_seed_is_the_interrupted_runs_and_a_finished_shuffle_returns_at_once(
    source: str, tmp_path: Path, points: Points
) -> None:
    points.arm("merge", raise_at(3))
    with dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
        shuffle_zarr(source, tmp_path / "piles.zarr", **SMALL)  # seed=None: drawn, and recorded first
    drawn = read_metadata(str(tmp_path / "piles.zarr"))["seed"]
    points.disarm("merge")

    scatters = points.arm("scatter")
    with dask.config.set(scheduler="sync"):
        resumed = shuffle_zarr(source, tmp_path / "piles.zarr", **SMALL)
    assert resumed.seed == drawn and scatters == [], "pass 1 was done: only merges ran"
    shuffle_zarr(source, tmp_path / "fresh.zarr", seed=drawn, **SMALL)
    assert content_digest(tmp_path / "piles.zarr") == content_digest(tmp_path / "fresh.zarr")

    scatters, merges = points.arm("scatter"), points.arm("merge")
    again = shuffle_zarr(source, tmp_path / "piles.zarr", **SMALL)
    assert again.seed == drawn and again.n_tasks == 0 and scatters == merges == [], "complete: it returns at once"
    with pytest.raises(PileStoreExistsError, match="overwrite=True"):
        shuffle_zarr(source, tmp_path / "piles.zarr", seed=drawn + 1, **SMALL)


def test_other_arguments_are_refused_and_overwrite_starts_over(source: str, tmp_path: Path, points: Points) -> None:
    points.arm("merge", raise_at())
    with dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
        shuffle_zarr(source, tmp_path / "piles.zarr", seed=3, **SMALL)
    points.disarm("merge")
    with pytest.raises(DaskShuffleValueError, match=r"same shuffle as the interrupted one.*Got other settings"):
        shuffle_zarr(source, tmp_path / "piles.zarr", seed=4, **SMALL)
    with pytest.raises(DaskShuffleValueError, match=r"Got other blocks"):
        shuffle_zarr(source, tmp_path / "piles.zarr", seed=3, **{**SMALL, "block_memory": "8KiB"})
    result = shuffle_zarr(source, tmp_path / "piles.zarr", seed=4, overwrite=True, **SMALL)
    assert result.seed == 4 and read_metadata(str(tmp_path / "piles.zarr"))["seed"] == 4
    assert sorted(os.listdir(tmp_path)) == ["piles.zarr", "raw.zarr"]


def test_a_parquet_shuffle_resumes_too(tmp_path: Path, points: Points) -> None:
    table = pa.table({"id": np.arange(2000), "text": [f"row {i}" for i in range(2000)]})
    pq.write_table(table, tmp_path / "raw.parquet", row_group_size=100)
    options = {"n_piles": 10, "seed": 5, "block_memory": "4KiB"}
    shuffle_parquet(tmp_path / "raw.parquet", tmp_path / "whole", **options)
    points.arm("merge", raise_at(4))
    with dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
        shuffle_parquet(tmp_path / "raw.parquet", tmp_path / "piles", **options)
    points.disarm("merge")
    with dask.config.set(scheduler="sync"):
        shuffle_parquet(tmp_path / "raw.parquet", tmp_path / "piles", **options)
    assert content_digest(tmp_path / "piles") == content_digest(tmp_path / "whole")


@pytest.mark.slow
def test_a_killed_client_is_continued_by_the_same_call(source: str, tmp_path: Path) -> None:
    """SIGKILL mid-merge: nothing runs on the way out, and the same call finishes the shuffle, byte for byte."""
    call = f"shuffle_zarr({source!r}, {str(tmp_path / 'piles.zarr')!r}, seed=21, n_piles=12, block_memory='4KiB', chunk_rows=16)"
    code = textwrap.dedent(
        f"""
        import os, signal, dask
        from daskshuffle import shuffle_zarr
        from daskshuffle.storage._crash import armed
        def killed(count):  # three merges done, then SIGKILL as the fourth begins
            if count == 4:
                os.kill(os.getpid(), signal.SIGKILL)
        with armed("merge", killed), dask.config.set(scheduler="sync"):
            {call}
        """
    )
    process = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    done = tmp_path / "piles.zarr.daskshuffle-tmp" / "_done"
    assert len([name for name in os.listdir(done) if name.startswith("merge-")]) == 3, "killed mid-merge"
    assert read_metadata(str(tmp_path / "piles.zarr"))["complete"] is False
    result = eval(call, {"shuffle_zarr": shuffle_zarr})
    shuffle_zarr(source, tmp_path / "whole.zarr", seed=21, n_piles=12, block_memory="4KiB", chunk_rows=16)
    assert result.n_rows == 1500
    assert content_digest(tmp_path / "piles.zarr") == content_digest(tmp_path / "whole.zarr")
    loaded = np.concatenate([batch["id"] for batch in daskshuffle.PileLoader(tmp_path / "piles.zarr", 100, seed=0)])
    assert sorted(loaded.tolist()) == list(range(1500))


def test_a_scatter_run_again_after_its_worker_was_lost_does_not_redo_its_work(tmp_path: Path) -> None:
    from daskshuffle.storage._location import Location
    from daskshuffle.storage._manifest import Manifest, run_once

    manifest = Manifest(Location.of(tmp_path / "_done"))
    calls: list[int] = []
    assert run_once(manifest, "scatter-3", calls.append, 1) is None and calls == [1]
    assert run_once(manifest, "scatter-3", calls.append, 2) is None and calls == [1], "marked: not run again"
    assert manifest.done() == {"scatter-3"}


@pytest.mark.parametrize("key", ["run", "row_group_rows"])
def test_a_parquet_store_resumed_without_its_binding_is_refused(tmp_path: Path, points: Points, key: str) -> None:
    from daskshuffle.pilestore._metadata import seal_of

    pq.write_table(pa.table({"id": np.arange(2000)}), tmp_path / "raw.parquet", row_group_size=100)
    options = {"n_piles": 10, "seed": 5, "block_memory": "4KiB"}
    points.arm("merge", raise_at(4))
    with dask.config.set(scheduler="sync"), pytest.raises(KeyboardInterrupt):
        shuffle_parquet(tmp_path / "raw.parquet", tmp_path / "piles", **options)
    points.disarm("merge")
    (sidecar,) = [path for path in tmp_path.rglob("_daskshuffle.json")]
    recorded = json.loads(sidecar.read_text())
    metadata = {name: value for name, value in recorded.items() if name not in ("seal", key)}
    sidecar.write_text(json.dumps({**metadata, "seal": seal_of(metadata)} if "seal" in recorded else metadata))
    with dask.config.set(scheduler="sync"), pytest.raises(CorruptPileStoreError, match=f"{key}. Got None instead"):
        shuffle_parquet(tmp_path / "raw.parquet", tmp_path / "piles", **options)
