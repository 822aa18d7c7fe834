"""The public names of ``daskshuffle``: imported on first use (``lazy_loader``), typed here."""

from . import orders as orders
from ._config import config as config
from ._errors import (
    CorruptPileStoreError as CorruptPileStoreError,
    DaskShuffleError as DaskShuffleError,
    DaskShuffleTypeError as DaskShuffleTypeError,
    DaskShuffleValueError as DaskShuffleValueError,
    IncompletePileStoreError as IncompletePileStoreError,
    IneffectiveSettingWarning as IneffectiveSettingWarning,
    NoWorkersError as NoWorkersError,
    PileStoreExistsError as PileStoreExistsError,
    ShuffleInterrupted as ShuffleInterrupted,
    SourceChangedError as SourceChangedError,
    SourceMismatchError as SourceMismatchError,
    SourceNotFoundError as SourceNotFoundError,
    StorageAccessError as StorageAccessError,
    StorageFullError as StorageFullError,
    StorageNotFoundError as StorageNotFoundError,
    StoreChangedError as StoreChangedError,
    UnfinishedShuffleError as UnfinishedShuffleError,
    UnsafePathError as UnsafePathError,
    VerificationError as VerificationError,
)
from .epochs._streams import Stream as Stream
from .loader._loader import LoaderSettings as LoaderSettings, PileLoader as PileLoader
from .plan._scale import explain as explain
from .plan._scale_model import ScaleModel as ScaleModel
from .reshuffle._epochs import EpochShuffler as EpochShuffler
from .reshuffle._generations import (
    Generation as Generation,
    append as append,
    compact as compact,
    evict as evict,
    generations as generations,
)
from .shuffle._frames import shuffle_dataframe as shuffle_dataframe, shuffle_parquet as shuffle_parquet
from .shuffle._lines import shuffle_lines as shuffle_lines
from .shuffle._run import ShuffleResult as ShuffleResult
from .shuffle._shuffle import shuffle_zarr as shuffle_zarr
from .shuffle._verify import VerifyResult as VerifyResult, verify as verify
from .shuffle._xarray import shuffle_xarray as shuffle_xarray
from .storage._cache import Cache as Cache

__version__: str
__all__: list[str]
