"""The ``daskshuffle`` command line, end to end in subprocesses (``python -m daskshuffle``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click
import dask
import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from conftest import interruptible, make_zarr_source

from daskshuffle import shuffle_lines
from daskshuffle._cli._common import cli


def run(*args: str | Path, stdin: bytes = b"", cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "daskshuffle", *map(str, args)],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        timeout=120,
    )


def numbered(n: int) -> bytes:
    return b"".join(b"line %d %s\n" % (i, b"x" * (i % 13)) for i in range(n))


@pytest.mark.slow
def test_lines_from_stdin_to_stdout_are_the_library_s_bytes(tmp_path: Path) -> None:
    data = numbered(500)
    done = run(
        "lines", "-", "-o", "-", "--seed", "4", "--n-piles", "3", "--scheduler", "sync", stdin=data, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    (tmp_path / "in.txt").write_bytes(data)
    with dask.config.set(scheduler="sync"):
        shuffle_lines(tmp_path / "in.txt", tmp_path / "expected.txt", n_piles=3, seed=4)
    assert done.stdout == (tmp_path / "expected.txt").read_bytes(), "the CLI gives the library's bytes"
    assert b"500 rows" in done.stderr and b"seed=4" in done.stderr, "a summary on stderr, not in the output"
    assert sorted(os.listdir(tmp_path)) == ["expected.txt", "in.txt"], "the spooled stdin is removed"


@pytest.mark.slow
@pytest.mark.cluster
def test_lines_on_a_local_cluster_with_a_header(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_bytes(b"id,text\n" + numbered(300))
    (tmp_path / "b.csv").write_bytes(numbered(40))
    done = run(
        "lines", tmp_path / "a.csv", tmp_path / "b.csv", "-o", tmp_path / "out.csv", "--header", "--workers", "1",
        "--block-memory", "2KiB", "--memory-limit", "1GiB", "--seed", "0",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = (tmp_path / "out.csv").read_bytes().splitlines(keepends=True)
    assert out[0] == b"id,text\n"
    assert sorted(out[1:]) == sorted(numbered(300).splitlines(keepends=True) + numbered(40).splitlines(keepends=True))
    assert b"Traceback" not in done.stderr and b"INFO" not in done.stderr, "the cluster's logs stay quiet"


@pytest.mark.slow
def test_bad_arguments_and_missing_inputs_write_nothing(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_bytes(b"a\nb\n")
    usage = run("lines", "in.txt", "-o", "out.txt", "--n-piles", "0", cwd=tmp_path)
    assert usage.returncode == 2 and b"Expected a positive integer or 'auto'. Got '0' instead." in usage.stderr

    missing = run("lines", "in.txt", "missing.txt", "-o", "out.txt", "--scheduler", "sync", cwd=tmp_path)
    assert missing.returncode == 1
    assert missing.stderr.decode().strip().splitlines() == [
        "Error: Expected src to name existing text files. Got 'missing.txt', which does not exist, instead."
    ], "one clear line, no traceback"

    (tmp_path / "out.txt").write_bytes(b"keep\n")
    exists = run("lines", "in.txt", "-o", "out.txt", "--scheduler", "sync", cwd=tmp_path)
    assert exists.returncode == 1 and b"pass --overwrite to replace it" in exists.stderr
    assert (tmp_path / "out.txt").read_bytes() == b"keep\n"

    # A bad value the library finds is a usage error too, named as the option.
    size = run("lines", "in.txt", "-o", "x.txt", "--scheduler", "sync", "--pile-memory", "lots", cwd=tmp_path)
    assert size.returncode == 2, size.stderr
    assert b"Invalid value for '--pile-memory'" in size.stderr and b"Expected --pile-memory to be a size" in size.stderr

    both = run("lines", "in.txt", "-o", "x.txt", "--scheduler", "sync", "--workers", "2", cwd=tmp_path)
    assert both.returncode == 2 and b"Expected either --scheduler or --workers" in both.stderr

    debug = run("lines", "missing.txt", "-o", "x.txt", "--scheduler", "sync", "--debug", cwd=tmp_path)
    assert debug.returncode == 1 and b"Traceback" in debug.stderr and b"SourceNotFoundError" in debug.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.txt"], "nothing is written"


@pytest.mark.slow
@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_run_leaves_no_output(tmp_path: Path, signal_number: int) -> None:
    """Ctrl-C cleans up everything; even a kill leaves nothing at OUT that looks complete."""
    (tmp_path / "big.txt").write_bytes(numbered(300_000))
    process = subprocess.Popen(
        [sys.executable, "-m", "daskshuffle", "lines", "big.txt", "-o", "out.txt", "--scheduler", "sync",
         "--block-memory", "64KiB", "--pile-memory", "256KiB", "--seed", "0"],
        cwd=tmp_path, stderr=subprocess.PIPE, preexec_fn=interruptible,
    )  # fmt: skip
    while not list(tmp_path.glob("out.txt*.daskshuffle-partial")):  # the output is being written: interrupt now
        assert process.poll() is None, "the run ended before it could be interrupted"
        time.sleep(0.002)
    process.send_signal(signal_number)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode != 0
    assert not (tmp_path / "out.txt").exists(), "nothing at OUT"
    if signal_number == signal.SIGINT:
        assert process.returncode == 130, stderr
        assert stderr.startswith(b"daskshuffle: Interrupted") and stderr.count(b"\n") == 1, stderr
        assert sorted(os.listdir(tmp_path)) == ["big.txt"], "no partial output and no pieces"


@pytest.mark.slow
def test_zarr_then_info(tmp_path: Path) -> None:
    src = make_zarr_source(tmp_path / "raw.zarr", 400, chunk_rows=50)
    done = run("zarr", src, tmp_path / "piles.zarr", "--n-piles", "4", "--seed", "9", "--variables", "id,y",
               "--scheduler", "threads")  # fmt: skip
    assert done.returncode == 0, done.stderr
    group = zarr.open_group(str(tmp_path / "piles.zarr"), mode="r")
    assert sorted(name for name, _ in group.arrays()) == ["id", "y"]
    assert np.array_equal(np.sort(group["id"][...]), np.arange(400))

    shown = run("info", tmp_path / "piles.zarr")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    for expected in ("complete: yes", "rows: 400", "piles: 4 (rows per pile: min", "seed: 9", "variables: id, y"):
        assert expected in text, text
    as_json = json.loads(run("info", tmp_path / "piles.zarr", "--json").stdout)
    assert as_json["n_rows"] == 400 and as_json["seed"] == 9 and as_json["complete"] is True
    assert "pile_offsets" not in as_json and as_json["rows_per_pile"]["min"] <= as_json["rows_per_pile"]["max"]
    offsets = json.loads(run("info", tmp_path / "piles.zarr", "--json", "--offsets").stdout)["pile_offsets"]
    assert len(offsets) == 5 and offsets[0] == 0 and offsets[-1] == 400

    # An interrupted shuffle: its store is there but not marked complete.
    group = zarr.open_group(str(tmp_path / "piles.zarr"), mode="r+")
    group.attrs["daskshuffle"] = {**group.attrs["daskshuffle"], "complete": False}
    incomplete = run("info", tmp_path / "piles.zarr")
    assert incomplete.returncode == 1
    assert "complete: no" in incomplete.stdout.decode() and b"did not finish" in incomplete.stderr

    missing = run("info", tmp_path / "nothing.zarr")
    assert missing.returncode == 1 and b"does not exist" in missing.stderr and b"Traceback" not in missing.stderr


def test_xarray_shuffles_a_dataset_that_zarr_refuses(tmp_path: Path) -> None:
    import xarray as xr

    from daskshuffle import shuffle_xarray

    dataset = xr.Dataset(
        {"x": (("sample", "feature"), np.arange(200.0).reshape(50, 4))},
        coords={"sample": np.arange(50), "feature": np.arange(4) * 10},
    )
    dataset.to_zarr(tmp_path / "raw.zarr", zarr_format=3, consolidated=False)
    refused = CliRunner().invoke(cli, ["zarr", str(tmp_path / "raw.zarr"), str(tmp_path / "z.zarr")])
    assert refused.exit_code == 1 and not (tmp_path / "z.zarr").exists()
    assert "shuffle_xarray(src, dst, dim='sample')" in refused.output, refused.output
    assert "daskshuffle xarray SRC DST --dim sample" in refused.output, refused.output
    done = CliRunner().invoke(cli, ["xarray", str(tmp_path / "raw.zarr"), str(tmp_path / "p.zarr"), "--dim", "sample",
                                    "--n-piles", "4", "--seed", "3", "--scheduler", "threads", "--quiet",
                                    "--verify"])  # fmt: skip
    assert done.exit_code == 0, done.output
    shuffle_xarray(tmp_path / "raw.zarr", tmp_path / "expected.zarr", "sample", n_piles=4, seed=3)
    shuffled, expected = xr.open_zarr(tmp_path / "p.zarr"), xr.open_zarr(tmp_path / "expected.zarr")
    # Each run has an identity of its own (and a seal that covers it): the rest is identical.
    recorded = [json.loads(data.attrs.pop("daskshuffle")) for data in (shuffled, expected)]
    assert [{k: v for k, v in r.items() if k not in ("run", "seal")} for r in recorded] == [
        {k: v for k, v in recorded[1].items() if k not in ("run", "seal")}
    ] * 2
    xr.testing.assert_identical(shuffled.load(), expected.load())
    np.testing.assert_array_equal(shuffled["x"].values[:, 0], shuffled["sample"].values * 4.0)
    one_path = CliRunner().invoke(cli, ["xarray", str(tmp_path / "raw.zarr"), "--dim", "sample"])
    assert one_path.exit_code != 0 and "Expected one SRC and a DST" in one_path.output


@pytest.mark.parametrize("command", [[], ["lines"], ["zarr"], ["xarray"], ["info"]])
def test_help_everywhere_with_examples(command: list[str]) -> None:
    shown = CliRunner().invoke(cli, [*command, "--help"])
    assert shown.exit_code == 0 and "Examples:" in shown.output and "daskshuffle" in shown.output


#: Each command with the arguments it needs, for the bad option values below.
COMMANDS = {
    "zarr": ["raw.zarr", "piles.zarr"],
    "parquet": ["raw", "piles"],
    "xarray": ["raw.zarr", "piles.zarr", "--dim", "time"],
    "lines": ["in.txt", "-o", "out.txt"],
    "verify": ["piles.zarr"],
    "append": ["piles.zarr", "day.zarr"],
    "evict": ["piles.zarr"],
    "compact": ["piles.zarr"],
    "plan": ["--rows", "10", "--row-bytes", "8"],
    "quality": ["ids.npy"],
}
BAD_OPTIONS = [
    *[(command, option, value) for command in ("zarr", "parquet", "xarray", "lines") for option, value in [
        ("--n-piles", "0"), ("--seed", "-1"), ("--seed", "many"), ("--pile-memory", "lots"),
        ("--block-memory", "0"), ("--memory-limit", "lots"), ("--workers", "0"), ("--threads-per-worker", "x")]],
    ("parquet", "--row-group-size", "0"), ("parquet", "--n-output-files", "-2"), ("parquet", "--compression", "zip"),
    ("xarray", "--chunk-rows", "none"), ("lines", "--n-output-files", "0"),
    ("verify", "--block-memory", "lots"), ("verify", "--memory-limit", "2x"), ("verify", "--workers", "0"),
    ("append", "--seed", "-1"), ("append", "--block-memory", "1.5.2"), ("append", "--memory-limit", "lots"),
    ("evict", "--keep-last", "0"), ("compact", "--memory-limit", "-1GiB"), ("compact", "--threads-per-worker", "0"),
    ("plan", "--rows", "many"), ("plan", "--row-bytes", "0"), ("plan", "--block-memory", "lots"),
    ("plan", "--pile-memory", "0"), ("plan", "--min-read", "x"), ("plan", "--workers", "0"), ("plan", "--n-piles", "0"),
    ("plan", "--levels", "9"), ("plan", "--storage", "tape"),
    ("quality", "--png", "missing/q.png"),
    ("quality", "--epochs", "0"), ("quality", "--batch-size", "x"), ("quality", "--block-size", "0"),
]  # fmt: skip


def assert_usage_error(result: Any, option: str) -> None:
    """Exit status 2, one line of error naming the option, no traceback."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    errors = [line for line in lines if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0] == lines[-1] and f"'{option}'" in errors[0], result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit), result.output


@pytest.mark.parametrize(("command", "option", "value"), BAD_OPTIONS)
def test_every_bad_option_value_is_a_usage_error(
    command: str, option: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, [command, *COMMANDS[command], option, value])
    assert_usage_error(result, option)


def test_a_library_error_about_an_argument_is_the_option_that_set_it(tmp_path: Path) -> None:
    """dst is -o/--output on the command line: named as the option, spelled as options, exit status 2."""
    (tmp_path / "in.txt").write_bytes(numbered(20))
    args = ["lines", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"), "--n-output-files", "2"]
    result = CliRunner().invoke(cli, [*args, "--scheduler", "sync"])
    assert_usage_error(result, "-o")
    assert "Expected --output to name 2 different files" in result.output, result.output


def test_arguments_in_messages_are_spelled_as_options_and_other_text_is_left_alone() -> None:
    """The command line spells the Argument parts of an error; it never rewrites the text around them."""
    from daskshuffle._cli._common import reported
    from daskshuffle._errors import Argument, DaskShuffleValueError, PileStoreExistsError

    @click.command()
    @click.option("--n-piles")
    @click.option("--overwrite", is_flag=True)
    @click.option("--header", is_flag=True)
    @click.option("--variables", metavar="NAMES")
    @click.argument("kind")
    def command(kind: str, **options: Any) -> None:
        with reported(debug=False):
            if kind == "exists":
                raise PileStoreExistsError(
                    ("Got dst; ", Argument("overwrite", True, passed=True), " (not overwrite=True, n_piles here)."),
                    parameter="overwrite",
                )
            raise DaskShuffleValueError(
                [
                    *("Expected ", Argument("n_piles"), " at most 4; ", Argument("n_piles", 4, passed=True), ", "),
                    *(Argument("header", False, passed=True), ", ", Argument("variables", ..., passed=True), ", or "),
                    *(Argument("seed", 3, passed=True), "."),
                ],
                parameter="n_piles",
            )

    exists = CliRunner().invoke(command, ["exists"])
    assert exists.exit_code == 1, exists.output
    assert exists.output == "Error: Got dst; pass --overwrite (not overwrite=True, n_piles here).\n"
    bad = CliRunner().invoke(command, ["bad"])
    assert_usage_error(bad, "--n-piles")
    assert (
        "Expected --n-piles at most 4; pass --n-piles 4, leave out --header, pass --variables NAMES, or pass seed=3."
        in bad.output
    ), bad.output
