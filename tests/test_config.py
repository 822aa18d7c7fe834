"""``daskshuffle.config``: the tuning knobs, set in code or the environment, checked, and documented in one table."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import fsspec
import pytest
from conftest import Configure

import daskshuffle as ds
from daskshuffle._config import DEFAULTS, float_setting, int_setting
from daskshuffle._parse import size_in_bytes
from daskshuffle.storage._fetch import Fetches

ROOT = Path(__file__).parents[1]


def _keys() -> dict[str, Any]:
    return {f"{section}.{name}": value for section, values in DEFAULTS.items() for name, value in values.items()}


def test_every_key_is_in_the_table_with_its_default() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z-]+\.[a-z-]+)` \| ([^|]+) \|", page, flags=re.MULTILINE))
    assert sorted(rows) == sorted(_keys()), "docs/configuration.md has one row a key, no more"
    for key, default in _keys().items():
        text = rows[key].strip()
        written = float(text) if isinstance(default, float) else size_in_bytes(text.replace(" ", ""))
        assert written == default, f"{key}: the table says {text}, the default is {default}"
        assert ds.config.get(key) == default


def test_a_value_set_in_code_holds_inside_the_block_only() -> None:
    with ds.config.set({"fetch.in-flight": 7, "fetch.kept-nbytes": "1MiB"}):
        fetches = Fetches(fsspec.filesystem("memory"))
        assert (int_setting("fetch.in-flight"), int_setting("fetch.kept-nbytes")) == (7, 2**20)
    assert int_setting("fetch.in-flight") == 256
    # What was made inside keeps its values, also through a pickle to a worker.
    copied = pickle.loads(pickle.dumps(fetches))
    assert copied.__getstate__()["in_flight"] == 7 and copied.__getstate__()["kept"] == 2**20


def test_environment_variables_set_values_as_dasks_do(tmp_path: Path) -> None:
    code = (
        "from daskshuffle._config import int_setting, float_setting\n"
        "print(int_setting('fetch.in-flight'), int_setting('loader.read-ahead-nbytes'), "
        "float_setting('fetch.timeout'))\n"
    )
    env = {
        **os.environ,
        "DASKSHUFFLE_FETCH__IN_FLIGHT": "1024",
        "DASKSHUFFLE_LOADER__READ_AHEAD_NBYTES": "1GiB",
        "DASKSHUFFLE_FETCH__TIMEOUT": "0.01",
        "PYTHONPATH": str(ROOT),
    }
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["1024", str(2**30), "0.01"]


@pytest.mark.parametrize(
    ("values", "error", "match"),
    [
        ({"fetch.in-flight": 0}, ds.DaskShuffleValueError, r"daskshuffle.config\['fetch.in-flight'\] to be a positive"),
        ({"fetch.in-flight": "many"}, ds.DaskShuffleTypeError, r"daskshuffle.config\['fetch.in-flight'\].*'many'"),
        ({"fetch.in-flight": True}, ds.DaskShuffleTypeError, r"fetch.in-flight"),
        ({"fetch.kept-nbytes": "lots"}, ds.DaskShuffleValueError, r"'fetch.kept-nbytes'\] to be a size such as"),
    ],
)
def test_a_wrong_value_is_refused_naming_its_key(values: dict[str, Any], error: type, match: str) -> None:
    with ds.config.set(values), pytest.raises(error, match=match):
        Fetches(fsspec.filesystem("memory"))


def test_a_wrong_number_of_seconds_is_refused(configure: Configure) -> None:
    configure({"fetch.timeout": -1.0})
    with pytest.raises(ds.DaskShuffleValueError, match=r"'fetch.timeout'\] to be a number of at least 0"):
        float_setting("fetch.timeout")
    configure({"fetch.timeout": "soon"})
    with pytest.raises(ds.DaskShuffleTypeError, match="Got 'soon' instead"):
        float_setting("fetch.timeout")


def test_the_read_ahead_budget_of_a_loader_made_under_a_setting(memory_store: str) -> None:
    """``prefetch="auto"`` takes ``loader.read-ahead-nbytes`` as its budget (what a budget does: test_fetch.py)."""
    with ds.config.set({"loader.read-ahead-nbytes": "24KiB"}), ds.PileLoader(memory_store, 100, seed=1) as loader:
        assert loader._piles.read_ahead == 24 * 2**10
    with ds.PileLoader(memory_store, batch_size=100, seed=1) as loader:
        assert loader._piles.read_ahead == 256 * 2**20
