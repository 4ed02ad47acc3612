"""Where each embedding table's rows, optimizer state and learning rate live on this rank
(the TBE-level view of the tables :mod:`dlrm_multiepoch.tables` lists).

After ``DistributedModelParallel`` shards a model, a table is no longer a parameter:
its local shard is a slice of an FBGEMM table-batched embedding (TBE) owned by a
TorchRec kernel module (``BatchedFusedEmbeddingBag``, ``BatchedFusedEmbedding``), and
several tables share one TBE when their optimizer settings are equal. The fused
in-backward optimizer's learning rate is one value per TBE: TorchRec keeps it in the
kernel's ``EmbeddingFusedOptimizer.param_groups[0]["lr"]`` and copies it into the TBE
(``set_learning_rate`` fills ``learning_rate_tensor``, which the backward kernel reads)
on ``zero_grad()``/``step()``. Data-parallel tables are replicated in a dense TBE
(``BatchedDenseEmbeddingBag``) and trained by a regular optimizer.

Example::

    for shard in table_shards(dmp):
        print(shard.name, shard.fused, shard.row_offset, shard.weight().shape)
"""

from dataclasses import dataclass
from typing import List

import torch
from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torchrec.distributed.batched_embedding_kernel import BaseBatchedEmbedding, BaseBatchedEmbeddingBag
from torchrec.distributed.embedding_types import ShardedEmbeddingTable

from dlrm_multiepoch.tables import embedding_modules

KERNEL_TYPES = (BaseBatchedEmbeddingBag, BaseBatchedEmbedding)


@dataclass(frozen=True)
class TableShard:
    """One table's local shard inside one TBE of this rank.

    Args:
        kernel: the TorchRec kernel module that owns the TBE (``kernel.emb_module``).
        index: the table's position among the TBE's tables.
    """

    kernel: nn.Module
    index: int

    @property
    def config(self) -> ShardedEmbeddingTable:
        return self.kernel.config.embedding_tables[self.index]

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def tbe(self) -> nn.Module:
        return self.kernel.emb_module

    @property
    def fused(self) -> bool:
        """True when an in-backward (fused) optimizer trains it; False for data-parallel tables."""
        return isinstance(self.tbe, SplitTableBatchedEmbeddingBagsCodegen)

    @property
    def row_offset(self) -> int:
        meta = self.config.local_metadata
        return int(meta.shard_offsets[0]) if meta is not None else 0

    @property
    def col_offset(self) -> int:
        meta = self.config.local_metadata
        return int(meta.shard_offsets[1]) if meta is not None and len(meta.shard_offsets) > 1 else 0

    @property
    def local_rows(self) -> int:
        return int(self.config.local_rows)

    @property
    def local_cols(self) -> int:
        return int(self.config.local_cols)

    @property
    def row_split(self) -> bool:
        """The table's rows are spread over several shards (row-wise and similar sharding)."""
        return self.local_rows < self.config.num_embeddings

    @property
    def column_split(self) -> bool:
        return self.local_cols < self.config.embedding_dim

    def weight(self) -> torch.Tensor:
        """A ``[local_rows, local_cols]`` view of the shard's weights (writes go to the TBE)."""
        return self.tbe.split_embedding_weights()[self.index]

    def optimizer_states(self) -> List[torch.Tensor]:
        """Views of the fused optimizer's state for this shard (none for SGD or data-parallel tables)."""
        if not self.fused:
            return []
        return list(self.tbe.split_optimizer_states()[self.index])


def kernels(model: nn.Module) -> List[nn.Module]:
    """The TorchRec kernel modules of every sharded embedding module of ``model``.

    A sharded module keeps its lookups in a plain list (``_lookups``, data-parallel ones
    wrapped in ``DistributedDataParallel``), so ``model.modules()`` does not reach them.
    """
    found: List[nn.Module] = []
    for m in embedding_modules(model):
        for lookup in getattr(m.collection, "_lookups", []):
            while isinstance(lookup, DistributedDataParallel):
                lookup = lookup.module
            found.extend(k for k in getattr(lookup, "_emb_modules", []) if isinstance(k, KERNEL_TYPES))
    return found


def table_shards(model: nn.Module) -> List[TableShard]:
    """Every local table shard of a ``DistributedModelParallel`` model, in module order."""
    return [TableShard(kernel, i) for kernel in kernels(model) for i in range(len(kernel.config.embedding_tables))]


def set_kernel_learning_rate(kernel: nn.Module, lr: float) -> None:
    """Set a fused kernel's learning rate where TorchRec keeps it and where FBGEMM reads it.

    The param group is what TorchRec copies into the TBE on ``zero_grad()``/``step()``;
    writing the TBE too makes the new LR apply to the very next backward, even in a loop
    that calls ``zero_grad()`` only after it.
    """
    kernel.fused_optimizer.param_groups[0]["lr"] = lr
    kernel.emb_module.set_learning_rate(lr)

