"""Data: real datasets encoded for TorchRec and the rank-sharded batch loader."""

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.synthetic import synthetic_data
from dlrm_multiepoch.data.dataset import (
    HISTORY_FEATURE,
    UNKNOWN_ID,
    BatchLoader,
    InteractionData,
    Split,
    TableSpec,
)

__all__ = [
    "Batch",
    "BatchLoader",
    "HISTORY_FEATURE",
    "InteractionData",
    "Split",
    "TableSpec",
    "UNKNOWN_ID",
    "synthetic_data",
]
