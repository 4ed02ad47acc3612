"""dlrm-multiepoch: multi-epoch training components for TorchRec DLRM-style models."""

from dlrm_multiepoch.auto import AutoFreezeSchedule, AutoScheduleConfig, AutoSchedulePolicy
from dlrm_multiepoch.data import Batch, BatchLoader, InteractionData
from dlrm_multiepoch.freeze import FreezeScheduleWrapper
from dlrm_multiepoch.gates import GradientGate
from dlrm_multiepoch.lookup import (
    FusedKJTLookup,
    SingletonEmbeddingBagCollection,
    SmallTableEmbeddingBagCollection,
    count_all_to_all,
    dense_grad_embedding_bag,
)
from dlrm_multiepoch.schedule import PRESETS, FreezeSchedule, Window

__all__ = [
    "AutoFreezeSchedule",
    "AutoScheduleConfig",
    "AutoSchedulePolicy",
    "Batch",
    "BatchLoader",
    "FreezeSchedule",
    "FusedKJTLookup",
    "FreezeScheduleWrapper",
    "GradientGate",
    "InteractionData",
    "PRESETS",
    "SingletonEmbeddingBagCollection",
    "SmallTableEmbeddingBagCollection",
    "Window",
    "count_all_to_all",
    "dense_grad_embedding_bag",
]
