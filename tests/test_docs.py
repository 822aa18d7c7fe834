"""The documentation builds and names every public name; docstring examples are not skipped."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


#: Modules whose docstring examples are still skipped rather than run. Remove a module once its
#: examples run (``pytest --doctest-modules``, in the directory ``conftest.py`` makes); none may join.
STILL_SKIPPED: set[str] = set()


def test_docstring_examples_run_rather_than_being_skipped() -> None:
    skipping = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "daskshuffle").rglob("*.py")
        if "doctest: +SKIP" in path.read_text()
    }
    assert skipping <= STILL_SKIPPED, f"make the examples of {sorted(skipping - STILL_SKIPPED)} run"


def test_every_public_name_is_in_the_api_reference() -> None:
    import daskshuffle

    reference = (ROOT / "docs" / "api.md").read_text()
    missing = [name for name in daskshuffle.__all__ if f"::: daskshuffle.{name}" not in reference]
    assert not missing, f"add {missing} to docs/api.md"


@pytest.mark.slow
def test_site_builds_strictly(tmp_path: Path) -> None:
    # Without -q: quiet, mkdocs logs no warnings, and --strict counts only what it logs. The tutorial notebook is
    # not executed here (30 s in a fresh clone): tests/test_notebooks.py runs it.
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "DASKSHUFFLE_DOCS_EXECUTE": "false"},
    )
    assert run.returncode == 0, run.stderr
    assert "Shuffle the rows of Zarr arrays" in (tmp_path / "api" / "index.html").read_text()


def test_the_examples_directory_holds_exactly_what_conftest_promises(doctest_stores: Path) -> None:
    import json

    import numpy as np
    import pyarrow.parquet as pq
    import zarr

    import daskshuffle

    assert sorted(path.name for path in doctest_stores.iterdir()) == [
        "corpus.jsonl",
        "day-2.zarr",
        "piles.parquet",
        "piles.zarr",
        "raw.parquet",
        "raw.zarr",
        "window.zarr",
    ]
    raw = zarr.open_group(doctest_stores / "raw.zarr", mode="r")
    assert raw.metadata.zarr_format == 3
    shapes = {name: (array.shape, str(array.dtype), array.chunks) for name, array in raw.arrays()}
    assert shapes == {
        "x": ((1000, 8), "float32", (100, 8)),
        "y": ((1000,), "int64", (100,)),
        "id": ((1000,), "int64", (100,)),
    }
    assert np.array_equal(zarr.open_array(doctest_stores / "raw.zarr", path="id", mode="r")[:], np.arange(1000))
    table = pq.read_table(doctest_stores / "raw.parquet")
    assert table.schema.names == ["id", "x", "label"] and table.column("id").to_pylist() == list(range(1000))
    assert [str(table.schema.field(name).type) for name in table.schema.names] == ["int64", "double", "string"]
    lines = (doctest_stores / "corpus.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"id": i} for i in range(1000)]
    for name, kind in [("piles.zarr", "zarr"), ("piles.parquet", "parquet")]:
        with daskshuffle.PileLoader(doctest_stores / name, batch_size=100, seed=0) as loader:
            ids = np.concatenate([np.asarray(batch["id"]) for batch in loader])
        assert sorted(ids.tolist()) == list(range(1000)) and ids.tolist() != list(range(1000)), kind
    window = daskshuffle.generations(doctest_stores / "window.zarr")
    assert [(g.generation, g.n_rows, g.seed) for g in window] == [(0, 1000, 0), (1, 1000, 1)]


def _python_blocks(markdown: str) -> list[str]:
    blocks, inside, lines = [], False, []
    for line in markdown.splitlines():
        if line.strip() == "```python":
            inside, lines = True, []
        elif inside and line.strip() == "```":
            inside = False
            blocks.append("\n".join(lines))
        elif inside:
            lines.append(line)
    return blocks


def _demo_sources(root: Path) -> None:
    """Two small stores where ``make demo`` writes its own."""
    from daskshuffle.demo import make_example

    make_example(root / "demo-data" / "raw", n_stores=2, rows_per_store=2_000, width=4)


@pytest.mark.slow
@pytest.mark.cluster
def test_the_readme_usage_runs_as_a_script(tmp_path: Path) -> None:
    """The quickstart, saved as a file under the guard the README names: ``Client()``'s workers import it again."""
    import textwrap

    readme = (ROOT / "README.md").read_text()
    quickstart = _python_blocks(readme[readme.index("## Quickstart") :])[0]
    assert 'if __name__ == "__main__":' in readme[readme.index("## Quickstart") :]
    script = 'if __name__ == "__main__":\n' + textwrap.indent(quickstart + "\nclient.close()\n", "    ")
    (tmp_path / "quickstart.py").write_text(script)
    run = subprocess.run([sys.executable, "quickstart.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    import daskshuffle

    with daskshuffle.PileLoader(tmp_path / "piles.zarr", batch_size=100_000) as loader:
        assert sorted(int(i) for batch in loader for i in batch["y"]) == list(range(1_000_000))


#: What the README's snippets take as given: a training job's names, and the inputs they name.
README_PRELUDE = """
import numpy as np, pandas as pd, xarray as xr, dask.dataframe as dd
rank, world_size, n_epochs, model = 0, 1, 1, None
def train_step(*arrays): pass
def checkpoint(model, state): pass
ddf = dd.from_pandas(pd.DataFrame({"id": np.arange(500), "value": np.arange(500) * 0.5}), npartitions=3)
"""


@pytest.mark.slow
def test_the_how_to_snippets_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python snippet of the Parquet and xarray guides, pasted into one session, as a reader would."""
    import numpy as np
    import pandas as pd
    import xarray as xr

    _demo_sources(tmp_path)
    (tmp_path / "events").mkdir()
    for index in range(2):
        pd.DataFrame({"id": np.arange(300) + 300 * index, "kind": ["a", "b", "c"] * 100}).to_parquet(
            tmp_path / "events" / f"part-{index}.parquet"
        )
    times = pd.date_range("2020-01-01", periods=400, freq="h")
    era5 = xr.Dataset({"t2m": (("time", "cell"), np.random.default_rng(0).random((400, 3)))}, coords={"time": times})
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__main__"}
    try:
        with warnings.catch_warnings():  # zarr's and xarray's notes on consolidated metadata are not failures here
            warnings.simplefilter("ignore")
            era5.to_zarr(tmp_path / "era5.zarr")
            exec(README_PRELUDE, namespace)
            for page in ["parquet.md", "xarray.md"]:
                for block in _python_blocks((ROOT / "docs" / "how-to" / page).read_text()):
                    exec(compile(block.replace("...", "pass"), page, "exec"), namespace)
    finally:
        client = namespace.get("client")
        if client is not None:
            client.close()  # type: ignore[attr-defined]
    assert (tmp_path / "events-piles.parquet").exists() and (tmp_path / "era5-piles-2.zarr").exists()


@pytest.mark.slow
def test_the_parameter_reference_is_current() -> None:
    pytest.importorskip("torch")
    import reference_tables

    assert (ROOT / "docs" / "reference" / "parameters.md").read_text() == reference_tables.page(), (
        "run: python tests/reference_tables.py"
    )


def test_every_error_is_in_the_errors_page() -> None:
    from daskshuffle import _errors

    page = (ROOT / "docs" / "reference" / "errors.md").read_text()
    missing = [name for name in _errors.__all__ if f"| `{name}` |" not in page]
    assert not missing, f"add {missing} to docs/reference/errors.md, with its cause and what to do"


def _results_sections() -> dict[str, str]:
    """Each anchored entry of benchmarks/RESULTS.md: its text up to the next anchor."""
    import re

    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    parts = re.split(r'<a id="([^"]+)"></a>', text)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_every_figure_of_the_readme_links_to_a_results_entry_that_holds_it() -> None:
    import re

    readme = (ROOT / "README.md").read_text()
    sections = _results_sections()
    links = re.findall(r"\[([^\]]*)\]\(benchmarks/RESULTS\.md#([^)]+)\)", readme)
    assert links, "the README's table of results links to its entries"
    for text, anchor in links:
        assert anchor in sections, f"no entry <a id={anchor!r}> in benchmarks/RESULTS.md"
        for figure in re.findall(r"\d[\d.,]*\d|\d", text):
            assert figure in sections[anchor], f"{figure} (README: {text!r}) is not in RESULTS.md#{anchor}"
    # A figure in the results table stands inside a link to its entry.
    table = [line for line in readme.splitlines() if line.startswith("| ") and "---" not in line][1:]
    for row in table:
        bare = re.sub(r"\[[^\]]*\]\([^)]*\)", "", row)
        assert not re.search(r"\d\.\d|\d+x\b|\dM\b", bare), f"a figure outside a link: {row}"


def _documented_defaults(doc: str) -> dict[str, str]:
    import re

    found = {}
    for line in doc.splitlines():
        match = re.match(r"\s*([\w, *]+) : .*, default (.+)$", line)
        if match is None:
            continue
        names = [name.strip() for name in match.group(1).split(",")]
        values = [value.strip() for value in match.group(2).split(" and ")]
        if len(values) == len(names):
            found.update(zip(names, values, strict=True))
        elif len(values) == 1:
            found.update(dict.fromkeys(names, values[0]))
    return found


def test_every_default_a_docstring_names_is_the_signatures() -> None:
    import ast
    import inspect

    pytest.importorskip("torch")
    import reference_tables

    checked = 0
    for name, point in reference_tables.entry_points():
        signature = inspect.signature(point)
        for parameter, text in _documented_defaults(point.__doc__ or "").items():
            if parameter not in signature.parameters:
                continue
            try:
                documented = ast.literal_eval(text.strip("`"))
            except (ValueError, SyntaxError):
                continue  # a default described in words ("the store's seed")
            actual = signature.parameters[parameter].default
            if isinstance(documented, str) and isinstance(actual, int) and documented[:1].isdigit():
                from dask.utils import parse_bytes

                documented = parse_bytes(documented)
            assert documented == actual, f"{name}({parameter}=...): the docstring says {text}, the signature {actual!r}"
            checked += 1
    assert checked > 30
