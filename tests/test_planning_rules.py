"""One set of planning rules (plan/_rules.py): ``explain`` predicts the shuffle's piles and levels, or its error."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
import zarr
from hypothesis import assume, event, given, settings, strategies as st

from daskshuffle import DaskShuffleError, explain, shuffle_zarr
from daskshuffle.pilestore import read_metadata
from daskshuffle.plan import DEFAULT_N_PILES
from daskshuffle.plan._level_plan import LevelPlan
from daskshuffle.plan._plan import auto_n_piles, block_rows
from daskshuffle.plan._rules import choose_layout
from daskshuffle.plan._scale_model import ScaleModel
from daskshuffle.shuffle._store_plan import _draw, plan_within_budget


def _outcome(call: Any) -> tuple[Any, DaskShuffleError | None]:
    try:
        return call(), None
    except DaskShuffleError as error:
        return None, error


def _same_error(found: BaseException | None, expected: BaseException | None) -> None:
    assert found is not None and expected is not None
    assert (type(found), str(found), found.parameter) == (type(expected), str(expected), expected.parameter)  # type: ignore[attr-defined]


def _levels(plan: Any) -> tuple[int, list[int]]:
    return (plan.n_levels, plan.fanouts) if isinstance(plan, LevelPlan) else (1, [])


def _predicted(model: ScaleModel) -> tuple[int, int, list[int]]:
    return model.n_piles, model.levels, [model.n_super] * (model.levels - 1)


@st.composite
def _shuffles(draw: st.DrawFn) -> dict[str, Any]:
    """The sizes of a shuffle small enough to draw its plan, with every kind of choice."""
    n_rows = draw(st.integers(1, 200_000))
    row_bytes = draw(st.integers(1, 512))
    # At most 300 blocks, each of whole rows and a few bytes more (explain's blocks, as a shuffle cuts them).
    rows_per_block = draw(st.integers(max(1, -(-n_rows // 300)), n_rows))
    block_memory = rows_per_block * row_bytes + draw(st.integers(0, row_bytes - 1))
    n_piles = draw(st.one_of(st.none(), st.just("auto"), st.integers(1, 3_000)))
    # From a row to the whole data: piles that cannot fit, that fit barely, and that fit easily.
    pile_memory = draw(st.integers(1, 2 * n_rows * row_bytes)) if draw(st.booleans()) else draw(st.integers(1, 2**20))
    return {
        "rows": n_rows,
        "row_bytes": row_bytes,
        "n_piles": n_piles,
        "block_memory": block_memory,
        "pile_memory": pile_memory,
        "levels": draw(st.one_of(st.just("auto"), st.integers(1, 4))),
        "min_read": draw(st.integers(1, 2**22)),
        "storage": draw(st.sampled_from(["local", "object"])),
        "seed": draw(st.integers(0, 2**32)),
    }


@settings(max_examples=200, deadline=None)
@given(_shuffles())
def test_explain_predicts_the_shuffles_piles_levels_and_errors(case: dict[str, Any]) -> None:
    n_rows, row_bytes, block_memory = case["rows"], case["row_bytes"], case["block_memory"]
    n_piles, pile_memory, levels, storage = case["n_piles"], case["pile_memory"], case["levels"], case["storage"]
    if n_piles == "auto" and row_bytes <= pile_memory:
        # Keep the plans small (blocks x piles), and leave "auto" room for a few rows a pile: with room for
        # one or two, the birthday problem makes it draw again until there are far more piles than rows.
        assume(auto_n_piles(n_rows, row_bytes, pile_memory) <= 20_000 and pile_memory >= 8 * row_bytes)
    step = block_rows(row_bytes, block_memory)
    lengths = [min(step, n_rows - start) for start in range(0, n_rows, step)]  # the blocks explain assumes
    model, predicted = _outcome(lambda: explain(**{k: v for k, v in case.items() if k != "seed"}))
    plan, error = _outcome(
        lambda: plan_within_budget(
            lengths,
            DEFAULT_N_PILES if n_piles is None else n_piles,
            case["seed"],
            row_bytes,
            pile_memory,
            levels=levels,
            block_nbytes=block_memory,
            storage=storage,
        )
    )
    event("refused" if predicted is not None else f"{model.levels if model else 0} levels")
    if predicted is not None:
        _same_error(error, predicted)
        return
    assert model is not None
    if plan is not None and (plan.n_piles, *_levels(plan)) == _predicted(model):
        return
    # The only way to differ: the plan drawn for the predicted layout had a pile too large for pile_memory.
    layout = choose_layout(
        n_rows,
        row_bytes,
        len(lengths),
        n_piles=DEFAULT_N_PILES if n_piles is None else n_piles,
        pile_nbytes=pile_memory,
        block_nbytes=block_memory,
        levels=levels,
        storage=storage,
    )
    assert (layout.n_piles, layout.levels, list(layout.fanouts)) == _predicted(model)
    event("a drawn pile overflowed")
    largest = int(_draw(lengths, layout, case["seed"]).pile_sizes.max()) * row_bytes
    assert largest > pile_memory
    if n_piles == "auto":
        assert plan is not None and plan.n_piles > model.n_piles
    else:
        assert error is not None and "Got a planned pile of" in str(error)
        assert model.overflow_probability > 0.0


def test_a_given_number_of_piles_that_cannot_fit_is_refused_before_drawing() -> None:
    """Refused whatever the seed; one that fits when equal is drawn, and refused only if its draw overflows."""
    for seed in range(20):
        _, error = _outcome(lambda seed=seed: plan_within_budget([300_000], 512, seed, 72, 32 * 1024))
        assert error is not None and "Got n_piles=512 instead, whose piles hold 42,188 bytes on average" in str(error)
    # 600 rows a pile and room for 640: a drawn pile of more than 640 rows happens, often.
    outcomes = [_outcome(lambda seed=seed: plan_within_budget([6_000], 10, seed, 1, 640)) for seed in range(20)]
    assert any(plan is not None for plan, _ in outcomes)
    assert any(error is not None and "Got a planned pile of" in str(error) for _, error in outcomes)


def test_auto_redraws_with_more_piles_and_chooses_levels_again() -> None:
    layout = choose_layout(10**6, 100, 10_000, n_piles="auto", pile_nbytes=10**6, block_nbytes=10**4, levels="auto")
    more = layout.after_overflow(2 * 10**6)
    assert more.n_piles == max(layout.n_piles + 1, int(layout.n_piles * 1.1))
    assert (
        more.levels_asked == "auto"
        and more.fanouts
        == choose_layout(
            10**6, 100, 10_000, n_piles=more.n_piles, pile_nbytes=10**6, block_nbytes=10**4, levels="auto"
        ).fanouts
    )


def _make_source(path: Path, n_rows: int, row_floats: int, chunk_rows: int) -> str:
    """One array of ``row_floats`` float64 a row: rows of ``8 * row_floats`` bytes."""
    group = zarr.open_group(str(path), mode="w")
    values = np.arange(n_rows * row_floats, dtype=np.float64).reshape(n_rows, row_floats)
    group.create_array("x", shape=values.shape, chunks=(chunk_rows, row_floats), dtype=values.dtype)[...] = values
    return str(path)


@pytest.mark.parametrize(
    ("n_rows", "row_floats", "chunk_rows", "arguments"),
    [
        # Explain once predicted 873 piles here, and the shuffle (n_piles=512 by default) raised.
        (300_000, 9, 50_000, {"pile_memory": "32KiB"}),
        # Explain once quietly dropped to 2 levels here, and the shuffle raised.
        (2_000, 9, 500, {"n_piles": 4, "levels": 3}),
        # Both agree on piles and levels: "auto" piles in several levels ("auto") on a local disk.
        (6_000, 2, 25, {"n_piles": "auto", "pile_memory": 3_000, "block_memory": 400, "storage": "local"}),
        (3_000, 2, 25, {"n_piles": 16, "levels": 3, "block_memory": 800, "storage": "local"}),
    ],
)
def test_a_shuffle_does_what_explain_predicts(
    tmp_path: Path, n_rows: int, row_floats: int, chunk_rows: int, arguments: dict[str, Any]
) -> None:
    source = _make_source(tmp_path / "raw.zarr", n_rows, row_floats, chunk_rows)
    storage: Literal["local", "object"] = arguments.pop("storage", "object")
    model, predicted = _outcome(lambda: explain(n_rows, 8 * row_floats, storage=storage, **arguments))
    dst = tmp_path / "piles.zarr"
    result, error = _outcome(lambda: shuffle_zarr(source, dst, seed=0, **arguments))
    if predicted is not None:
        _same_error(error, predicted)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.zarr"], "refused before writing"
        return
    assert model is not None and result is not None, error
    metadata = read_metadata(str(dst))
    assert metadata is not None
    levels = metadata.get("levels", {"n_levels": 1, "fanouts": []})
    assert (result.n_piles, levels["n_levels"], levels["fanouts"]) == _predicted(model)
    assert model.levels > 1, "a case of several levels"


def test_piles_of_a_row_or_two_are_refused_by_both_not_redrawn_without_end(tmp_path: Path) -> None:
    """pile_memory for two rows: 'auto' would make piles of about one row, which overflow at any count."""
    group = zarr.open_group(tmp_path / "raw.zarr", mode="w")
    group.create_array("x", data=np.arange(1_000, dtype="f8"), chunks=(100,))
    with pytest.raises(DaskShuffleError, match="piles of 8 rows or more") as predicted:
        explain(rows=1_000, row_bytes=8, n_piles="auto", pile_memory=16)
    with pytest.raises(DaskShuffleError, match="piles of 8 rows or more") as shuffled:
        shuffle_zarr(str(tmp_path / "raw.zarr"), str(tmp_path / "piles.zarr"), n_piles="auto", pile_memory=16)
    assert str(predicted.value) == str(shuffled.value)
    assert not (tmp_path / "piles.zarr").exists()


_REFUSE_IN_A_SUBPROCESS = """
import json, resource, sys, tracemalloc
import daskshuffle
source, dst, warm, n_piles = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
daskshuffle.shuffle_zarr(source, warm, n_piles=2, seed=0, progress=False)  # what a shuffle imports, imported
# At most 1 GiB more address space than the imports took: a plan that allocates first fails here, not the machine.
size = int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmSize:"))) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))
tracemalloc.start()
try:
    daskshuffle.shuffle_zarr(source, dst, n_piles=n_piles, seed=0, progress=False)
    outcome = {"error": None}
except BaseException as error:
    outcome = {"error": type(error).__name__, "message": str(error), "parameter": getattr(error, "parameter", None)}
print(json.dumps({**outcome, "allocated": tracemalloc.get_traced_memory()[1]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("n_piles", [10**7, 10**9, 10**18])
def test_an_impossible_number_of_piles_is_refused_at_once_by_explain_the_command_and_the_shuffle(
    tmp_path: Path, n_piles: int
) -> None:
    """Piles for 10 rows by the million: refused at once, before anything is allocated or written.

    "At once" is counted in bytes allocated (traced), not seconds: under 1 MiB.
    """
    import json
    import os
    import subprocess
    import sys
    import tracemalloc

    from click.testing import CliRunner
    from conftest import make_zarr_source

    from daskshuffle._cli._common import cli
    from daskshuffle._errors import DaskShuffleValueError

    source = make_zarr_source(tmp_path / "raw.zarr", 10)  # rows of 26 bytes: x 4 float32, y int16, id int64
    explain(10, 26)  # what explain imports (dask's parse_bytes), imported
    tracemalloc.start()
    with pytest.raises(DaskShuffleValueError, match="Expected a plan that takes at most 2 GiB") as predicted:
        explain(10, 26, n_piles=n_piles)
    assert tracemalloc.get_traced_memory()[1] < 2**20
    tracemalloc.stop()
    message = str(predicted.value)
    assert predicted.value.parameter == "n_piles"
    assert f"n_piles={n_piles:,} for 10 rows" in message and "use n_piles='auto' (1 here)" in message

    tracemalloc.start()
    command = CliRunner().invoke(cli, ["plan", "--rows", "10", "--row-bytes", "26", "--n-piles", str(n_piles)])
    assert tracemalloc.get_traced_memory()[1] < 2**20
    tracemalloc.stop()
    assert command.exit_code == 2 and "Expected a plan that takes at most 2 GiB" in command.output, command.output

    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    dst, warm = tmp_path / "piles.zarr", tmp_path / "warm" / "piles.zarr"
    child = subprocess.run(
        [sys.executable, "-c", _REFUSE_IN_A_SUBPROCESS, source, str(dst), str(warm), str(n_piles)],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )
    assert child.returncode == 0, child.stderr
    outcome = json.loads(child.stdout.splitlines()[-1])
    assert (outcome["error"], outcome["message"], outcome["parameter"]) == ("DaskShuffleValueError", message, "n_piles")
    assert outcome["allocated"] < 2**20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.zarr", "warm"], "refused before anything was written"


def test_the_plan_memory_bound_lets_every_documented_scale_through() -> None:
    """1 GiB to 100 TiB of 1 KiB rows as a shuffle plans them by default, and 1 TiB in one level, all fit."""
    for n_rows in (2**20, 100 * 2**20, 2**30, 10 * 2**30, 100 * 2**30):
        explain(n_rows, 1024, n_piles="auto")
        if n_rows <= 100 * 2**20:  # beyond, 512 piles would not fit 256 MiB each
            explain(n_rows, 1024)
    assert explain(2**30, 1024, n_piles="auto", levels=1).levels == 1  # a plan of 1 GiB, drawn in seconds
    # 10 TiB in one level would hold 101 GiB of counts: refused, pointing at levels.
    with pytest.raises(DaskShuffleError, match=r"levels='auto'"):
        explain(10 * 2**30, 1024, n_piles="auto", levels=1)
