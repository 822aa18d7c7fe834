"""torch's ``DataLoader`` internals: whether a fetcher puts the dataset's items together into batches.

``_BaseDatasetFetcher`` (``torch.utils.data._utils.fetch``), the base class of
the fetcher a ``DataLoader`` (and torchdata's ``StatefulDataLoader``) creates in
each worker; its ``__init__`` calls ``iter(dataset)`` once ``auto_collation``
is set. No public API tells a dataset how its ``DataLoader`` collates. Checked
against torch 2.13 and torchdata 0.11 (:data:`CHECKED`). torch is imported when
:func:`is_collating_fetcher` is called, so that daskshuffle imports without it.
"""

from __future__ import annotations

import sys

__all__ = ["CHECKED", "is_collating_fetcher"]

#: The versions (major.minor) each function here was checked against.
CHECKED: dict[str, tuple[str, ...]] = {"torch": ("2.13",), "torchdata": ("0.11",)}


def is_collating_fetcher(caller: object) -> bool:
    """Whether ``caller`` is a ``DataLoader`` fetcher that puts items together into batches.

    A fetcher not recognised (another torch) is taken as one that does not;
    without torch imported nothing is a fetcher.

    Parameters
    ----------
    caller
        The object that called ``iter(dataset)``: the ``self`` of its frame.

    Examples
    --------
    >>> is_collating_fetcher(object())
    False
    """
    if sys.modules.get("torch") is None:  # no DataLoader without torch: nothing to import
        return False
    from torch.utils.data._utils.fetch import _BaseDatasetFetcher

    return isinstance(caller, _BaseDatasetFetcher) and bool(caller.auto_collation)
