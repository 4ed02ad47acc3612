"""A small sharded DLRM job, for tests and benchmarks of a pipeline or a part (``benchmarks/bench_semi_sync.py``).

The TorchRec dlrm_main recipe on our synthetic data: TorchRec ``DLRM`` with fused
in-backward row-wise Adagrad tables (really sharded: table-wise / column-wise, so the
input and output all-to-alls happen) and dense Adam, combined in one
``CombinedOptimizer``. Call inside a process group (e.g. from
:func:`~dlrm_multiepoch.testing.ranks.run_on_ranks`). :func:`shard` and :func:`copy_into_shards`
also serve the tests' other sharded models (``tests/sharding_helpers.py``).

Example::

    job = build_job(num_rows=4096, embedding_dim=32)
    pipeline = make_train_pipeline("semi_sync", job.model, job.optimizer, job.env.device)
"""

import warnings
from typing import Any, Dict, Mapping, NamedTuple, Optional, Union

import torch
import torch.distributed as dist
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
from torchrec.optim.keyed import CombinedOptimizer

from dlrm_multiepoch.data.dataset import InteractionData
from dlrm_multiepoch.data.synthetic import synthetic_data
from dlrm_multiepoch.distributed import DistEnv, init_distributed
from dlrm_multiepoch.models import ModelConfig, build_dlrm
from dlrm_multiepoch.tables import embedding_modules
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, quiet_sharding

TABLE_SIZES: Dict[str, int] = {"user": 1000, "item": 2000, "age": 8}
# Real sharding, so the input and output all-to-alls happen. TorchRec 1.8's planner
# proposes no row-wise sharding on CPU (its EBC sharder lists it for CUDA only; an
# explicit plan does run it, see tests/test_dropin.py), so the second kind is column-wise.
SHARDING: Dict[str, str] = {"user": "table_wise", "item": "column_wise", "age": "table_wise"}


class Job(NamedTuple):
    env: DistEnv
    data: InteractionData
    model: DistributedModelParallel
    optimizer: CombinedOptimizer


def build_job(
    num_rows: int = 2048,
    table_sizes: Dict[str, int] = TABLE_SIZES,
    embedding_dim: int = 16,
    dense_arch: str = "64,16",
    over_arch: str = "64,32",
    sharding: Dict[str, str] = SHARDING,
    embedding_lr: float = 0.05,
    dense_lr: float = 1e-3,
    seed: int = 0,
) -> Job:
    """Data, sharded model and optimizer, identical on every call with the same arguments.

    ``torch.manual_seed(seed)`` before building makes the dense weights equal across
    calls; the sharded tables are then copied from rank-independent seeded values so
    two jobs built in one process start bitwise equal.
    """
    env = init_distributed()
    data = synthetic_data(num_rows, dict(table_sizes), seed=seed)
    torch.manual_seed(seed)
    cfg = ModelConfig(embedding_dim=embedding_dim, dense_arch_layer_sizes=dense_arch, over_arch_layer_sizes=over_arch)
    model = build_dlrm(data, cfg, env.device)
    apply_embedding_optimizer(model, "rowwise_adagrad", embedding_lr)
    dmp = shard(model, env.world_size, sharding, device=env.device, local_world_size=env.local_world_size)
    seed_tables(dmp, seed)
    return Job(env, data, dmp, build_optimizer(dmp, dense_lr))


def seed_tables(dmp: DistributedModelParallel, seed: int) -> None:
    """Fill every table shard with values that depend only on (seed, table), not on rank."""
    for name, tensor in dmp.state_dict().items():
        if not name.endswith(".weight") or "embedding_bags" not in name:
            continue
        with warnings.catch_warnings():  # a ShardedTensor's size is its full size: what this needs
            warnings.filterwarnings("ignore", message="Please use DTensor instead", category=FutureWarning)
            full_rows, dim = tensor.size()
        g = torch.Generator().manual_seed(seed * 1000 + sum(map(ord, name)))
        copy_into_shards(tensor, torch.empty(full_rows, dim).uniform_(-0.05, 0.05, generator=g))


def shard(
    module: torch.nn.Module,
    world_size: int,
    sharding: Union[str, Mapping[str, str]] = "table_wise",
    sharders: Optional[list] = None,
    device: torch.device = torch.device("cpu"),
    local_world_size: Optional[int] = None,
) -> DistributedModelParallel:
    """DMP whose planner gives each table its sharding type (a str: every table of the module).

    ``sharders`` None: TorchRec's defaults. Table values come from DMP's initialisation:
    follow with :func:`load_full_tables` for known values.
    """
    if isinstance(sharding, str):
        sharding = {name: sharding for m in embedding_modules(module) for name in m.table_names}
    constraints = {table: ParameterConstraints(sharding_types=[kind]) for table, kind in sharding.items()}
    with quiet_sharding():
        topology = Topology(world_size=world_size, compute_device=device.type, local_world_size=local_world_size)
        planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints)
        plan = planner.collective_plan(module, sharders, dist.GroupMember.WORLD)
        return DistributedModelParallel(module, device=device, plan=plan, sharders=sharders)


def copy_into_shards(sharded: Any, full: torch.Tensor) -> None:
    """Copies this rank's slices of the full (unsharded) 2-D ``full`` into ``sharded``'s local shards."""
    with torch.no_grad():
        for piece in sharded.local_shards():
            (r, c), (h, w) = piece.metadata.shard_offsets, piece.metadata.shard_sizes
            piece.tensor.copy_(full[r : r + h, c : c + w])
