"""Where bytes live: paths and URLs resolved through fsspec, locks, manifests."""

from ._access import access_error, raise_storage_failure, reaching
from ._cache import Cache, StoreCache, parse_cache
from ._crash import crash_point
from ._deadline import bounded, request_deadline, within
from ._fetch import Fetches, Request, fetched_each
from ._identity import changed_entries, identify_files, identify_token, identify_tree
from ._leftovers import Leftover
from ._location import Location, glob_matches, unreached
from ._lock import exclusive
from ._manifest import Manifest, run_marked, run_once
from ._paths import normalize

__all__ = [
    "Cache",
    "Fetches",
    "Leftover",
    "Location",
    "Manifest",
    "Request",
    "StoreCache",
    "access_error",
    "bounded",
    "changed_entries",
    "crash_point",
    "exclusive",
    "fetched_each",
    "glob_matches",
    "identify_files",
    "identify_token",
    "identify_tree",
    "normalize",
    "parse_cache",
    "raise_storage_failure",
    "reaching",
    "request_deadline",
    "run_marked",
    "run_once",
    "unreached",
    "within",
]
