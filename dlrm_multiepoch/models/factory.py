"""Model selection by name (``--model``)."""

from typing import Callable, Dict

import torch

from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.dlrm import build_dlrm
from dlrm_multiepoch.models.multipath import build_multipath

ModelBuilder = Callable[[InteractionData, ModelConfig, torch.device], torch.nn.Module]

MODELS: Dict[str, ModelBuilder] = {
    "dlrm": build_dlrm,
    "dlrm_dcn": build_dlrm,
    "multipath": build_multipath,
}


def build_model(data: InteractionData, cfg: ModelConfig, dense_device: torch.device) -> torch.nn.Module:
    """The train module named by ``cfg.model``: ``forward(batch) -> (loss, ModelOutput)``.

    Embedding tables are created on the meta device, for ``DistributedModelParallel``.
    """
    if cfg.model not in MODELS:
        raise ValueError(f"--model must be one of {sorted(MODELS)}, got {cfg.model!r}")
    return MODELS[cfg.model](data, cfg, dense_device)
