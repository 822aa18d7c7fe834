"""Where bytes live: paths and URLs resolved through fsspec, locks, manifests."""
