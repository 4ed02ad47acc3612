"""dlrm-multiepoch: multi-epoch training components for TorchRec DLRM-style models.

Every public component is importable from here. The exports load on first use
(PEP 562), so ``import dlrm_multiepoch.<config module>`` (the TorchX components, the
``dlrm-multiepoch`` command) does not load torch.

Example::

    from dlrm_multiepoch import FreezeScheduleWrapper, SemiSyncTrainPipeline
"""

from dlrm_multiepoch.lazy import lazy_exports

_EXPORTS = {
    "AutoFreezeSchedule": "dlrm_multiepoch.auto",
    "AutoScheduleConfig": "dlrm_multiepoch.auto",
    "AutoSchedulePolicy": "dlrm_multiepoch.auto",
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

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
