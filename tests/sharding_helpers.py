"""Sharding helpers shared by the multi-rank lookup and model tests (call inside a process group)."""

from typing import Dict

import torch
import torch.distributed as dist
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology


def shard_table_wise(module: torch.nn.Module, world_size: int, configs=None) -> torch.nn.Module:
    """DMP with every table table-wise sharded, in-backward exact SGD, and the module's weights."""
    fused_params = {"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.5}
    sharders = [EmbeddingBagCollectionSharder(fused_params=fused_params), EmbeddingCollectionSharder(fused_params=fused_params)]
    full = {k: v.detach().clone() for k, v in module.state_dict().items()}
    if configs is None:
        configs = module.embedding_bag_configs() if hasattr(module, "embedding_bag_configs") else module.embedding_configs()
    constraints = {c.name: ParameterConstraints(sharding_types=["table_wise"]) for c in configs}
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=world_size, compute_device="cpu"), constraints=constraints)
    plan = planner.collective_plan(module, sharders, dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(module, device=torch.device("cpu"), plan=plan, sharders=sharders)
    load_full_tables(dmp, full)
    return dmp


def load_full_tables(dmp: torch.nn.Module, full: Dict[str, torch.Tensor]) -> None:
    """Copies full (unsharded) tables into the local shards (DMP on CPU does not)."""
    with torch.no_grad():
        for key, sharded in dmp.state_dict().items():
            if not hasattr(sharded, "local_shards"):  # dense weights, data-parallel tables
                continue
            for shard in sharded.local_shards():
                r, c = shard.metadata.shard_offsets
                h, w = shard.metadata.shard_sizes
                shard.tensor.copy_(full[key.removeprefix("module.")][r : r + h, c : c + w])


def local_tables(dmp: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """Copies of this rank's table shards (sharded tables only)."""
    return {
        k: s.tensor.clone() for k, v in dmp.state_dict().items() if hasattr(v, "local_shards") for s in v.local_shards()
    }
