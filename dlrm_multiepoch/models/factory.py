"""Model selection by name (``--model``)."""

from typing import Callable, Dict

import torch

from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.dlrm import build_dlrm
from dlrm_multiepoch.models.multipath import build_multipath
from dlrm_multiepoch.names import MODELS, check_name

ModelBuilder = Callable[[InteractionData, ModelConfig, torch.device], torch.nn.Module]

BUILDERS: Dict[str, ModelBuilder] = {
    "dlrm": build_dlrm,
    "dlrm_dcn": build_dlrm,
    "multipath": build_multipath,
}
assert tuple(BUILDERS) == MODELS, "a --model name without a builder (or the reverse): see dlrm_multiepoch/names.py"


def build_model(data: InteractionData, cfg: ModelConfig, dense_device: torch.device) -> torch.nn.Module:
    """The train module named by ``cfg.model``: ``forward(batch) -> (loss, ModelOutput)``.

    Embedding tables are created on the meta device, for ``DistributedModelParallel``.
    """
    check_name("--model", cfg.model, MODELS)
    return BUILDERS[cfg.model](data, cfg, dense_device)
