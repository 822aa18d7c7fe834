"""Where bytes live: paths and URLs resolved through fsspec, locks, manifests."""

from ._access import access_error, storage_failure
from ._cache import Cache, StoreCache, parse_cache
from ._fetch import IN_FLIGHT, Fetches
from ._location import Location, unreached
from ._lock import exclusive
from ._manifest import Manifest, run_marked, run_once
from ._paths import normalize

__all__ = [
    "IN_FLIGHT",
    "Cache",
    "Fetches",
    "Location",
    "Manifest",
    "StoreCache",
    "access_error",
    "exclusive",
    "normalize",
    "parse_cache",
    "run_marked",
    "run_once",
    "storage_failure",
    "unreached",
]
