"""Gradient accumulation: dense all-reduces per sample and step time, N = 1 vs N > 1, 2 gloo ranks.

The app's default model (``build_dlrm``, fused row-wise Adagrad tables, dense Adam) on
the app's Book-Crossing data under ``TrainPipelineSparseDist``, with the DDP
all-reduces of dense gradients counted by a DDP communication hook. One
``GradientAccumulation`` drives the pipeline; each round sets its window to every N of
``--accum`` in turn (rotating order), on the same model and micro-batches, for
``--windows`` + 1 whole windows (the first included in the counts but timed with the
rest: a window's all-reduce falls in its last micro-batch). Per N: DDP all-reduce calls
and bytes per 1,000 samples, median time per micro-batch (wall and CPU, rank 0) and its
ratio to the first N (median over rounds).

Usage::

    python benchmarks/bench_grad_accum.py --rounds 10 --windows 10    # the documented run (default: 4 and 4)
"""

import argparse
import os
import statistics
import sys
from itertools import cycle, islice
from typing import Dict, List

os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 30))
os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 30))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist  # noqa: E402

from benchmarks.tools.claims import claim  # noqa: E402
from benchmarks.tools.interleaved import print_timings, time_interleaved  # noqa: E402
from dlrm_multiepoch.data.config import DataConfig  # noqa: E402
from dlrm_multiepoch.data.load import load_dataset  # noqa: E402
from dlrm_multiepoch.data.loader import BatchLoader  # noqa: E402
from dlrm_multiepoch.distributed import init_distributed  # noqa: E402
from dlrm_multiepoch.lookup.comm_count import count_ddp_all_reduce  # noqa: E402
from dlrm_multiepoch.models import ModelConfig, build_dlrm  # noqa: E402
from dlrm_multiepoch.optim.accumulation import GradientAccumulation, ddp_modules  # noqa: E402
from dlrm_multiepoch.part import TrainParts  # noqa: E402
from dlrm_multiepoch.testing.ranks import run_on_ranks  # noqa: E402
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model  # noqa: E402


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
    pipeline = TrainPipelineSparseDist(dmp, TrainParts([accum]).wrap_optimizer(opt), env.device)
    modes = [f"N={n}" for n in args.accum]
    counted: Dict[str, List[float]] = {m: [] for m in modes}
    start: Dict[str, int] = {}

    def enter(mode: str) -> None:
        accum.steps = int(mode[2:])
        start["reduces"], start["bytes"] = calls["all_reduce"], calls["bytes"]

    def leave(mode: str) -> None:
        # Warm-up and timed micro-batches are whole windows: every one ran its all-reduce.
        samples = (accum.steps * (args.windows + 1)) * args.batch_size
        counted[mode].append((calls["all_reduce"] - start["reduces"]) / samples * 1000)
        counted[mode + " bytes"] = counted.get(mode + " bytes", []) + [(calls["bytes"] - start["bytes"]) / samples * 1000]

    def step() -> None:
        with accum.micro_batch():
            pipeline.progress(batches)

    timings = time_interleaved(
        step, modes, enter, leave, rounds=args.rounds, steps=0, warmup=0,
        steps_of=lambda mode: int(mode[2:]) * (args.windows + 1),
    )  # fmt: skip
    if rank == 0:
        print(f"{len(ddp_modules(dmp))} DDP module(s); global micro-batch {args.batch_size}")
        for m in modes:
            print(f"  {m}: {statistics.median(counted[m]):.3f} dense all-reduces and "
                  f"{statistics.median(counted[m + ' bytes']) / 1e3:.1f} kB per 1,000 samples (rank 0)")
        ratios = print_timings(timings, ratios={f"{m} / {modes[0]}": (m, modes[0]) for m in modes[1:]}, percent=False,
                               label="micro-batch")
        first, last = modes[0], modes[-1]
        reduces = statistics.median(counted[first]) / statistics.median(counted[last])
        claim(f"gradient accumulation: dense all-reduces per sample, {first} / {last}", reduces)
        claim(f"gradient accumulation: CPU time per micro-batch, {first} / {last}", 1 / ratios["cpu"][f"{last} / {first}"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Quick defaults for `make bench`; docs/BENCHMARKS.md gives the sizes of the documented figures.
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--windows", type=int, default=4, help="accumulation windows timed per round and N")
    parser.add_argument("--accum", type=int, nargs="+", default=[1, 2, 4, 8], help="values of N; the first is the baseline")
    parser.add_argument("--batch_size", type=int, default=1024, help="global micro-batch size")
    parser.add_argument("--batches", type=int, default=64, help="distinct batches cycled through")
    args = parser.parse_args()
    run_on_ranks(_bench, 2, args)
