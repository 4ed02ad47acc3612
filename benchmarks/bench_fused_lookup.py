"""Fused vs separate lookups of several KJT groups on a table-wise sharded EBC, 2 ranks.

Each rank looks up ``--groups`` groups of ``--features`` features (each group its own
tables, as candidate / history / context features would be) through
``FusedKJTLookup(dmp, fused=True)``, ``fused=False`` (one lookup per group on the same
EBC, other features empty: what N lookups against the same tables cost in stock TorchRec)
and ``per_group_ebc`` (one sharded EBC per group, each lookup carrying only its own
features: same bytes as fused, N times the collectives), forward + backward with
in-backward SGD, interleaved step by step. Rank 0 prints all-to-alls per step (counted at
the ``torch.distributed`` entry points) and the median step time of each, as a ratio to
fused. Tables are forced ``table_wise`` so the all-to-alls are
real (the default planner makes small tables data-parallel). Backend: nccl on CUDA, gloo
on CPU.

    python benchmarks/bench_fused_lookup.py --groups 3 --features 8 --batch 2048

``--model multipath`` instead trains the multi-path model (``--model multipath``, all
tables ``table_wise``, row-wise Adagrad tables, Adam dense) with ``--fused_lookup`` and
``--no-fused_lookup`` under ``TrainPipelineSparseDist``, interleaved step by step in the
same processes, and prints all-to-alls per step and the median step time of each:

    python benchmarks/bench_fused_lookup.py --model multipath --batch 512 --history 20
"""

import argparse
import os
import statistics
import sys
import time
from typing import Dict, List

if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
    os.environ.update(MALLOC_MMAP_THRESHOLD_="4294967296", MALLOC_TRIM_THRESHOLD_="4294967296")
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.tools.claims import claim  # noqa: E402
from dlrm_multiepoch.distributed import free_port, pick_device  # noqa: E402
from dlrm_multiepoch.lookup import FusedKJTLookup, count_all_to_all  # noqa: E402
from dlrm_multiepoch.testing.ranks import quiet_rank_logs  # noqa: E402


def _build(args: argparse.Namespace, device: torch.device, world_size: int, per_group: bool) -> torch.nn.Module:
    """One EBC over all groups' tables, or (per_group) one EBC per group in a ModuleDict."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

    from dlrm_multiepoch.testing.dlrm_job import shard

    tables = [
        EmbeddingBagConfig(name=f"t{g}_{f}", embedding_dim=args.dim, num_embeddings=args.rows, feature_names=[f"g{g}_f{f}"])
        for g in range(args.groups)
        for f in range(args.features)
    ]
    if per_group:
        ebc = torch.nn.ModuleDict({
            f"group{g}": EmbeddingBagCollection(tables[g * args.features : (g + 1) * args.features], device=torch.device("meta"))
            for g in range(args.groups)
        })
    else:
        ebc = EmbeddingBagCollection(tables, device=torch.device("meta"))
    sharders = [EmbeddingBagCollectionSharder(fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.01})]
    return shard(ebc, world_size, "table_wise", sharders, device)


def _groups(args: argparse.Namespace, device: torch.device, gen: torch.Generator):
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    out = {}
    for g in range(args.groups):
        keys = [f"g{g}_f{f}" for f in range(args.features)]
        lengths = torch.randint(1, 2 * args.bag + 1, (len(keys) * args.batch,), generator=gen)
        values = torch.randint(0, args.rows, (int(lengths.sum()),), generator=gen)
        out[f"group{g}"] = KeyedJaggedTensor(keys=keys, values=values.to(device), lengths=lengths.to(device), stride=args.batch)
    return out


def _run(rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    quiet_rank_logs()
    device = pick_device(rank)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    else:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world_size)
    try:
        dmp = _build(args, device, world_size, per_group=False)
        per_group = _build(args, device, world_size, per_group=True).module
        lookups = {
            "fused": FusedKJTLookup(dmp, fused=True),
            "separate": FusedKJTLookup(dmp, fused=False),
            "per_group_ebc": lambda groups: {g: per_group[g](kjt).wait() for g, kjt in groups.items()},
        }
        batches = [_groups(args, device, torch.Generator().manual_seed(100 * rank + i)) for i in range(4)]
        times: Dict[str, List[float]] = {k: [] for k in lookups}
        calls: Dict[str, int] = {}
        for step in range(args.warmup + args.steps):
            for name, lookup in lookups.items():
                groups = batches[step % len(batches)]
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                dist.barrier()
                start = time.perf_counter()
                with count_all_to_all() as counted:
                    out = lookup(groups)
                    loss = sum(kt.values().sum() for kt in out.values())
                    loss.backward()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                elapsed = time.perf_counter() - start
                if step >= args.warmup:
                    times[name].append(elapsed)
                    calls[name] = sum(counted.values())
        if rank == 0:
            med = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"device={device} world_size={world_size} groups={args.groups} features/group={args.features} "
                f"batch/rank={args.batch} mean bag={args.bag} dim={args.dim} rows={args.rows} steps={args.steps}"
            )
            print("contender | all-to-alls/step (fwd+bwd) | median step ms | vs fused")
            for name in lookups:
                print(f"{name:13s} | {calls[name]:3d} ({calls[name] / calls['fused']:.1f}x) | "
                      f"{med[name] * 1e3:8.2f} | {med[name] / med['fused']:.2f}x")
            claim("fused lookup: all-to-alls per step, separate / fused", calls["separate"] / calls["fused"])
            claim("fused lookup: step time, separate / fused", med["separate"] / med["fused"])
    finally:
        dist.destroy_process_group()


def _epochs(loader):
    """The loader's batches, epoch after epoch (the pipeline reads one batch ahead)."""
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def _run_multipath(rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    """Multi-path model training steps, ``fused_lookup`` on vs off, interleaved."""
    from torchrec.distributed.train_pipeline import TrainPipelineSparseDist

    from dlrm_multiepoch.data.loader import BatchLoader
    from dlrm_multiepoch.data.synthetic import synthetic_data
    from dlrm_multiepoch.distributed import init_distributed
    from dlrm_multiepoch.models.config import ModelConfig
    from dlrm_multiepoch.models.multipath import build_multipath
    from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size))
    torch.set_num_threads(args.threads)
    quiet_rank_logs()
    env = init_distributed()
    try:
        tables = {"user": args.rows, "item": args.rows, "age": 8}
        data = synthetic_data(args.batch * world_size * 16, tables, history_length=args.history, seed=0)
        pipelines = {}
        for name, fused in (("fused", True), ("separate", False)):
            torch.manual_seed(0)
            cfg = ModelConfig(model="multipath", embedding_dim=args.dim, dense_arch_layer_sizes=f"64,{args.dim}",
                              fused_lookup=fused)
            model = build_multipath(data, cfg, env.device)
            apply_embedding_optimizer(model, "rowwise_adagrad", 0.05)
            dmp = shard_model(model, env, ("table_wise",))
            pipelines[name] = TrainPipelineSparseDist(dmp, build_optimizer(dmp, 1e-3), env.device)
        iters = {name: _epochs(BatchLoader(data, "train", args.batch, rank, world_size, shuffle=True)) for name in pipelines}
        times: Dict[str, List[float]] = {name: [] for name in pipelines}
        calls: Dict[str, int] = {}
        for step in range(args.warmup + args.steps):
            for name, pipeline in pipelines.items():
                if env.device.type == "cuda":
                    torch.cuda.synchronize(env.device)
                dist.barrier()
                start = time.perf_counter()
                with count_all_to_all() as counted:
                    pipeline.progress(iters[name])
                if env.device.type == "cuda":
                    torch.cuda.synchronize(env.device)
                elapsed = time.perf_counter() - start
                if step >= args.warmup:
                    times[name].append(elapsed)
                    calls[name] = sum(counted.values())
        if rank == 0:
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"device={env.device} world_size={world_size} multipath batch/rank={args.batch} "
                  f"history={args.history} dim={args.dim} rows={args.rows} steps={args.steps}")
            print("contender | all-to-alls/step (fwd+bwd) | median step ms | vs fused")
            for name in pipelines:
                print(f"{name:9s} | {calls[name]:3d} ({calls[name] / calls['fused']:.2f}x) | "
                      f"{med[name] * 1e3:8.2f} | {med[name] / med['fused']:.2f}x")
            claim("multipath --fused_lookup: all-to-alls per step, separate / fused", calls["separate"] / calls["fused"])
            claim("multipath --fused_lookup: step time, separate / fused", med["separate"] / med["fused"])
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["lookup", "multipath"], default="lookup",
                        help="lookup: FusedKJTLookup on one EBC; multipath: the model's --fused_lookup switch")
    parser.add_argument("--history", type=int, default=20, help="multipath: history length")
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--features", type=int, default=8, help="features (one table each) per group")
    parser.add_argument("--batch", type=int, default=2048, help="per rank")
    parser.add_argument("--bag", type=int, default=2, help="mean ids per bag")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank (CPU)")
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    run = _run_multipath if args.model == "multipath" else _run
    mp.start_processes(run, args=(args.world_size, free_port(), args), nprocs=args.world_size, start_method="spawn")


if __name__ == "__main__":
    main()
