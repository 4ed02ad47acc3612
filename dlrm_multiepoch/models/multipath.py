"""The reference multi-path, multi-task DLRM: one set of tables, three gradient paths.

::

    KJT ─► MultiPathSparseArch ─► EmbeddingViews ─┬─ gates["feature_cross"] ─► FeatureCrossPath ─┐
           EBC: pooled tables                     │  (+ DenseArch) DCN-v2 low-rank, MLP, head     ├─► logits
           EC:  item table, for the candidate     ├─ gates["sequence"] ─► SequencePath ───────────┘  [B, T]
                item AND the history              │  cross-attention, transformer, head
                                                  └─ gates["contrastive"] ─► NextItemContrastive (loss)

The shallow feature-cross path and the deep sequence path each have their own task
heads; their logits add up, so blocking one path's gate removes exactly that path's
gradient into the tables. The contrastive path is a training-only auxiliary loss.

Each ``gates[name]`` is a :class:`~dlrm_multiepoch.gates.GradientGate` of that name
(open: the identity), so ``--freeze_schedule 'gate:feature_cross=closed@[1,2)'`` blocks
one path's gradient into the tables without touching this file.
"""

from typing import Dict, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import nn
from torchrec.models.dlrm import DenseArch
from torchrec.modules.crossnet import LowRankCrossNet
from torchrec.modules.mlp import MLP
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.config_section import validated
from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.gates import GradientGate
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.models.dlrm import ModelOutput
from dlrm_multiepoch.models.losses import in_batch_info_nce, pairwise_ranking_loss, weighted_bce
from dlrm_multiepoch.models.multipath_tables import EmbeddingViews, MultiPathSparseArch, max_history_length

# Names of the places where the tables' output enters each path (see module docstring).
PATHS = ("feature_cross", "sequence", "contrastive")
AUX_LOSSES = ("pairwise", "contrastive")


# -- paths (tables and their views: models/multipath_tables.py) ------------------------


def _head(in_features: int, layer_sizes: Sequence[int], num_tasks: int, device: Optional[torch.device]) -> nn.Module:
    """MLP plus one linear logit per task (TorchRec's ``OverArch`` shape)."""
    return nn.Sequential(
        MLP(in_features, list(layer_sizes), device=device), nn.Linear(layer_sizes[-1], num_tasks, device=device)
    )


class FeatureCrossPath(nn.Module):
    """Shallow path: ``[dense, tables]`` → DCN-v2 low-rank cross layers → MLP → task logits.

    Args:
        in_features: dense arch output width plus the gated table width.
        num_layers: cross layers.
        low_rank: rank of each cross layer's weight.
        layer_sizes: MLP hidden sizes.
        num_tasks: logits per sample.
        device: where the weights live.
    """

    def __init__(
        self,
        in_features: int,
        num_layers: int,
        low_rank: int,
        layer_sizes: Sequence[int],
        num_tasks: int,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        self.crossnet = LowRankCrossNet(in_features, num_layers, low_rank).to(device)
        self.head = _head(in_features, layer_sizes, num_tasks, device)

    def forward(self, dense: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
        return self.head(self.crossnet(torch.cat([dense, tables], dim=1)))


class SequencePath(nn.Module):
    """Deep path: the candidate cross-attends over the history → transformer encoder → task logits.

    The encoder runs over ``[candidate + attended history, history_1..K]`` with learned
    position embeddings (the history is most-recent-first) and the history's padding
    masked; the candidate slot's output feeds the head. A learned "no history" key is
    always attendable, so empty histories (and the loader's padding rows) stay defined.

    Args:
        embedding_dim: ``D``, the model width.
        max_history_length: ``K``.
        num_layers: transformer encoder layers.
        num_heads: attention heads; must divide ``D``.
        ff_dim: transformer feed-forward width.
        head_layer_sizes: hidden sizes of the task head.
        num_tasks: logits per sample.
        device: where the weights live.
    """

    def __init__(
        self,
        embedding_dim: int,
        max_history_length: int,
        num_layers: int,
        num_heads: int,
        ff_dim: int,
        head_layer_sizes: Sequence[int],
        num_tasks: int,
        device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        if num_heads <= 0 or embedding_dim % num_heads:
            raise ValueError(f"--transformer_heads ({num_heads}) must divide --embedding_dim ({embedding_dim})")
        if num_layers <= 0 or ff_dim <= 0:
            raise ValueError(
                f"--transformer_layers and --transformer_ff_dim must be positive, got {num_layers}, {ff_dim}"
            )
        self.no_history_key = nn.Parameter(torch.empty(1, 1, embedding_dim, device=device).normal_(std=0.02))
        self.positions = nn.Parameter(
            torch.empty(1, max_history_length + 1, embedding_dim, device=device).normal_(std=0.02)
        )
        self.cross_attention = nn.MultiheadAttention(embedding_dim, num_heads, batch_first=True, device=device)
        layer = nn.TransformerEncoderLayer(
            embedding_dim, num_heads, ff_dim, dropout=0.0, batch_first=True, device=device
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.head = _head(embedding_dim, head_layer_sizes, num_tasks, device)

    def forward(self, tokens: torch.Tensor, history_lengths: torch.Tensor) -> torch.Tensor:
        """``tokens``: ``[B, 1 + K, D]``, the candidate then the padded history."""
        batch_size, width, dim = tokens.shape
        candidate, history = tokens[:, :1], tokens[:, 1:]
        positions = torch.arange(width - 1, device=tokens.device)
        history_padding = positions[None, :] >= history_lengths[:, None]
        key_padding = torch.cat([history_padding.new_zeros(batch_size, 1), history_padding], dim=1)
        keys = torch.cat([self.no_history_key.expand(batch_size, 1, dim), history], dim=1)
        attended, _ = self.cross_attention(candidate, keys, keys, key_padding_mask=key_padding, need_weights=False)
        sequence = torch.cat([candidate + attended, history], dim=1) + self.positions[:, :width]
        encoded = self.encoder(sequence, src_key_padding_mask=key_padding)
        return self.head(encoded[:, 0])


class NextItemContrastive(nn.Module):
    """Next-item prediction over the history with in-batch negatives (InfoNCE).

    The most recent history item is the target; a projection of the mean of the older
    items is the query; the other rows' targets are the negatives. Rows with fewer
    than two history items do not count.

    Args:
        embedding_dim: ``D``.
        temperature: InfoNCE temperature.
        device: where the projection lives.
    """

    def __init__(self, embedding_dim: int, temperature: float, device: Optional[torch.device] = None) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"--contrastive_temperature must be positive, got {temperature}")
        self.temperature = temperature
        self.project = nn.Linear(embedding_dim, embedding_dim, device=device)

    def forward(self, history: torch.Tensor, history_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(history.shape[1], device=history.device)
        older = (positions[None, :] >= 1) & (positions[None, :] < lengths[:, None])
        context = (history * older[..., None]).sum(dim=1) / older.sum(dim=1, keepdim=True).clamp_min(1)
        return in_batch_info_nce(
            query=self.project(context),
            target=history[:, 0],
            target_ids=history_ids[:, 0],
            query_mask=lengths >= 2,
            target_mask=lengths >= 1,
            temperature=self.temperature,
        )


# -- model -----------------------------------------------------------------------------


class MultiPathOutput(NamedTuple):
    logits: torch.Tensor  # [B, T], cross_logits + sequence_logits
    cross_logits: torch.Tensor  # [B, T]
    sequence_logits: torch.Tensor  # [B, T]
    contrastive_history: torch.Tensor  # [B, K, D], after gates["contrastive"]
    history_ids: torch.Tensor  # [B, K]
    history_lengths: torch.Tensor  # [B]


class MultiPathDLRM(nn.Module):
    """Feature-cross and sequence paths over shared tables; see the module docstring.

    Args:
        sparse_arch: the tables.
        dense_in_features: dense input width.
        dense_arch_layer_sizes: dense MLP sizes (the dense vector joins the cross path).
        cross_layer_sizes: feature-cross MLP hidden sizes.
        dcn_num_layers: cross layers.
        dcn_low_rank_dim: cross layers' rank.
        max_history_length: ``K``.
        transformer_layers / transformer_heads / transformer_ff_dim: sequence path sizes.
        sequence_head_layer_sizes: sequence head hidden sizes.
        num_tasks: logits per sample.
        dense_device: where every non-table weight lives.

    Example::

        model = build_multipath(data, ModelConfig(model="multipath"), torch.device("cpu")).model
        out = model(batch.dense_features, batch.sparse_features)
        out.logits  # [B, num_tasks]
    """

    def __init__(
        self,
        sparse_arch: MultiPathSparseArch,
        dense_in_features: int,
        dense_arch_layer_sizes: Sequence[int],
        cross_layer_sizes: Sequence[int],
        dcn_num_layers: int,
        dcn_low_rank_dim: int,
        max_history_length: int,
        transformer_layers: int,
        transformer_heads: int,
        transformer_ff_dim: int,
        sequence_head_layer_sizes: Sequence[int],
        num_tasks: int,
        dense_device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        dim = sparse_arch.embedding_dim
        self.sparse_arch = sparse_arch
        self.embedding_views = EmbeddingViews(sparse_arch, max_history_length)
        # Where the tables' output enters each path; a closed gate cuts that path's table gradient.
        self.gates = nn.ModuleDict({name: GradientGate(name) for name in PATHS})
        self.dense_arch = DenseArch(dense_in_features, list(dense_arch_layer_sizes), device=dense_device)
        cross_in = dense_arch_layer_sizes[-1] + (len(sparse_arch.pooled_features) + 1) * dim
        self.feature_cross = FeatureCrossPath(
            cross_in, dcn_num_layers, dcn_low_rank_dim, cross_layer_sizes, num_tasks, dense_device
        )
        self.sequence = SequencePath(
            dim,
            max_history_length,
            transformer_layers,
            transformer_heads,
            transformer_ff_dim,
            sequence_head_layer_sizes,
            num_tasks,
            dense_device,
        )

    def forward(self, dense_features: torch.Tensor, features: KeyedJaggedTensor) -> MultiPathOutput:
        # Traced by TorchRec's pipeline (it holds the sharded tables): plain tensor
        # plumbing only; every check lives in leaf modules.
        tables = self.embedding_views(self.sparse_arch(features))
        cross_tables = self.gates["feature_cross"](torch.cat([tables.pooled, tables.candidate], dim=1))
        cross_logits = self.feature_cross(self.dense_arch(dense_features), cross_tables)
        sequence_tables = self.gates["sequence"](torch.cat([tables.candidate.unsqueeze(1), tables.history], dim=1))
        sequence_logits = self.sequence(sequence_tables, tables.history_lengths)
        return MultiPathOutput(
            logits=cross_logits + sequence_logits,
            cross_logits=cross_logits,
            sequence_logits=sequence_logits,
            contrastive_history=self.gates["contrastive"](tables.history),
            history_ids=tables.history_ids,
            history_lengths=tables.history_lengths,
        )


class MultiPathLoss(nn.Module):
    """Every objective of the multi-path model, weighted, plus the logged outputs.

    Per-task weighted BCE, the in-batch pairwise ranking loss and the next-item InfoNCE
    loss. A term with weight 0 is left out of the total (so it sends exactly no
    gradient); a zero-weight auxiliary term is not computed at all. Auxiliary terms are
    training-only.

    Args:
        tasks: task names, in logit column order.
        task_weights: BCE weight per task.
        pairwise_weight: weight of :func:`pairwise_ranking_loss`.
        contrastive_weight: weight of ``next_item``'s loss.
        next_item: the contrastive head.
    """

    def __init__(
        self,
        tasks: Sequence[str],
        task_weights: Sequence[float],
        pairwise_weight: float,
        contrastive_weight: float,
        next_item: NextItemContrastive,
    ) -> None:
        super().__init__()
        clash = sorted(set(tasks) & set(AUX_LOSSES))
        if clash:
            raise ValueError(f"task names {clash} clash with the multipath loss names {list(AUX_LOSSES)}")
        if len(task_weights) != len(tasks):
            raise ValueError(f"--task_loss_weights: {len(task_weights)} weights for {len(tasks)} tasks {list(tasks)}")
        for name, w in (("pairwise_loss_weight", pairwise_weight), ("contrastive_loss_weight", contrastive_weight)):
            if w < 0:
                raise ValueError(f"--{name} must be >= 0, got {w}")
        self.tasks = list(tasks)
        self.weights: Dict[str, float] = dict(zip(self.tasks, task_weights))
        self.weights.update(pairwise=pairwise_weight, contrastive=contrastive_weight)
        self.next_item = next_item

    def forward(
        self, out: MultiPathOutput, labels: Dict[str, torch.Tensor], weights: torch.Tensor
    ) -> Tuple[torch.Tensor, ModelOutput]:
        y = torch.stack([labels[t] for t in self.tasks], dim=1)
        terms = {t: weighted_bce(out.logits[:, i], y[:, i], weights) for i, t in enumerate(self.tasks)}
        if self.training and self.weights["pairwise"] > 0:
            terms["pairwise"] = pairwise_ranking_loss(out.logits, y, weights)
        if self.training and self.weights["contrastive"] > 0:
            terms["contrastive"] = self.next_item(out.contrastive_history, out.history_ids, out.history_lengths)
        weighted = [self.weights[name] * value for name, value in terms.items() if self.weights[name] > 0]
        loss = torch.stack(weighted).sum() if weighted else out.logits.sum() * 0.0
        return loss, ModelOutput(
            loss=loss.detach(),
            losses={name: value.detach() for name, value in terms.items()},
            logits=out.logits.detach(),
            labels=y,
            weights=weights,
        )


class MultiPathTrain(nn.Module):
    """``forward(batch) -> (loss, ModelOutput)`` for TorchRec train pipelines.

    Attributes:
        model: the :class:`MultiPathDLRM` (what serving would keep).
        loss: the objectives, including the training-only contrastive head.

    Example::

        train_module = build_multipath(data, ModelConfig(model="multipath"), torch.device("cpu"))
        loss, out = train_module(batch)
        out.losses  # {"like": ..., "love": ..., "pairwise": ..., "contrastive": ...}
    """

    def __init__(self, model: MultiPathDLRM, loss: MultiPathLoss) -> None:
        super().__init__()
        self.model = model
        self.loss = loss
        self.tasks = loss.tasks

    def forward(self, batch: Batch) -> Tuple[torch.Tensor, ModelOutput]:
        return self.loss(self.model(batch.dense_features, batch.sparse_features), batch.labels, batch.weights)


def build_multipath(
    data: InteractionData,
    cfg: ModelConfig,
    dense_device: torch.device,
    sparse_device: torch.device = torch.device("meta"),
) -> MultiPathTrain:
    """The multi-path train module for ``data`` (``--model multipath``).

    Args:
        data: provides tables, dense width, tasks and the history length.
        cfg: sizes and loss weights (its text flags parsed here unless they were).
        dense_device: where the non-table weights live.
        sparse_device: where the tables are created; ``meta`` (default) for
            ``DistributedModelParallel``, a real device to run unsharded.
    """
    validated(cfg, parse_only=True)
    sparse_arch = MultiPathSparseArch(data, cfg.embedding_dim, sparse_device, fused_lookup=cfg.fused_lookup)
    k = max_history_length(data)
    model = MultiPathDLRM(
        sparse_arch,
        dense_in_features=len(data.dense_names),
        dense_arch_layer_sizes=cfg.dense_arch_sizes,
        cross_layer_sizes=cfg.over_arch_sizes,
        dcn_num_layers=cfg.dcn_num_layers,
        dcn_low_rank_dim=cfg.dcn_low_rank_dim,
        max_history_length=k,
        transformer_layers=cfg.transformer_layers,
        transformer_heads=cfg.transformer_heads,
        transformer_ff_dim=cfg.transformer_ff_dim,
        sequence_head_layer_sizes=cfg.sequence_head_sizes,
        num_tasks=len(data.tasks),
        dense_device=dense_device,
    )
    loss = MultiPathLoss(
        data.tasks,
        cfg.task_loss_weight_values or (1.0,) * len(data.tasks),  # MultiPathLoss checks the count
        cfg.pairwise_loss_weight,
        cfg.contrastive_loss_weight,
        NextItemContrastive(cfg.embedding_dim, cfg.contrastive_temperature, dense_device),
    )
    return MultiPathTrain(model, loss)
