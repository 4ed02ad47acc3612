"""Data: real datasets encoded for TorchRec and the rank-sharded batch loader."""

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.config import DATASETS, DataConfig, load_dataset
from dlrm_multiepoch.data.dataset import (
    HISTORY_FEATURE,
    HISTORY_PAD,
    UNKNOWN_ID,
    BatchLoader,
    InteractionData,
    Split,
    TableSpec,
)
from dlrm_multiepoch.data.encode import IdMap
from dlrm_multiepoch.data.synthetic import synthetic_data

__all__ = [
    "Batch",
    "BatchLoader",
    "DATASETS",
    "DataConfig",
    "HISTORY_FEATURE",
    "HISTORY_PAD",
    "IdMap",
    "InteractionData",
    "Split",
    "TableSpec",
    "UNKNOWN_ID",
    "load_dataset",
    "synthetic_data",
]
