"""Pictures of an order: a Hilbert curve of output positions coloured by source position, and a heat map.

The Hilbert curve keeps output neighbours near each other in the picture: no shuffle is a smooth
gradient, order surviving at some scale shows as patches of that size, a uniform shuffle is noise.
Figures are ``matplotlib.figure.Figure`` objects (no pyplot state) and need the ``plot`` extra.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ._metrics import bin_counts, parse_order

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_heatmap", "plot_hilbert", "plot_orders"]

#: The Hilbert picture's side, in cells: at most this squared output positions are drawn.
SIDE = 256


def _figure(**options: Any) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - the plot extra is missing
        raise ImportError("pictures need matplotlib: pip install 'daskshuffle[plot]'") from error
    return Figure(**options)


def hilbert_xy(d: NDArray[np.int64], side: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The cells ``(x, y)`` of positions ``d`` along the Hilbert curve that fills a ``side`` x ``side`` grid."""
    x, y, t = np.zeros_like(d), np.zeros_like(d), d.copy()
    s = 1
    while s < side:
        rx = 1 & (t // 2)
        ry = 1 & (t ^ rx)
        turn = ry == 0
        flip = turn & (rx == 1)
        x[flip], y[flip] = s - 1 - x[flip], s - 1 - y[flip]
        x[turn], y[turn] = y[turn], x[turn].copy()
        x += s * rx
        y += s * ry
        t //= 4
        s *= 2
    return x, y


def hilbert_image(order: Any, side: int = SIDE) -> NDArray[np.float64]:
    """A ``side`` x ``side`` image: evenly spaced output positions along the Hilbert curve, valued source / n."""
    values = parse_order(order)
    n = int(values.shape[0])
    cells = min(n, side * side)
    positions = (np.arange(cells, dtype=np.int64) * n) // cells
    x, y = hilbert_xy(np.arange(cells, dtype=np.int64), side)
    image = np.full((side, side), np.nan)
    taken = values[positions]  # an array on storage (a zarr.Array) reads only the chunks of these
    image[y, x] = np.asarray(taken) / n
    return image


def plot_hilbert(order: Any, ax: Axes | None = None, title: str = "", side: int = SIDE) -> Figure:
    """Draw ``order`` as the Hilbert picture; on ``ax``, or on a new figure. Returns the figure.

    Examples
    --------
    >>> from daskshuffle import quality
    >>> figure = quality.plot_hilbert(quality.orders.identity(4096), title="no shuffle")
    >>> figure.savefig("identity.png")
    """
    ax = ax or _figure(figsize=(4, 4)).add_subplot()
    ax.imshow(hilbert_image(order, side), cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_axis_off()
    return ax.figure  # type: ignore[return-value]


def plot_heatmap(order: Any, ax: Axes | None = None, title: str = "", bins: int = 64) -> Figure:
    """Draw the output-bin x source-bin counts of ``order`` (uniform: flat; no shuffle: a diagonal)."""
    values = parse_order(order)
    table = bin_counts(values, max(2, min(bins, int(values.shape[0]))))
    ax = ax or _figure(figsize=(4, 4)).add_subplot()
    ax.imshow(table.T, origin="lower", cmap="magma", interpolation="nearest", aspect="auto")
    ax.set_xlabel("output position", fontsize=8)
    ax.set_ylabel("source position", fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)
    return ax.figure  # type: ignore[return-value]


def plot_orders(named: dict[str, Any], path: str | os.PathLike[str] | None = None) -> Figure:
    """Side by side, for each named order: its Hilbert picture above its heat map. Saved as PNG if ``path``.

    Examples
    --------
    >>> from daskshuffle import quality
    >>> o = quality.orders
    >>> figure = quality.plot_orders({"none": o.identity(4096), "uniform": o.uniform(4096)}, "orders.png")
    """
    figure = _figure(figsize=(2.6 * len(named), 5.4), layout="constrained")
    axes = figure.subplots(2, len(named), squeeze=False)
    for column, (name, order) in enumerate(named.items()):
        plot_hilbert(order, axes[0, column], title=name)
        plot_heatmap(order, axes[1, column])
    if path is not None:
        figure.savefig(os.fspath(path), dpi=110)
    return figure
