"""Data: sources encoded into dataset folders, streamed per rank as TorchRec batches.

Exports load on first use: the numpy-only modules (sources, preprocessing, the dataset
store, the block shuffle) import no torch, and :class:`Batch` and :class:`BatchLoader`
import torch and TorchRec only when used. A built-in source is loaded from its module
when its name is first looked up (:mod:`~dlrm_multiepoch.data.registry`).
"""

from dlrm_multiepoch.lazy import lazy_exports

_EXPORTS = {
    "Batch": "dlrm_multiepoch.data.batch",
    "BatchLoader": "dlrm_multiepoch.data.loader",
    "DataConfig": "dlrm_multiepoch.data.config",
    "HISTORY_FEATURE": "dlrm_multiepoch.data.dataset",
    "HISTORY_PAD": "dlrm_multiepoch.data.dataset",
    "UNKNOWN_ID": "dlrm_multiepoch.data.dataset",
    "InteractionData": "dlrm_multiepoch.data.dataset",
    "Ragged": "dlrm_multiepoch.data.dataset",
    "Split": "dlrm_multiepoch.data.dataset",
    "SplitSource": "dlrm_multiepoch.data.dataset",
    "TableSpec": "dlrm_multiepoch.data.dataset",
    "load_dataset": "dlrm_multiepoch.data.load",
    "prepare_dataset": "dlrm_multiepoch.data.load",
    "SOURCES": "dlrm_multiepoch.data.registry",
    "Source": "dlrm_multiepoch.data.source",
    "register_source": "dlrm_multiepoch.data.registry",
    "synthetic_data": "dlrm_multiepoch.data.synthetic",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
