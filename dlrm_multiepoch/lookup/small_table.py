"""Dense-GEMM backward for small embedding tables.

A table with tens to a few thousand rows looked up millions of times makes the stock
scatter-add backward (``index_add_`` / atomics) contend on the same rows. Its weight
gradient is also ``one_hot(ids).T @ grad_per_id``: a GEMM with no write contention.
Whether that is faster depends on the device and the row count; ``DENSE_BACKWARD_MAX_ROWS``
holds the measured crossover per device type (``benchmarks/bench_small_table_backward.py``).
"""

import os
from typing import List, Optional, Set

import torch
import torch.nn.functional as F
from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor, KeyedTensor

# Largest table (rows) for which the dense backward is used by default, per device type.
# cpu: measured with benchmarks/bench_small_table_backward.py (singleton bags, D=64, 256k
# and 1M lookups, 1 and 2 threads; docs/BENCHMARKS.md): the one-hot GEMM won up to 32 rows
# in every run (0.53-0.80x the stock time), was 0.57-1.30x at 64 and lost from 128 rows
# in 3 of 4 runs (1.7-2.0x; 4-15x at 512-2048).
# cuda: NOT measured yet (no GPU was available); 1024 is a placeholder to be replaced by the
# same benchmark on a GPU. Override per module (``max_dense_rows=``) or with the
# environment variable DLRM_DENSE_BACKWARD_MAX_ROWS.
DENSE_BACKWARD_MAX_ROWS = {"cpu": 32, "cuda": 1024}

# Elements of the one-hot block materialised at once (bounds backward memory: 16M floats).
_ONE_HOT_BLOCK_ELEMS = 1 << 24


def dense_backward_max_rows(device: torch.device) -> int:
    """The row threshold for ``device``: the environment override, else the table above."""
    override = os.environ.get("DLRM_DENSE_BACKWARD_MAX_ROWS")
    if override is not None:
        try:
            return int(override)
        except ValueError:
            raise ValueError(f"DLRM_DENSE_BACKWARD_MAX_ROWS must be an integer, got {override!r}") from None
    return DENSE_BACKWARD_MAX_ROWS.get(device.type, 0)


class _DenseGradEmbeddingBag(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, ids, offsets, per_sample_weights, mode):  # type: ignore[override]
        ctx.save_for_backward(weight, ids, offsets, per_sample_weights)
        ctx.mode = mode
        # The forward is the stock kernel: outputs are bitwise those of F.embedding_bag.
        return F.embedding_bag(ids, weight, offsets, mode=mode, per_sample_weights=per_sample_weights)

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        weight, ids, offsets, psw = ctx.saved_tensors
        rows, n = weight.shape[0], ids.numel()
        bags = grad_out.shape[0]
        ends = torch.cat([offsets[1:], offsets.new_full((1,), n)])
        lengths = ends - offsets
        bag_of_id = torch.repeat_interleave(torch.arange(bags, device=ids.device), lengths, output_size=n)
        coef = psw  # d out[bag] / d weight[id] = coef * I (1 for plain sums)
        if ctx.mode == "mean":
            coef = 1.0 / lengths.to(grad_out.dtype)[bag_of_id]
        grad_weight = torch.zeros_like(weight) if ctx.needs_input_grad[0] else None
        grad_psw = None
        if grad_weight is not None:
            block = max(1, _ONE_HOT_BLOCK_ELEMS // max(rows, 1))
            for start in range(0, n, block):
                chunk_ids = ids[start : start + block]
                one_hot = torch.zeros(chunk_ids.numel(), rows, dtype=grad_out.dtype, device=ids.device)
                # Each id its own row of the one-hot: a scatter without collisions.
                if coef is None:
                    one_hot.scatter_(1, chunk_ids.unsqueeze(1), 1.0)
                else:
                    one_hot.scatter_(1, chunk_ids.unsqueeze(1), coef[start : start + block].unsqueeze(1).to(grad_out.dtype))
                grad_weight.addmm_(one_hot.t(), grad_out[bag_of_id[start : start + block]])
        if psw is not None and ctx.needs_input_grad[3]:
            grad_psw = (grad_out[bag_of_id] * weight[ids]).sum(1)
        return grad_weight, None, None, grad_psw, None


def dense_grad_embedding_bag(
    weight: torch.Tensor,
    ids: torch.Tensor,
    offsets: torch.Tensor,
    mode: str = "sum",
    per_sample_weights: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """``F.embedding_bag`` (bag start ``offsets``) whose weight gradient is a one-hot GEMM.

    Outputs equal ``F.embedding_bag`` bitwise; the weight gradient equals the stock one up
    to float summation order. Supports ``mode`` "sum" and "mean".

    Example::

        out = dense_grad_embedding_bag(table.weight, kjt["age"].values(), kjt["age"].offsets()[:-1])
    """
    if mode not in ("sum", "mean"):
        raise ValueError(f"dense_grad_embedding_bag supports mode 'sum' or 'mean', got {mode!r}")
    if per_sample_weights is not None and mode != "sum":
        raise ValueError("per_sample_weights need mode 'sum' (as in F.embedding_bag)")
    return _DenseGradEmbeddingBag.apply(weight, ids, offsets, per_sample_weights, mode)


class SmallTableEmbeddingBagCollection(EmbeddingBagCollection):
    """``EmbeddingBagCollection`` whose small tables get the dense-GEMM backward.

    Tables with at most ``max_dense_rows`` rows (default: ``dense_backward_max_rows`` of
    the device) use ``dense_grad_embedding_bag``; the others the stock path. Same configs,
    outputs and state dict as ``EmbeddingBagCollection``. Being a subclass (TorchRec shards by exact type), ``DistributedModelParallel`` leaves it
    unsharded: its tables are replicated and trained data-parallel with the dense
    parameters, as TorchRec does for small tables anyway.

    Args:
        tables: as for ``EmbeddingBagCollection``.
        is_weighted: as for ``EmbeddingBagCollection``.
        device: as for ``EmbeddingBagCollection``.
        max_dense_rows: tables up to this many rows use the dense backward; ``None``
            takes the measured per-device threshold.

    Example::

        small = SmallTableEmbeddingBagCollection([age_bucket, country], max_dense_rows=256)
        kt = small(kjt)  # KeyedTensor, as EmbeddingBagCollection
    """

    def __init__(
        self,
        tables: List[EmbeddingBagConfig],
        is_weighted: bool = False,
        device: Optional[torch.device] = None,
        max_dense_rows: Optional[int] = None,
    ) -> None:
        super().__init__(tables, is_weighted=is_weighted, device=device)
        self._max_dense_rows = max_dense_rows
        self._dense_tables: Optional[Set[str]] = None

    @property
    def dense_backward_tables(self) -> Set[str]:
        """Tables whose backward is the dense GEMM: at most the row threshold of the
        device the weights live on. Decided on first use, not at construction: models
        are built on the meta device and only then placed (e.g. by
        ``DistributedModelParallel``)."""
        if self._dense_tables is None:
            device = next(iter(self.embedding_bags.values())).weight.device
            if device.type == "meta":
                raise RuntimeError("SmallTableEmbeddingBagCollection: weights are still on the meta device")
            limit = self._max_dense_rows if self._max_dense_rows is not None else dense_backward_max_rows(device)
            self._dense_tables = {c.name for c in self.embedding_bag_configs() if c.num_embeddings <= limit}
        return self._dense_tables

    def forward(self, features: KeyedJaggedTensor) -> KeyedTensor:
        feature_dict = features.to_dict()
        pooled: List[torch.Tensor] = []
        for config in self.embedding_bag_configs():
            bag = self.embedding_bags[config.name]
            for feature in config.feature_names:
                if feature not in feature_dict:
                    raise ValueError(f"input KeyedJaggedTensor lacks feature {feature!r} of table {config.name!r}")
                f = feature_dict[feature]
                weights = f.weights() if self._is_weighted else None
                offsets = f.offsets()
                if config.name in self.dense_backward_tables:
                    mode = "sum" if config.pooling == PoolingType.SUM else "mean"
                    res = dense_grad_embedding_bag(bag.weight, f.values(), offsets[:-1], mode, weights)
                else:
                    res = bag(input=f.values(), offsets=offsets, per_sample_weights=weights)
                pooled.append(res.float())
        return KeyedTensor(
            keys=self._embedding_names, values=torch.cat(pooled, dim=1), length_per_key=self._lengths_per_embedding
        )
