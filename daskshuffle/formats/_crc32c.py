"""The crc32c of bytes: with the GIL let go where the ``crc32c`` package (the ``fast-checksum`` extra) is installed.

The pile store's writers record checksums with it and its readers check them,
so one function serves both: google-crc32c (what zarr's own codec uses, always
installed with zarr) where the extra is not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import google_crc32c
import numpy as np
from numpy.typing import NDArray

__all__ = ["crc32c"]

try:
    # The `crc32c` package (the `fast-checksum` extra; LGPL) lets go of the GIL for buffers of 32 KiB or more, so the
    # event loop and the threads that read ahead run while a chunk is checked: an epoch of 1 GiB through the S3 model
    # took 0.985 s against 1.138 s with google-crc32c, which holds the GIL (and which zarr's own codec uses).
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
