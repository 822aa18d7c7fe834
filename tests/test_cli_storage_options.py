"""``--storage-option KEY=VALUE`` on the command line: the library's ``storage_options``, against the loopback S3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import make_zarr_source

from daskshuffle._cli._common import cli

pytestmark = pytest.mark.s3


def _no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An environment with no credentials at all, whose look-ups never leave this machine."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))


def _endpoint(s3: Any) -> str:
    return "client_kwargs=" + json.dumps({"endpoint_url": s3.endpoint})


@pytest.mark.slow
def test_credentials_given_as_storage_options_reach_the_shuffle_and_the_loader(
    tmp_path: Path, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from s3 import KEY, SECRET

    source = make_zarr_source(tmp_path / "raw.zarr", 2_000, chunk_rows=100)
    _no_credentials(monkeypatch, tmp_path)
    given = [
        "--storage-option",
        f"key={KEY}",
        "--storage-option",
        f"secret={SECRET}",
        "--storage-option",
        _endpoint(s3),
    ]
    shuffled = CliRunner().invoke(
        cli, ["zarr", source, s3.url("piles.zarr"), "--n-piles", "4", "--seed", "0", "--scheduler", "sync", *given]
    )
    assert shuffled.exit_code == 0, shuffled.output
    assert s3.fs.exists(f"{s3.bucket}/piles.zarr/zarr.json")
    measured = CliRunner().invoke(cli, ["quality", s3.url("piles.zarr"), "--batch-size", "64", "--json", *given])
    assert measured.exit_code == 0, measured.output
    assert json.loads(measured.output)
    shown = CliRunner().invoke(cli, ["info", s3.url("piles.zarr"), "--json", *given])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["n_rows"] == 2_000
    verified = CliRunner().invoke(cli, ["verify", s3.url("piles.zarr"), "--scheduler", "sync", *given])
    assert verified.exit_code == 0, verified.output
    assert "the same 2,000 rows" in verified.output


def test_the_credentials_error_says_the_command_line_spelling(
    tmp_path: Path, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 500, chunk_rows=100)
    _no_credentials(monkeypatch, tmp_path)
    result = CliRunner().invoke(
        cli,
        [
            "zarr",
            source,
            s3.url("piles.zarr"),
            "--n-piles",
            "2",
            "--seed",
            "0",
            "--scheduler",
            "sync",
            "--storage-option",
            _endpoint(s3),
        ],
    )
    assert result.exit_code != 0
    message = " ".join(result.output.split())
    assert "no usable credentials" in message, message
    assert (
        "pass them (--storage-option key=... --storage-option secret=..., or --storage-option profile=...; "
        "--storage-option anon=true for a public bucket)" in message
    ), message
    assert "storage_options" not in message
    assert s3.fs.ls(s3.bucket, refresh=True) == []


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (["anon=true", "profile=dev", "key=123"], {"anon": True, "profile": "dev", "key": 123}),
        (['client_kwargs={"endpoint_url": "http://h:1"}'], {"client_kwargs": {"endpoint_url": "http://h:1"}}),
        (['secret="123"', "token=a=b"], {"secret": "123", "token": "a=b"}),
    ],
)
def test_values_are_json_where_they_parse_else_text(given: list[str], expected: dict[str, Any]) -> None:
    import click

    from daskshuffle._cli._options import STORAGE_OPTIONS

    @click.command()
    @STORAGE_OPTIONS
    def command(storage_options: dict[str, Any] | None) -> None:
        click.echo(json.dumps(storage_options))

    arguments = [item for pair in given for item in ("--storage-option", pair)]
    result = CliRunner().invoke(command, arguments)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == expected
    assert CliRunner().invoke(command, []).output.strip() == "null"  # none given: the library's default


@pytest.mark.parametrize(
    ("given", "said"),
    [(["anon"], "Expected KEY=VALUE, such as anon=true"), (["anon=true", "anon=false"], "Got 'anon' twice")],
)
def test_a_malformed_storage_option_is_a_usage_error(given: list[str], said: str) -> None:
    arguments = [item for pair in given for item in ("--storage-option", pair)]
    result = CliRunner().invoke(cli, ["zarr", "raw.zarr", "piles.zarr", *arguments])
    assert result.exit_code == 2 and "--storage-option" in result.output and said in result.output, result.output
