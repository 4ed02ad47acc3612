"""Models: DLRM-style multi-task models built from a dataset's table layout."""

from dlrm_multiepoch.models.dlrm import ModelConfig, ModelOutput, MultiTaskTrain, build_dlrm, embedding_bag_configs

__all__ = ["ModelConfig", "ModelOutput", "MultiTaskTrain", "build_dlrm", "embedding_bag_configs"]
