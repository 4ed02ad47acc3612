"""Helpers for tests on (sharded) TorchRec models, in one place.

- :func:`shard_table_wise`: every table table-wise sharded, in-backward exact SGD, the
  module's own table values (built on ``dlrm_multiepoch/testing/dlrm_job.py``'s ``shard``, one
  planner-chosen sharding type per table, which the benchmarks share);
- :func:`load_full_tables`: full (unsharded) tables into this rank's shards, so models
  sharded differently start from the same values;
- :func:`local_tensors`, :func:`snapshot`, :func:`local_tables`, :func:`table_shards`: this
  rank's tensors of a state dict, of a model and its optimizer, of the sharded tables
  (bitwise comparisons);
- :func:`random_kjt`: a random ``KeyedJaggedTensor`` input.

Sharding and state helpers run inside a process group (e.g. from ``run_on_ranks``).
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dlrm_multiepoch.testing.dlrm_job import copy_into_shards, shard


def shard_table_wise(module: torch.nn.Module, world_size: int) -> DistributedModelParallel:
    """DMP with every table table-wise sharded, in-backward exact SGD, and the module's weights."""
    fused_params = {"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.5}
    sharders = [EmbeddingBagCollectionSharder(fused_params=fused_params), EmbeddingCollectionSharder(fused_params=fused_params)]
    full = {k: v.detach().clone() for k, v in module.state_dict().items()}
    dmp = shard(module, world_size, "table_wise", sharders)
    load_full_tables(dmp, full)
    return dmp


def load_full_tables(dmp: torch.nn.Module, full: Dict[str, torch.Tensor]) -> None:
    """Copies full (unsharded) tables, keyed as in the unsharded module's state dict, into the local shards
    (DMP on CPU does not)."""
    for key, sharded in dmp.state_dict().items():
        if hasattr(sharded, "local_shards"):  # dense weights and data-parallel tables are left alone
            copy_into_shards(sharded, full[key.removeprefix("module.")])


def local_tensors(state: Any, prefix: str = "", sep: str = "/") -> Dict[str, List[Tuple[Tuple[int, ...], torch.Tensor]]]:
    """Every tensor of a nested state dict, as this rank's (shard offsets, tensor) pieces (not copies).

    Keys join the nesting with ``sep``; a plain tensor is one piece with offsets ``()``; a
    sharded tensor of which this rank holds nothing has no piece.
    """
    out: Dict[str, List[Tuple[Tuple[int, ...], torch.Tensor]]] = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out |= local_tensors(value, f"{prefix}{key}{sep}", sep)
        elif hasattr(value, "local_shards"):  # ShardedTensor
            out[prefix + key] = [(tuple(s.metadata.shard_offsets), s.tensor) for s in value.local_shards()]
        elif isinstance(value, torch.Tensor):
            out[prefix + key] = [((), value)]
    return out


def snapshot(dmp: torch.nn.Module, optimizer: Any = None) -> Dict[str, torch.Tensor]:
    """Copies of this rank's weights (``w.<state_dict key>``) and optimizer state (``opt.<key>``).

    A shard's key ends in ``@<its offsets>``; a table-wise table lives on one rank: the
    others hold no key of it. Fused table state (row-wise Adagrad's ``momentum1``) included.
    """
    state = {"w": dmp.state_dict()} | ({"opt": optimizer.state_dict()["state"]} if optimizer is not None else {})
    return {
        f"{key}@{offsets}" if offsets else key: tensor.detach().clone()
        for key, pieces in local_tensors(state, sep=".").items()
        for offsets, tensor in pieces
    }


def differing_keys(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> List[str]:
    """The keys of two snapshots whose tensors differ or that only one of them holds."""
    return sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or not torch.equal(a[k], b[k]))


def local_tables(dmp: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """Copies of this rank's table shards (sharded tables only), keyed as in :func:`snapshot`."""
    return {k: v for k, v in snapshot(dmp).items() if "@" in k}


def random_kjt(
    keys: Sequence[str],
    batch: int,
    gen: torch.Generator,
    rows: int,
    max_len: int = 3,
    weighted: bool = False,
    fixed_lengths: Optional[Mapping[str, int]] = None,
) -> KeyedJaggedTensor:
    """``batch`` bags per key of 0..``max_len`` ids below ``rows`` (``fixed_lengths``: a length per key).

    Example::

        random_kjt(["user", "item"], 8, torch.Generator().manual_seed(0), rows=50, weighted=True)
    """
    lengths = torch.randint(0, max_len + 1, (len(keys), batch), generator=gen)
    for i, key in enumerate(keys):
        if fixed_lengths and key in fixed_lengths:
            lengths[i] = fixed_lengths[key]
    lengths = lengths.flatten()
    values = torch.randint(0, rows, (int(lengths.sum()),), generator=gen)
    weights = torch.rand(values.numel(), generator=gen) if weighted else None
    return KeyedJaggedTensor(keys=list(keys), values=values, lengths=lengths, weights=weights, stride=batch)


def table_shards(dmp: DistributedModelParallel) -> Dict[str, torch.Tensor]:
    """This rank's table shards, as views into the live (FBGEMM) weights."""
    pieces = local_tensors(dmp.state_dict())
    return {f"{k}@{o}": t for k, shards in pieces.items() if "embedding_bags" in k for o, t in shards if o}
