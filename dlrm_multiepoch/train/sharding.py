"""Shard a model with TorchRec's planner and build its optimizers (the dlrm_main recipe)."""

import contextlib
import logging
import warnings
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

import torch
from torch import nn
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.model_parallel import DefaultDataParallelWrapper
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
from torchrec.distributed.planner.constants import BATCH_SIZE
from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
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


class OrderedEnumerator(EmbeddingEnumerator):
    """TorchRec's enumerator with the sharding types in a fixed order: the one given.

    TorchRec 1.8 intersects the allowed types as Python sets, whose order follows the
    per-process string hash seed; the proposer then breaks ties between equal-cost
    plans (a table-wise table and a one-shard column-wise one) differently from launch
    to launch. A restart or rerun must shard the same way.
    """

    def __init__(self, *args: Any, sharding_types: Sequence[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._order = {t: i for i, t in enumerate(sharding_types)}

    def _filter_sharding_types(self, *args: Any, **kwargs: Any) -> List[str]:
        types = super()._filter_sharding_types(*args, **kwargs)
        return sorted(types, key=lambda t: (self._order.get(t, len(self._order)), t))


def apply_embedding_optimizer(
    model: nn.Module, optimizer: str, learning_rate: float, table_lrs: Optional[Mapping[str, float]] = None
) -> None:
    """Attach a fused in-backward optimizer to every embedding table of ``model``.

    Call before sharding: ``DistributedModelParallel`` turns these into FBGEMM's fused
    table-batched optimizers. Tables with different learning rates (``table_lrs``:
    table -> LR, others get ``learning_rate``) land in different TBEs, so each keeps its
    own LR (one LR per TBE) and a schedule can move them independently.
    """
    if optimizer not in EMBEDDING_OPTIMIZERS:
        raise ValueError(f"--embedding_optimizer must be one of {sorted(EMBEDDING_OPTIMIZERS)}, got {optimizer!r}")
    table_lrs = dict(table_lrs or {})
    unknown = sorted(set(table_lrs) - set(table_names(model)))
    if unknown:
        raise ValueError(f"--table_lr: unknown table(s) {unknown}; tables: {table_names(model)}")
    by_lr: Dict[float, List[nn.Parameter]] = {}
    # The collections' own tables only: feature processors stay with the dense optimizer.
    for m in embedding_modules(model):
        for name, param in m.collection.named_parameters():
            by_lr.setdefault(table_lrs.get(name.split(".")[-2], learning_rate), []).append(param)
    if not by_lr:
        raise ValueError("model has no EmbeddingBagCollection or EmbeddingCollection to optimise")
    for lr, params in by_lr.items():
        apply_optimizer_in_backward(EMBEDDING_OPTIMIZERS[optimizer], params, {"lr": lr})


# What TorchRec's planner and DMP say on every launch that a user can do nothing about: we build the topology
# ourselves (the planner's storage estimate is ours to choose), and DMP's DDP wrapper names a deprecated argument.
_PLANNER_LOGGERS = ("torchrec.distributed.planner.types", "torchrec.distributed.planner.storage_reservations")
_LIBRARY_FUTURE_WARNINGS = ("HeuristicalStorageReservation is known", "`broadcast_buffers` is deprecated")


@contextlib.contextmanager
def quiet_sharding() -> Iterator[None]:
    """Silence, inside the block, what TorchRec's planner and DMP print on every sharding that a user can do
    nothing about (their topology and storage-estimate notes, DDP's deprecated argument); other warnings pass.

    Example::

        with quiet_sharding():
            plan = EmbeddingShardingPlanner(topology=Topology(world_size=2, compute_device="cpu")).plan(model, sharders)
            dmp = DistributedModelParallel(model, plan=plan, sharders=sharders)
    """
    loggers = [logging.getLogger(name) for name in _PLANNER_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for message in _LIBRARY_FUTURE_WARNINGS:
                warnings.filterwarnings("ignore", message=message, category=FutureWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def shard_model(
    model: nn.Module,
    env: DistEnv,
    sharding_types: Sequence[str] = ("table_wise", "row_wise", "column_wise"),
    static_graph: bool = True,
) -> DistributedModelParallel:
    """Plan and shard ``model`` over the default process group.

    Args:
        model: model whose tables live on the meta device.
        env: this process's rank, world size and device.
        sharding_types: sharding types the planner may choose for every table. The
            default leaves out ``data_parallel``: TorchRec would give replicated tables
            no fused optimizer and train them with the dense optimizer at the dense LR.
        static_graph: TorchRec's default DDP setting for the dense part. Gradient
            accumulation needs False: a static-graph DDP cannot skip its all-reduce
            (``no_sync``) from the first iteration on. A static graph tolerates dense
            parameters the loss never uses (TorchRec's ``TestSparseNN`` has one); without
            it DDP must look for them (``find_unused_parameters``), or its second step fails.
    """
    unknown = sorted(set(sharding_types) - set(ALL_SHARDING_TYPES))
    if unknown:
        raise ValueError(f"--sharding_types: unknown {unknown}; choose from {ALL_SHARDING_TYPES}")
    constraints = {name: ParameterConstraints(sharding_types=list(sharding_types)) for name in table_names(model)}
    with quiet_sharding():
        topology = Topology(
            world_size=env.world_size, compute_device=env.device.type, local_world_size=env.local_world_size
        )
        enumerator = OrderedEnumerator(
            topology=topology, batch_size=BATCH_SIZE, constraints=constraints, sharding_types=sharding_types
        )
        planner = EmbeddingShardingPlanner(topology=topology, enumerator=enumerator, constraints=constraints)
        plan = planner.collective_plan(model, pg=torch.distributed.GroupMember.WORLD)
        wrapper = DefaultDataParallelWrapper(static_graph=static_graph, find_unused_parameters=not static_graph)
        return DistributedModelParallel(module=model, device=env.device, plan=plan, data_parallel_wrapper=wrapper)


def build_optimizer(model: DistributedModelParallel, learning_rate: float) -> CombinedOptimizer:
    """Fused table optimizers plus Adam over every other parameter, as one optimizer.

    ``step()`` steps only the dense part (the fused part already stepped in backward).
    """
    dense = KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(model.named_parameters())),
        lambda params: torch.optim.Adam(params, lr=learning_rate),
    )
    return CombinedOptimizer([model.fused_optimizer, dense])
