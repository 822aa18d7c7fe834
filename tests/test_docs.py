"""The documentation builds, and the examples in the pure layers' docstrings run."""

from __future__ import annotations

import doctest
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize("module", ["daskshuffle._plan", "daskshuffle._random"])
def test_docstring_examples(module: str) -> None:
    failures, tried = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failures == 0


def test_every_public_name_is_in_the_api_reference() -> None:
    import daskshuffle

    reference = (ROOT / "docs" / "api.md").read_text()
    missing = [name for name in daskshuffle.__all__ if f"::: daskshuffle.{name}" not in reference]
    assert not missing, f"add {missing} to docs/api.md"


def test_site_builds_strictly(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "Shuffle the rows of Zarr arrays" in (tmp_path / "api" / "index.html").read_text()
