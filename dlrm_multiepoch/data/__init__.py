"""Data: real datasets encoded for TorchRec and the rank-sharded batch loader (exports load on first use)."""

from dlrm_multiepoch.lazy import lazy_exports

_EXPORTS = {
    "Batch": "dlrm_multiepoch.data.batch",
    "DATASETS": "dlrm_multiepoch.data.config",
    "DataConfig": "dlrm_multiepoch.data.config",
    "load_dataset": "dlrm_multiepoch.data.config",
    "HISTORY_FEATURE": "dlrm_multiepoch.data.dataset",
    "HISTORY_PAD": "dlrm_multiepoch.data.dataset",
    "UNKNOWN_ID": "dlrm_multiepoch.data.dataset",
    "BatchLoader": "dlrm_multiepoch.data.dataset",
    "InteractionData": "dlrm_multiepoch.data.dataset",
    "Split": "dlrm_multiepoch.data.dataset",
    "TableSpec": "dlrm_multiepoch.data.dataset",
    "IdMap": "dlrm_multiepoch.data.encode",
    "synthetic_data": "dlrm_multiepoch.data.synthetic",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
