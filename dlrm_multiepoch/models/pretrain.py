"""Self-supervised pre-training of the tables: predict each row's item from its context.

The tables are exactly those of the multi-path model (:class:`MultiPathSparseArch`,
same names and shapes), so :func:`~dlrm_multiepoch.train.pretrained.save_tables`
output loads straight into it (or into TorchRec's DLRM, which names its tables alike).
"""

from typing import Optional, Tuple

import torch
from torch import nn
from torchrec.modules.mlp import MLP

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.dlrm import ModelOutput
from dlrm_multiepoch.models.losses import in_batch_info_nce
from dlrm_multiepoch.models.multipath_tables import EmbeddingViews, MultiPathSparseArch, TableEmbeddings, max_history_length


class CoOccurrenceObjective(nn.Module):
    """InfoNCE between a row's context and its item, the batch's other items as negatives.

    The context is every pooled feature of the row (user, user and item side features)
    plus the mean of the user's history; a small MLP maps it to the item space. Every
    table gets a gradient: the pooled ones through the query, the item table through
    the target and the history.

    Args:
        num_pooled_features: pooled features in ``TableEmbeddings.pooled``.
        embedding_dim: ``D``.
        temperature: InfoNCE temperature.
        device: where the query tower lives.
    """

    def __init__(
        self, num_pooled_features: int, embedding_dim: int, temperature: float, device: Optional[torch.device] = None
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"--contrastive_temperature must be positive, got {temperature}")
        self.temperature = temperature
        in_features = (num_pooled_features + 1) * embedding_dim
        self.query_tower = MLP(
            in_features, [2 * embedding_dim, embedding_dim], device=device, activation_on_last=False
        )

    def forward(self, tables: TableEmbeddings, weights: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(tables.history.shape[1], device=weights.device)
        in_history = (positions[None, :] < tables.history_lengths[:, None]).to(tables.history.dtype)
        history_mean = (tables.history * in_history[..., None]).sum(dim=1) / in_history.sum(
            dim=1, keepdim=True
        ).clamp_min(1.0)
        query = self.query_tower(torch.cat([tables.pooled, history_mean], dim=1))
        real = weights > 0
        loss = in_batch_info_nce(query, tables.candidate, tables.candidate_ids, real, real, self.temperature)
        return loss, loss.detach()


class CoOccurrencePretrain(nn.Module):
    """``forward(batch) -> (loss, ModelOutput)`` over the multi-path model's tables (the train pipelines' contract;
    the output's ``losses`` has the one term ``contrastive``, its logits and labels no task).

    Attributes:
        sparse_arch: the tables being pre-trained.
        objective: the query tower and loss (discarded after pre-training).

    Example::

        model = build_pretrain_model(data, ModelConfig(embedding_dim=16), torch.device("cpu"))
        loss, output = model(batch)
    """

    def __init__(self, sparse_arch: MultiPathSparseArch, max_history_length: int, objective: CoOccurrenceObjective):
        super().__init__()
        self.sparse_arch = sparse_arch
        self.embedding_views = EmbeddingViews(sparse_arch, max_history_length)
        self.objective = objective

    def forward(self, batch: Batch) -> Tuple[torch.Tensor, ModelOutput]:
        loss, logged = self.objective(self.embedding_views(self.sparse_arch(batch.sparse_features)), batch.weights)
        no_task = batch.weights.new_zeros((batch.weights.shape[0], 0))
        return loss, ModelOutput(logged, {"contrastive": logged}, no_task, no_task, batch.weights.detach())


def build_pretrain_model(
    data: InteractionData,
    cfg: ModelConfig,
    dense_device: torch.device,
    sparse_device: torch.device = torch.device("meta"),
) -> CoOccurrencePretrain:
    """The pre-training module for ``data``: tables as ``--model multipath`` builds them.

    Args:
        data: table layout (needs the ``history`` feature, like the multi-path model).
        cfg: ``embedding_dim`` and ``contrastive_temperature`` are used.
        dense_device: where the query tower lives.
        sparse_device: where the tables are created (``meta`` for sharding).
    """
    sparse_arch = MultiPathSparseArch(data, cfg.embedding_dim, sparse_device)
    objective = CoOccurrenceObjective(
        len(sparse_arch.pooled_features), cfg.embedding_dim, cfg.contrastive_temperature, dense_device
    )
    return CoOccurrencePretrain(sparse_arch, max_history_length(data), objective)
