"""Step time of frozen tables vs joint training, and the wrapper's overhead, on 2 gloo ranks.

Runs the app's default model (``build_dlrm`` with ``ModelConfig()``, the app's default
sharding types, fused row-wise Adagrad tables, dense Adam) on the app's Book-Crossing
data (``--data synthetic``: Zipf ids over tables of Book-Crossing's sizes) under
``TrainPipelineSparseDist``. Three contenders run interleaved, round after round, in a
rotating order, on the same model and batches:

- ``bare``:   no wrapper (TorchRec as is);
- ``joint``:  ``FreezeScheduleWrapper`` with the ``joint`` preset (hooks installed, nothing frozen);
- ``frozen``: the ``frozen`` preset (every table's output cut from the graph).

Prints median and IQR of per-step wall and CPU time (rank 0) of each, and the median over
rounds of bare/frozen (speed-up of a frozen epoch) and joint/bare (wrapper overhead).
``--profile N`` prints instead the top ops of N joint and N frozen steps. glibc's malloc
thresholds are pinned (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) because
dense-gradient benchmarks swing with them; each rank runs one thread.

Usage::

    python benchmarks/bench_freeze.py --rounds 20 --steps 40 [--batch_size 1024] [--data bookcrossing]   # default: 6 x 20
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

from benchmarks.tools.claims import claim  # noqa: E402
from dlrm_multiepoch.data.config import DataConfig  # noqa: E402
from dlrm_multiepoch.data.load import load_dataset  # noqa: E402
from dlrm_multiepoch.data.loader import BatchLoader  # noqa: E402
from dlrm_multiepoch.data.synthetic import synthetic_data  # noqa: E402
from dlrm_multiepoch.distributed import init_distributed  # noqa: E402
from dlrm_multiepoch.freeze import FreezeScheduleWrapper  # noqa: E402
from dlrm_multiepoch.models import ModelConfig, build_dlrm  # noqa: E402
from dlrm_multiepoch.testing.ranks import run_on_ranks  # noqa: E402
from dlrm_multiepoch.train.sharding import apply_embedding_optimizer, build_optimizer, shard_model  # noqa: E402


BOOKCROSSING_TABLES = {  # the app's Book-Crossing tables (docs/RESULTS_HISTORY.md), for --data synthetic
    "user": 68463, "item": 158613, "author": 54449, "publisher": 10408, "year": 91, "country": 269, "age": 8,
}
MODES = ("bare", "joint", "frozen")


def _data(kind: str):
    if kind == "bookcrossing":  # the app's default data (fetched into the cache on first use)
        return load_dataset(DataConfig(), log=lambda _: None)
    return synthetic_data(65536, BOOKCROSSING_TABLES)


def _profile(pipeline, batches, steps: int, rank: int) -> None:
    """Where a joint and a frozen step spend their time (rank 0, self CPU time per op)."""
    for mode in ("joint", "frozen"):
        wrapper = FreezeScheduleWrapper(pipeline._model, mode, steps_per_epoch=10**6, num_epochs=1)
        for _ in range(3):
            pipeline.progress(batches)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                pipeline.progress(batches)
                wrapper.step()
        wrapper.remove()
        if rank == 0:
            averages = prof.key_averages()
            total = sum(e.self_cpu_time_total for e in averages)
            print(f"--- {mode}: {total / steps / 1e3:.2f} ms self CPU per step; top ops:")
            for e in sorted(averages, key=lambda e: -e.self_cpu_time_total)[:14]:
                print(f"  {e.self_cpu_time_total / steps / 1e3:7.3f} ms  {e.count // steps:4d}x  {e.key[:90]}")


def _bench(rank: int, world_size: int, args: argparse.Namespace) -> None:
    env = init_distributed()
    data = _data(args.data)
    torch.manual_seed(0)
    dim = args.embedding_dim
    model = build_dlrm(data, ModelConfig(embedding_dim=dim, dense_arch_layer_sizes=f"64,{dim}"), env.device)
    apply_embedding_optimizer(model, "rowwise_adagrad", 0.05)
    dmp = shard_model(model, env)  # the app's default --sharding_types
    opt = build_optimizer(dmp, 1e-3)
    if rank == 0:
        print(f"data {args.data}: tables {[(t.name, t.num_embeddings) for t in data.tables]}")
        print(f"plan: {dict((t, p.sharding_type) for m in dmp.plan.plan.values() for t, p in m.items())}")
    loader = BatchLoader(data, "train", args.batch_size, rank, world_size, shuffle=True)
    batches = cycle(list(islice(loader, args.batches)))
    pipeline = TrainPipelineSparseDist(dmp, opt, env.device)
    if args.profile:
        _profile(pipeline, batches, args.profile, rank)
        return
    # Wall time per step, and this process's CPU time per step: on a shared machine the
    # CPU time counts only the work this rank did (gloo waits block, they do not spin).
    walls: Dict[str, List[float]] = {m: [] for m in MODES}
    cpus: Dict[str, List[float]] = {m: [] for m in MODES}
    rounds: Dict[str, Dict[str, List[float]]] = {"wall": {m: [] for m in MODES}, "cpu": {m: [] for m in MODES}}
    for r in range(args.rounds):
        for mode in MODES[r % 3 :] + MODES[: r % 3]:  # rotate the order: no contender always runs first
            wrapper = None if mode == "bare" else FreezeScheduleWrapper(dmp, mode, steps_per_epoch=10**6, num_epochs=1)
            for _ in range(3):  # warm-up, and flush batches queued under the previous mode
                pipeline.progress(batches)
            dist.barrier()
            wall, cpu = [], []
            for _ in range(args.steps):
                start, start_cpu = time.perf_counter(), time.process_time()
                pipeline.progress(batches)
                if wrapper is not None:
                    wrapper.step()
                wall.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
            if wrapper is not None:
                wrapper.remove()
            walls[mode].extend(wall)
            cpus[mode].extend(cpu)
            rounds["wall"][mode].append(statistics.median(wall))
            rounds["cpu"][mode].append(statistics.median(cpu))
    if rank == 0:
        for clock, per_step in (("wall", walls), ("cpu", cpus)):
            print(f"[{clock} time, rank 0]")
            for m, t in per_step.items():
                q = statistics.quantiles(t, n=4)
                print(f"  {m:7s} median {statistics.median(t) * 1e3:7.2f} ms/step  "
                      f"(IQR {q[0] * 1e3:.2f}-{q[2] * 1e3:.2f}, {len(t)} steps)")
            med = rounds[clock]
            speedup = [b / f for b, f in zip(med["bare"], med["frozen"])]
            overhead = [(j / b - 1) * 100 for j, b in zip(med["joint"], med["bare"])]
            for name, values, fmt in (("frozen speed-up (bare / frozen)", speedup, "{:.2f}x"),
                                      ("wrapper overhead (joint / bare - 1)", overhead, "{:+.1f}%")):
                q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
                print(f"  {name}: median of {len(values)} rounds " + fmt.format(statistics.median(values))
                      + " (IQR " + fmt.format(q[0]) + " to " + fmt.format(q[2]) + ")")
        cpu = rounds["cpu"]
        claim("frozen tables: CPU time per step, bare / frozen",
              statistics.median([b / f for b, f in zip(cpu["bare"], cpu["frozen"])]))
        claim("freeze wrapper, nothing frozen: CPU time per step, joint / bare (its overhead)",
              statistics.median([j / b for j, b in zip(cpu["joint"], cpu["bare"])]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Quick defaults for `make bench`; docs/BENCHMARKS.md gives the sizes of the documented figures.
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=1024, help="global batch size")
    parser.add_argument("--data", choices=("bookcrossing", "synthetic"), default="bookcrossing",
                        help="the app's Book-Crossing data, or synthetic Zipf ids over tables of its sizes")
    parser.add_argument("--embedding_dim", type=int, default=16, help="table dimension (the app's default: 16)")
    parser.add_argument("--batches", type=int, default=64, help="distinct batches cycled through")
    parser.add_argument("--profile", type=int, default=0, help="instead: profile this many joint and frozen steps")
    args = parser.parse_args()
    run_on_ranks(_bench, 2, args)
