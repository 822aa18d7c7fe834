"""dask's DataFrame internals: a collection's empty meta.

``DataFrame._meta`` (``dask.dataframe``), the empty pandas DataFrame with the
collection's columns, dtypes and index, known without computing anything. The
public ``head(0)`` computes the first partition; a schema read from ``dtypes``
alone has no index. Checked against dask 2026.8 (:data:`CHECKED`), where
``dask.dataframe`` is dask-expr's collection. Nothing is imported: the
function is handed the collection.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHECKED", "dataframe_meta"]

#: The versions (major.minor) each function here was checked against.
CHECKED: dict[str, tuple[str, ...]] = {"dask": ("2026.8",)}


def dataframe_meta(df: Any) -> Any:
    """The empty pandas DataFrame a dask DataFrame's partitions are like: columns, dtypes, index.

    Parameters
    ----------
    df
        A ``dask.dataframe.DataFrame``.

    Examples
    --------
    >>> import dask.dataframe as dd, pandas as pd
    >>> meta = dataframe_meta(dd.from_pandas(pd.DataFrame({"x": [1, 2, 3]}), npartitions=2))
    >>> len(meta), list(meta.columns), str(meta.dtypes["x"])
    (0, ['x'], 'int64')
    """
    return df._meta
