"""The command line in a real terminal: a pseudo-terminal, where progress bars are drawn."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_zarr_source

pty = pytest.importorskip("pty", reason="pseudo-terminals are POSIX")


def run_in_terminal(args: list[str], cwd: Path, timeout: float = 120.0) -> tuple[int, str]:
    """Run ``python -m daskshuffle ARGS`` with stdin, stdout and stderr on a pseudo-terminal; its exit status and output."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "daskshuffle", *args], cwd=cwd, stdin=follower, stdout=follower, stderr=follower
    )
    os.close(follower)
    output = b""
    while True:
        ready, _, _ = select.select([leader], [], [], timeout)
        if not ready:
            process.kill()
            break
        try:
            data = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process is gone
            break
        if not data:
            break
        output += data
    os.close(leader)
    return process.wait(timeout=timeout), output.decode(errors="replace")


@pytest.mark.slow
def test_a_shuffle_with_a_progress_bar_ends_with_its_summary_alone(tmp_path: Path) -> None:
    with open(tmp_path / "extra.jsonl", "w") as file:
        for i in range(5_000):
            file.write(json.dumps({"i": i}) + "\n")
    make_zarr_source(tmp_path / "raw.zarr", 2_000, chunk_rows=100)
    for args, summary in [
        (["lines", "extra.jsonl", "-o", "out.jsonl", "--seed", "0", "--progress"], "5,000 rows into out.jsonl"),
        (
            ["zarr", "raw.zarr", "piles.zarr", "--seed", "0", "--n-piles", "4", "--progress"],
            "2,000 rows into piles.zarr",
        ),
    ]:
        status, output = run_in_terminal(args, tmp_path)
        assert status == 0, output
        assert "100% Completed" in output, "a bar is drawn in a terminal"
        # Nothing after the summary: no log line of the cluster closing behind the bar.
        tail = output[output.index(summary) :]
        assert "Traceback" not in output and "ERROR" not in output, output
        assert tail.strip().count("\n") == 0, tail
