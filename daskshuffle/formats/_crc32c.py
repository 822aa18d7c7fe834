"""The crc32c of bytes, which the pile store's writers record and its readers check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import google_crc32c
import numpy as np
from numpy.typing import NDArray

__all__ = ["crc32c"]

try:
    # The `crc32c` package (the `fast-checksum` extra; LGPL) lets go of the GIL for buffers of 32 KiB or more, so the
    # threads that read ahead run while a chunk is checked; google-crc32c (zarr's own) holds it.
    from crc32c import crc32c as _crc32c_package

    _released_crc32c: Callable[[Any], int] | None = _crc32c_package
except ImportError:  # the extra is installed where the tests run; a test imports without it
    _released_crc32c = None


def crc32c(data: NDArray[np.uint8] | bytes) -> int:
    """The crc32c of ``data``, a contiguous byte array: with the GIL let go where the ``crc32c`` package is installed.

    Examples
    --------
    >>> crc32c(np.frombuffer(b"123456789", dtype=np.uint8)) == 0xE3069283
    True
    """
    if isinstance(data, bytes):
        data = np.frombuffer(data, dtype=np.uint8)
    if _released_crc32c is not None:
        return int(_released_crc32c(data.data))
    view = data.view()
    view.flags.writeable = False  # google-crc32c takes read-only buffers only
    return int(google_crc32c.value(view))
