"""The multi-path model's tables: one lookup whose item table serves the candidate item
and the history, and the per-table views the paths read (shared with the pre-training
model, :mod:`dlrm_multiepoch.models.pretrain`).
"""

from typing import Dict, List, NamedTuple, Optional

import torch
from torch import nn
from torchrec.modules.embedding_configs import EmbeddingConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.sparse.jagged_tensor import JaggedTensor, KeyedJaggedTensor, KeyedTensor

from dlrm_multiepoch.data.dataset import HISTORY_FEATURE, InteractionData
from dlrm_multiepoch.lookup.fused import FusedKJTLookup
from dlrm_multiepoch.models.dlrm import embedding_bag_configs


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
    if not widths:
        raise ValueError(
            f"--model multipath needs histories (--history_length > 0); dataset {data.name!r} splits "
            f"{sorted(data.splits)} carry none"
        )
    return max(widths)
