"""The quality table: :func:`report` measures an order at several scales, :func:`summary` prints it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._metrics import (
    Measure,
    cobatch_overlap,
    contingency,
    displacement,
    diversity,
    label_mix,
    lag_correlation,
    parse_order,
    rank_correlation,
    spread,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["report", "summary"]

#: Predicted co-batch overlap over independent shuffles above which a loader's epochs are called dependent.
EPOCHS_WITHIN = 2.0


def _epochs(loader: Any) -> tuple[Measure, str | None]:
    """What ``loader``'s mixing of units predicts for the next epoch's co-batch overlap, and advice when it is high."""
    from ..epochs import unit_excess

    settings = loader.settings
    if settings.unit_rows is None or settings.group_rows is None:  # an order of its own reads: no prediction
        return Measure("epoch independence", f"order {settings.order!r}", float("nan"), 1.0, 0.2), None
    # The epoch's rows: this rank's, times the ranks (ranks share the units of one deal).
    predicted = unit_excess(int(loader.n_rows) * settings.world_size, settings.unit_rows, settings.group_rows)
    k = max(1, settings.group_rows // settings.unit_rows)
    what = f"{k} units of {settings.unit_rows:,} rows mixed"
    measure = Measure("epoch independence", what, predicted, 1.0, 0.2)
    if not predicted > EPOCHS_WITHIN:
        return measure, None
    return measure, (
        f"PileLoader mixes groups of {k} units of {settings.unit_rows:,} rows: rows that share a batch share one "
        f"again next epoch about {predicted:,.1f}x as often as under independent shuffles. Give it a larger "
        "budget (order=ds.orders.Piles(budget='8GiB')), or draw a fresh shuffle each epoch with "
        "daskshuffle.EpochShuffler."
    )


def report(
    order: Any,
    *,
    batch_size: int = 1024,
    block_size: int | None = None,
    n_piles: int | None = None,
    previous: Any = None,
    labels: Any = None,
    loader: Any = None,
) -> pd.DataFrame:
    """Measure how shuffled ``order`` is, next to a uniform shuffle of the same size.

    Parameters
    ----------
    order : array of int
        Source positions ``0..n-1``, in the order the rows were yielded.
    batch_size : int, default 1024
        The batch size of training: the smallest scale measured.
    block_size : int, optional
        Rows of a source file or chunk: adds the distinct blocks per batch.
    n_piles : int, optional
        Adds the scale of a pile (``n / n_piles`` rows).
    previous : array of int, optional
        The order of the epoch before: adds the share of batch-mates that meet again.
    labels : array, optional
        The label of each source position: adds how far each batch's label mix is from the whole
        data's, against a band drawn from eight uniform shuffles.
    loader : PileLoader, optional
        The loader that yielded ``order``: adds how often batch-mates will meet again next epoch
        over independent shuffles, as its budget predicts ("not uniform" above 2x), and then
        ``table.attrs["advice"]``, which :func:`summary` prints.

    Returns
    -------
    pandas.DataFrame
        One row per measure: ``metric``, ``scale``, ``value``, ``uniform`` (expected), ``low`` and
        ``high`` (five standard deviations) and ``verdict``.
    """
    import pandas as pd

    values = parse_order(order)
    n = int(values.shape[0])
    measures: list[Measure] = [rank_correlation(values), displacement(values), lag_correlation(values)]
    scales = [("batch", batch_size), *([("pile", max(2, n // n_piles))] if n_piles else [])]
    scales += [("1%", max(2, n // 100)), ("10%", max(2, n // 10))]
    measures += [spread(values, window, name) for name, window in scales if window < n]
    measures.append(contingency(values))
    if block_size:
        measures.append(diversity(values, batch_size, block_size))
    if labels is not None:
        measures.append(label_mix(values, labels, batch_size))
    if previous is not None:
        measures.append(cobatch_overlap(parse_order(previous), values, batch_size))
    advice = None
    if loader is not None:
        epochs, advice = _epochs(loader)
        measures.append(epochs)
    columns = ["metric", "scale", "value", "uniform", "low", "high", "verdict"]
    table = pd.DataFrame([{column: getattr(m, column) for column in columns} for m in measures])
    if advice is not None:
        table.attrs["advice"] = advice
    return table


def summary(table: pd.DataFrame, title: str = "") -> str:
    """The table of :func:`report` as a few readable lines.

    Examples
    --------
    >>> from daskshuffle import quality
    >>> print(quality.summary(quality.report(quality.orders.identity(10_000)), "no shuffle").splitlines()[0])
    no shuffle: 0 of 7 measures as uniform
    """
    uniform = int((table["verdict"] == "as uniform").sum())
    lines = [f"{title + ': ' if title else ''}{uniform} of {len(table)} measures as uniform"]
    for row in table.itertuples():
        lines.append(
            f"  {row.metric:<17} {row.scale:<22} {row.value:>10.4g}   uniform {row.uniform:>9.4g} "
            f"[{row.low:.4g}, {row.high:.4g}]   {row.verdict}"
        )
    if "advice" in table.attrs:
        lines.append(f"  advice: {table.attrs['advice']}")
    return "\n".join(lines)
