"""TorchRec's DLRM / DLRM-DCN with one logit per task, trainable from a ``Batch``."""

from typing import Dict, List, NamedTuple, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torchrec.models.dlrm import DLRM, DLRM_DCN
from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import InteractionData, TableSpec
from dlrm_multiepoch.models.config import ModelConfig, check_dense_arch


def embedding_bag_configs(tables: Sequence[TableSpec], embedding_dim: int) -> List[EmbeddingBagConfig]:
    """One ``EmbeddingBagConfig`` per dataset table, pooled as the table says
    (:attr:`TableSpec.pooling_mode`: multi-hot bags by ``--multi_hot_pooling``, the
    history's table by mean; a single id is unaffected, the mean of one = sum)."""
    return [
        EmbeddingBagConfig(
            name=t.name,
            embedding_dim=embedding_dim,
            num_embeddings=t.num_embeddings,
            feature_names=list(t.feature_names),
            pooling=PoolingType.MEAN if t.pooling_mode == "mean" else PoolingType.SUM,
        )
        for t in tables
    ]


class ModelOutput(NamedTuple):
    """Detached per-step outputs for metrics and logging.

    ``losses`` holds every named loss term (one per task, plus any auxiliary losses a
    model adds); each is logged as ``train/loss_<name>``.
    """

    loss: torch.Tensor
    losses: Dict[str, torch.Tensor]
    logits: torch.Tensor  # [B, num_tasks] ([B] from a BatchAdapter over a one-task model)
    labels: torch.Tensor  # the logits' shape
    weights: torch.Tensor  # [B]


def weighted_bce(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy over real samples (weight-0 padding contributes nothing)."""
    per_sample = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    return (per_sample * weights).sum() / weights.sum().clamp_min(1.0)


class MultiTaskTrain(nn.Module):
    """Wraps a model ``(dense, kjt) -> [B, num_tasks] logits`` for TorchRec train pipelines.

    ``forward(batch)`` returns ``(loss, ModelOutput)``, the contract of
    ``TrainPipelineSparseDist.progress``; the loss is the sum of per-task weighted BCE.

    Args:
        model: e.g. TorchRec's ``DLRM`` with ``over_arch_layer_sizes[-1] == len(tasks)``.
        tasks: task names, in logit column order.

    Example::

        train_model = MultiTaskTrain(DLRM(ebc, 4, [64, 16], [64, 32, 2]), ["like", "love"])
        loss, out = train_model(batch)
    """

    def __init__(self, model: nn.Module, tasks: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.tasks = list(tasks)

    def forward(self, batch: Batch) -> Tuple[torch.Tensor, ModelOutput]:
        logits = self.model(batch.dense_features, batch.sparse_features)
        labels = torch.stack([batch.labels[t] for t in self.tasks], dim=1)
        task_losses = {t: weighted_bce(logits[:, i], labels[:, i], batch.weights) for i, t in enumerate(self.tasks)}
        loss = torch.stack(list(task_losses.values())).sum()
        out = ModelOutput(
            loss=loss.detach(),
            losses={t: v.detach() for t, v in task_losses.items()},
            logits=logits.detach(),
            labels=labels,
            weights=batch.weights,
        )
        return loss, out


def build_dlrm(data: InteractionData, cfg: ModelConfig, dense_device: torch.device) -> MultiTaskTrain:
    """TorchRec ``DLRM``/``DLRM_DCN`` for ``data``, tables on the meta device for sharding.

    Args:
        data: provides tables, dense width and tasks.
        cfg: architecture (its text flags parsed here unless they were).
        dense_device: where the dense arch lives (the tables are materialised by
            ``DistributedModelParallel`` on their shards' devices).
    """
    check_dense_arch(cfg)  # parses the text flags unless validate() did
    ebc = EmbeddingBagCollection(
        tables=embedding_bag_configs(data.tables, cfg.embedding_dim), device=torch.device("meta")
    )
    common = dict(
        embedding_bag_collection=ebc,
        dense_in_features=len(data.dense_names),
        dense_arch_layer_sizes=list(cfg.dense_arch_sizes),
        over_arch_layer_sizes=[*cfg.over_arch_sizes, len(data.tasks)],
        dense_device=dense_device,
    )
    if cfg.model == "dlrm":
        model: nn.Module = DLRM(**common)
    elif cfg.model == "dlrm_dcn":
        model = DLRM_DCN(**common, dcn_num_layers=cfg.dcn_num_layers, dcn_low_rank_dim=cfg.dcn_low_rank_dim)
    else:
        raise ValueError(f"--model must be one of dlrm, dlrm_dcn; got {cfg.model!r}")
    return MultiTaskTrain(model, data.tasks)
