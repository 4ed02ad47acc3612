"""Shard a model with TorchRec's planner and build its optimizers (the dlrm_main recipe)."""

from typing import Sequence

import torch
from torch import nn
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
from torchrec.distributed.types import ShardingType
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter
from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

from dlrm_multiepoch.distributed import DistEnv
from dlrm_multiepoch.tables import embedding_modules, table_names

# In-backward optimizers FBGEMM's CPU kernels accept (DESIGN.md: Adam raises on CPU).
EMBEDDING_OPTIMIZERS = {
    "rowwise_adagrad": RowWiseAdagrad,
    "adagrad": torch.optim.Adagrad,
    "sgd": torch.optim.SGD,
}
ALL_SHARDING_TYPES = [t.value for t in ShardingType]


def apply_embedding_optimizer(model: nn.Module, optimizer: str, learning_rate: float) -> None:
    """Attach a fused in-backward optimizer to every embedding table of ``model``.

    Call before sharding: ``DistributedModelParallel`` turns these into FBGEMM's fused
    table-batched optimizers.
    """
    if optimizer not in EMBEDDING_OPTIMIZERS:
        raise ValueError(f"--embedding_optimizer must be one of {sorted(EMBEDDING_OPTIMIZERS)}, got {optimizer!r}")
    # The collections' own tables only: feature processors stay with the dense optimizer.
    params = [p for m in embedding_modules(model) for p in m.collection.parameters()]
    if not params:
        raise ValueError("model has no EmbeddingBagCollection or EmbeddingCollection to optimise")
    apply_optimizer_in_backward(EMBEDDING_OPTIMIZERS[optimizer], params, {"lr": learning_rate})


def shard_model(
    model: nn.Module, env: DistEnv, sharding_types: Sequence[str] = ("table_wise", "row_wise", "column_wise")
) -> DistributedModelParallel:
    """Plan and shard ``model`` over the default process group.

    Args:
        model: model whose tables live on the meta device.
        env: this process's rank, world size and device.
        sharding_types: sharding types the planner may choose for every table. The
            default leaves out ``data_parallel``: TorchRec would give replicated tables
            no fused optimizer and train them with the dense optimizer at the dense LR.
    """
    unknown = sorted(set(sharding_types) - set(ALL_SHARDING_TYPES))
    if unknown:
        raise ValueError(f"--sharding_types: unknown {unknown}; choose from {ALL_SHARDING_TYPES}")
    constraints = {name: ParameterConstraints(sharding_types=list(sharding_types)) for name in table_names(model)}
    planner = EmbeddingShardingPlanner(
        topology=Topology(
            world_size=env.world_size,
            compute_device=env.device.type,
            local_world_size=env.local_world_size,
        ),
        constraints=constraints,
    )
    plan = planner.collective_plan(model, pg=torch.distributed.GroupMember.WORLD)
    return DistributedModelParallel(module=model, device=env.device, plan=plan)


def build_optimizer(model: DistributedModelParallel, learning_rate: float) -> CombinedOptimizer:
    """Fused table optimizers plus Adam over every other parameter, as one optimizer.

    ``step()`` steps only the dense part (the fused part already stepped in backward).
    """
    dense = KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(model.named_parameters())),
        lambda params: torch.optim.Adam(params, lr=learning_rate),
    )
    return CombinedOptimizer([model.fused_optimizer, dense])
