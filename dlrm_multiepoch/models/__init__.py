"""Models: DLRM-style multi-task models built from a dataset's table layout (exports load on first use)."""

from dlrm_multiepoch.lazy import lazy_exports

_EXPORTS = {
    "ModelConfig": "dlrm_multiepoch.models.config",
    "ModelOutput": "dlrm_multiepoch.models.dlrm",
    "MultiTaskTrain": "dlrm_multiepoch.models.dlrm",
    "build_dlrm": "dlrm_multiepoch.models.dlrm",
    "embedding_bag_configs": "dlrm_multiepoch.models.dlrm",
    "BatchAdapter": "dlrm_multiepoch.models.batch_adapter",
    "ModelBuilder": "dlrm_multiepoch.models.user_model",
    "MODELS": "dlrm_multiepoch.models.factory",
    "build_model": "dlrm_multiepoch.models.factory",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
