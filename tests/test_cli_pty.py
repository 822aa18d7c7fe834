"""The command line in a real terminal: a pseudo-terminal, where progress bars are drawn."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import interruptible, make_zarr_source

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


#: A bar part of the way, from 1% to 99%: some tasks are done and others under way on the workers.
PART_OF_THE_WAY = re.compile(rb"\| *[1-9][0-9]?% Completed")


def _interrupt_in_terminal(args: list[str], cwd: Path, started: Path, signum: int) -> tuple[int, str]:
    """Run the command in a terminal of its own; once ``started`` exists and its bar is part of the way, send ``signum``.

    SIGINT goes to the whole process group, the worker processes too, as Ctrl-C in a terminal does.
    """
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "daskshuffle", *args],
        cwd=cwd,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        start_new_session=True,
        preexec_fn=interruptible,
    )
    os.close(follower)
    output, sent = b"", False
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            process.kill()
            break
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        output += data
        if not sent and started.exists() and PART_OF_THE_WAY.search(output):
            if signum == signal.SIGINT:
                os.killpg(process.pid, signum)
            else:
                process.send_signal(signum)
            sent = True
    os.close(leader)
    assert sent, output.decode(errors="replace")
    return process.wait(timeout=60), output.decode(errors="replace")


@pytest.mark.slow
@pytest.mark.cluster
def test_an_interrupted_shuffle_says_what_it_left_in_one_line(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT, to the whole group), then SIGTERM to the run that continues it, then a run to the end.

    One shuffle interrupted twice: each signal is checked on its own run, and the
    second also shows that a continued run can itself be interrupted and continued.
    """
    # 30,000 rows in 64 KiB blocks into 8 piles: over a hundred tasks, seconds of them on two workers.
    make_zarr_source(tmp_path / "raw.zarr", 30_000, chunk_rows=300, width=16)
    args = ["zarr", "raw.zarr", "piles.zarr", "--n-piles", "8", "--seed", "0", "--block-memory", "64KiB"]
    args += ["--workers", "2", "--progress"]
    for signum, status in [(signal.SIGINT, 130), (signal.SIGTERM, 143)]:
        got, output = _interrupt_in_terminal(args, tmp_path, tmp_path / "piles.zarr.daskshuffle-tmp", signum)
        assert got == status, output
        said = [line for line in output.replace("\r", "\n").splitlines() if line.strip() and "Completed" not in line]
        assert len(said) == 1, output
        assert "Traceback" not in output and "Aborted" not in output and "Error" not in output, output
        assert re.search(
            r"Interrupted the shuffle into '[^']*piles.zarr'; it left [0-9.,]+ (?:[KMGTPE]i)?B in '[^']*piles.zarr' and",
            said[0],
        )
        assert "run it again the same way to continue it" in said[0], said[0]
    status_again, again = run_in_terminal(args[:-1], tmp_path)
    assert status_again == 0 and "30,000 rows into piles.zarr" in again, again
    assert sorted(path.name for path in tmp_path.iterdir()) == ["piles.zarr", "raw.zarr"]
