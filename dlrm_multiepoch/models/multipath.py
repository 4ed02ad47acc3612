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

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import nn
from torchrec.models.dlrm import DenseArch
from torchrec.modules.crossnet import LowRankCrossNet
from torchrec.modules.embedding_configs import EmbeddingConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.modules.mlp import MLP
from torchrec.sparse.jagged_tensor import JaggedTensor, KeyedJaggedTensor, KeyedTensor

from dlrm_multiepoch.data.batch import Batch
from dlrm_multiepoch.data.dataset import HISTORY_FEATURE, InteractionData
from dlrm_multiepoch.gates import GradientGate
from dlrm_multiepoch.lookup.fused import FusedKJTLookup
from dlrm_multiepoch.models.config import ModelConfig, float_list, int_list
from dlrm_multiepoch.models.dlrm import ModelOutput, embedding_bag_configs
from dlrm_multiepoch.models.losses import in_batch_info_nce, pairwise_ranking_loss, weighted_bce

# Names of the places where the tables' output enters each path (see module docstring).
PATHS = ("feature_cross", "sequence", "contrastive")
AUX_LOSSES = ("pairwise", "contrastive")


# -- tables ----------------------------------------------------------------------------


class SparseFeatures(NamedTuple):
    """What the table lookup returns, as TorchRec's modules return it."""

    pooled: KeyedTensor  # one [B, D] block per pooled feature, keys in sharding order
    sequences: Dict[str, JaggedTensor]  # candidate item and history; weights carry the ids


class MultiPathSparseArch(nn.Module):
    """Every embedding table of the model, as TorchRec collections ``DistributedModelParallel`` shards.

    The item table must be ONE parameter serving both the candidate item and the
    history sequence, and the history must stay unpooled for attention. TorchRec cannot
    share a table between an ``EmbeddingBagCollection`` and an ``EmbeddingCollection``,
    so the item table lives alone in an ``EmbeddingCollection`` with both features: the
    candidate, one id per sample, comes back as a length-1 sequence, i.e. its embedding.
    This also makes the candidate and the history one lookup (one input and one output
    all-to-all when sharded): the batch KJT already carries both features, i.e. it is the
    KJT ``FusedKJTLookup`` would concatenate, built once by the loader instead of in the
    model. ``fused_lookup=False`` looks them up separately instead
    (:class:`SeparateLookups`), for comparison. Every other table is pooled in an
    ``EmbeddingBagCollection``, whose output all-to-all carries one ``[B, D]`` block per
    feature. ``need_indices`` returns the item ids with the embeddings, for the
    contrastive loss (no second read of the input KJT).

    Both collections take the whole batch KJT: each looks up only its own features.
    Passing ``batch.sparse_features`` unchanged is what lets ``TrainPipelineSparseDist``
    start both input all-to-alls ahead of the forward.

    Args:
        data: table layout; one table must serve ``history`` plus one candidate feature.
        embedding_dim: dimension of every table.
        device: where the tables are created (``meta`` for ``DistributedModelParallel``).
        fused_lookup: ``False`` looks up the candidate and the history separately (twice
            the item table's collectives); same tables, same outputs.

    Example::

        arch = MultiPathSparseArch(data, 16, torch.device("meta"))
        sparse = arch(batch.sparse_features)
        sparse.sequences["history"].values()  # [sum(lengths), 16]
    """

    def __init__(
        self,
        data: InteractionData,
        embedding_dim: int,
        device: Optional[torch.device] = None,
        fused_lookup: bool = True,
    ) -> None:
        super().__init__()
        item_tables = [t for t in data.tables if HISTORY_FEATURE in t.feature_names]
        if not item_tables:
            raise ValueError(
                f"--model multipath needs the {HISTORY_FEATURE!r} feature (set --history_length > 0): its sequence "
                f"path and contrastive loss read the user's item history; dataset {data.name!r} tables: "
                f"{[(t.name, t.feature_names) for t in data.tables]}"
            )
        item = item_tables[0]
        candidates = [f for f in item.feature_names if f != HISTORY_FEATURE]
        if len(candidates) != 1:
            raise ValueError(
                f"table {item.name!r} serves {HISTORY_FEATURE!r} and must serve exactly one candidate item "
                f"feature besides it, has {candidates}"
            )
        pooled_tables = [t for t in data.tables if t is not item]
        if not pooled_tables:
            raise ValueError(f"--model multipath needs at least one table besides the item table {item.name!r}")
        self.embedding_dim = embedding_dim
        self.candidate_feature = candidates[0]
        self.history_feature = HISTORY_FEATURE
        self.pooled_features: List[str] = [f for t in pooled_tables for f in t.feature_names]
        self.embedding_bag_collection = EmbeddingBagCollection(
            tables=embedding_bag_configs(pooled_tables, embedding_dim), device=device
        )
        self.embedding_collection = EmbeddingCollection(
            tables=[
                EmbeddingConfig(
                    name=item.name,
                    embedding_dim=embedding_dim,
                    num_embeddings=item.num_embeddings,
                    feature_names=[self.candidate_feature, self.history_feature],
                )
            ],
            device=device,
            need_indices=True,
        )
        # No tables of its own: the item table stays at the path above either way, so parameter
        # names and checkpoints do not depend on the switch.
        self.separate_lookups: Optional[SeparateLookups] = (
            None
            if fused_lookup
            else SeparateLookups({"candidate": [self.candidate_feature], "history": [self.history_feature]})
        )

    def forward(self, features: KeyedJaggedTensor) -> SparseFeatures:
        """The model's table lookups."""
        pooled = self.embedding_bag_collection(features)
        if self.separate_lookups is None:
            # The batch KJT itself, so the train pipeline runs this input all-to-all ahead.
            sequences = self.embedding_collection(features)
        else:
            sequences = self.separate_lookups(self.embedding_collection, features)
        return SparseFeatures(pooled=pooled, sequences=sequences)


class SeparateLookups(nn.Module):
    """One lookup per feature group against the same collection: the unfused comparison.

    Each group becomes its own KJT (the collection's other features as empty bags) and
    its own lookup through ``FusedKJTLookup(collection, fused=False)``, so a sharded
    collection pays one input and one output all-to-all per group, as separate candidate
    and sequence lookups do in stock TorchRec. The collection is an argument, not a child:
    this module then has no sharded children, so TorchRec's pipeline tracer treats it as a
    leaf, and the collection stays registered (and sharded in place) at its owner's path.
    Because the KJTs are built inside the model, ``TrainPipelineSparseDist`` cannot start
    these lookups ahead of the forward; a sharded table with an in-backward optimizer
    is updated once per lookup.

    Args:
        groups: group name -> the features it looks up; each feature in one group.

    Example::

        lookups = SeparateLookups({"candidate": ["item"], "history": ["history"]})
        sequences = lookups(arch.embedding_collection, batch.sparse_features)
        sequences["history"].values()  # [sum(lengths), D], as the collection returns it
    """

    def __init__(self, groups: Dict[str, List[str]]) -> None:
        super().__init__()
        self.groups = {name: list(keys) for name, keys in groups.items()}

    def forward(self, collection: nn.Module, features: KeyedJaggedTensor) -> Dict[str, JaggedTensor]:
        keys = features.keys()
        for name, wanted in self.groups.items():
            missing = [k for k in wanted if k not in keys]
            if missing:
                raise ValueError(f"lookup group {name!r}: features {missing} are not in the batch (it has {keys})")
        groups = {name: features.permute([keys.index(k) for k in wanted]) for name, wanted in self.groups.items()}
        # Built per call around the live collection: DistributedModelParallel swaps the
        # sharded one in after construction (layout read from its configs: microseconds).
        out = FusedKJTLookup(collection, fused=False)(groups)
        return {key: jt for group in out.values() for key, jt in group.items()}


class TableEmbeddings(NamedTuple):
    """Dense views of one batch's lookups."""

    pooled: torch.Tensor  # [B, F * D], pooled features in table order
    candidate: torch.Tensor  # [B, D]
    candidate_ids: torch.Tensor  # [B]
    history: torch.Tensor  # [B, K, D], most recent first, zero-padded
    history_ids: torch.Tensor  # [B, K], padded with -1
    history_lengths: torch.Tensor  # [B]


class EmbeddingViews(nn.Module):
    """Turns :class:`SparseFeatures` into fixed-layout dense tensors.

    A module of its own (no sharded children) so TorchRec's pipeline tracer treats it
    as a leaf: its shape checks never meet FX tracing.

    Args:
        sparse_arch: provides the feature names and dimension.
        max_history_length: ``K``, the padded history width (the data's history length).
    """

    def __init__(self, sparse_arch: MultiPathSparseArch, max_history_length: int) -> None:
        super().__init__()
        if max_history_length <= 0:
            raise ValueError(f"history length must be positive, got {max_history_length}")
        self.pooled_features = list(sparse_arch.pooled_features)
        self.candidate_feature = sparse_arch.candidate_feature
        self.history_feature = sparse_arch.history_feature
        self.max_history_length = max_history_length

    def forward(self, sparse: SparseFeatures) -> TableEmbeddings:
        pooled_by_feature = sparse.pooled.to_dict()
        # Sharded EBCs emit keys in sharding order; a fixed order keeps the cross path's
        # weights meaning the same features under any sharding plan.
        pooled = torch.cat([pooled_by_feature[f] for f in self.pooled_features], dim=1)
        candidate = sparse.sequences[self.candidate_feature]
        batch_size = pooled.shape[0]
        if candidate.values().shape[0] != batch_size:
            raise ValueError(
                f"feature {self.candidate_feature!r} must carry exactly one id per sample: "
                f"{candidate.values().shape[0]} ids for {batch_size} samples"
            )
        history = sparse.sequences[self.history_feature]
        lengths = history.lengths()
        # On CUDA this checks without a host sync; padding would otherwise silently cut.
        torch._assert_async(
            (lengths <= self.max_history_length).all(),
            f"a {self.history_feature!r} sequence is longer than the model's history length "
            f"{self.max_history_length}",
        )
        history_ids = JaggedTensor(values=history.weights(), lengths=lengths)
        return TableEmbeddings(
            pooled=pooled,
            candidate=candidate.values(),
            candidate_ids=candidate.weights(),
            history=history.to_padded_dense(desired_length=self.max_history_length, padding_value=0.0),
            history_ids=history_ids.to_padded_dense(desired_length=self.max_history_length, padding_value=-1),
            history_lengths=lengths,
        )


def max_history_length(data: InteractionData) -> int:
    """Widest history over the data's splits (the ``K`` of ``--history_length``)."""
    widths = [s.history_length for s in data.splits.values() if s.history_length]
    if not widths or max(widths) == 0:
        raise ValueError(
            f"--model multipath needs histories (--history_length > 0); dataset {data.name!r} splits "
            f"{sorted(data.splits)} carry none"
        )
    return max(widths)


# -- paths -----------------------------------------------------------------------------


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
            raise ValueError(f"{len(task_weights)} task loss weights for {len(tasks)} tasks {list(tasks)}")
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
        cfg: sizes and loss weights.
        dense_device: where the non-table weights live.
        sparse_device: where the tables are created; ``meta`` (default) for
            ``DistributedModelParallel``, a real device to run unsharded.
    """
    sparse_arch = MultiPathSparseArch(data, cfg.embedding_dim, sparse_device, fused_lookup=cfg.fused_lookup)
    k = max_history_length(data)
    model = MultiPathDLRM(
        sparse_arch,
        dense_in_features=len(data.dense_names),
        dense_arch_layer_sizes=int_list(cfg.dense_arch_layer_sizes, "dense_arch_layer_sizes"),
        cross_layer_sizes=int_list(cfg.over_arch_layer_sizes, "over_arch_layer_sizes"),
        dcn_num_layers=cfg.dcn_num_layers,
        dcn_low_rank_dim=cfg.dcn_low_rank_dim,
        max_history_length=k,
        transformer_layers=cfg.transformer_layers,
        transformer_heads=cfg.transformer_heads,
        transformer_ff_dim=cfg.transformer_ff_dim,
        sequence_head_layer_sizes=int_list(cfg.sequence_head_layer_sizes, "sequence_head_layer_sizes"),
        num_tasks=len(data.tasks),
        dense_device=dense_device,
    )
    loss = MultiPathLoss(
        data.tasks,
        float_list(cfg.task_loss_weights, "task_loss_weights", len(data.tasks)),
        cfg.pairwise_loss_weight,
        cfg.contrastive_loss_weight,
        NextItemContrastive(cfg.embedding_dim, cfg.contrastive_temperature, dense_device),
    )
    return MultiPathTrain(model, loss)
