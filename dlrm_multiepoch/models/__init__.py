"""Models: DLRM-style multi-task models built from a dataset's table layout."""

from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.dlrm import ModelOutput, MultiTaskTrain, build_dlrm, embedding_bag_configs
from dlrm_multiepoch.models.factory import MODELS, build_model

__all__ = ["MODELS", "build_model", "ModelConfig", "ModelOutput", "MultiTaskTrain", "build_dlrm", "embedding_bag_configs"]
