"""Gradient accumulation: dense all-reduces per sample and step time, N = 1 vs N > 1, 2 gloo ranks.

The app's default model (``build_dlrm``, fused row-wise Adagrad tables, dense Adam) on
the app's Book-Crossing data under ``TrainPipelineSparseDist``, with the DDP
all-reduces of dense gradients counted by a DDP communication hook. One
``GradientAccumulation`` drives the pipeline; each round sets its window to every N of
``--accum`` in turn (rotating order), on the same model and micro-batches. Per N: DDP
all-reduce calls and bytes per 1,000 samples, and median time per micro-batch (wall and
CPU, rank 0); then the ratio to N = 1 (median over rounds).

Usage::

    python benchmarks/bench_grad_accum.py [--rounds 10] [--windows 10] [--accum 1 2 4 8] [--batch_size 1024]
"""

import argparse
import os
import statistics
import sys
import time
from itertools import cycle, islice
from typing import Dict, List

os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 30))
os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 30))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist  # noqa: E402

from dlrm_multiepoch.data.config import DataConfig, load_dataset  # noqa: E402
from dlrm_multiepoch.data.dataset import BatchLoader  # noqa: E402
from dlrm_multiepoch.distributed import init_distributed  # noqa: E402
from dlrm_multiepoch.lookup.comm_count import count_ddp_all_reduce  # noqa: E402
from dlrm_multiepoch.models import ModelConfig, build_dlrm  # noqa: E402
from dlrm_multiepoch.optim.accumulation import GradientAccumulation, ddp_modules  # noqa: E402
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model  # noqa: E402
from tests.multiprocess import run_on_ranks  # noqa: E402


def _bench(rank: int, world_size: int, args: argparse.Namespace) -> None:
    env = init_distributed()
    data = load_dataset(DataConfig(), log=lambda _: None)
    torch.manual_seed(0)
    model = build_dlrm(data, ModelConfig(), env.device)
    apply_embedding_optimizer(model, "rowwise_adagrad", 0.05)
    dmp = shard_model(model, env, static_graph=False)  # no_sync needs a non-static DDP graph
    opt = build_optimizer(dmp, 1e-3)
    accum = GradientAccumulation(dmp, opt, steps=1)
    calls = count_ddp_all_reduce(ddp_modules(dmp))
    loader = BatchLoader(data, "train", args.batch_size, rank, world_size, shuffle=True)
    batches = cycle(list(islice(loader, args.batches)))
    pipeline = TrainPipelineSparseDist(dmp, accum.optimizer, env.device)
    modes = list(args.accum)
    walls: Dict[int, List[float]] = {n: [] for n in modes}
    cpus: Dict[int, List[float]] = {n: [] for n in modes}
    reduces: Dict[int, List[float]] = {n: [] for n in modes}
    nbytes: Dict[int, List[float]] = {n: [] for n in modes}
    per_round: Dict[str, Dict[int, List[float]]] = {"wall": {n: [] for n in modes}, "cpu": {n: [] for n in modes}}
    for r in range(args.rounds):
        for n in modes[r % len(modes) :] + modes[: r % len(modes)]:
            accum.steps = n
            for _ in range(n):  # one warm-up window
                with accum.micro_batch():
                    pipeline.progress(batches)
            dist.barrier()
            before, before_bytes = calls["all_reduce"], calls["bytes"]
            wall, cpu = [], []
            for _ in range(args.windows * n):
                start, start_cpu = time.perf_counter(), time.process_time()
                with accum.micro_batch():
                    pipeline.progress(batches)
                wall.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
            samples = args.windows * n * args.batch_size
            reduces[n].append((calls["all_reduce"] - before) / samples * 1000)
            nbytes[n].append((calls["bytes"] - before_bytes) / samples * 1000)
            walls[n].extend(wall)
            cpus[n].extend(cpu)
            per_round["wall"][n].append(statistics.median(wall))
            per_round["cpu"][n].append(statistics.median(cpu))
    if rank == 0:
        print(f"{len(ddp_modules(dmp))} DDP module(s); global batch {args.batch_size} per micro-batch")
        for n in modes:
            print(f"  N={n}: {statistics.median(reduces[n]):.3f} dense all-reduces and "
                  f"{statistics.median(nbytes[n]) / 1e3:.1f} kB per 1,000 samples (rank 0)")
        for clock, per_step in (("wall", walls), ("cpu", cpus)):
            print(f"[{clock} time per micro-batch, rank 0]")
            for n in modes:
                t = per_step[n]
                q = statistics.quantiles(t, n=4)
                ratios = [a / b for a, b in zip(per_round[clock][n], per_round[clock][modes[0]])]
                print(f"  N={n}: median {statistics.median(t) * 1e3:7.2f} ms (IQR {q[0] * 1e3:.2f}-{q[2] * 1e3:.2f}); "
                      f"vs N={modes[0]}: {statistics.median(ratios):.3f}x (median of {len(ratios)} rounds)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--windows", type=int, default=10, help="accumulation windows timed per round and N")
    parser.add_argument("--accum", type=int, nargs="+", default=[1, 2, 4, 8], help="values of N; the first is the baseline")
    parser.add_argument("--batch_size", type=int, default=1024, help="global micro-batch size")
    parser.add_argument("--batches", type=int, default=64, help="distinct batches cycled through")
    args = parser.parse_args()
    run_on_ranks(_bench, 2, args)
