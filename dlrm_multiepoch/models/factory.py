"""Model selection by ``--model``: a name of the app's models, or your own builder's import path."""

from typing import Dict

import torch

from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.import_path import is_import_path
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.dlrm import build_dlrm
from dlrm_multiepoch.models.multipath import build_multipath
from dlrm_multiepoch.models.user_model import ModelBuilder, build_user_model
from dlrm_multiepoch.names import MODELS, check_name

BUILDERS: Dict[str, ModelBuilder] = {
    "dlrm": build_dlrm,
    "dlrm_dcn": build_dlrm,
    "multipath": build_multipath,
}
assert tuple(BUILDERS) == MODELS, "a --model name without a builder (or the reverse): see dlrm_multiepoch/names.py"


def build_model(data: InteractionData, cfg: ModelConfig, dense_device: torch.device) -> torch.nn.Module:
    """The train module ``cfg.model`` names: ``forward(batch) -> (loss, output)``; an import path
    ``MODULE:NAME`` is imported and called like the app's own builders.

    Embedding tables are created on the meta device, for ``DistributedModelParallel``.
    """
    if is_import_path(cfg.model):
        return build_user_model(cfg.model, data, cfg, dense_device)
    check_name("--model", cfg.model, MODELS)
    return BUILDERS[cfg.model](data, cfg, dense_device)
