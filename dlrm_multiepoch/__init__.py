"""dlrm-multiepoch: multi-epoch training components for TorchRec DLRM-style models.

Exports load on first use, so ``import dlrm_multiepoch.data.preprocess`` (numpy,
pyarrow) does not pay for importing torch and TorchRec.
"""

import importlib
from typing import Any

_EXPORTS = {
    "AutoFreezeSchedule": "dlrm_multiepoch.auto",
    "AutoScheduleConfig": "dlrm_multiepoch.auto",
    "AutoSchedulePolicy": "dlrm_multiepoch.auto",
    "Batch": "dlrm_multiepoch.data.batch",
    "BatchLoader": "dlrm_multiepoch.data.loader",
    "InteractionData": "dlrm_multiepoch.data.dataset",
    "FreezeScheduleWrapper": "dlrm_multiepoch.freeze",
    "GradientGate": "dlrm_multiepoch.gates",
    "FusedKJTLookup": "dlrm_multiepoch.lookup",
    "SingletonEmbeddingBagCollection": "dlrm_multiepoch.lookup",
    "SmallTableEmbeddingBagCollection": "dlrm_multiepoch.lookup",
    "count_all_to_all": "dlrm_multiepoch.lookup",
    "dense_grad_embedding_bag": "dlrm_multiepoch.lookup",
    "PRESETS": "dlrm_multiepoch.schedule",
    "FreezeSchedule": "dlrm_multiepoch.schedule",
    "Window": "dlrm_multiepoch.schedule",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dlrm_multiepoch' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_EXPORTS))
