"""The test suite's own hooks: tests that take long without a slow marker are named after the run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TIMED = """
import time

import pytest


def test_quick() -> None:
    pass


def test_unmarked_and_long() -> None:
    time.sleep(0.6)


@pytest.mark.slow
def test_marked_and_long() -> None:
    time.sleep(0.6)
"""


@pytest.mark.slow
def test_a_long_test_without_a_slow_marker_is_named_as_a_warning(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "tests" / "conftest.py")
    (tmp_path / "tests" / "test_timed.py").write_text(TIMED)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\nunmarked_slow_seconds = 0.4\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider", "--strict-config", "--strict-markers"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr  # a warning, not a failure
    section = run.stdout.split("tests over 0.4 s without @pytest.mark.slow", 1)[1]
    assert "tests/test_timed.py::test_unmarked_and_long" in section
    assert "test_marked_and_long" not in section and "test_quick" not in section
