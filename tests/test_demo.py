"""``make demo`` runs ``python -m daskshuffle.demo``: it works, on small data."""

from __future__ import annotations

from pathlib import Path

import pytest
import zarr

from daskshuffle.demo import main


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--root", str(tmp_path / "demo"), "--rows-per-store", "3000"])
    out = capsys.readouterr().out
    assert "checked: 12,000 rows, each exactly once" in out
    assert "PileLoader: one epoch of 12 shuffled batches, each row once" in out
    # The two throughputs come with why piles are the default all the same.
    assert "(shuffled copy)\n  both hold the same rows in the same order; the copy is cut in larger chunks" in out
    assert "Piles are the default because PileLoader" in out and "deals them into new groups every epoch" in out
    # Captured output is no terminal: the shuffle's progress is one final line, not a redrawn bar.
    assert "\r" not in out and out.count("| 100% Completed |") == 1
    assert zarr.open_group(str(tmp_path / "demo" / "piles.zarr"), mode="r").attrs["daskshuffle"]["complete"]
