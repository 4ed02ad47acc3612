"""dlrm-multiepoch: multi-epoch training components for TorchRec DLRM-style models.

The exports load on first use (PEP 562), so ``import dlrm_multiepoch.<config module>``
(the TorchX components, the ``dlrm-multiepoch`` command) does not load torch.
"""

from dlrm_multiepoch.lazy import lazy_exports

_EXPORTS = {
    "AutoFreezeSchedule": "dlrm_multiepoch.auto",
    "AutoScheduleConfig": "dlrm_multiepoch.auto",
    "AutoSchedulePolicy": "dlrm_multiepoch.auto",
    "Batch": "dlrm_multiepoch.data",
    "BatchLoader": "dlrm_multiepoch.data",
    "InteractionData": "dlrm_multiepoch.data",
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

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
