"""Data: sources encoded into dataset folders, streamed per rank as TorchRec batches.

The numpy-only modules (sources, preprocessing, the dataset store, the block shuffle)
import no torch; :class:`Batch` and :class:`BatchLoader` import torch and TorchRec when
first used. Importing this package registers the built-in sources.
"""

import importlib
from typing import Any

# The built-in sources add themselves to the registry (this order: the choices' order).
from dlrm_multiepoch.data import bookcrossing, movielens, interactions, criteo  # noqa: F401, E401
from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.data.dataset import (
    HISTORY_FEATURE,
    HISTORY_PAD,
    UNKNOWN_ID,
    InteractionData,
    Ragged,
    Split,
    SplitSource,
    TableSpec,
)
from dlrm_multiepoch.data.load import load_dataset, prepare_dataset
from dlrm_multiepoch.data.registry import SOURCES, Source, register_source
from dlrm_multiepoch.data.synthetic import synthetic_data

_LAZY = {"Batch": "dlrm_multiepoch.data.batch", "BatchLoader": "dlrm_multiepoch.data.loader"}

__all__ = [
    "Batch",
    "BatchLoader",
    "DataConfig",
    "HISTORY_FEATURE",
    "HISTORY_PAD",
    "InteractionData",
    "Ragged",
    "SOURCES",
    "Source",
    "Split",
    "SplitSource",
    "TableSpec",
    "UNKNOWN_ID",
    "load_dataset",
    "prepare_dataset",
    "register_source",
    "synthetic_data",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'dlrm_multiepoch.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
