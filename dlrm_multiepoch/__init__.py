"""dlrm-multiepoch: multi-epoch training components for TorchRec DLRM-style models.

Every public component is importable from here; each is imported on first use
(PEP 562), so ``import dlrm_multiepoch`` (and loading its TorchX component) does not
import torch or TorchRec.

Example::

    from dlrm_multiepoch import FreezeScheduleWrapper, SemiSyncTrainPipeline
"""

import importlib
from typing import Any, Dict, List

# name -> module that defines it
_EXPORTS: Dict[str, str] = {
    "Batch": "dlrm_multiepoch.data",
    "BatchLoader": "dlrm_multiepoch.data",
    "InteractionData": "dlrm_multiepoch.data",
    "FixedSchedule": "dlrm_multiepoch.freeze",
    "FreezeScheduleWrapper": "dlrm_multiepoch.freeze",
    "ScheduleSource": "dlrm_multiepoch.freeze",
    "GradientGate": "dlrm_multiepoch.gates",
    "FusedKJTLookup": "dlrm_multiepoch.lookup",
    "SingletonEmbeddingBagCollection": "dlrm_multiepoch.lookup",
    "SmallTableEmbeddingBagCollection": "dlrm_multiepoch.lookup",
    "count_all_to_all": "dlrm_multiepoch.lookup",
    "dense_grad_embedding_bag": "dlrm_multiepoch.lookup",
    "SemiSyncTrainPipeline": "dlrm_multiepoch.pipeline",
    "StalenessMeter": "dlrm_multiepoch.pipeline",
    "make_train_pipeline": "dlrm_multiepoch.pipeline",
    "PRESETS": "dlrm_multiepoch.schedule",
    "FreezeSchedule": "dlrm_multiepoch.schedule",
    "Window": "dlrm_multiepoch.schedule",
    "EmbeddingModule": "dlrm_multiepoch.tables",
    "embedding_modules": "dlrm_multiepoch.tables",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dlrm_multiepoch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_EXPORTS))
